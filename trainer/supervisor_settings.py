"""The supervisor's settings: what the chart tells it, from its container's environment."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tfdcontract import CHIEF
from tfdcontract import env as names
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

        chief = text(names.CHIEF_JOB_ENV)
        if not chief:
            raise SupervisorConfigError(f"{names.CHIEF_JOB_ENV} (the chief Job's name) is not set")
        policies = {}
        for name in (names.ON_SUCCESS_ENV, names.ON_FAILURE_ENV):
            policies[name] = text(name) or "scaleDown"
            if policies[name] not in POLICIES:
                raise SupervisorConfigError(f"{name}={policies[name]!r}: expected one of {', '.join(POLICIES)}")
        timeout = number(names.START_TIMEOUT_ENV, 0.0)
        stall = number(names.STALL_TIMEOUT_ENV, 0.0)
        selector = text(names.POD_SELECTOR_ENV)
        expected = int(number(names.EXPECTED_PODS_ENV, 0.0))
        for name, value in ((names.START_TIMEOUT_ENV, timeout), (names.STALL_TIMEOUT_ENV, stall)):
            if value and (not selector or expected < 1):
                raise SupervisorConfigError(
                    f"{name} needs {names.POD_SELECTOR_ENV} and {names.EXPECTED_PODS_ENV} (the TensorFlow pods)"
                )
        progress = text(names.PROGRESS_ENV).lower() or "false"
        if progress not in ("true", "false"):
            raise SupervisorConfigError(f"{names.PROGRESS_ENV}={progress!r}: expected true or false")
        if stall and progress != "true":
            raise SupervisorConfigError(f"{names.STALL_TIMEOUT_ENV} needs {names.PROGRESS_ENV}=true (the stall clock "
                                        "is kept in the progress record)")
        kind, run_name = text(names.RUN_KIND_ENV) or "Job", text(names.RUN_NAME_ENV)
        if kind not in RUN_KINDS:
            raise SupervisorConfigError(f"{names.RUN_KIND_ENV}={kind!r}: expected one of {', '.join(RUN_KINDS)}")
        if kind == "JobSet" and not run_name:
            raise SupervisorConfigError(f"{names.RUN_KIND_ENV}=JobSet needs {names.RUN_NAME_ENV} (the JobSet's name)")
        if kind == "JobSet" and timeout:
            raise SupervisorConfigError(f"{names.START_TIMEOUT_ENV} does not apply to a JobSet: it creates the "
                                        "chief's Job, whose deadline ends the run, only once the roles before it "
                                        "are Ready")
        return cls(
            chief_job=chief,
            statefulsets=tuple(n.strip() for n in text(names.STATEFULSETS_ENV).split(",") if n.strip()),
            evaluator_job=text(names.EVALUATOR_JOB_ENV) or None,
            deployment=text(names.SUPERVISOR_DEPLOYMENT_ENV) or None,
            on_success=policies[names.ON_SUCCESS_ENV],
            on_failure=policies[names.ON_FAILURE_ENV],
            start_timeout_seconds=timeout,
            pod_selector=selector,
            expected_pods=expected,
            poll_seconds=max(0.1, number(names.POLL_SECONDS_ENV, 10.0)),
            chief_missing_seconds=number(names.CHIEF_MISSING_ENV, 60.0),
            progress=progress == "true",
            stall_timeout_seconds=stall,
            progress_job=text(names.PROGRESS_JOB_ENV),
            progress_container=text(names.PROGRESS_CONTAINER_ENV) or CHIEF,
            run_kind=kind,
            run_name=run_name,
        )

