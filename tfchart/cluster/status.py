"""`tfchart status`: what a release is doing, from its objects (found by the chart's labels) and the
chief's log, as the JSON `-o json` prints and status_view draws. The chief Job owns completion (Complete =
Succeeded, Failed condition = Failed); training progress comes from the last `tfd-status: {json}` line of the
chief pod's log (the same document as <storage>/status.json), else from the last `step N, loss = L (X
examples/sec; Y sec/batch)` line, else from the record the run supervisor wrote on the chief's Job
(tf-distributed.io/progress), which also gives the ETA and the last checkpoint.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from tfchart.cluster import objects
from tfchart.cluster.objects import JobInfo, role_of
from tfchart.errors import KubernetesError
from tfchart.manifests import workloads
from tfdcontract import (
    CHIEF,
    COMPLETION_INDEX_ANNOTATION,
    DISPLAY_ORDER,
    ENDING_ANNOTATION,
    EVALUATOR,
    HOLDING_ROLES,
    MODEL_VERSION_POLICY_ANNOTATION,
    POD_INDEX_LABEL,
    SERVING,
    TENSORBOARD,
    JobProgress,
    parse_job_progress,
    parse_status_line,
    parse_step_line,
    release_selector,
)
from tfdcontract.runstate import condition, name_of, parse_time

if TYPE_CHECKING:
    from tfchart.cluster.kube import KubeApi

LOG_TAIL_LINES = 2000
NO_PROGRESS = "no progress reported yet"
#: `kubectl wait --for=jsonpath=` of the run's ending, written on the run's object however the run ends (lifecycle.md)
ENDED = "jsonpath='{.metadata.annotations." + ENDING_ANNOTATION.replace(".", "\\.") + "}'"
#: What the trainer reported, as `training.progress` shows it (with its `source`: tfd-status, step-line or
#: job-record); a key not reported is None, as are those of a tfd-status document where "" or 0 means not reported.
PROGRESS_KEYS = ("state", "strategy", "step", "train_steps", "loss", "accuracy", "examples_per_sec", "export_path",
                 "exported_versions", "model_name", "started_at", "updated_at", "message")  # fmt: skip
UNSET_WHEN_EMPTY = ("strategy", "train_steps", "export_path", "model_name", "started_at", "updated_at", "message")


def collect(api: KubeApi, release: str, namespace: str, *, now: datetime | None = None) -> dict[str, Any]:
    """Everything `tfchart status` shows, from four list calls (five with Serving: its ConfigMap) and one
    log read of the chief pod."""
    selector = release_selector(release)
    pods, stateful_sets, jobs, services = (
        api.items(kind, namespace, selector) for kind in ("Pod", "StatefulSet", "Job", "Service")
    )
    if not (pods or stateful_sets or jobs or services):
        raise KubernetesError(f"no release {release} in namespace {namespace}: no pods, StatefulSets, Jobs or "
                              "Services carry its labels",
                              f"check the release name and namespace: `helm list -n {namespace}` (or `helm list -A`)")
    run = objects.find_run(api, release, namespace, jobs, [pod for pod in pods if objects.is_chief_pod(pod)])
    chief, role = run.info, run.info.role
    chief_pods = [pod for pod in pods if role_of(pod) == role and objects.is_chief_pod(pod)
                  and objects.in_jobset(pod) == (chief.kind == "JobSet")]
    evaluator = objects.job_info(EVALUATOR, jobs, [pod for pod in pods if role_of(pod) == EVALUATOR])
    progress, recorded, log_note = read_progress(api, namespace, chief, chief_pods)
    moment = now or datetime.now(timezone.utc)
    pod_rows = [pod_row(pod, moment) for pod in sorted(pods, key=pod_order)]
    set_rows = sorted(({"role": role_of(s), "name": name_of(s),
                        "ready": (s.get("status") or {}).get("readyReplicas") or 0,
                        "desired": s["spec"].get("replicas", 1)} for s in stateful_sets),
                      key=lambda row: (role_rank(row["role"]), row["name"]))  # fmt: skip
    versions, config_note, pinned = versions_served(api, release, namespace, services, progress)
    client_services = sorted((s for s in services if role_of(s) in (TENSORBOARD, SERVING)),
                             key=lambda s: (role_rank(role_of(s)), name_of(s)))
    run_object = f"{chief.kind.lower()}/{chief.name}" if chief.name else None  # the one object to wait on
    wait = f"kubectl wait {run_object} -n {namespace} --for={ENDED}"
    return {
        "release": release, "namespace": namespace, "training": training_state(chief, progress), CHIEF: asdict(chief),
        EVALUATOR: asdict(evaluator) if evaluator.name else None, "stateful_sets": set_rows, "pods": pod_rows,
        "endpoints": [endpoint(service, namespace, pods) for service in client_services], SERVING: versions,
        "job_progress": recorded and asdict(recorded), "notes": [note for note in (log_note, config_note) if note],
        "warnings": [*held_after_the_end(release, namespace, chief, set_rows, pod_rows), *pinned],
        "run": {"object": run_object, "wait": run_object and f"{wait} --timeout=24h",
                "succeeded": run_object and f"{wait}=succeeded --timeout=0"},
    }  # fmt: skip


def role_rank(role: str) -> int:
    return DISPLAY_ORDER.index(role) if role in DISPLAY_ORDER else len(DISPLAY_ORDER)


def ordinal(pod: Any) -> int | None:
    """A task's index: the pod-index label (a StatefulSet's, Kubernetes 1.28+), an Indexed Job pod's completion index
    (a JobSet's `<jobset>-worker-0-<index>-<suffix>`), else the name's `-<ordinal>` suffix."""
    metadata = pod["metadata"]
    label = (metadata.get("labels") or {}).get(POD_INDEX_LABEL, (metadata.get("annotations") or {}).get(
        COMPLETION_INDEX_ANNOTATION))  # fmt: skip
    if label is not None and str(label).isdigit():
        return int(label)
    match = re.search(r"-(\d+)$", name_of(pod))
    return int(match.group(1)) if match else None


def pod_order(pod: Any) -> tuple[int, int, str]:
    """Pods in role order, a role's by their ordinal, as status and `logs --all-roles` list them."""
    return role_rank(role_of(pod)), ordinal(pod) or 0, name_of(pod)


def pod_row(pod: Any, now: datetime) -> dict[str, Any]:
    """A pod as the table and `pods` show it; `status` is its phase and, when it is another, why."""
    reason, message = objects.pod_reason(pod)
    metadata, created = pod["metadata"], parse_time(pod["metadata"].get("creationTimestamp"))
    phase = "Terminating" if metadata.get("deletionTimestamp") else (pod.get("status") or {}).get("phase") or "Unknown"
    return {"role": role_of(pod), "name": name_of(pod), "phase": phase,
            "ready": condition(pod, "Ready") is not None,
            "restarts": sum(s.get("restartCount") or 0 for s in objects.container_statuses(pod)),
            "node": (pod.get("spec") or {}).get("nodeName"),
            "gpus": [{"resource": name, "count": count}
                     for name, count in workloads.gpus(pod.get("spec") or {}).items()],
            "age_seconds": None if created is None else int(now.timestamp() - created), "reason": reason,
            "message": message, "status": f"{phase}: {reason}" if reason and reason != phase else phase}  # fmt: skip


def held_after_the_end(
    release: str, namespace: str, chief: JobInfo, stateful_sets: list[dict[str, Any]], pods: list[dict[str, Any]]
) -> list[str]:
    """A warning when the chief Job ended but ps/worker/evaluator pods still run (and hold their GPUs)."""
    suspended = chief.state == "Suspended" and not chief.ending
    # (JobSet deletes its running Jobs when it ends: nothing to free)
    ended = chief.state in ("Succeeded", "Failed", "Missing") and chief.kind != "JobSet"
    done = ("Succeeded", "Failed", "Terminating")
    holding = [p for p in pods if p["role"] in HOLDING_ROLES and p["phase"] not in done]
    if not (ended or suspended) or chief.role != CHIEF or not (holding or any(s["desired"] for s in stateful_sets)):
        return []
    gpus = sum((Counter({gpu["resource"]: gpu["count"] for gpu in pod["gpus"]}) for pod in holding), Counter[str]())
    held = ", ".join(f"{count} {resource}" for resource, count in sorted(gpus.items()))
    what = f"{len(holding)} pod(s) still run" + (f" and hold {held}" if held else "")
    names = ", ".join(p["name"] for p in holding[:4]) + (", ..." if len(holding) > 4 else "")
    listed = f" ({names})" if names else ""
    if suspended:
        return [f"the run is suspended but {what}{listed}: the suspension is under way or was interrupted; "
                f"`tfchart suspend {release} -n {namespace}` finishes it"]
    if chief.ending:
        policy = "onSuccess" if chief.state == "Succeeded" else "onFailure"
        why = f"kept by the cleanup policy (training.cleanup.{policy}=keep)"
    else:
        why = "nothing freed them (supervisor.enabled=false, or the supervisor is not running)"
    gone = "is gone" if chief.state == "Missing" else f"ended ({chief.state})"
    return [f"the chief Job {gone} but {what}{listed}: {why}; free them with `tfchart stop {release} -n {namespace}`"]


# -- model versions: the chart renders `serving.modelVersionPolicy` as TF Serving's model config and, as the values gave
# it, as JSON in MODEL_VERSION_POLICY_ANNOTATION on Serving's ConfigMap; status applies that to the versions the chief
# reported (tests/chart/test_serving_versions.py holds the two equal as TF Serving's own protos parse the config) ------
def read_policy(text: str) -> dict[str, Any]:
    """The annotation's JSON: `model`, `type` (latest | specific | all), `latest` N, `versions` (ValueError when it is
    not the chart's)."""
    document = json.loads(text)
    kind, latest, versions = document["type"], document.get("latest", 1), document.get("versions") or []
    if kind not in ("latest", "specific", "all") or not all(isinstance(v, int) for v in [latest, *versions]):
        raise ValueError(f"unknown policy {document!r}")
    return {"model": str(document.get("model", "")), "type": kind, "latest": latest, "versions": versions}


def selected(policy: dict[str, Any], exported: Sequence[int]) -> list[int]:
    """The exported versions a policy loads (TF Serving's rule: num_versions 0 loads one), ascending."""
    ordered = sorted(set(exported))
    if policy["type"] == "specific":
        return [v for v in ordered if v in policy["versions"]]
    return ordered if policy["type"] == "all" else ordered[-max(policy["latest"], 1) :]


def serving_versions(config_map: str, text: str | None, exported: list[int] | None) -> dict[str, Any]:
    """What `tfchart status` shows of model versions: the policy recorded on Serving's ConfigMap (its annotation's
    `text`; `policy` "" when it cannot be read) applied to `exported` (None: the chief's status did not say: its
    log gone, an older trainer); `missing`: pinned (specific) but not exported; a `note` says what is unknown."""
    versions = {"config_map": config_map, "model": "", "policy": "", "exported": exported, "loaded": None,
                "missing": [], "note": ""}  # fmt: skip
    if text is None:
        return versions | {"note": f"{config_map} has no {MODEL_VERSION_POLICY_ANNOTATION} annotation (made by an "
                                   "older chart)"}  # fmt: skip
    try:
        policy = read_policy(text)
    except (ValueError, KeyError, TypeError) as error:
        return versions | {"note": f"{config_map}'s {MODEL_VERSION_POLICY_ANNOTATION} annotation cannot be read: "
                                   f"{error}"}  # fmt: skip
    described = {"all": "all versions", "specific": "specific: " + ", ".join(map(str, policy["versions"])),
                 "latest": f"latest {max(policy['latest'], 1)}"}  # fmt: skip
    versions |= {"model": policy["model"], "policy": described[policy["type"]]}
    if exported is None:
        versions["note"] = "the exported versions are unknown (no tfd-status line in the chief's log lists them)"
        return versions
    missing = sorted(set(policy["versions"]) - set(exported)) if policy["type"] == "specific" else []
    return versions | {"loaded": selected(policy, exported), "missing": missing}


def versions_served(
    api: KubeApi, release: str, namespace: str, services: list[Any], progress: dict[str, Any] | None
) -> tuple[dict[str, Any] | None, str, list[str]]:
    """When the release serves: the versions the chief reported exported and those Serving's model config (the policy
    recorded on its ConfigMap) loads of them; a note when the ConfigMap cannot be read (403 on configmaps); a warning
    when serving.modelVersionPolicy pins versions that were never exported."""
    if not any(role_of(service) == SERVING for service in services):
        return None, "", []
    try:
        config_maps = api.items("ConfigMap", namespace, release_selector(release, SERVING))
    except KubernetesError as error:
        return None, f"cannot read Serving's model config: {error.message} ({error.hint})", []
    if not config_maps:
        return None, "", []
    config_map = sorted(config_maps, key=name_of)[0]
    text = (config_map["metadata"].get("annotations") or {}).get(MODEL_VERSION_POLICY_ANNOTATION)
    exported = progress["exported_versions"] if progress and progress["source"] == "tfd-status" else None
    versions = serving_versions(name_of(config_map), text, exported)
    missing, model = ", ".join(map(str, versions["missing"])), versions["model"]
    if not missing or exported is None:
        return versions, "", []
    if not exported:
        return versions, "", [f"Serving is configured to load version(s) {missing} of {model}, but no version was "
                              "exported yet: it answers nothing until one is (or use `--set "
                              "serving.modelVersionPolicy.type=latest`)"]  # fmt: skip
    have, pins = ", ".join(map(str, exported)), ",".join(map(str, versions["loaded"] or exported[-1:]))
    return versions, "", [f"Serving is configured to load version(s) {missing} of {model}, which were never exported "
                          f"(exported: {have}): it answers nothing for them; pin exported versions only, e.g. "
                          f"`tfchart upgrade {release} ... --set serving.modelVersionPolicy.versions={{{pins}}}`"]


# -- progress from the chief's log --------------------------------------------------------------
def read_progress(
    api: KubeApi, namespace: str, chief: JobInfo, pods: list[Any]
) -> tuple[dict[str, Any] | None, JobProgress | None, str]:
    """The progress the chief reported in the log of its newest started pod of `pods`, else as the supervisor last
    recorded it on the Job (the log gone or unreadable); the record; a note when the log could not be read (403 on
    pods/log, a race)."""
    pod, progress, note = objects.newest([pod for pod in pods if objects.has_started(pod)]), None, ""
    recorded = parse_job_progress(chief.progress)
    if pod is not None:
        try:
            container = objects.main_container(pod, CHIEF)
            progress = parse_progress(api.read_pod_log(namespace, name_of(pod), container, LOG_TAIL_LINES))
        except KubernetesError as error:
            note = f"cannot read the chief's log: {error.message} ({error.hint})"
    if progress is None and recorded is not None:
        progress = reported("job-record", state=recorded.state, step=recorded.step, train_steps=recorded.target,
                            loss=recorded.loss, accuracy=recorded.accuracy, updated_at=recorded.updated_at or None)
    return progress, recorded, note


def reported(source: str, **values: Any) -> dict[str, Any]:
    return {"source": source} | {key: values.get(key) for key in PROGRESS_KEYS}


def parse_progress(log: str) -> dict[str, Any] | None:
    """The last tfd-status document, else the last step line, else None."""
    lines = log.splitlines()[::-1]
    status = next((status for status in map(parse_status_line, lines) if status is not None), None)
    if status is not None:
        return reported("tfd-status", **{key: value or None if key in UNSET_WHEN_EMPTY else value
                                         for key, value in asdict(status).items()})  # fmt: skip
    step = next((step for step in map(parse_step_line, lines) if step), None)
    if step is None:
        return None
    return reported("step-line", step=step.step, loss=step.loss, examples_per_sec=step.examples_per_sec)


def training_state(chief: JobInfo, progress: dict[str, Any] | None) -> dict[str, Any]:
    """The chief Job decides completion; the trainer's report adds the numbers and its message."""
    message = (progress or {}).get("message") or ""
    what = "JobSet" if chief.kind == "JobSet" else "chief Job"
    state, detail = chief.state, message
    early = chief.state == "Suspended" or (chief.state in ("Running", "Pending") and chief.ending != "succeeded")
    if chief.ending and early:  # by the supervisor (start timeout, stall) or `tfchart stop` (--end-run: suspended to
        # end it), the Job not failed yet
        state, detail = "Failed", f"the run ended ({chief.ending}): {chief.end_reason or message}"
    elif chief.state == "Succeeded":
        detail = message or f"the {what} completed"
    elif chief.state == "Failed":
        job = f"{what} failed: {chief.reason}" + (f" ({chief.message})" if chief.message else "")
        detail = f"{job}; trainer: {message}" if message else job
    elif chief.state == "Running" and progress and progress["state"] == "Failed":
        detail = f"the last attempt failed ({message}); the {chief.kind} retries from the checkpoint"
    elif chief.state == "Running":
        detail = message or ("training in progress" if progress else NO_PROGRESS)
    elif chief.state == "Suspended":
        saved = f" at step {progress['step']}" if progress and progress["step"] is not None else ""
        detail = (f"suspended since {chief.suspended_since or '(unknown)'}: its pods are released; resuming continues "
                  f"from the checkpoint{saved}")
    elif chief.state == "Pending":
        detail = f"the chief pod has not started: {chief.reason}" + (f": {chief.message}" if chief.message else "")
    else:
        state, detail = "Unknown", f"{chief.message}; training progress is in <storage>/status.json"
    return {"state": state, "detail": detail, "progress": progress}


def endpoint(service: Any, namespace: str, pods: list[Any]) -> dict[str, Any]:
    role, name = role_of(service), name_of(service)
    ports = [{"name": port.get("name") or str(port["port"]), "port": int(port["port"])}
             for port in service["spec"].get("ports") or []]
    forwards = " ".join(f"{port['port']}:{port['port']}" for port in ports)
    return {"component": role, "service": name, "dns": f"{name}.{namespace}.svc", "ports": ports,
            "ready_pods": sum(1 for pod in pods if role_of(pod) == role and condition(pod, "Ready")),
            "port_forward": f"kubectl -n {namespace} port-forward svc/{name} {forwards}"}  # fmt: skip
