"""`tfchart local` stops every pod it started, whatever it is sent while they stop (processes.running)."""

from __future__ import annotations

import time

import pytest

from tfchart.local.pods import LocalPod
from tfchart.local.processes import LocalCluster, running

# Told to stop, the pod presses Ctrl-C again on tfchart (its parent), then takes a second to end.
SLOW_TO_STOP = "trap 'kill -INT $PPID; sleep 1; exit 0' TERM; echo up; while :; do sleep 0.1; done"


def test_a_second_ctrl_c_while_the_pods_stop_leaves_none_running() -> None:
    lines: list[str] = []
    cluster = LocalCluster(lambda pod, line: lines.append(line))
    with pytest.raises(KeyboardInterrupt), running(cluster):
        cluster.start([LocalPod("slow-0", "worker", 0, ["sh", "-c", SLOW_TO_STOP], {})])
        deadline = time.monotonic() + 30
        while "up" not in lines:
            assert time.monotonic() < deadline, "the pod did not start"
            time.sleep(0.05)
        raise KeyboardInterrupt  # the first Ctrl-C
    assert not cluster.processes["slow-0"].running
