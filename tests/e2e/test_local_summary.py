"""The commands `tfchart local` ends with, run as printed: TensorBoard kept answers, the `tensorboard --logdir`
line serves the run's logs, and the prediction request is valid for the exported signature. TensorFlow Serving
itself cannot run on these machines (no tensorflow_model_server): the request is given to the exported
SavedModel's serving signature as Serving would, through tf.saved_model.load."""

from __future__ import annotations

import json
import re
import shlex
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.chartlib import REPO
from tests.e2e.test_local import assert_none_left

pytestmark = pytest.mark.slow

RUN = ["--set", "training.dataset=digits", "--set", "training.download=false", "--set",
       "training.strategy=single_device", "--set", "training.trainSteps=200"]  # fmt: skip


def answers(url: str, deadline: float) -> bool:
    """Whether `url` answers 200 before `deadline` (a server just started takes a moment to listen)."""
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return bool(response.status == 200)
        except OSError:
            time.sleep(0.5)
    return False


def free_port() -> int:
    from tfchart.local.pods import free_port as free

    return free()


def test_the_closing_commands_work_as_printed(tmp_path: Path) -> None:
    workdir = tmp_path / "run"
    argv = [str(REPO / ".venv" / "bin" / "tfchart"), "local", *RUN, "--workdir", str(workdir), "--keep-tensorboard"]
    tfchart = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert tfchart.stdout is not None
    shown: list[str] = []
    try:
        for line in tfchart.stdout:  # up to the last line of the summary: the prediction request
            shown.append(line.rstrip("\n"))
            if "curl -d @" in line or "✗" in line:
                break
        text = "\n".join(shown)
        # off a terminal, what the run waits for gets a line of its own: the silences before and after training
        phases = [line.strip().split("  ")[0] for line in shown if re.match(r"^ {5}[a-z]|^100% ", line)]
        assert phases[0] == "importing TensorFlow" and phases[-2:] == ["100% step 200/200", "shutting down"], text
        [summary] = [line for line in shown if line.startswith("✓ training Succeeded")]
        status = json.loads((workdir / "status.json").read_text())
        assert f"{status['average_examples_per_sec']} examples/sec on average" in summary, text
        [kept] = [line for line in shown if "TensorBoard: http" in line and "kept running" in line]
        assert answers(kept.split()[1], time.monotonic() + 60), text

        [later] = [line.split("later: ", 1)[1] for line in shown if "later: " in line]
        assert later.endswith(f"--logdir {workdir / 'logs'}") and later.split()[0].startswith("/"), later
        port = free_port()
        tensorboard = subprocess.Popen([*shlex.split(later), "--port", str(port)], stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL)  # fmt: skip
        try:
            assert answers(f"http://127.0.0.1:{port}/data/runs", time.monotonic() + 120)
        finally:
            tensorboard.terminate()
            tensorboard.wait(30)

        request_file = Path(shown[-1].split("curl -d @", 1)[1].split()[0])
        assert request_file.parent == workdir.resolve(), shown[-1]
        request = json.loads(request_file.read_text())
        import tensorflow as tf

        loaded = tf.saved_model.load(status["export_path"])
        serve = loaded.signatures[request["signature_name"]]
        assert set(serve.structured_input_signature[1]) == {"images"}
        images = tf.constant([instance["images"] for instance in request["instances"]], tf.float32)
        outputs = serve(images=images)
        probabilities = outputs["probabilities"].numpy()
        assert probabilities.shape == (1, 10) and abs(float(probabilities.sum()) - 1.0) < 1e-4
        assert 0 <= int(outputs["classes"].numpy()[0]) <= 9
    finally:
        tfchart.send_signal(signal.SIGINT)  # TensorBoard kept: Ctrl-C ends it
        rest = tfchart.communicate(timeout=120)[0]
    assert tfchart.returncode == 0, rest[-3000:]
    assert_none_left(workdir)
