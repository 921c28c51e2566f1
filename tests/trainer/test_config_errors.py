"""Bad configuration: one clear error line on stderr, exit code 2, never a traceback.

These run the real ``python -m trainer`` entry point; configuration is validated before
TensorFlow is imported, so each case takes well under a second."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.trainer.conftest import PYTHON, REPO, trainer_env

CLUSTER = {"chief": ["127.0.0.1:2220"], "worker": ["127.0.0.1:2221", "127.0.0.1:2222"],
           "ps": ["127.0.0.1:2223"]}


def _run(args: list[str], tf_config: object | None = None, raw_tf_config: str | None = None,
         ) -> subprocess.CompletedProcess[str]:
    env = trainer_env()
    if tf_config is not None:
        env["TF_CONFIG"] = json.dumps(tf_config)
    if raw_tf_config is not None:
        env["TF_CONFIG"] = raw_tf_config
    return subprocess.run([PYTHON, "-m", "trainer", *args], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=120)


CASES = [
    pytest.param(["--strategy=single_device", "--export-min-accuracy=1.5"], None, None,
                 "--export-min-accuracy must be between 0 and 1, got 1.5", id="export-gate-out-of-range"),
    pytest.param(["--strategy=horovod"], None, None,
                 "unknown --strategy 'horovod': valid strategies are parameter_server, "
                 "multi_worker_mirrored, mirrored, single_device", id="unknown-strategy"),
    pytest.param(["--strategy=parameter_server"],
                 {"cluster": {"chief": CLUSTER["chief"], "worker": CLUSTER["worker"]},
                  "task": {"type": "chief", "index": 0}}, None,
                 "needs chief, ps and worker tasks in the cluster, but TF_CONFIG gives no ps",
                 id="ps-strategy-without-ps"),
    pytest.param(["--strategy=parameter_server"], None, None,
                 "TF_CONFIG unset, no --job_name) gives no chief, worker, ps", id="ps-strategy-without-cluster"),
    pytest.param(["--strategy=single_device", "--dataset=mnist", "--data-dir=/nonexistent/x"],
                 None, None, "/nonexistent/x/mnist.npz does not exist", id="missing-mnist"),
    pytest.param(["--strategy=single_device", "--dataset=mnist_tfrecord",
                  "--data-dir=/nonexistent/x"], None, None,
                 "no train*.tfrecord files in /nonexistent/x", id="missing-tfrecords"),
    pytest.param(["--strategy=parameter_server"], None, '{"cluster": {"chief": [',
                 "TF_CONFIG is not valid JSON", id="malformed-tf-config"),
    pytest.param(["--strategy=parameter_server"], None, '["chief"]',
                 "TF_CONFIG must be a JSON object", id="tf-config-not-object"),
    pytest.param(["--strategy=parameter_server"],
                 {"cluster": CLUSTER, "task": {"type": "worker", "index": 2}}, None,
                 "task index 2 is out of range: the cluster has 2 'worker' task(s) (valid: 0..1)",
                 id="task-index-out-of-range"),
    pytest.param(["--strategy=parameter_server"],
                 {"cluster": {**CLUSTER, "master": ["127.0.0.1:2224"]},
                  "task": {"type": "worker", "index": 0}}, None,
                 "unknown job name 'master' in the cluster", id="master-in-cluster"),
    pytest.param(["--strategy=parameter_server"],
                 {"cluster": CLUSTER, "task": {"type": "master", "index": 0}}, None,
                 "TF_CONFIG task type 'master' is unknown", id="master-task-type"),
    pytest.param(["--strategy=parameter_server", "--job_name=master", "--task_index=0",
                  "--ps_hosts=127.0.0.1:2223", "--worker_hosts=127.0.0.1:2221"], None, None,
                 "unknown --job_name 'master'", id="master-classic-flag"),
    pytest.param(["--strategy=parameter_server", "--job_name=worker", "--task_index=5",
                  "--ps_hosts=127.0.0.1:2223", "--worker_hosts=127.0.0.1:2221,127.0.0.1:2222"],
                 None, None, "task index 4 is out of range", id="classic-index-out-of-range"),
    pytest.param(["--strategy=parameter_server", "--job_name=worker", "--task_index=0",
                  "--ps_hosts=127.0.0.1:2223", "--worker_hosts=127.0.0.1:2221"],
                 {"cluster": CLUSTER, "task": {"type": "worker", "index": 0}}, None,
                 "both TF_CONFIG and --job_name are set", id="tf-config-and-classic-flags"),
    pytest.param(["--strategy=mirrored"],
                 {"cluster": CLUSTER, "task": {"type": "worker", "index": 0}}, None,
                 "--strategy=mirrored runs on one machine", id="mirrored-in-cluster"),
    pytest.param(["--strategy=multi_worker_mirrored"],
                 {"cluster": CLUSTER, "task": {"type": "worker", "index": 0}}, None,
                 "does not use ps tasks", id="mwms-with-ps"),
    pytest.param(["--strategy=parameter_server"],
                 {"cluster": {**CLUSTER, "worker": ["localhost"]},
                  "task": {"type": "chief", "index": 0}}, None,
                 "is not a 'host:port' string", id="address-without-port"),
    pytest.param(["--train-steps=0"], None, None, "--train-steps must be a positive integer",
                 id="zero-steps"),
    pytest.param(["--steps-per-execution=0"], None, None,
                 "--steps-per-execution must be a positive integer", id="zero-steps-per-execution"),
    pytest.param(["--no-such-flag"], None, None, "unrecognized arguments: --no-such-flag",
                 id="unknown-flag"),
    pytest.param(["--cleanup=delete"], None, None, "unknown --cleanup 'delete'",
                 id="unknown-cleanup"),
    pytest.param(["--strategy=parameter_server", "--inter-op-threads=1"], None, None,
                 "--inter-op-threads=1 deadlocks parameter_server", id="one-inter-op-thread"),
    pytest.param(["--checkpoint-every-seconds=-1"], None, None,
                 "--checkpoint-every-seconds must be >= 0, got -1.0", id="negative-checkpoint-seconds"),
    pytest.param(["--checkpoint-every-secs=-0.5"], None, None,
                 "--checkpoint-every-seconds must be >= 0, got -0.5", id="negative-checkpoint-secs-alias"),
    pytest.param(["--checkpoint-every-seconds=nan"], None, None,
                 "--checkpoint-every-seconds must be >= 0, got nan", id="nan-checkpoint-seconds"),
    pytest.param(["--shutdown-grace-seconds=-5"], None, None,
                 "--shutdown-grace-seconds must be a positive number of seconds, got -5.0",
                 id="negative-shutdown-grace"),
    pytest.param(["--shutdown-grace-seconds=0"], None, None,
                 "--shutdown-grace-seconds must be a positive number of seconds, got 0.0",
                 id="zero-shutdown-grace"),
    pytest.param(["--shutdown-grace-seconds=inf"], None, None,
                 "--shutdown-grace-seconds must be a positive number of seconds, got inf",
                 id="infinite-shutdown-grace"),
]


@pytest.mark.parametrize(("args", "tf_config", "raw", "expected"), CASES)
def test_bad_configuration_is_one_clear_line(args: list[str], tf_config: object | None,
                                             raw: str | None, expected: str,
                                             tmp_path: Path) -> None:
    proc = _run([f"--storage-root={tmp_path}", "--dataset=digits", *args], tf_config, raw)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("trainer: error:")]
    assert len(errors) == 1, proc.stderr
    assert proc.stderr.rstrip().splitlines()[-1] == errors[0]
    assert expected in errors[0], errors[0]
    assert not (tmp_path / "status.json").exists()


def test_help_lists_every_contract_flag() -> None:
    proc = _run(["--help"])
    assert proc.returncode == 0
    for flag in ("--strategy", "--dataset", "--data-dir", "--storage-root", "--model-name",
                 "--batch-size", "--train-steps", "--learning-rate", "--checkpoint-every-steps",
                 "--checkpoint-every-seconds", "--checkpoint-every-secs", "--shutdown-grace-seconds",
                 "--eval-split", "--log-every-steps", "--steps-per-execution",
                 "--log-device-placement", "--cleanup", "--download", "--job_name",
                 "--task_index", "--ps_hosts", "--worker_hosts", "--chief_hosts"):
        assert flag in proc.stdout, flag
