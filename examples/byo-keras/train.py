"""A bring-your-own training program for the tf-distributed chart: Keras 3 layers and optimizer,
synchronous training under MultiWorkerMirroredStrategy with a custom loop (Keras 3's model.fit does
not run under that strategy in TensorFlow 2.21), on generated data.

What it takes from the chart (examples/byo-keras/README.md): TF_CONFIG (read by the strategy) and
TFD_CHECKPOINT_DIR, TFD_LOG_DIR, TFD_EXPORT_DIR, TFD_MODEL_NAME, TFD_STORAGE_ROOT. What it gives back:
checkpoints, TensorBoard summaries, a SavedModel in $TFD_EXPORT_DIR/<version> for TF Serving, and
`step ...` / `tfd-status: {json}` lines that `tfchart local` and `tfchart status` show.
"""

import argparse
import json
import os
import shutil
import tempfile
import time
from datetime import datetime, timezone

import keras
import numpy as np
import tensorflow as tf

# Where the chart says things go (every TensorFlow container gets these; the defaults are for a run
# outside the chart).
STORAGE_ROOT = os.environ.get("TFD_STORAGE_ROOT", "/tmp/byo-keras")
CHECKPOINT_DIR = os.environ.get("TFD_CHECKPOINT_DIR", os.path.join(STORAGE_ROOT, "checkpoints"))
LOG_DIR = os.environ.get("TFD_LOG_DIR", os.path.join(STORAGE_ROOT, "logs"))
MODEL = os.environ.get("TFD_MODEL_NAME", "byo-keras")
EXPORT_DIR = os.environ.get("TFD_EXPORT_DIR", os.path.join(STORAGE_ROOT, "export", MODEL))
STARTED = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

FEATURES, CLASSES = 8, 3
# TensorBoard's scalar tag, written with TensorFlow's own summary op: tf.summary.scalar needs the
# tensorboard package, which `pip install tensorflow` (and so the tensorflow image) no longer carries.
SCALAR = tf.compat.v1.SummaryMetadata(plugin_data=tf.compat.v1.SummaryMetadata.PluginData(plugin_name="scalars"))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300, help="training steps")
    parser.add_argument("--global-batch", type=int, default=64, help="examples per step, all workers together")
    parser.add_argument("--checkpoint-every", type=int, default=100, help="steps between checkpoints")
    parser.add_argument("--log-every", type=int, default=20, help="steps between progress lines")
    return parser.parse_args()


def is_chief() -> bool:
    """The chief task, or worker 0 when the cluster has no chief (TensorFlow's convention); a lone
    process without TF_CONFIG too."""
    config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    task, cluster = config.get("task", {}), config.get("cluster", {})
    if not task or task.get("type") == "chief":
        return True
    return task.get("type") == "worker" and task.get("index") == 0 and "chief" not in cluster


def make_dataset(global_batch: int) -> tf.data.Dataset:
    """Points in three classes, the same on every task (fixed seed); the strategy shards batches."""
    rng = np.random.default_rng(7)
    features = rng.normal(size=(4096, FEATURES)).astype("float32")
    labels = np.argmax(features @ rng.normal(size=(FEATURES, CLASSES)), axis=1).astype("int64")
    return tf.data.Dataset.from_tensor_slices((features, labels)).shuffle(4096, seed=7).repeat().batch(global_batch)


def report(state: str, step: int, args: argparse.Namespace, **fields: object) -> None:
    """The chief's progress: one `tfd-status: {json}` line, which `tfchart status` reads from its log, and the
    same document in $TFD_STORAGE_ROOT/status.json (fields: docs/trainer.md, "status.json")."""
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    document = {"state": state, "strategy": "multi_worker_mirrored", "step": step, "train_steps": args.steps,
                "loss": None, "accuracy": None, "examples_per_sec": None, "export_path": None,
                "started_at": STARTED, "updated_at": now, "message": "", "model_name": MODEL, **fields}
    print("tfd-status: " + json.dumps(document), flush=True)
    os.makedirs(STORAGE_ROOT, exist_ok=True)
    partial = os.path.join(STORAGE_ROOT, ".status.json.partial")
    with open(partial, "w", encoding="utf-8") as file:
        json.dump(document, file)
    os.replace(partial, os.path.join(STORAGE_ROOT, "status.json"))  # readers never see half a file


