"""`tfchart local` end to end: the README's first command, and a Ctrl-C that leaves nothing behind."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.chartlib import REPO

pytestmark = pytest.mark.slow


def processes_mentioning(text: str) -> list[str]:
    return [f"{pid}: {cmdline[:200]}" for pid, cmdline, environ in processes() if text in cmdline or text in environ]


def processes() -> list[tuple[int, str, str]]:
    """(pid, command line, environment) of every process but this one (a process gone meanwhile is left out)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            environ = (entry / "environ").read_bytes().decode(errors="replace")
        except OSError:
            continue
        found.append((int(entry.name), cmdline, environ))
    return found


def pod_process(workdir: Path, pod: str) -> int:
    """The pid of a pod `tfchart local` runs in `workdir` (its env names the pod: HOSTNAME)."""
    [pid] = [pid for pid, cmdline, environ in processes()
             if f"HOSTNAME={pod}\0" in environ and str(workdir) in cmdline + environ]  # fmt: skip
    return pid


def assert_none_left(workdir: Path, timeout: float = 60) -> None:
    """No process of the run is left: tfchart killed every pod's group before it exited; what was killed
    may take a moment to leave the process table, a process that was not never does."""
    deadline = time.monotonic() + timeout
    while processes_mentioning(str(workdir)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_mentioning(str(workdir)) == []


def test_readme_first_command_completes(tmp_path: Path) -> None:
    workdir = tmp_path / "run"
    result = subprocess.run(
        ["make", "--no-print-directory", "run", f"ARGS=--workdir {workdir}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "✓ training Succeeded" in result.stdout
    status = json.loads((workdir / "status.json").read_text())
    assert status["state"] == "Succeeded" and status["accuracy"] >= 0.95
    assert (workdir / "export" / "mnist" / "1" / "saved_model.pb").is_file()
    # a calm terminal: the progress, then the summary; every pod's whole output in its log file
    shown = result.stdout[result.stdout.index("tfchart local:"):].splitlines()
    assert len(shown) <= 40, "\n".join(shown)
    assert "tfd-status" not in result.stdout and "oneDNN" not in result.stdout and "|" not in "".join(shown[:3])
    # at most one plain progress line per tenth of the run (how many tenths a line is seen in depends
    # on how fast this machine trains), ending at 100%
    progress = [line for line in shown if re.match(r"^ *\d+% step \d+/2000 ", line)]
    tenths = [int(line.split("%")[0]) for line in progress]
    assert tenths and tenths == sorted(set(tenths)) and tenths[-1] == 100 and all(t % 10 == 0 for t in tenths), shown
    assert progress[-1].startswith("100% step 2000/2000"), shown
    for pod in (
        "local-tf-distributed-ps-0",
        "local-tf-distributed-worker-1",
        "local-tf-distributed-chief",
        "local-tf-distributed-tensorboard-0",
    ):
        log = (workdir / "pod-logs" / f"{pod}.log").read_text()
        assert log.strip(), pod
        assert not re.search(rf"^{pod}\s+\|", result.stdout, re.MULTILINE), pod
    chief_log = (workdir / "pod-logs" / "local-tf-distributed-chief.log").read_text()
    assert "tfd-status: " in chief_log and re.search(r"^step 2000, loss = ", chief_log, re.MULTILINE)
    assert "TensorFlow Serving cannot run on this machine" in result.stdout
    assert_none_left(workdir)


SHORT_RUN = ["--set", "training.dataset=digits", "--set", "training.download=false", "--set",
             "training.strategy=single_device", "--set", "training.trainSteps=300",
             "--set", "tensorboard.enabled=false"]


def test_on_a_terminal_one_live_progress_bar_and_a_line_per_pod(tmp_path: Path) -> None:
    """Run in tmux (a real terminal): what stays on the screen is the bar, the pod lines and the summary."""
    workdir = tmp_path / "run"
    command = " ".join([str(REPO / ".venv" / "bin" / "tfchart"), "local", *SHORT_RUN, "--workdir", str(workdir)])
    session = f"tfd-{os.getpid()}"
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "100", "-y", "60",
                    f"cd {REPO} && {command}; echo EXIT=$?; sleep 300"], check=True)  # fmt: skip
    try:
        deadline, screen = time.monotonic() + 300, ""
        while "EXIT=" not in screen:
            assert time.monotonic() < deadline, screen
            time.sleep(1)
            screen = subprocess.run(["tmux", "capture-pane", "-p", "-S", "-", "-t", session],
                                    capture_output=True, text=True, check=True).stdout  # fmt: skip
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], check=False)
    lines = [line for line in screen.rstrip().splitlines() if line.strip()]
    assert "EXIT=0" in screen, screen
    assert len(lines) <= 40, screen
    assert "━" in screen and re.search(r"step 300/300 +loss \d", screen), screen
    assert re.search(r"local-tf-distributed-chief +succeeded", screen), screen
    assert "tfd-status" not in screen and "oneDNN" not in screen


