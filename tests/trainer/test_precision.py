"""--precision: the policy auto picks, and mixed_bfloat16 training as accurate as float32 with a float32 export."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.trainer.conftest import COMMON, Procs, read_status
from trainer.runtime import BF16_FLAGS, cpu_flags, resolve_precision


@pytest.mark.parametrize(("flags", "gpu", "expected"), [
    ({"avx2", "amx_bf16", "amx_tile"}, False, "mixed_bfloat16"),  # Intel Sapphire Rapids and newer
    ({"avx2", "avx512f", "avx512_bf16"}, False, "mixed_bfloat16"),  # AMD Zen 4, Intel Cooper Lake
    ({"avx2", "fma"}, False, "float32"),  # AMD Zen 2/3, older Xeons: no bfloat16 arithmetic
    ({"avx2", "amx_bf16"}, True, "float32"),  # a GPU trains: the CPU's instructions do not matter
    (set(), False, "float32"),  # not Linux: no /proc/cpuinfo
])  # fmt: skip
def test_auto_picks_bfloat16_only_on_a_cpu_only_machine_with_bfloat16(flags: set[str], gpu: bool,
                                                                        expected: str) -> None:
    assert resolve_precision("auto", frozenset(flags), gpu) == expected
    for asked in ("float32", "mixed_bfloat16"):
        assert resolve_precision(asked, frozenset(flags), gpu) == asked


def test_cpu_flags_reads_the_flags_line(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: fpu avx2 amx_bf16\n\nprocessor\t: 1\n")
    assert cpu_flags(str(info)) == {"fpu", "avx2", "amx_bf16"}
    assert cpu_flags(str(tmp_path / "absent")) == frozenset()
    assert set(BF16_FLAGS) <= {"amx_bf16", "avx512_bf16"}


@pytest.mark.slow
def test_mixed_bfloat16_trains_as_well_as_float32_and_exports_float32(procs: Procs, tmp_path: Path) -> None:
    """Both precisions of the same run (same seed, data, steps) reach the same held-out accuracy, and the
    exported SavedModel of the bfloat16 run takes and answers float32 (evaluation and export are float32)."""
    accuracy = {}
    for precision in ("float32", "mixed_bfloat16"):
        root = tmp_path / precision
        chief = procs.trainer(precision, ["--strategy=single_device", *COMMON, f"--storage-root={root}",
                                          "--train-steps=300", "--checkpoint-every-steps=300", "--cleanup=keep",
                                          f"--precision={precision}"])
        assert chief.wait(180) == 0, chief.tail()
        assert re.search(rf"precision: {precision}$", chief.output(), re.M), chief.tail()
        status = read_status(root)
        assert status["state"] == "Succeeded", status
        accuracy[precision] = float(status["accuracy"])
    assert accuracy["float32"] >= 0.95 and abs(accuracy["mixed_bfloat16"] - accuracy["float32"]) <= 0.02, accuracy

    import tensorflow as tf

    exported = tf.saved_model.load(str(next((tmp_path / "mixed_bfloat16" / "export" / "mnist").glob("*"))))
    serve = exported.signatures["serving_default"]
    (spec,) = serve.structured_input_signature[1].values()
    assert spec.dtype == tf.float32
    outputs = serve(images=tf.zeros([2, 8, 8, 1]))
    assert {str(t.dtype.name) for t in outputs.values()} <= {"float32", "int64"}, outputs
