"""Command-line flags, defaults and the storage layout.

Nothing here imports TensorFlow, so a bad configuration is reported in milliseconds.
The flag names are a contract with the Helm chart (``charts/tf-distributed``): every TF
pod runs ``python -m trainer`` with the same flags and learns its role from TF_CONFIG.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import NoReturn

from tfdcontract import CHECKPOINTS_DIR, EXPORT_DIR, LOGS_DIR, PREDICT_REQUEST_FILE, STRATEGIES, TASK_TYPES
from tfdcontract.env import CLEANUP_STATEFULSETS_ENV
from trainer.errors import ConfigError

DATASETS = ("mnist", "mnist_tfrecord", "digits", "synthetic")
CLEANUP_POLICIES = ("scale-down", "keep")
PRECISIONS = ("auto", "float32", "mixed_bfloat16")
JOB_NAMES = TASK_TYPES


@dataclass(frozen=True)
class ClassicFlags:
    """The TF 1.x style cluster flags (``--job_name --task_index --ps_hosts ...``)."""

    job_name: str | None
    task_index: int
    ps_hosts: tuple[str, ...]
    worker_hosts: tuple[str, ...]
    chief_hosts: tuple[str, ...]

    @property
    def given(self) -> bool:
        """True when the classic flags (not TF_CONFIG) describe the cluster."""
        return self.job_name is not None


@dataclass(frozen=True)
class TrainConfig:
    """Everything a trainer process needs to know, validated.

    ``batch_size`` is the global batch per training step: under the synchronous
    strategies it is split across all replicas; under parameter_server every scheduled
    step runs one batch of this size on one worker.
    """

    strategy: str
    dataset: str
    data_dir: Path
    storage_root: Path
    model_name: str
    batch_size: int
    train_steps: int
    learning_rate: float
    momentum: float
    checkpoint_every_steps: int
    checkpoint_every_seconds: float
    keep_checkpoints: int
    eval_split: float
    export_min_accuracy: float
    log_every_steps: int
    steps_per_execution: int
    log_device_placement: bool
    cleanup: str
    exit_when_done: bool
    download: bool
    seed: int
    run_id: str
    eval_poll_secs: float
    eval_timeout_secs: float
    shutdown_grace_seconds: float
    intra_op_threads: int
    inter_op_threads: int
    precision: str
    classic: ClassicFlags

    @property
    def layout(self) -> StorageLayout:
        """Paths on the shared volume."""
        return StorageLayout(self.storage_root, self.model_name)


@dataclass(frozen=True)
class StorageLayout:
    """The storage layout on the shared volume (docs/trainer.md, "Storage layout")."""

    root: Path
    model_name: str

    @property
    def checkpoints(self) -> Path:
        """Training checkpoints, written by the chief only."""
        return self.root / CHECKPOINTS_DIR

    @property
    def logs(self) -> Path:
        """TensorBoard event files of training (chief)."""
        return self.root / LOGS_DIR

    @property
    def eval_logs(self) -> Path:
        """TensorBoard event files of the evaluator."""
        return self.root / LOGS_DIR / "eval"

    @property
    def predict_request(self) -> Path:
        """A Serving predict request of one held-out example, written with each export."""
        return self.root / PREDICT_REQUEST_FILE

    @property
    def export_base(self) -> Path:
        """``export/<model>``: one integer-named SavedModel directory per version."""
        return self.root / EXPORT_DIR / self.model_name

    @property
    def status(self) -> Path:
        """The status file (JSON), written atomically by the chief."""
        return self.root / "status.json"

    @property
    def restarts(self) -> Path:
        """``restarts/<role>-<index>.json``: each task's start count in this run (metrics only)."""
        return self.root / "restarts"


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser that raises ConfigError instead of printing usage and exiting."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"{message} (see python -m trainer --help)")


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Show defaults, except empty ones (None, False, "")."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        d = action.default
        if d is None or d is False or d == "" or d is argparse.SUPPRESS:
            return action.help
        return super()._get_help_string(action)