def test_follow_logs_streams_every_pod_prefixed_and_sigterm_leaves_no_process(tmp_path: Path) -> None:
    """--follow-logs: every pod's output here as the pod wrote it, prefixed by its name (and once in its log).
    SIGTERM (a service manager stopping it; Ctrl-C (SIGINT) is the private-network test's way out) ends the run."""
    workdir = tmp_path / "run"
    command = [str(REPO / ".venv" / "bin" / "tfchart"), "local", "-f", "values/cpu.yaml", "-f",
               "tests/fixtures/e2e-values.yaml", "--set", "training.trainSteps=5000", "--workdir", str(workdir),
               "--follow-logs"]  # fmt: skip
    proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    deadline = time.monotonic() + 240
    seen: list[str] = []
    step: re.Match[str] | None = None
    try:
        for line in proc.stdout:
            seen.append(line)
            step = re.search(r"^local-tf-distributed-chief +\| (step \d+, loss = .*)$", line)
            if step and any("chief" in seen_line and "| tfd-status: " in seen_line for seen_line in seen):
                break
            assert time.monotonic() < deadline, "".join(seen[-50:])
        assert step, "".join(seen[-50:])
        assert len(processes_mentioning(str(workdir))) >= 5  # tfchart + ps + 2 workers + chief + tensorboard
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode in (130, 1), proc.returncode
    assert (workdir / "pod-logs" / "local-tf-distributed-chief.log").read_text().count(step[1]) == 1
    assert_none_left(workdir)


def process_tree(root: int) -> set[int]:
    """`root` and every process under it, from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            pid, rest = stat.read_text().split(" ", 1)
        except OSError:
            continue
        children.setdefault(int(rest.rsplit(")", 1)[1].split()[1]), []).append(int(pid))
    tree, todo = set(), [root]
    while todo:
        pid = todo.pop()
        tree.add(pid)
        todo += children.get(pid, [])
    return tree


def test_a_local_run_listens_on_loopback_or_in_a_private_network_only(tmp_path: Path) -> None:
    """`make run`-sized: while it trains, every listening socket of its process tree in this machine's network
    is on 127.0.0.1, and the TensorFlow pods (whose gRPC servers bind every interface) are in a network
    namespace of their own. Then Ctrl-C (SIGINT) ends it, leaving no process (the run to its end is the
    README's first command's test)."""
    argv = [str(REPO / ".venv" / "bin" / "tfchart"), "local", "-f", "values/cpu.yaml", "--set",
            "training.dataset=digits", "--set", "training.download=false", "--set", "metrics.enabled=true",
            "--workdir", str(tmp_path / "run")]  # fmt: skip
    tfchart = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert tfchart.stdout is not None
    try:
        for line in tfchart.stdout:  # the chief trains: every pod is up
            if re.match(r"^ *\d+% step \d+/", line):
                break
        tree = process_tree(tfchart.pid)
        listening = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout.splitlines()
        ours = [line.split() for line in listening
                if any(int(pid) in tree for pid in re.findall(r"pid=(\d+)", line))]  # fmt: skip
        assert ours, listening  # tfchart's forwarders and TensorBoard
        assert all(fields[3].startswith(("127.0.0.1:", "[::1]:")) for fields in ours), ours
        own = os.readlink("/proc/self/ns/net")
        trainers = [pid for pid in tree if b"trainer" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        assert trainers and all(os.readlink(f"/proc/{pid}/ns/net") != own for pid in trainers)
        tfchart.send_signal(signal.SIGINT)
        rest = tfchart.communicate(timeout=60)[0]
        assert tfchart.returncode in (130, 1), rest[-3000:]
    finally:
        if tfchart.poll() is None:
            tfchart.send_signal(signal.SIGINT)
            tfchart.wait(60)
    assert_none_left(tmp_path / "run")


def test_the_private_network_has_one_way_out_a_connect_tunnel(tmp_path: Path) -> None:
    """Inside, a pod reaches nothing directly; HTTPS_PROXY (what urllib, so the trainer's --download, follows)
    tunnels to where tfchart itself can connect: here an echo server on this machine's loopback."""
    from tfchart.local.netns import PrivateNetwork

    with socket.create_server(("127.0.0.1", 0)) as echo:
        port = echo.getsockname()[1]

        def answer() -> None:
            connection, _ = echo.accept()
            with connection:
                connection.sendall(connection.recv(100).upper())

        threading.Thread(target=answer, daemon=True).start()
        network = PrivateNetwork([])
        try:
            pod = network.wrap(type("Pod", (), {"role": "chief"})())
            client = (
                "import os, socket\n"
                f"direct = socket.socket(); direct.settimeout(5)\n"
                f"print('direct', direct.connect_ex(('127.0.0.1', {port})) != 0)\n"
                "proxy = os.environ['HTTPS_PROXY'].rsplit(':', 1)\n"
                "s = socket.create_connection((proxy[0][len('http://'):], int(proxy[1])), timeout=10)\n"
                f"s.sendall(b'CONNECT 127.0.0.1:{port} HTTP/1.1\\r\\n\\r\\n')\n"
                "print(s.recv(100).split(b'\\r\\n')[0].decode()); s.sendall(b'hello'); print(s.recv(100).decode())\n"
            )
            result = subprocess.run([*pod, sys.executable, "-c", client], capture_output=True, text=True, timeout=60)
        finally:
            network.close()
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["direct True", "HTTP/1.1 200 Connection established", "HELLO"]
