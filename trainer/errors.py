"""One error hierarchy for the trainer.

Every error the trainer raises on purpose derives from :class:`TrainerError`. The
single boundary in :mod:`trainer.__main__` turns it into one ``trainer: error: ...``
line on stderr and the error's ``exit_code``; nothing else prints tracebacks.
"""

from __future__ import annotations

#: Exit code for a bad configuration (flags, TF_CONFIG, missing data): retrying cannot help.
EXIT_CONFIG = 2
#: Exit code for a training run that failed (the chief Job retries it).
EXIT_FAILED = 1
#: Exit code when a cluster member (parameter server) was lost; a restart resumes.
EXIT_CLUSTER = 3
#: Exit code after SIGTERM (128 + 15, the shell's and Kubernetes' convention for a process
#: ended by SIGTERM): the chief saved a checkpoint at the step it reached (or says why it
#: could not) and a restart resumes there. SIGINT gives 130 (128 + 2). See trainer.shutdown.
EXIT_INTERRUPTED = 143


class TrainerError(Exception):
    """Base class of every error the trainer reports to the user."""

    exit_code: int = EXIT_FAILED


class ConfigError(TrainerError):
    """Flags, environment or TF_CONFIG are invalid. The message says how to fix it."""

    exit_code = EXIT_CONFIG


class ClusterError(ConfigError):
    """The cluster description (TF_CONFIG or classic flags) is invalid."""


class DataError(ConfigError):
    """The data set is missing or malformed."""


class ClusterFailure(TrainerError):
    """A cluster task failed during training (e.g. a parameter server was lost)."""

    exit_code = EXIT_CLUSTER


class TrainingFailure(TrainerError):
    """Training failed for a reason other than configuration (e.g. the loss diverged)."""
