"""bench/: the one benchmark command, its table and RESULTS.md, and the measuring harnesses.

Fast tests check the table and the RESULTS.md update; slow ones run the real harnesses on short
trainings (real TensorFlow processes), so that the benchmark command cannot silently break.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import gpu
import pytest
import run
import scale_render
import validate_vs_lint
from common import REPO, Result, bench_env, local_training

ROWS = [
    Result("B1", "trainer / keras", "8000 vs 4000 examples/s", 2.0, ">= 1.0", True, ["digits, batch 100"]),
    Result("B3", "validate / lint", "400 vs 300 ms", 1.3333, "<= 1.2", False),
    Result("B6", "GPU", "skipped: no NVIDIA GPU", None, ">= 20", None),
]


def test_table_ends_every_row_with_its_ratio() -> None:
    lines = run.table(ROWS).splitlines()
    assert lines[0].split()[-1] == "ratio" and set(lines[1]) == {"-"}
    assert [line.split()[-1] for line in lines[2:]] == ["2.00", "1.33", "-"]
    assert [line.split()[-2] for line in lines[2:]] == ["met", "MISSED", "skipped"]


def test_results_md_keeps_the_analysis_and_replaces_only_the_latest_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    results = tmp_path / "RESULTS.md"
    results.write_text("# Benchmark results\n\n## B3 analysis\n\nhand-written evidence\n")
    monkeypatch.setattr(run, "RESULTS", results)
    facts = {"CPU": "test CPU, 2 cores usable (2 online)", "GPU": "none"}
    for when in ("2026-11-22 10:00", "2026-11-22 11:00"):
        run.write_results(run.markdown(ROWS, facts, ".venv/bin/python bench/run.py", 420.0, when),
                          run.history_line(ROWS, facts, when))
    text = results.read_text()
    assert text.count(run.BEGIN) == 1 and text.count(run.END) == 1
    assert "## Latest run: 2026-11-22 11:00" in text and "## Latest run: 2026-11-22 10:00" not in text
    assert "hand-written evidence" in text
    assert "| B3 | validate / lint | 400 vs 300 ms | <= 1.2 | MISSED | 1.33 |" in text
    assert "| B1 | trainer / keras | 8000 vs 4000 examples/s; digits, batch 100 | >= 1.0 | met | 2.00 |" in text
    history = text.split(run.HISTORY, 1)[1].strip().splitlines()
    assert history == [
        "- 2026-11-22 11:00, test CPU, 2 cores usable (2 online), GPU none: B1 2.00, B3 1.33, B6 -",
        "- 2026-11-22 10:00, test CPU, 2 cores usable (2 online), GPU none: B1 2.00, B3 1.33, B6 -",
    ]


def test_validate_is_timed_against_lint_with_one_helm_and_bytecode_caching_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """B3 compares like with like: the same values file and helm binary for tfchart validate, helm lint
    and helm template, and tfchart starts as on a user's machine (.pyc files written and read)."""
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    assert "PYTHONDONTWRITEBYTECODE" not in bench_env()
    argvs = validate_vs_lint.commands("values/gpu.yaml", "/opt/helm")
    assert argvs["tfchart validate"][1:] == ["--helm", "/opt/helm", "validate", "-f", "values/gpu.yaml"]
    assert argvs["helm lint"] == ["/opt/helm", "lint", str(REPO / "charts" / "tf-distributed"), "-f", "values/gpu.yaml"]
    assert argvs["helm template"][:2] == ["/opt/helm", "template"] and argvs["helm template"][-2:] == [
        "-f", "values/gpu.yaml"]


def test_the_largest_cluster_is_read_from_the_chart_schema() -> None:
    schema = json.loads((REPO / "charts" / "tf-distributed" / "values.schema.json").read_text())
    for role in ("worker", "ps"):
        replicas = schema["properties"][role]["properties"]["replicas"]
        assert f"at most {scale_render.schema_maximum(role)}:" in replicas["description"]
    assert scale_render.MAX_WORKERS == scale_render.schema_maximum("worker") > 1


def test_gpu_benchmark_says_why_it_was_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi
    (row,) = gpu.results()
    assert row.ratio is None and row.verdict == "skipped"
    assert row.figures == "skipped: no NVIDIA GPU on this machine (nvidia-smi lists none)"


@pytest.mark.slow
def test_gpu_benchmark_without_a_gpu_build_of_tensorflow_names_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # nvidia-smi cannot run without an NVIDIA driver: this stand-in answers like it does on an
    # H100 machine, so the branch where TensorFlow (tensorflow-cpu here) sees no GPU is exercised.
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho 'NVIDIA H100 80GB HBM3'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert gpu.gpu_names() == ["NVIDIA H100 80GB HBM3"]
    (row,) = gpu.results()
    assert row.ratio is None
    assert "1 x NVIDIA H100 80GB HBM3 present, but this TensorFlow sees no GPU" in row.figures
    assert "pip install 'tensorflow[and-cuda]==2.21.0'" in row.figures


@pytest.mark.slow
def test_the_benchmark_command_prints_the_fast_rows_with_ratios_last() -> None:
    result = subprocess.run(
        [sys.executable, "bench/run.py", "--only", "B3,B4v,B6", "--quick", "--no-write"],  # B4v: measured by B4
        capture_output=True, text=True, cwd=REPO, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines() if line[:2] in ("B3", "B4", "B6")}
    assert set(rows) == {"B3", "B4", "B4v", "B6"}
    assert float(rows["B4"][-1]) < 1.0 and rows["B4"][-2] == "met"  # the largest allowed map, with short names
    assert float(rows["B3"][-1]) > 0 and rows["B6"][-1] == "-"


