"""The chief's progress on its Job, and the stall clock (standard library only; the run supervisor's).

The supervisor reads the tail of the chief container's log through the API: the chief's last
`tfd-status: {json}` line (the project's trainer prints one on every status write) and its last step
line (`step N, loss = L (X examples/sec; Y sec/batch)`), either of which a bring-your-own chief may
print. :func:`report` merges them, :func:`next_progress` turns a report into the record written on the
chief's Job (tfdcontract.JobProgress) given the record already there, :func:`worth_writing` throttles
the writes and :func:`stalled` reads the stall clock. Every decision rests on the stored record, the
log and the time: a restarted supervisor continues where the first one was.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tfdcontract import (
    RUNNING,
    STALLED_REASON_PREFIX,
    SUSPENDED,
    JobProgress,
    parse_status_line,
    parse_step_line,
)
from tfdcontract.runstate import now_text, parse_time

#: Lines of the chief's log read each poll: the trainer prints a step and a status line every
#: training.logEverySteps, and a few lines around each checkpoint.
LOG_TAIL_LINES = 200
#: At most one write of the record per this many seconds, besides every change of state.
WRITE_INTERVAL_SECONDS = 15.0


@dataclass(frozen=True)
class Report:
    """What the chief's log tail says: its last status document, with a later step line over it."""

    step: int
    state: str | None = None  # None: step lines only (the Job's state stands in)
    target: int | None = None
    loss: float | None = None
    accuracy: float | None = None
    checkpoint_step: int | None = None
    seconds_per_step: float | None = None


def report(log: str) -> Report | None:
    """The chief's latest report in a log tail, or None when it printed neither line there."""
    status, step_line, after_status = None, None, False
    for line in log.splitlines():
        parsed = parse_status_line(line)
        if parsed is not None:
            status, after_status = parsed, False
            continue
        step = parse_step_line(line)
        if step is not None:
            step_line, after_status = step, True
    if status is None and step_line is None:
        return None
    pace = step_line.sec_per_batch if step_line is not None and step_line.sec_per_batch > 0 else None
    if status is None:
        assert step_line is not None
        return Report(step_line.step, loss=step_line.loss, seconds_per_step=pace)
    newer = step_line if after_status and step_line is not None else None
    return Report(
        step=newer.step if newer else status.step, state=status.state, target=status.train_steps or None,
        loss=newer.loss if newer else status.loss, accuracy=status.accuracy,
        checkpoint_step=status.checkpoint_step, seconds_per_step=pace,
    )



def next_progress(stored: JobProgress | None, seen: Report | None, now: float, *, suspended: bool = False,
                  job_state: str = RUNNING, step_since: float | None = None) -> JobProgress | None:
    """The record to hold now. `stored`: the record on the Job; `seen`: this poll's report (None: nothing
    new read); `job_state`: the state to show for a chief that prints step lines only (the Job's ending);
    `step_since`: when this supervisor saw the step change to `seen.step` (None: it has not seen it change,
    e.g. on its first look). It keeps the time of a change seen while the writes were throttled, and
    catches a step that went and came back (a retry resuming from the checkpoint) between two records."""
    stamp = now_text(now)
    if suspended:  # the clock stops; it restarts at the resume
        base = stored or JobProgress(SUSPENDED, step_changed_at=stamp)
        return replace(base, state=SUSPENDED, eta=None, updated_at=stamp)
    resumed = stored is not None and stored.state == SUSPENDED
    if seen is None:
        if resumed:
            assert stored is not None
            return replace(stored, state=RUNNING, updated_at=stamp, step_changed_at=stamp)
        return stored
    recorded = parse_time(stored.step_changed_at) if stored is not None else None
    if resumed:  # the clock restarts
        changed = stamp
    elif stored is None or stored.step != seen.step or (step_since and recorded and step_since > recorded):
        changed = stamp if step_since is None else now_text(step_since)
    else:
        changed = stored.step_changed_at
    state = seen.state or job_state
    if stored is not None:  # what a report does not say (step lines only) stays as last known
        seen = replace(seen, **{name: getattr(stored, name) for name in ("target", "accuracy", "checkpoint_step")
                                if getattr(seen, name) is None})
    return JobProgress(
        state=state, step=seen.step, target=seen.target, eta=eta(stored, seen, state, now), loss=seen.loss,
        accuracy=seen.accuracy, checkpoint_step=seen.checkpoint_step, updated_at=stamp,
        step_changed_at=changed,
    )


def eta(stored: JobProgress | None, seen: Report, state: str, now: float) -> str | None:
    """When the target step is reached at the chief's latest pace (its step line's sec/batch), else at the
    pace seen since the stored record's step; None when finished or unknown."""
    if state != RUNNING or not seen.target or seen.step >= seen.target:
        return None
    pace = seen.seconds_per_step
    since = parse_time(stored.step_changed_at) if stored else None
    if pace is None and stored is not None and stored.step is not None and since and seen.step > stored.step:
        pace = (now - since) / (seen.step - stored.step)
    if pace is None:
        return stored.eta if stored is not None and stored.step == seen.step else None
    return now_text(now + (seen.target - seen.step) * pace)


def worth_writing(stored: JobProgress | None, new: JobProgress | None, now: float,
                  interval: float = WRITE_INTERVAL_SECONDS) -> bool:
    """A change of state at once; another change (not the ETA alone) once `interval` passed since the last
    write."""
    if new is None or new == stored:
        return False
    if stored is None or new.state != stored.state:
        return True
    if replace(new, eta=None, updated_at="") == replace(stored, eta=None, updated_at=""):
        return False
    written = parse_time(stored.updated_at)
    return written is None or now - written >= interval


def stalled(progress: JobProgress | None, started_at: float, now: float, timeout: float) -> str | None:
    """The stall's reason when the step has not changed for `timeout` seconds since the later of the run's
    start and the step's last change (or resume); else None."""
    if progress is not None and progress.state == SUSPENDED:
        return None
    changed = parse_time(progress.step_changed_at) if progress is not None else None
    since = max(started_at, changed or started_at)
    if now - since < timeout:
        return None
    if progress is None or progress.step is None:
        return f"{STALLED_REASON_PREFIX}no step reported for {timeout:.0f} s"
    return f"{STALLED_REASON_PREFIX}step {progress.step} has not risen for {timeout:.0f} s"
