"""The supervisor's settings: what the chart tells it, from its container's environment."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tfdcontract import CHIEF
from trainer.progress import WRITE_INTERVAL_SECONDS

POLICIES = ("scaleDown", "keep")
RUN_KINDS = ("Job", "JobSet")  # the run's object: native, its Job; workload.kind=jobset, the JobSet


class SupervisorConfigError(Exception):
    """The supervisor's environment is incomplete or contradictory (exit 2)."""


@dataclass(frozen=True)
class Settings:
    """What the chart tells the supervisor, from its container's environment."""

    chief_job: str
    statefulsets: tuple[str, ...]
    evaluator_job: str | None = None
    deployment: str | None = None
    on_success: str = "scaleDown"
    on_failure: str = "scaleDown"
    start_timeout_seconds: float = 0.0
    pod_selector: str = ""
    expected_pods: int = 0
    poll_seconds: float = 10.0
    chief_missing_seconds: float = 60.0
    progress: bool = False  # read the chief's log and write its progress on its Job
    stall_timeout_seconds: float = 0.0
    # The chief's own Job and container, whose pods' log says the progress and whose deadline ends the
    # run (native: the run's Job itself, the chief Job or the workers' Job).
    progress_job: str = ""
    progress_container: str = CHIEF
    progress_interval_seconds: float = WRITE_INTERVAL_SECONDS
    # The run's object: native, the Job chief_job; workload.kind=jobset, the JobSet run_name, whose chief's Job
    # (chief_job, <jobset>-chief-0) gets the deadline that ends the run.
    run_kind: str = "Job"
    run_name: str = ""

    @property
    def chief_own_job(self) -> str:
        return self.progress_job or self.chief_job

    @property
    def run_object(self) -> str:
        """The name of the run's object (its Job, or its JobSet)."""
        return self.run_name or self.chief_job

    @property
    def watches_start(self) -> bool:
        """Whether the run's start (every TensorFlow pod up) is looked for: a start timeout or stalls."""
        return bool(self.start_timeout_seconds or self.stall_timeout_seconds)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        def text(name: str) -> str:
            return env.get(name, "").strip()

        def number(name: str, default: float) -> float:
            raw = text(name)
            if not raw:
                return default
            try:
                value = float(raw)
            except ValueError:
                raise SupervisorConfigError(f"{name}={raw!r} is not a number of seconds") from None
            if value < 0:
                raise SupervisorConfigError(f"{name}={raw!r} must be 0 or more")
            return value

        chief = text("TFD_CHIEF_JOB")
        if not chief:
            raise SupervisorConfigError("TFD_CHIEF_JOB (the chief Job's name) is not set")
        policies = {}
        for name in ("TFD_ON_SUCCESS", "TFD_ON_FAILURE"):
            policies[name] = text(name) or "scaleDown"
            if policies[name] not in POLICIES:
                raise SupervisorConfigError(f"{name}={policies[name]!r}: expected one of {', '.join(POLICIES)}")
        timeout = number("TFD_START_TIMEOUT_SECONDS", 0.0)
        stall = number("TFD_STALL_TIMEOUT_SECONDS", 0.0)
        selector = text("TFD_POD_SELECTOR")
        expected = int(number("TFD_EXPECTED_PODS", 0.0))
        for name, value in (("TFD_START_TIMEOUT_SECONDS", timeout), ("TFD_STALL_TIMEOUT_SECONDS", stall)):
            if value and (not selector or expected < 1):
                raise SupervisorConfigError(
                    f"{name} needs TFD_POD_SELECTOR and TFD_EXPECTED_PODS (the TensorFlow pods)"
                )
        progress = text("TFD_PROGRESS").lower() or "false"
        if progress not in ("true", "false"):
            raise SupervisorConfigError(f"TFD_PROGRESS={progress!r}: expected true or false")
        if stall and progress != "true":
            raise SupervisorConfigError("TFD_STALL_TIMEOUT_SECONDS needs TFD_PROGRESS=true (the stall clock is kept "
                                        "in the progress record)")
        kind, run_name = text("TFD_RUN_KIND") or "Job", text("TFD_RUN_NAME")
        if kind not in RUN_KINDS:
            raise SupervisorConfigError(f"TFD_RUN_KIND={kind!r}: expected one of {', '.join(RUN_KINDS)}")
        if kind == "JobSet" and not run_name:
            raise SupervisorConfigError("TFD_RUN_KIND=JobSet needs TFD_RUN_NAME (the JobSet's name)")
        if kind == "JobSet" and timeout:
            raise SupervisorConfigError("TFD_START_TIMEOUT_SECONDS does not apply to a JobSet: it creates the chief's "
                                        "Job, whose deadline ends the run, only once the roles before it are Ready")
        return cls(
            chief_job=chief,
            statefulsets=tuple(n.strip() for n in text("TFD_STATEFULSETS").split(",") if n.strip()),
            evaluator_job=text("TFD_EVALUATOR_JOB") or None,
            deployment=text("TFD_SUPERVISOR_DEPLOYMENT") or None,
            on_success=policies["TFD_ON_SUCCESS"],
            on_failure=policies["TFD_ON_FAILURE"],
            start_timeout_seconds=timeout,
            pod_selector=selector,
            expected_pods=expected,
            poll_seconds=max(0.1, number("TFD_POLL_SECONDS", 10.0)),
            chief_missing_seconds=number("TFD_CHIEF_MISSING_SECONDS", 60.0),
            progress=progress == "true",
            stall_timeout_seconds=stall,
            progress_job=text("TFD_PROGRESS_JOB"),
            progress_container=text("TFD_PROGRESS_CONTAINER") or CHIEF,
            run_kind=kind,
            run_name=run_name,
        )