def test_the_benchmark_command_rejects_unknown_names() -> None:
    result = subprocess.run([sys.executable, "bench/run.py", "--only", "B9"], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 2
    assert result.stderr.strip() == "bench: unknown benchmark(s) B9: choose from B1-B8"


@pytest.mark.slow
def test_throughput_harness_times_the_chart_pods_and_their_cpu() -> None:
    training = local_training("parameter_server", 1, 150, 50)
    assert [s.step for s in training.samples] == [50, 100, 150]
    assert training.examples_per_sec(50) > 100
    cpu = training.cpu_per_step(50)
    assert set(cpu) == {"ps", "worker", "chief"} and cpu["worker"] > cpu["chief"] > 0
    with pytest.raises(RuntimeError, match="too few step lines after step 150"):
        training.window(150)


@pytest.mark.slow
def test_gpu_harness_runs_the_trainer_up_to_the_gpu_boundary() -> None:
    # Where no GPU exists, single_device falls back to the CPU: the command B6 runs is real.
    training = gpu.train_on_gpus("single_device", 32, 100)
    assert [s.step for s in training.samples] == [50, 100]
    assert training.examples_per_sec(50) > 0


@pytest.mark.slow
def test_plain_keras_baseline_reports_its_throughput() -> None:
    result = subprocess.run(
        [sys.executable, "bench/plain_keras.py", "--examples=3000"], capture_output=True, text=True, cwd=REPO,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert figures["examples"] >= 3000 and figures["steps"] == 3 * 15  # 3 epochs of 1437 examples
    assert figures["examples_per_sec"] > 0 and figures["cpu_ms_per_step"] > 0


@pytest.mark.slow
def test_container_startup_harness_times_both_engines_of_the_real_cli(monkeypatch: pytest.MonkeyPatch) -> None:
    """B7c drives `tfchart local` with processes and with podman (the image tests build the image). The
    harness is the subject: its release is one pod here (the benchmark's 1 ps + 2 workers + the chief start
    under podman in tests/e2e/test_containers.py and as processes in tests/e2e/test_local.py)."""
    import container_startup

    from tests.containerlib import built_images

    built_images()
    one_pod = ["training.strategy=single_device" if s.startswith("training.strategy=") else s
               for s in container_startup.SETS]  # fmt: skip
    assert one_pod != container_startup.SETS
    monkeypatch.setattr(container_startup, "SETS", one_pod)
    row = container_startup.result(repeat=1)
    assert row.ratio is not None, row.figures
    assert row.figures.startswith("podman ") and "processes " in row.figures
    assert 0.2 < row.ratio < 10, row.figures


def test_the_mnist_shaped_set_has_mnists_shape_and_size(tmp_path: Path) -> None:
    """B1L's offline stand-in for MNIST: what the trainer's mnist loader reads, of MNIST's shape and size."""
    import numpy as np
    from large_input import generate_mnist_shaped, real_mnist

    path = tmp_path / "mnist.npz"
    generate_mnist_shaped(path)
    with np.load(path) as f:
        shapes = {key: f[key].shape for key in f.files}
        assert {f[key].dtype for key in f.files} == {np.dtype(np.uint8)}
        assert set(np.unique(f["y_train"])) == set(range(10)) and 0 < f["x_train"].mean() < 128
    assert shapes == {"x_train": (60000, 28, 28), "y_train": (60000,), "x_test": (10000, 28, 28), "y_test": (10000,)}
    assert real_mnist(str(path)) is None  # not MNIST's sha256: never labelled as the real set


@pytest.mark.slow
def test_training_flops_count_the_models_convolutions_and_dense_layers() -> None:
    from large_input import training_flops_per_example

    conv1, conv2 = 28 * 28 * 32 * 5 * 5 * 1 * 2, 14 * 14 * 64 * 5 * 5 * 32 * 2
    dense = (7 * 7 * 64 * 1024 + 1024 * 10) * 2
    assert training_flops_per_example((28, 28, 1)) == 3 * (conv1 + conv2 + dense)


def test_b1_keeps_one_line_per_cpu_vendor(monkeypatch: pytest.MonkeyPatch) -> None:
    text = ("# Benchmark results\n\n" + run.BY_VENDOR + "\n| vendor | CPU | date | ratios | command |\n"
            "| --- | --- | --- | --- | --- |\n| AuthenticAMD | AMD EPYC, 2 cores | 2026-11-26 | B1 0.90 | `x` |\n"
            "| GenuineIntel | Intel Xeon, 2 cores | 2026-11-25 | B1 2.10 | `y` |\n" + run.BY_VENDOR_END + "\n")
    rows = [Result("B1", "t", "f", 2.4, ">= 2.0", True), Result("B3", "t", "f", 1.1, "<= 1.2", True)]
    monkeypatch.setattr(run, "cpu_vendor", lambda: "GenuineIntel")
    updated = run.vendor_table(text, rows, {"CPU": "Intel Xeon, 2 cores"}, "2026-11-27", "bench/run.py")
    lines = [line for line in updated.splitlines() if line.startswith("| Genuine") or line.startswith("| Authentic")]
    assert lines == ["| AuthenticAMD | AMD EPYC, 2 cores | 2026-11-26 | B1 0.90 | `x` |",
                     "| GenuineIntel | Intel Xeon, 2 cores | 2026-11-27 | B1 2.40 | `bench/run.py` |"]
    assert run.vendor_table(text, rows[1:], {"CPU": "c"}, "d", "e") == text  # no B1 row: nothing to keep