def _hosts(value: str) -> tuple[str, ...]:
    return tuple(h.strip() for h in value.split(",") if h.strip())


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser; ``--help`` documents every flag."""
    p = _Parser(
        prog="python -m trainer",
        description=(
            "Distributed TensorFlow trainer (LeNet-style CNN on MNIST-shaped data). Every "
            "task of a cluster runs the same command; its role comes from TF_CONFIG (or the "
            "classic --job_name/--task_index flags). Exit codes: 0 success, 1 training "
            "failed, 2 configuration error, 3 a cluster task (parameter server) was lost, "
            "143 (130) stopped by SIGTERM (SIGINT) after saving a checkpoint at the step "
            "reached: a restart resumes there."
        ),
        formatter_class=_HelpFormatter,
        allow_abbrev=False,  # flags are matched whole: a policy that looks for --download finds every way to say it
    )
    g = p.add_argument_group("training")
    g.add_argument("--strategy", default="single_device",
                   help="one of: " + ", ".join(STRATEGIES))
    g.add_argument("--dataset", default="mnist", help="one of: " + ", ".join(DATASETS))
    g.add_argument("--data-dir", default=None,
                   help="where the data set lives (default: <storage-root>/datasets)")
    g.add_argument("--download", action="store_true",
                   help="download mnist.npz into --data-dir when it is absent (needs internet)")
    g.add_argument("--storage-root", default="/data",
                   help="shared volume: checkpoints/, logs/, export/, status.json")
    g.add_argument("--model-name", default="mnist",
                   help="model name: exports go to <storage-root>/export/<model-name>/<N>/")
    g.add_argument("--batch-size", type=int, default=64, help="global batch size per step")
    g.add_argument("--train-steps", type=int, default=600, help="total global training steps")
    g.add_argument("--learning-rate", type=float, default=0.05, help="SGD learning rate")
    g.add_argument("--momentum", type=float, default=0.9, help="SGD momentum (0 = plain SGD)")
    g.add_argument("--export-min-accuracy", type=float, default=0.0,
                   help="export the SavedModel only when the final held-out accuracy reaches this "
                        "(0 = always); below it the run still Succeeds and status.json says why "
                        "nothing was exported")
    g.add_argument("--eval-split", type=float, default=0.2,
                   help="fraction of the labelled examples held out (seeded, same in every task)")
    g.add_argument("--seed", type=int, default=42, help="seed of the held-out split and init")
    g.add_argument("--checkpoint-every-steps", type=int, default=100,
                   help="save a checkpoint every N global steps (0 = only at the end)")
    g.add_argument("--checkpoint-every-seconds", "--checkpoint-every-secs",
                   dest="checkpoint_every_seconds", type=float, default=0.0,
                   help="also save when N seconds passed since the last save, checked at "
                        "every chunk boundary; the chief decides (0 = off)")
    g.add_argument("--keep-checkpoints", type=int, default=5, help="checkpoints kept on disk")
    g.add_argument("--log-every-steps", type=int, default=20,
                   help="print the step line and write TensorBoard scalars every N steps")
    g.add_argument("--precision", choices=PRECISIONS, default="auto",
                   help="float32, or mixed_bfloat16 (variables float32, layers compute in bfloat16; the "
                        "logits, the loss, evaluation and the exported SavedModel stay float32); auto: "
                        "mixed_bfloat16 on a CPU with bfloat16 instructions (AMX-BF16 or AVX512-BF16) and "
                        "no GPU, else float32")
    g.add_argument("--steps-per-execution", type=int, default=10,
                   help="training steps run inside one TensorFlow function call (one remote "
                        "closure under parameter_server); chunks end at log and checkpoint steps")
    g.add_argument("--log-device-placement", action="store_true",
                   help="log the device of every op (tf.debugging.set_log_device_placement)")
    g.add_argument("--exit-when-done", action="store_true",
                   help="multi_worker_mirrored workers exit 0 once the chief reports success, and a "
                        "restarted worker of a finished run exits 0 at once (pods of a Job; "
                        "the default idles until SIGTERM, as StatefulSet pods must)")
    g.add_argument("--cleanup", default="scale-down",
                   help=f"after success: 'scale-down' the StatefulSets in "
                        f"{CLEANUP_STATEFULSETS_ENV} to 0 replicas, or 'keep' them")
    g.add_argument("--run-id", default=None,
                   help="identity of this training run in status.json (default: a hash of "
                        "model name, dataset, strategy, steps, batch size, learning rate)")
    g.add_argument("--eval-poll-secs", type=float, default=5.0,
                   help="evaluator: how often to look for a new checkpoint")
    g.add_argument("--eval-timeout-secs", type=float, default=0.0,
                   help="evaluator: give up (exit 1) after N seconds without success (0 = never)")
    g.add_argument("--shutdown-grace-seconds", type=float, default=25.0,
                   help="on SIGTERM/SIGINT: stop at the next step boundary, save and exit "
                        "within N seconds (keep it below terminationGracePeriodSeconds); "
                        "past it, exit without a new checkpoint")
    g.add_argument("--intra-op-threads", type=int, default=0,
                   help="TensorFlow intra-op threads (0 = TensorFlow's default)")
    g.add_argument("--inter-op-threads", type=int, default=0,
                   help="TensorFlow inter-op threads (0 = TensorFlow's default)")
    c = p.add_argument_group(
        "classic cluster flags",
        "Alternative to TF_CONFIG (do not set both). Without --chief_hosts, worker 0 is the "
        "chief: under parameter_server it becomes the coordinator and the other workers "
        "are servers; under multi_worker_mirrored it trains and writes like a chief.",
    )
    c.add_argument("--job_name", default=None, help="one of: " + ", ".join(JOB_NAMES))
    c.add_argument("--task_index", type=int, default=0, help="index of this task in its job")
    c.add_argument("--ps_hosts", default="", help="comma-separated host:port of the ps tasks")
    c.add_argument("--worker_hosts", default="", help="comma-separated host:port of workers")
    c.add_argument("--chief_hosts", default="", help="host:port of the chief (coordinator)")
    return p


def _fingerprint(values: dict[str, object]) -> str:
    blob = json.dumps(values, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def parse_config(argv: Sequence[str]) -> TrainConfig:
    """Parse and validate the flags. Raises ConfigError with a one-line message."""
    ns = build_parser().parse_args(list(argv))
    if ns.strategy not in STRATEGIES:
        raise ConfigError(
            f"unknown --strategy {ns.strategy!r}: valid strategies are {', '.join(STRATEGIES)}"
        )
    if ns.dataset not in DATASETS:
        raise ConfigError(
            f"unknown --dataset {ns.dataset!r}: valid data sets are {', '.join(DATASETS)}"
        )
    if ns.cleanup not in CLEANUP_POLICIES:
        raise ConfigError(
            f"unknown --cleanup {ns.cleanup!r}: valid policies are {', '.join(CLEANUP_POLICIES)}"
        )
    positive = {
        "--batch-size": ns.batch_size,
        "--train-steps": ns.train_steps,
        "--log-every-steps": ns.log_every_steps,
        "--steps-per-execution": ns.steps_per_execution,
        "--keep-checkpoints": ns.keep_checkpoints,
    }
    for flag, value in positive.items():
        if value <= 0:
            raise ConfigError(f"{flag} must be a positive integer, got {value}")
    non_negative: dict[str, float] = {
        "--checkpoint-every-steps": ns.checkpoint_every_steps,
        "--checkpoint-every-seconds": ns.checkpoint_every_seconds,
        "--eval-timeout-secs": ns.eval_timeout_secs,
        "--intra-op-threads": ns.intra_op_threads,
        "--inter-op-threads": ns.inter_op_threads,
        "--task_index": ns.task_index,
    }
    for flag, fvalue in non_negative.items():
        if fvalue < 0 or math.isnan(fvalue):
            raise ConfigError(f"{flag} must be >= 0, got {fvalue}")
    if not (ns.learning_rate > 0 and math.isfinite(ns.learning_rate)):
        raise ConfigError(f"--learning-rate must be a positive number, got {ns.learning_rate}")
    if not 0 <= ns.momentum < 1:
        raise ConfigError(f"--momentum must be in [0, 1), got {ns.momentum}")
    if not 0 <= ns.export_min_accuracy <= 1:
        raise ConfigError(f"--export-min-accuracy must be between 0 and 1, got {ns.export_min_accuracy}")
    if not 0 < ns.eval_split < 1:
        raise ConfigError(f"--eval-split must be between 0 and 1 (exclusive), got {ns.eval_split}")
    if ns.eval_poll_secs <= 0:
        raise ConfigError(f"--eval-poll-secs must be > 0, got {ns.eval_poll_secs}")
    if not (ns.shutdown_grace_seconds > 0 and math.isfinite(ns.shutdown_grace_seconds)):
        raise ConfigError(
            f"--shutdown-grace-seconds must be a positive number of seconds, got "
            f"{ns.shutdown_grace_seconds}"
        )
    if not ns.model_name or "/" in ns.model_name or ns.model_name.startswith("."):
        raise ConfigError(
            f"--model-name {ns.model_name!r} is not a valid directory name (no '/', no leading .)"
        )
    if ns.strategy == "parameter_server" and ns.inter_op_threads == 1:
        raise ConfigError(
            "--inter-op-threads=1 deadlocks parameter_server workers (remote step functions "
            "need a second inter-op thread): use 0 (TensorFlow's default) or >= 2"
        )
    if ns.job_name is not None and ns.job_name not in JOB_NAMES:
        hint = " (TF 1.x 'master' is called 'chief')" if ns.job_name == "master" else ""
        raise ConfigError(
            f"unknown --job_name {ns.job_name!r}: valid job names are {', '.join(JOB_NAMES)}{hint}"
        )
    storage_root = Path(ns.storage_root)
    data_dir = Path(ns.data_dir) if ns.data_dir else storage_root / "datasets"
    run_id = ns.run_id or _fingerprint(
        {
            "model_name": ns.model_name,
            "dataset": ns.dataset,
            "strategy": ns.strategy,
            "train_steps": ns.train_steps,
            "batch_size": ns.batch_size,
            "learning_rate": ns.learning_rate,
        }
    )
    return TrainConfig(
        strategy=ns.strategy,
        dataset=ns.dataset,
        data_dir=data_dir,
        storage_root=storage_root,
        model_name=ns.model_name,
        batch_size=ns.batch_size,
        train_steps=ns.train_steps,
        learning_rate=ns.learning_rate,
        momentum=ns.momentum,
        checkpoint_every_steps=ns.checkpoint_every_steps,
        checkpoint_every_seconds=ns.checkpoint_every_seconds,
        keep_checkpoints=ns.keep_checkpoints,
        eval_split=ns.eval_split,
        export_min_accuracy=ns.export_min_accuracy,
        log_every_steps=ns.log_every_steps,
        steps_per_execution=ns.steps_per_execution,
        log_device_placement=ns.log_device_placement,
        cleanup=ns.cleanup,
        exit_when_done=ns.exit_when_done,
        download=ns.download,
        seed=ns.seed,
        run_id=run_id,
        eval_poll_secs=ns.eval_poll_secs,
        eval_timeout_secs=ns.eval_timeout_secs,
        shutdown_grace_seconds=ns.shutdown_grace_seconds,
        intra_op_threads=ns.intra_op_threads,
        inter_op_threads=ns.inter_op_threads,
        precision=ns.precision,
        classic=ClassicFlags(
            job_name=ns.job_name,
            task_index=ns.task_index,
            ps_hosts=_hosts(ns.ps_hosts),
            worker_hosts=_hosts(ns.worker_hosts),
            chief_hosts=_hosts(ns.chief_hosts),
        ),
    )


def config_summary(cfg: TrainConfig) -> dict[str, object]:
    """A JSON-able view of the configuration, for the start-up log line."""
    d = asdict(cfg)
    return {k: str(v) if isinstance(v, Path) else v for k, v in d.items()}
