"""Entry point: ``python -m trainer``. The one boundary where errors become exit codes.

Every TrainerError becomes one ``trainer: error: <message>`` line on stderr and its exit
code (2 for configuration errors); any other exception becomes one ``internal error``
line and exit code 1 (set ``TFD_DEBUG=1`` to see the traceback). Configuration (flags,
TF_CONFIG, data paths) is validated before TensorFlow is imported. A stop on SIGTERM or
SIGINT (trainer.shutdown) exits 128 + the signal number: 143 or 130.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Sequence
from typing import NoReturn

from tfdcontract.env import DEBUG_ENV
from trainer.errors import EXIT_FAILED, TrainerError
from trainer.shutdown import Interrupted


def _error(message: str) -> None:
    one_line = " ".join(message.split())
    print(f"trainer: error: {one_line}", file=sys.stderr, flush=True)


def _exit(code: int) -> NoReturn:
    """Flush and leave without running TensorFlow's (sometimes hanging) teardown."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse, validate, import TensorFlow, run the role. Returns the exit code."""
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        from trainer.cluster import resolve_task
        from trainer.config import parse_config
        from trainer.roles import dispatch
        from trainer.runtime import setup_logging

        cfg = parse_config(args)
        task = resolve_task(cfg, os.environ)
        setup_logging(task.name)
        return dispatch(cfg, task)
    except TrainerError as e:
        _error(str(e))
        return e.exit_code
    except Interrupted as stop:
        # Exit from inside the handler: the stopped frames hold TensorFlow objects (collective
        # ops, distributed iterators) whose teardown can wait many seconds for peers that are
        # already gone, eating the grace period.
        _exit(stop.exit_code)
    except KeyboardInterrupt:
        _error("interrupted")
        return 130
    except Exception as e:
        if os.environ.get(DEBUG_ENV):
            traceback.print_exc()
        _error(f"internal error: {type(e).__name__}: {e} (set {DEBUG_ENV}=1 for a traceback)")
        return EXIT_FAILED


if __name__ == "__main__":
    if any(a in ("-h", "--help") for a in sys.argv[1:]):
        sys.exit(main())  # argparse prints help and raises SystemExit(0)
    _exit(main())
