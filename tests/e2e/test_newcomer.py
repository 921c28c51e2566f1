"""A newcomer's laptop: `make run` from a clean copy of the repository as a user who is not root, with a
fresh HOME and no podman, Prometheus, apt or helm on PATH (only what a laptop has: Python, make, a shell,
coreutils, util-linux, curl and npm). The set-up installs tfchart, TensorFlow and helm into the copy
itself, and the run prints the held-out accuracy.

Run as root (CI), the test becomes `nobody`; run as anyone else, it stays that user.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chartlib import copy_tracked

pytestmark = pytest.mark.slow

#: what `make test` installs and `make run` must not need (and helm, which set-up fetches without root)
ABSENT = ("podman", "buildah", "runc", "crun", "conmon", "netavark", "aardvark-dns", "debootstrap",
          "docker", "docker-registry", "prometheus", "promtool", "apt", "apt-get", "dpkg", "sudo", "helm")  # fmt: skip
SHORT_RUN = 200  # training steps
PASSED_ON = re.compile(r"^(PIP_|(HTTPS?|NO)_PROXY$|(https?|no)_proxy$|SSL_CERT_FILE$|REQUESTS_CA_BUNDLE$|LANG$)")


@pytest.fixture
def laptop() -> Iterator[tuple[Path, Path, dict[str, str], list[str]]]:
    """(checkout, HOME, environment, the argv prefix that runs a command as the newcomer)."""
    newcomer = pwd.getpwnam("nobody") if os.geteuid() == 0 else pwd.getpwuid(os.geteuid())
    top = Path(tempfile.mkdtemp(prefix="tfd-newcomer-"))
    try:
        checkout, home, bin_dir = copy_tracked(top / "tf-distributed"), top / "home", top / "bin"
        home.mkdir()
        bin_dir.mkdir()
        for folder in ("/usr/bin", "/bin"):
            for tool in Path(folder).iterdir():
                if tool.name not in ABSENT and not (bin_dir / tool.name).exists() and os.access(tool, os.X_OK):
                    (bin_dir / tool.name).symlink_to(tool)
        if os.geteuid() == 0:
            os.chmod(top, 0o755)
            subprocess.run(["chown", "-R", f"{newcomer.pw_uid}:{newcomer.pw_gid}", str(top)], check=True)
            as_newcomer = ["setpriv", f"--reuid={newcomer.pw_uid}", f"--regid={newcomer.pw_gid}", "--clear-groups"]
        else:
            as_newcomer = []
        env = {name: value for name, value in os.environ.items() if PASSED_ON.match(name)}
        env.update(HOME=str(home), PATH=str(bin_dir), USER=newcomer.pw_name, LOGNAME=newcomer.pw_name)
        yield checkout, home, env, as_newcomer
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_make_run_on_a_laptop_without_root(laptop: tuple[Path, Path, dict[str, str], list[str]]) -> None:
    checkout, home, env, as_newcomer = laptop
    for tool in ABSENT:
        assert shutil.which(tool, path=env["PATH"]) is None, tool
    # The set-up is what this test is for: a short run (200 steps) shows the installed environment trains and
    # exports; the README's first command as written (2,000 steps) runs in tests/e2e/test_local.py.
    newcomer_env = [*as_newcomer, "env", "-i", *(f"{k}={v}" for k, v in env.items())]
    run = subprocess.run([*newcomer_env, "make", "run", f"ARGS=--set training.trainSteps={SHORT_RUN}"],
                         cwd=checkout, capture_output=True, text=True, timeout=1800)  # fmt: skip
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-6000:]
    assert re.search(rf"✓ training Succeeded in \d+ s: step {SHORT_RUN}, accuracy 0\.\d+", output), output[-3000:]
    assert "setup: ready for make run" in output
    # everything it installed is inside the checkout: helm 4 (PATH had none), the Python environment
    assert (checkout / ".tools" / "bin" / "helm").exists() and (checkout / ".venv" / "bin" / "tfchart").exists()
    assert not (checkout / ".tools" / "helm3").exists(), "make run installed the test toolchain's helm 3"
    assert not list(home.glob(".local/bin/*")), "set-up installed into the user's HOME"
