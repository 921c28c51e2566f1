"""Stopping on SIGTERM and SIGINT within a bounded time (``--shutdown-grace-seconds``).

Kubernetes stops a pod with SIGTERM and sends SIGKILL ``terminationGracePeriodSeconds``
later. :class:`Shutdown` turns the first signal into a *stop request*:

* inside a :meth:`Shutdown.deferred` region (the training loops, a server's life) the
  signal only sets the request; the loops honour it at the next step boundary, save a
  checkpoint of the exact step and raise :class:`Interrupted`;
* anywhere else (start-up, evaluation, export) there is nothing new to save: the signal
  handler raises :class:`Interrupted` at once.

A watchdog thread ends the process ``--shutdown-grace-seconds`` after the signal in every
case, also when the main thread is blocked inside TensorFlow (a collective waiting for a
dead peer, a remote closure that never returns): it learns of the signal through
``signal.set_wakeup_fd``, which the interpreter writes the moment the signal arrives, not
when the main thread next runs Python code. The signal handler itself only assigns
attributes (no locks), so it cannot deadlock with the code it interrupts.

Exit codes: 128 + the signal number, the shell's and Kubernetes' convention for a process
ended by that signal: 143 for SIGTERM, 130 for SIGINT (see ``trainer.errors``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType

from tfdcontract.phases import stopping_line
from trainer.errors import EXIT_INTERRUPTED

log = logging.getLogger("trainer.shutdown")

SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: How long the watchdog lets an on-expire callback (status.json) run before exiting.
EXPIRE_CALLBACK_SECS = 2.0


def exit_code_for(signum: int | None) -> int:
    """128 + the signal number; 143 (SIGTERM's) when the stop came from a peer."""
    return 128 + signum if signum is not None else EXIT_INTERRUPTED


class Interrupted(BaseException):
    """This task stops because of a termination signal, its own or (under
    multi_worker_mirrored) a peer's. A BaseException like KeyboardInterrupt, so that no
    ``except Exception`` on the way swallows it. ``line`` is the one log line."""

    def __init__(self, cause: str, where: str, outcome: str, exit_code: int,
                 step: int | None = None) -> None:
        self.line = f"{cause} {where}: {outcome}, exiting"
        super().__init__(self.line)
        self.exit_code = exit_code
        self.step = step


class Shutdown:
    """The process's stop request. Create it with :func:`install`."""

    def __init__(self, grace_seconds: float) -> None:
        self.grace_seconds = grace_seconds
        #: What the main thread is doing, for messages ("starting", "training", ...).
        self.phase = "starting"
        self._signum: int | None = None
        self._arrived: float | None = None
        self._deferred = 0
        self._handled = False
        self._woken = threading.Event()
        self._on_expire: list[Callable[[str], None]] = []

    @property
    def requested(self) -> bool:
        """True once SIGTERM or SIGINT arrived."""
        return self._signum is not None

    @property
    def signal_name(self) -> str:
        """``SIGTERM`` or ``SIGINT`` (``SIGTERM`` before any signal)."""
        return signal.Signals(self._signum or signal.SIGTERM).name

    @property
    def exit_code(self) -> int:
        """The exit code for this stop: 128 + the signal number."""
        return exit_code_for(self._signum)

    def time_left(self) -> float:
        """Seconds until the grace period ends (infinite before any signal)."""
        if self._arrived is None:
            return float("inf")
        return self._arrived + self.grace_seconds - time.monotonic()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until a stop is requested (or ``timeout``); returns :attr:`requested`."""
        self._woken.wait(timeout)
        return self.requested

    def on_expire(self, callback: Callable[[str], None]) -> None:
        """Run ``callback(message)`` (bounded) before the watchdog ends the process."""
        self._on_expire.append(callback)

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """Inside: a signal only requests the stop; the code polls :attr:`requested`."""
        self._deferred += 1
        try:
            yield
        finally:
            self._deferred -= 1

    def interrupted(self, where: str, outcome: str, step: int | None = None) -> Interrupted:
        """The :class:`Interrupted` for this task's own signal."""
        return Interrupted(self.signal_name, where, outcome, self.exit_code, step)

    def _record(self, signum: int) -> None:
        if self._signum is None:
            self._arrived = time.monotonic()
            self._signum = signum

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        """The Python-level handler (main thread): attributes only, no locks. Only the
        first signal can raise; later ones (a second SIGTERM while saving) are ignored."""
        first, self._handled = not self._handled, True
        self._record(signum)
        if first and self._deferred == 0:
            raise self.interrupted(f"while {self.phase}", "nothing new to save")

    def install(self) -> None:
        """Handlers for SIGTERM/SIGINT, the wake-up pipe and the watchdog (main thread only)."""
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        self.reclaim()
        signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        threading.Thread(target=self._watch, args=(read_fd,), name="shutdown-watchdog",
                         daemon=True).start()

    def reclaim(self) -> None:
        """(Re)install the handlers (main thread only). TensorFlow's coordination service
        (multi_worker_mirrored, parameter_server) installs its own C++ SIGTERM handler when
        the strategy connects ("preemption_notifier ... SIGTERM caught"), which would
        leave SIGTERM unanswered: call this after creating a strategy or a server."""
        for signum in SIGNALS:
            signal.signal(signum, self._handle)

    def _watch(self, read_fd: int) -> None:
        while not self.requested:
            for signum in os.read(read_fd, 64):
                if signum in SIGNALS:
                    self._record(signum)
        self._woken.set()
        log.warning("%s", stopping_line(self.signal_name, self.grace_seconds))
        time.sleep(max(0.0, self.time_left()))
        self._expire()

    def _expire(self) -> None:
        message = (f"{self.signal_name}: --shutdown-grace-seconds={self.grace_seconds:g} ran "
                   f"out while {self.phase}: exiting now; a restart resumes from the latest "
                   f"checkpoint on disk")
        log.error("%s", message)
        for callback in self._on_expire:
            helper = threading.Thread(target=callback, args=(message,), daemon=True)
            helper.start()
            helper.join(EXPIRE_CALLBACK_SECS)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(self.exit_code)


_installed: Shutdown | None = None


def install(grace_seconds: float) -> Shutdown:
    """Install the process's :class:`Shutdown` (once; later calls return the same one)."""
    global _installed
    if _installed is None:
        _installed = Shutdown(grace_seconds)
        _installed.install()
    return _installed


def save_reserve(grace_seconds: float, last_save_secs: float | None) -> float:
    """Seconds of the grace period kept for the final save: three times the last save of
    this attempt (at least 2 s), at most half the grace; half the grace before any save."""
    half = grace_seconds / 2
    if last_save_secs is None:
        return half
    return min(half, max(2.0, 3 * last_save_secs))
