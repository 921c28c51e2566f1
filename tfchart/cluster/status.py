"""`tfchart status`: what a release is doing, from its objects (found by the chart's labels) and the chief's log, as
the JSON `-o json` prints and `render` draws (a summary panel and a pods table, with rich). The chief Job owns
completion (Complete = Succeeded, Failed condition = Failed); training progress comes from the last `tfd-status: {json}`
line of the chief pod's log (the same document as <storage>/status.json), else from the last `step N, loss = L (X
examples/sec; Y sec/batch)` line, else from the record the run supervisor wrote on the chief's Job
(tf-distributed.io/progress), which also gives the ETA and the last checkpoint.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from dataclasses import asdict
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

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
    set_rows = [{"role": role_of(s), "name": name_of(s), "ready": (s.get("status") or {}).get("readyReplicas") or 0,
                 "desired": s["spec"].get("replicas", 1)} for s in sorted(stateful_sets, key=pod_order)]  # fmt: skip
    versions, config_note, pinned = versions_served(api, release, namespace, services, progress)
    client_services = sorted((s for s in services if role_of(s) in (TENSORBOARD, SERVING)), key=pod_order)
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


def pod_order(obj: Any) -> tuple[int, int, str]:
    """Pods (and StatefulSets, Services) in role order, a role's by their ordinal, as status and `logs --all-roles`
    list them."""
    rank = DISPLAY_ORDER.index(role_of(obj)) if role_of(obj) in DISPLAY_ORDER else len(DISPLAY_ORDER)
    return rank, ordinal(obj) or 0, name_of(obj)


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


def held_after_the_end(release: str, namespace: str, chief: JobInfo, stateful_sets: list[dict[str, Any]],
                       pods: list[dict[str, Any]]) -> list[str]:  # fmt: skip
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
    listed = f" ({', '.join(p['name'] for p in holding[:4])}{', ...' if len(holding) > 4 else ''})" if holding else ""
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


def serving_versions(config_map: str, text: str | None, exported: list[int] | None) -> dict[str, Any]:
    """What `tfchart status` shows of model versions: the policy recorded on Serving's ConfigMap (its annotation's
    `text`; `policy` "" when it cannot be read) applied to `exported` as TF Serving does (num_versions 0 loads one;
    None: the chief's status did not say: its log gone, an older trainer); `missing`: pinned (specific) but not
    exported; a `note` says what is unknown."""
    versions = {"config_map": config_map, "model": "", "policy": "", "exported": exported, "loaded": None,
                "missing": [], "note": ""}  # fmt: skip
    try:
        policy = read_policy(text) if text is not None else None
    except (ValueError, KeyError, TypeError) as error:
        return versions | {"note": f"{config_map}'s {MODEL_VERSION_POLICY_ANNOTATION} annotation cannot be read: "
                                   f"{error}"}  # fmt: skip
    if policy is None:
        return versions | {"note": f"{config_map} has no {MODEL_VERSION_POLICY_ANNOTATION} annotation (made by an "
                                   "older chart)"}  # fmt: skip
    kind, pinned, ordered = policy["type"], policy["versions"], sorted(set(exported or []))
    described = {"all": "all versions", "specific": "specific: " + ", ".join(map(str, pinned)),
                 "latest": f"latest {max(policy['latest'], 1)}"}  # fmt: skip
    versions |= {"model": policy["model"], "policy": described[kind]}
    if exported is None:
        return versions | {"note": "the exported versions are unknown (no tfd-status line in the chief's log lists "
                                   "them)"}  # fmt: skip
    latest = ordered[-max(policy["latest"], 1) :]
    loaded = {"all": ordered, "specific": [v for v in ordered if v in pinned]}.get(kind, latest)
    return versions | {"loaded": loaded, "missing": sorted(set(pinned) - set(ordered)) if kind == "specific" else []}


def versions_served(api: KubeApi, release: str, namespace: str, services: list[Any],
                    progress: dict[str, Any] | None) -> tuple[dict[str, Any] | None, str, list[str]]:  # fmt: skip
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
    have, pins = ", ".join(map(str, exported)), ",".join(map(str, versions["loaded"] or exported[-1:]))
    why = (f"which were never exported (exported: {have}): it answers nothing for them; pin exported versions only, "
           f"e.g. `tfchart upgrade {release} ... --set serving.modelVersionPolicy.versions={{{pins}}}`" if exported
           else "but no version was exported yet: it answers nothing until one is (or use `--set "
           "serving.modelVersionPolicy.type=latest`)")  # fmt: skip
    return versions, "", [f"Serving is configured to load version(s) {missing} of {model}, {why}"]


# -- progress from the chief's log --------------------------------------------------------------
def read_progress(api: KubeApi, namespace: str, chief: JobInfo,
                  pods: list[Any]) -> tuple[dict[str, Any] | None, JobProgress | None, str]:  # fmt: skip
    """The progress the chief reported in the log of its newest started pod of `pods`, else as the supervisor last
    recorded it on the Job (the log gone or unreadable); the record; a note when the log could not be read (403 on
    pods/log, a race)."""
    pod, progress, note = objects.newest([pod for pod in pods if objects.has_started(pod)]), None, ""
    recorded = parse_job_progress(chief.progress)
    if pod is not None:
        try:
            container = objects.main_container(pod, CHIEF)
            progress = parse_progress("\n".join(api.stream_pod_log(namespace, name_of(pod), container, LOG_TAIL_LINES)))
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


# -- the view, with rich: a run's (and its Job's) state in its colour, one not listed in white
STATE_STYLE = defaultdict(lambda: "white", Running="cyan", Succeeded="green", Failed="red", Pending="yellow",
                          Unknown="yellow", Missing="yellow", Suspended="magenta")


def render(status: dict[str, Any], console: Console) -> None:
    """A summary panel (training, chief Job, workloads, endpoints), a pods table, then the warnings and notes."""
    training, chief, record = status["training"], status[CHIEF], status["job_progress"] or {}
    progress, release, namespace = training["progress"] or {}, status["release"], status["namespace"]
    checkpoint = record.get("checkpoint_step")
    rows = [  # a row with nothing to say ("") is left out
        ("Training", f"[{STATE_STYLE[training['state']]}]{training['state']}[/]  {escape(training['detail'])}"),
        ("Progress", escape(progress_text(progress)) if progress else NO_PROGRESS),
        ("ETA", escape(record.get("eta") or "")),
        ("Checkpoint", "" if checkpoint is None else f"step {checkpoint}"),
        ("Export", escape(progress.get("export_path") or "")),
        ("JobSet" if chief["kind"] == "JobSet" else "Chief Job" if chief["role"] == CHIEF else "Workers' Job",
         f"[{STATE_STYLE[chief['state']]}]{escape(job_text(chief))}[/]"),
        ("Run ended", escape(": ".join(filter(None, (chief["ending"], chief["end_reason"]))))
         if chief["ending"] else ""),
        ("Suspended", escape(f"since {chief['suspended_since']}; `tfchart resume {release} -n {namespace}` continues")
         if chief["state"] == "Suspended" and not chief["ending"] else ""),
        ("Evaluator Job", escape(job_text(status[EVALUATOR])) if status[EVALUATOR] else ""),
        ("StatefulSets", escape(", ".join(f"{s['role']} {s['ready']}/{s['desired']} ready"
                                          for s in status["stateful_sets"]))),
        *((label, escape(text)) for label, text in versions_rows(status[SERVING], progress)),
    ]  # fmt: skip
    for point in status["endpoints"]:
        ports = ", ".join(f"{port['name']} {port['port']}" for port in point["ports"])
        rows += [("TensorBoard" if point["component"] == TENSORBOARD else "Serving",
                  escape(f"{point['dns']} ({ports}); {point['ready_pods']} ready pod(s)")),
                 ("", f"[dim]{escape(point['port_forward'])}[/]")]  # fmt: skip
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    for label, text in rows:
        if text:
            grid.add_row(label, text)
    console.print(Panel(grid, title=f"{release} ({namespace})", expand=False))
    table = Table(title="Pods", title_justify="left", show_lines=False)
    for column in ("ROLE", "POD", "STATUS", "READY", "RESTARTS", "NODE", "GPUS", "AGE", "DETAIL"):
        table.add_column(column, overflow="fold")
    if not status["pods"]:
        table.add_row("-", "(no pods)", "", "", "", "", "", "", "")
    for pod in status["pods"]:
        shown = escape(pod["status"])
        gpus = ", ".join(f"{gpu['count']} {gpu['resource']}" for gpu in pod["gpus"]) or "-"
        table.add_row(pod["role"], pod["name"], f"[red]{shown}[/]" if pod["reason"] and pod["phase"] != "Succeeded"
                      else shown, "yes" if pod["ready"] else "no", str(pod["restarts"]), pod["node"] or "-", gpus,
                      human_age(pod["age_seconds"]), escape(pod["message"]))  # fmt: skip
    console.print(table)
    for warning in status["warnings"]:
        console.print(f"[bold yellow]warning:[/] {escape(warning)}")
    for note in status["notes"]:
        console.print(f"[yellow]note:[/] {escape(note)}")


def versions_rows(versions: dict[str, Any] | None, progress: dict[str, Any]) -> list[tuple[str, str]]:
    """'Exported' (every version of the model) and 'Serving loads' (those the model config selects)."""
    exported = versions["exported"] if versions else progress.get("exported_versions")
    rows = [] if exported is None else [("Exported", ", ".join(f"v{v}" for v in exported) or "no version yet")]
    if versions is None:
        return rows
    configured, note = f"{versions['model']} ({versions['policy']}, {versions['config_map']})", versions["note"]
    loaded = ", ".join(f"v{v}" for v in versions["loaded"] or []) or "nothing"
    missing = "; not exported: " + ", ".join(f"v{v}" for v in versions["missing"]) if versions["missing"] else ""
    return [*rows, ("Serving loads", f"unknown: {note}" if not versions["policy"] else f"{configured}; {note}"
                    if versions["loaded"] is None else f"{loaded} of {configured}{missing}")]  # fmt: skip


def job_text(job: dict[str, Any]) -> str:
    text: str = job["state"] + (f" ({job['reason']})" if job["reason"] else "")
    if job["kind"] == "JobSet":  # the JobSet's name and how often its failure policy restarted every Job
        text = f"{job['name']} {text}" + (f", restarted {job['restarts']} time(s)" if job["restarts"] else "")
    return text


def progress_text(progress: dict[str, Any]) -> str:
    parts = []
    if progress["step"] is not None:
        steps = progress["train_steps"]
        parts.append(f"step {progress['step']}" + (f"/{steps} ({100 * progress['step'] / steps:.0f}%)" if steps
                                                   else ""))
    numbers = (("loss {:.4f}", "loss"), ("accuracy {:.4f}", "accuracy"), ("{:.1f} examples/sec", "examples_per_sec"))
    parts += [form.format(progress[key]) for form, key in numbers if progress[key] is not None]
    parts += [f"updated {progress['updated_at']}"] if progress["updated_at"] else []
    return ", ".join(parts) or "reported, without numbers"


def human_age(seconds: int | None) -> str:
    """As kubectl shows an age: 90s, 5m, 3h20m, 2d."""
    if seconds is None:
        return "-"
    minutes, hours = seconds // 60, seconds // 3600
    if hours >= 48:
        return f"{hours // 24}d"
    if minutes >= 120:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    return f"{minutes}m" if seconds >= 120 else f"{seconds}s"
