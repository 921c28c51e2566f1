"""Acting: the supervisor's requests (its run's objects, by path), and the writes of its own that no plan makes: the
run's start, a start timeout's or a stall's end of the chief (the plan's are in trainer/supervisor_plan.py)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import parse_qsl

from trainer.kube import ApiException, Kube
from trainer.supervisor_kinds import JOB_RUN, JOBSET_RUN, JobRun
from trainer.supervisor_settings import Settings


class Acting:
    """The requests of one supervised run (through :class:`trainer.kube.Kube`)."""

    settings: Settings
    kube: Kube
    clock: Callable[[], float]

    @property
    def namespace(self) -> str:
        return self.kube.namespace

    @property
    def kind(self) -> JobRun:
        """What differs between the kinds of the run's object (JobRun, JobSetRun)."""
        return JOBSET_RUN if self.settings.run_kind == "JobSet" else JOB_RUN

    def api(self, method: str, path: str, body: Mapping[str, object] | None = None) -> dict[str, Any] | None:
        """A request (its query in `path`); None for 404. Other HTTP errors propagate (ApiException)."""
        path, _, query = path.partition("?")
        try:
            return self.kube.request(method, path, parse_qsl(query), body)
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def path(self, group: str, resource: str, name: str = "") -> str:
        base = "/api/v1" if group == "" else f"/apis/{group}"
        return f"{base}/namespaces/{self.namespace}/{resource}" + (f"/{name}" if name else "")

    def job_path(self, name: str) -> str:
        return self.path("batch/v1", "jobs", name)

    def end_chief(self, reason: str) -> None:
        """Ends a run that cannot start or stalled: a 1 s deadline makes the Job controller fail the chief Job
        (under a JobSet, its DeadlineEndsTheRun rule then fails the run)."""
        self.kind.end(self, reason)

    def annotate_run(self, annotations: Mapping[str, str]) -> None:
        """Annotates the run's object (its Job, or its JobSet)."""
        self.api("PATCH", self.kind.path(self), {"metadata": {"annotations": dict(annotations)}})

    def annotate_job(self, annotations: Mapping[str, str], name: str) -> None:
        """Annotates the Job `name`."""
        self.api("PATCH", self.job_path(name), {"metadata": {"annotations": dict(annotations)}})