def export(module: tf.Module, chief: bool) -> str:
    """Every worker saves (the save is collective); the chief's copy is the next numbered version."""
    if not chief:
        target = tempfile.mkdtemp()
        tf.saved_model.save(module, target)
        shutil.rmtree(target)
        return ""
    os.makedirs(EXPORT_DIR, exist_ok=True)
    versions = [int(name) for name in os.listdir(EXPORT_DIR) if name.isdigit()]
    final = os.path.join(EXPORT_DIR, str(max(versions, default=0) + 1))
    partial = os.path.join(EXPORT_DIR, ".partial")  # TF Serving loads numbered directories only
    shutil.rmtree(partial, ignore_errors=True)
    tf.saved_model.save(module, partial)
    os.rename(partial, final)
    return final


class Serving(tf.Module):
    """The serving signature: `features` [None, 8] -> `probabilities`, `classes`."""

    def __init__(self, model: keras.Model) -> None:
        super().__init__()
        self.model = model

    @tf.function(input_signature=[tf.TensorSpec([None, FEATURES], tf.float32, name="features")])
    def serve(self, features: tf.Tensor) -> dict[str, tf.Tensor]:
        probabilities = tf.nn.softmax(self.model(features, training=False))
        return {"probabilities": probabilities, "classes": tf.argmax(probabilities, axis=-1)}


def main() -> None:
    args = parse_args()
    strategy = tf.distribute.MultiWorkerMirroredStrategy()  # reads TF_CONFIG; waits for every worker
    chief = is_chief()
    with strategy.scope():
        model = keras.Sequential([
            keras.Input((FEATURES,)),
            keras.layers.Dense(32, activation="relu"),
            keras.layers.Dense(CLASSES),
        ])
        optimizer = keras.optimizers.Adam(0.01)
        optimizer.build(model.trainable_variables)
        step = tf.Variable(0, dtype=tf.int64, trainable=False, aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step)
    # Saving is collective too: every worker saves, only the chief's directory is the real one.
    save_dir = CHECKPOINT_DIR if chief else tempfile.mkdtemp()
    manager = tf.train.CheckpointManager(checkpoint, save_dir, max_to_keep=3)
    if latest := tf.train.latest_checkpoint(CHECKPOINT_DIR):
        checkpoint.restore(latest)
    iterator = iter(strategy.experimental_distribute_dataset(make_dataset(args.global_batch)))

    def replica_step(features: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            logits = model(features, training=True)
            per_example = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=args.global_batch)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))
        step.assign_add(1)
        return loss

    @tf.function
    def train_step() -> tf.Tensor:
        features, labels = next(iterator)
        return strategy.reduce("SUM", strategy.run(replica_step, args=(features, labels)), axis=None)

    writer = tf.summary.create_file_writer(LOG_DIR) if chief else tf.summary.create_noop_writer()
    if chief:
        report("Running", int(step.numpy()), args, message="training")
    started = time.monotonic()
    first, loss = int(step.numpy()), None
    while int(step.numpy()) < args.steps:
        loss = float(train_step())
        done = int(step.numpy())
        if done % args.log_every == 0 or done == args.steps:
            seconds = (time.monotonic() - started) / max(1, done - first)
            print(f"step {done}, loss = {loss:.4f} ({args.global_batch / seconds:.1f} examples/sec; "
                  f"{seconds:.3f} sec/batch)", flush=True)
            with writer.as_default(step=done):
                tf.summary.write("loss", loss, metadata=SCALAR)
            if chief:
                report("Running", done, args, loss=loss, examples_per_sec=args.global_batch / seconds)
        if done % args.checkpoint_every == 0 or done == args.steps:
            manager.save(checkpoint_number=done)
    path = export(Serving(model), chief)
    if chief:
        versions = sorted(int(name) for name in os.listdir(EXPORT_DIR) if name.isdigit())
        report("Succeeded", args.steps, args, loss=loss, export_path=path, exported_versions=versions,
               message=f"exported {path}")
    else:
        shutil.rmtree(save_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
