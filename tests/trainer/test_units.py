"""Fast in-process tests of the pure-Python parts: config, cluster, status, cleanup."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.kubeapi import KubeServer
from tests.trainer.conftest import RELEASE_STATEFUL_SETS, release_stateful_sets, replicas, service_account_dir
from trainer.cleanup import kube_target, scale_down, statefulset_names
from trainer.cluster import parse_tf_config, resolve_task
from trainer.config import parse_config
from trainer.errors import ClusterError, ConfigError
from trainer.shutdown import Interrupted, Shutdown, save_reserve
from trainer.status import RUNNING, SUCCEEDED, Status, is_completed, read_status, write_status

HOSTS = ["--ps_hosts=h-ps0:2222,h-ps1:2222", "--worker_hosts=h-w0:2222,h-w1:2222,h-w2:2222"]


def test_defaults_match_the_chart_contract() -> None:
    cfg = parse_config([])
    assert (cfg.strategy, cfg.dataset, cfg.model_name) == ("single_device", "mnist", "mnist")
    assert (cfg.batch_size, cfg.train_steps, cfg.learning_rate) == (64, 600, 0.05)
    assert (cfg.checkpoint_every_steps, cfg.checkpoint_every_seconds) == (100, 0.0)
    assert cfg.shutdown_grace_seconds == 25.0
    assert (cfg.eval_split, cfg.log_every_steps, cfg.cleanup) == (0.2, 20, "scale-down")
    assert cfg.storage_root == Path("/data") and cfg.data_dir == Path("/data/datasets")
    assert cfg.layout.export_base == Path("/data/export/mnist")
    assert cfg.layout.status == Path("/data/status.json")


def test_checkpoint_rules_by_steps_and_by_seconds() -> None:
    from trainer.steps import checkpoint_due, steps_due, time_due

    cfg = parse_config(["--checkpoint-every-steps=100", "--checkpoint-every-seconds=30"])
    assert steps_due(100, 0, cfg) and steps_due(230, 170, cfg)
    assert not steps_due(150, 100, cfg) and not steps_due(100, 100, cfg)
    assert time_due(now=130.0, last_saved_time=100.0, cfg=cfg)
    assert not time_due(now=129.9, last_saved_time=100.0, cfg=cfg)
    assert checkpoint_due(150, 100, 100.0, 130.0, cfg)  # by time, between step saves
    assert not checkpoint_due(100, 100, 0.0, 999.0, cfg)  # this step is saved already
    off = parse_config(["--checkpoint-every-steps=0"])
    assert not steps_due(100, 0, off) and not time_due(1e9, 0.0, off)
    assert parse_config(["--checkpoint-every-secs=5"]).checkpoint_every_seconds == 5.0


def test_save_reserve_keeps_time_for_the_last_save() -> None:
    assert save_reserve(25.0, None) == 12.5  # no save measured yet: half the grace
    assert save_reserve(25.0, 0.1) == 2.0  # at least 2 s
    assert save_reserve(25.0, 2.0) == 6.0  # three times the last save
    assert save_reserve(25.0, 10.0) == 12.5  # at most half the grace


def test_first_signal_outside_a_deferred_region_raises_once() -> None:
    import signal

    stop = Shutdown(25.0)
    assert not stop.requested and stop.time_left() == float("inf")
    with pytest.raises(Interrupted) as raised:
        stop._handle(signal.SIGTERM, None)
    assert raised.value.line == "SIGTERM while starting: nothing new to save, exiting"
    assert raised.value.exit_code == 143 and raised.value.step is None
    assert stop.requested and 0 < stop.time_left() <= 25.0
    stop._handle(signal.SIGTERM, None)  # a second SIGTERM (while saving) is ignored


def test_signal_inside_a_deferred_region_only_requests_the_stop() -> None:
    import signal

    stop = Shutdown(10.0)
    with stop.deferred():
        stop._handle(signal.SIGINT, None)
    assert stop.requested and stop.signal_name == "SIGINT" and stop.exit_code == 130
    assert stop.wait(0) is True
    saved = stop.interrupted("at step 7", "checkpoint saved", 7)
    assert (saved.line, saved.exit_code, saved.step) == (
        "SIGINT at step 7: checkpoint saved, exiting", 130, 7)


def test_run_id_is_stable_and_follows_the_training_definition() -> None:
    a = parse_config(["--strategy=parameter_server", "--train-steps=600"]).run_id
    assert a == parse_config(["--train-steps=600", "--strategy=parameter_server"]).run_id
    assert a != parse_config(["--strategy=parameter_server", "--train-steps=700"]).run_id
    assert parse_config(["--run-id=abc"]).run_id == "abc"


def test_tf_config_roles() -> None:
    cluster = {"chief": ["c:1"], "worker": ["w0:1", "w1:1"], "ps": ["p:1"]}
    t = parse_tf_config(json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 1}}))
    assert (t.task_type, t.task_index, t.is_chief) == ("worker", 1, False)
    assert t.tf_config() == {"cluster": cluster, "task": {"type": "worker", "index": 1}}
    ev = parse_tf_config(json.dumps({"cluster": cluster, "task": {"type": "evaluator"}}))
    assert ev.task_type == "evaluator" and not ev.is_chief
    # without a chief job, worker 0 is the chief (TensorFlow convention)
    w0 = parse_tf_config(json.dumps({"cluster": {"worker": ["a:1", "b:1"]},
                                     "task": {"type": "worker", "index": 0}}))
    assert w0.is_chief


@pytest.mark.parametrize("raw", [
    '{"cluster": {"chief": ["a:1", "b:1"]}, "task": {"type": "chief", "index": 0}}',
    '{"cluster": {"worker": ["a:1", "a:1"]}, "task": {"type": "worker", "index": 0}}',
    '{"cluster": {"worker": ["a:99999"]}, "task": {"type": "worker", "index": 0}}',
    '{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": -1}}',
    '{"cluster": {"worker": ["a:1"]}}',
    '{"cluster": {"worker": ["a:1"], "evaluator": ["e:1"]}, "task": {"type": "worker"}}',
])
def test_invalid_tf_config(raw: str) -> None:
    with pytest.raises(ClusterError):
        parse_tf_config(raw)


def test_classic_flags_with_chief_hosts() -> None:
    cfg = parse_config(["--strategy=parameter_server", "--job_name=worker", "--task_index=2",
                        "--chief_hosts=h-c:2222", *HOSTS])
    t = resolve_task(cfg, {})
    assert (t.task_type, t.task_index, t.source) == ("worker", 2, "flags")
    assert t.cluster == {"chief": ["h-c:2222"], "ps": ["h-ps0:2222", "h-ps1:2222"],
                         "worker": ["h-w0:2222", "h-w1:2222", "h-w2:2222"]}


def test_classic_flags_without_chief_hosts_make_worker0_the_coordinator() -> None:
    def task(job: str, index: int) -> tuple[str, int, dict[str, list[str]]]:
        cfg = parse_config(["--strategy=parameter_server", f"--job_name={job}",
                            f"--task_index={index}", *HOSTS])
        t = resolve_task(cfg, {})
        return t.task_type, t.task_index, t.cluster

    ttype, index, cluster = task("worker", 0)
    assert (ttype, index) == ("chief", 0)
    assert cluster["chief"] == ["h-w0:2222"]
    assert cluster["worker"] == ["h-w1:2222", "h-w2:2222"]
    assert task("worker", 2)[:2] == ("worker", 1)
    assert task("ps", 1)[:2] == ("ps", 1)


def test_classic_flags_mwms_keep_worker0_as_chief() -> None:
    cfg = parse_config(["--strategy=multi_worker_mirrored", "--job_name=worker",
                        "--task_index=0", "--worker_hosts=a:1,b:1"])
    t = resolve_task(cfg, {})
    assert (t.task_type, t.task_index, t.is_chief) == ("worker", 0, True)
    assert t.cluster == {"worker": ["a:1", "b:1"]}


def test_mirrored_accepts_chief_only_tf_config() -> None:
    cfg = parse_config(["--strategy=mirrored"])
    env = {"TF_CONFIG": json.dumps({"cluster": {"chief": ["a:1"]},
                                    "task": {"type": "chief", "index": 0}})}
    assert resolve_task(cfg, env).is_chief
    assert resolve_task(cfg, {}).is_chief


@pytest.mark.parametrize("strategy", ["parameter_server", "multi_worker_mirrored", "mirrored"])
def test_evaluator_needs_no_cluster(strategy: str) -> None:
    cfg = parse_config([f"--strategy={strategy}"])
    for doc in ({"cluster": {}, "task": {"type": "evaluator", "index": 0}},
                {"task": {"type": "evaluator"}},
                {"cluster": {"chief": ["c:1"], "worker": ["w:1"], "ps": ["p:1"]},
                 "task": {"type": "evaluator", "index": 0}}):
        t = resolve_task(cfg, {"TF_CONFIG": json.dumps(doc)})
        assert t.task_type == "evaluator" and not t.is_chief


def test_config_error_is_exit_code_2() -> None:
    with pytest.raises(ConfigError) as e:
        parse_config(["--eval-split=1.5"])
    assert e.value.exit_code == 2


def _status(state: str, run_id: str = "r1") -> Status:
    return Status(state=state, strategy="parameter_server", step=10, train_steps=600,
                  loss=0.5, accuracy=None, examples_per_sec=100.0, export_path=None,
                  started_at="2026-01-01T00:00:00Z", updated_at="2026-01-01T00:00:00Z",
                  message="x", run_id=run_id)


def test_status_roundtrip_is_atomic(tmp_path: Path) -> None:
    path = tmp_path / "status.json"
    assert read_status(path) is None
    write_status(path, _status(RUNNING))
    assert read_status(path) == _status(RUNNING)
    write_status(path, _status(SUCCEEDED))
    assert is_completed(path, "r1") and not is_completed(path, "other-run")
    assert [p.name for p in tmp_path.iterdir()] == ["status.json"]
    path.write_text("{not json")
    assert read_status(path) is None


def test_scale_down_sends_exact_requests(tmp_path: Path, kube_api: KubeServer) -> None:
    """The namespace comes from the service account; each StatefulSet's /scale is merge-patched to 0."""
    sa = service_account_dir(tmp_path / "sa", namespace="from-file")
    kube_api.add(*release_stateful_sets("from-file"))
    ps, worker = RELEASE_STATEFUL_SETS
    env = {"TFD_KUBE_API": kube_api.url, "TFD_CLEANUP_STATEFULSETS": f" {ps} , {worker} ,",
           "TFD_SERVICEACCOUNT_DIR": str(sa)}
    assert replicas(kube_api, "from-file") == {ps: 1, worker: 2}
    assert scale_down(env) == [ps, worker]
    assert [(r.method, r.path, r.body, r.status, r.headers["content-type"], r.headers["authorization"])
            for r in kube_api.requests] == [
        ("PATCH", f"/apis/apps/v1/namespaces/from-file/statefulsets/{n}/scale",
         {"spec": {"replicas": 0}}, 200, "application/merge-patch+json", "Bearer test-token")
        for n in (ps, worker)
    ]
    assert replicas(kube_api, "from-file") == {ps: 0, worker: 0}
    assert replicas(kube_api, "ml-team") == {ps: 1, worker: 2}  # another namespace's release is left alone


def test_scale_down_outside_kubernetes_does_nothing(tmp_path: Path) -> None:
    env = {"TFD_CLEANUP_STATEFULSETS": "a-ps"}
    assert kube_target(env, tmp_path / "no-sa") is None
    assert scale_down(env, sa_dir=tmp_path / "no-sa") == []
    assert statefulset_names({}) == []


def test_scale_down_failure_is_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    env = {"TFD_KUBE_API": "http://127.0.0.1:9", "POD_NAMESPACE": "ns",
           "TFD_CLEANUP_STATEFULSETS": "a-ps"}
    assert scale_down(env, sa_dir=tmp_path, timeout=2) == []
    assert "scaling statefulset a-ps to 0 failed" in caplog.text


def test_in_cluster_target_uses_https_and_the_ca(tmp_path: Path) -> None:
    sa = service_account_dir(tmp_path / "sa")
    (sa / "ca.crt").write_text("dummy")
    t = kube_target({"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443",
                     "POD_NAMESPACE": "ns"}, sa)
    assert t is not None
    assert (t.base_url, t.namespace, t.token, t.ca_file) == (
        "https://10.96.0.1:443", "ns", "test-token", sa / "ca.crt")
