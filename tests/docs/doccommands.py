"""The shell commands the documentation shows, taken from its Markdown, and what checks each.

A command is a line of a ```bash/```sh/```shell/```console block (lines joined at a trailing `\\`,
and over a loop or a quote until bash reads the command whole; comments dropped), a `$ ` prompt
line of any fenced block (the lines after it, up to the next one, are the output it shows), or a
code span of running text that is a whole command (is_whole_command).
Every command is either run or skipped for a named reason (RULES, first match wins), so a command
added to a document is never untested without anyone deciding it.

A run command is run by bash in a fresh copy of the repository, with the files of EXAMPLE_FILES
beside it (the `team.yaml` and `policy.yaml` the examples name), and must exit 0, or 1 where the
output it shows starts as a failure does (`✗`, `Error:`); every line of shown output must appear in
the real output, in order (`...` stands for anything).

A command that needs a cluster (helm install, tfchart status, ...) is run the same way against a
kubeconfig whose API server address refuses every connection: it must get as far as asking the
cluster (helm's and tfchart's "unreachable" / "connection refused"), so a wrong flag, a values file
that does not exist or values the chart refuses still fail it.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
EXAMPLE_FILES = Path(__file__).resolve().parent / "files"
SHELL_LANGUAGES = {"bash", "sh", "shell", "console"}
FAILURE_OUTPUT = ("✗", "Error:")
TIMEOUT_SECONDS = 120
RUN, NO_CLUSTER, SKIP = "run", "run against no cluster", "skip"
UNREACHABLE = re.compile(r"connection refused|cluster unreachable|cannot reach the Kubernetes API server", re.I)


def documents(root: Path = REPO) -> list[Path]:
    """The documents whose commands are checked: the READMEs, docs/, the benchmark results, examples/."""
    found = [root / "README.md", root / "charts" / "tf-distributed" / "README.md", root / "bench" / "RESULTS.md"]
    found += sorted((root / "docs").rglob("*.md")) + sorted((root / "examples").rglob("*.md"))
    return [path for path in found if path.is_file()]


@dataclass(frozen=True)
class Command:
    """One documented command: where it is, what it says, and the output the document shows for it."""

    file: str
    line: int
    text: str
    shown: tuple[str, ...] = ()

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    @property
    def expected_exit(self) -> int:
        return 1 if self.shown and self.shown[0].startswith(FAILURE_OUTPUT) else 0


@dataclass(frozen=True)
class Rule:
    """Commands matching `pattern` (a regular expression, from the command's start) are run or skipped."""

    pattern: str
    verdict: str
    reason: str

    def matches(self, command: Command) -> bool:
        return re.match(self.pattern, command.text, re.S) is not None


NEEDS_CLUSTER = "needs a Kubernetes cluster (docs/testing.md: tests/kubeapi.py and tests/e2e stand in for it)"
ASKS_CLUSTER = "runs up to its first request to the cluster"
RULES = (
    Rule(r"\w+=\S*$", SKIP, "sets a shell variable for the commands after it, each run or skipped on its own"),
    Rule(r"kind create cluster\b", SKIP, "creates a cluster (docs/testing.md: tests against a live cluster)"),
    Rule(r"(\w+=\S* )*(\.venv/bin/)?python -m pytest -m cluster\b", SKIP, NEEDS_CLUSTER),
    Rule(r"make run\b", SKIP, "trains for a minute; tests/e2e/test_local.py runs this target's command"),
    Rule(r"make (test|setup|bench|docs|base-image)\b", SKIP,
         "installs tools or runs the whole suite or the benchmarks; CI runs `make test`"),
    Rule(r"tfchart images .*\|.*skopeo copy", SKIP, "copies images into a registry (none is reachable here)"),
    Rule(r"tfchart (suspend|resume)\b.* --local\b", SKIP, "acts on a running local run; tests/trainer/test_suspend.py"),
    Rule(r"tfchart (install|upgrade|uninstall|status|stop|logs|wait|list|preflight|suspend|resume)\b", NO_CLUSTER,
         ASKS_CLUSTER),
    Rule(r"tfchart local( \S+)* --clean\b", RUN, "removes old run directories, trains nothing"),
    Rule(r"tfchart local\b", SKIP,
         "trains for a minute; tests/e2e/test_local.py, test_local_jobset.py and test_containers.py run it"),
    Rule(r"tfchart build\b(?!.*--dry-run)", SKIP, "builds the trainer images (minutes); tests/images build them"),
    Rule(r"tfchart (validate|template|images|build|--help)\b", RUN, "renders the chart with helm, no cluster"),
    Rule(r"(source <\()?tfchart completion\b", RUN, "prints the shell completion script, no cluster"),
    Rule(r"helm install \S+ oci://", SKIP, "pulls the chart from a registry (none is reachable here)"),
    Rule(r"helm (install|upgrade|uninstall|test|status|rollback)\b", NO_CLUSTER, ASKS_CLUSTER),
    Rule(r"helm (package .*&& helm )?(registry login|push)\b", SKIP, "publishes the chart to a registry"),
    Rule(r"helm (template|lint|show)\b", RUN, "renders or reads the chart, no cluster"),
    Rule(r"kubectl wait\b", SKIP, "tests/docs/test_kubectl_wait.py runs it (the real kubectl) against the tests' API"),
    Rule(r"kubectl\b", SKIP, NEEDS_CLUSTER + "; the tests' kubectl (scripts/install_kubectl.sh) has no cluster to ask"),
    Rule(r"curl\b", SKIP, "asks a running TensorFlow Serving or metrics endpoint in a cluster"),
    Rule(r"(podman|docker) (push|login)\b", SKIP, "pushes to a registry (none is reachable here)"),
    Rule(r"(podman|docker) (build|run|tag)\b", SKIP, "builds, tags or runs images (minutes; tests/images do)"),
    Rule(r"saved_model_cli\b", SKIP, "reads an exported model on the shared volume of a finished run"),
    Rule(r"(\.venv/bin/)?python (bench/\S+\.py|-m bench)", SKIP, "a benchmark: minutes of training; `make bench`"),
    Rule(r"(\.venv/bin/)?python -m trainer\.selfcheck\b", SKIP, "checks an image's TensorFlow (tests/images)"),
    Rule(r"(\.venv/bin/)?python -m trainer\b(?!.*--help)", SKIP, "trains; tests/trainer run the trainer"),
    Rule(r"(\.venv/bin/)?python -m trainer\b.*--help", RUN, "prints the trainer's flags"),
    Rule(r"(\.venv/bin/)?python -m pytest\b", SKIP, "runs tests: the suite this check is part of"),
)


def verdict(command: Command, rules: tuple[Rule, ...] = RULES) -> Rule | None:
    """The first rule matching the command, or None: a command nobody decided about."""
    return next((rule for rule in rules if rule.matches(command)), None)


# -- extraction --------------------------------------------------------------------------------


def without_comment(line: str) -> str:
    """The line up to a shell comment: a `#` that starts a word outside quotes."""
    quote = ""
    for i, char in enumerate(line):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def complete(text: str) -> bool:
    """Whether bash reads `text` as whole commands (no open loop, quote or trailing pipe)."""
    return subprocess.run(["bash", "-n", "-c", text], capture_output=True).returncode == 0


@dataclass
class Block:
    """A fenced code block: its language, the line of its opening fence, and its lines, each with its
    line number in the file."""

    language: str
    start: int
    lines: list[tuple[int, str]] = field(default_factory=list)


def fenced_blocks(text: str) -> Iterator[Block]:
    block: Block | None = None
    fence = ""
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if block is None:
            match = re.match(r"(`{3,}|~{3,})\s*([\w+-]*)", stripped)
            if match:
                fence, block = match.group(1), Block(match.group(2).lower(), number)
        elif stripped.startswith(fence) and not stripped[len(fence):].strip():
            yield block
            block = None
        else:
            block.lines.append((number, line))


HEREDOC = re.compile(r"<<-?\s*(['\"]?)(\w+)\1")


def shell_commands(block: Block, file: str) -> Iterator[Command]:
    """The commands of a shell block written without prompts: every line is input; a here-document's
    lines belong to its command, as they are."""
    pending, start, heredoc = "", 0, ""
    for number, line in block.lines:
        if heredoc:
            pending += line + "\n"
            heredoc = "" if line.strip() == heredoc else heredoc
            if heredoc or not complete(pending):
                continue
            yield Command(file, start, pending.strip())
            pending = ""
            continue
        code = without_comment(line).strip()
        if not pending:
            if not code:
                continue
            start = number
        if code.endswith("\\"):
            pending += code[:-1].rstrip() + " "
            continue
        pending += code
        if match := HEREDOC.search(code):
            heredoc, pending = match.group(2), pending + "\n"
        elif complete(pending):
            yield Command(file, start, pending)
            pending = ""
        else:
            pending += "\n"
    if pending.strip():
        yield Command(file, start, pending.strip())


def prompted_commands(block: Block, file: str) -> Iterator[Command]:
    """The `$ ` commands of a transcript and the output lines shown after each."""
    current: tuple[int, str] | None = None
    shown: list[str] = []
    continued = False
    for number, line in block.lines:
        if continued and current:
            current = (current[0], current[1] + " " + line.strip().removeprefix("> ").rstrip("\\").strip())
            continued = line.rstrip().endswith("\\")
        elif line.startswith("$ "):
            if current:
                yield Command(file, current[0], current[1], tuple(shown))
            code = without_comment(line[2:])
            current, shown = (number, code.rstrip("\\").strip()), []
            continued = code.endswith("\\")
        elif current:
            shown.append(line.rstrip())
    if current:
        yield Command(file, current[0], current[1], tuple(shown))


def commands_in(path: Path, root: Path = REPO) -> list[Command]:
    """Every command the Markdown file shows, in order."""
    file = str(path.relative_to(root))
    found: list[Command] = []
    for block in fenced_blocks(path.read_text(encoding="utf-8")):
        if any(line.startswith("$ ") for _, line in block.lines):
            found += prompted_commands(block, file)
        elif block.language in SHELL_LANGUAGES:
            found += shell_commands(block, file)
    return found


# -- running -----------------------------------------------------------------------------------


def fresh_copy(destination: Path, root: Path = REPO) -> Path:
    """The repository's tracked files as they are in the working tree (no build outputs, no untracked
    files a document might lean on), with EXAMPLE_FILES at its root."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True).stdout
    for name in filter(None, listed.decode().split("\0")):
        source, target = root / name, destination / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():  # a link the repository tracks (values/ into the chart) stays a link
            target.symlink_to(os.readlink(source))
        elif source.is_file():
            shutil.copy2(source, target)
    for example in EXAMPLE_FILES.iterdir():
        shutil.copy2(example, destination / example.name)
    return destination


def environment(copy: Path) -> dict[str, str]:
    """PATH with this checkout's helm and virtual environment; Python imports the copy's packages; no
    tfchart setting and no cluster leak in from the caller's environment."""
    tools = Path(os.environ.get("TFD_TOOLS_DIR", REPO / ".tools")) / "bin"
    path = os.pathsep.join([str(tools), str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    inherited = {key: value for key, value in os.environ.items() if not key.startswith("TFCHART_")}
    return {**inherited, "PATH": path, "PYTHONPATH": str(copy), "KUBECONFIG": str(copy / "no-cluster" / "config"),
            "NO_COLOR": "1", "COLUMNS": "200"}


def shown_line_pattern(line: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part.strip()) for part in line.split("...")))


def problems(command: Command, copy: Path, no_cluster: Path | None = None) -> list[str]:
    """What is wrong with running the command in the copy: nothing when it does what the document says.
    With `no_cluster` (a kubeconfig, see refusing_kubeconfig) it must fail only at the cluster (a tfchart
    command alone with exit 69, docs/cli.md's "could not ask the cluster")."""
    env = environment(copy) | ({"KUBECONFIG": str(no_cluster)} if no_cluster else {})
    try:
        result = subprocess.run(["bash", "-c", command.text], cwd=copy, env=env, text=True,
                                capture_output=True, timeout=TIMEOUT_SECONDS, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return [f"{command.where}: `{command.text}` ran past {TIMEOUT_SECONDS} s"]
    output = result.stdout + result.stderr
    if no_cluster:
        alone = re.match(r"tfchart [^|;&]*$", command.text)  # a tfchart command alone exits 69: docs/cli.md, Exit codes
        if UNREACHABLE.search(output) and (result.returncode == 69 if alone else result.returncode != 0):
            return []
        return [f"{command.where}: `{command.text}` did not get as far as asking the cluster "
                f"(exit {result.returncode}):\n{output[-3000:]}"]
    found: list[str] = []
    if result.returncode != command.expected_exit:
        found.append(f"{command.where}: `{command.text}` exited {result.returncode}, the document expects "
                     f"{command.expected_exit}:\n{output[-3000:]}")
    lines, position = output.splitlines(), 0
    for shown in command.shown:
        if not shown.strip(" .") or shown.strip().startswith("#"):
            continue
        pattern = shown_line_pattern(shown)
        position = next((i + 1 for i in range(position, len(lines)) if pattern.search(lines[i])), -1)
        if position < 0:
            found.append(f"{command.where}: `{command.text}` does not print the line the document shows:\n"
                         f"  {shown.strip()}\nit printed:\n{output[-3000:]}")
            break
    return found


@contextmanager
def refusing_kubeconfig(directory: Path) -> Iterator[Path]:
    """A kubeconfig whose API server is a loopback port bound but never listening: every connection is
    refused at once, for as long as the context is open (no other process can take the port)."""
    with socket.socket() as bound:
        bound.bind(("127.0.0.1", 0))
        server = f"https://127.0.0.1:{bound.getsockname()[1]}"
        config = directory / "refusing-kubeconfig"
        config.write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: none\n"
            f"clusters: [{{name: none, cluster: {{server: '{server}'}}}}]\n"
            "users: [{name: none, user: {token: none}}]\n"
            "contexts: [{name: none, context: {cluster: none, user: none, namespace: ml-training}}]\n",
            encoding="utf-8")
        config.chmod(0o600)
        yield config


NOTES_VALUES = ("-f", "values/gpu.yaml", "--set", "metrics.enabled=true")
NOTES_PROGRAMS = re.compile(r"(?:^|:\s+)((?:tfchart|helm|kubectl|curl) .*)$")


def notes_commands(copy: Path) -> list[Command]:
    """The commands the chart's NOTES.txt prints after an install of values/gpu.yaml with metrics on,
    numbered by their line in the printed notes (helm 4 renders them without a cluster)."""
    env = environment(copy) | {"KUBECONFIG": str(copy / "no-cluster" / "config")}
    installed = subprocess.run(
        ["helm", "install", "mnist", "charts/tf-distributed", "-n", "ml-training", "--dry-run=client", *NOTES_VALUES],
        cwd=copy, env=env, capture_output=True, text=True, timeout=TIMEOUT_SECONDS, check=True)
    notes = installed.stdout.split("NOTES:\n", 1)[1]
    where = "charts/tf-distributed/templates/NOTES.txt, as printed for " + " ".join(NOTES_VALUES) + ", line"
    return [Command(where, number, match.group(1).strip())
            for number, line in enumerate(notes.splitlines(), start=1)
            if (match := NOTES_PROGRAMS.search(line.strip()))]


# -- options and names of every command, run or not ----------------------------------------------

CHECKED_PROGRAMS = re.compile(r"(\.venv/bin/)?(tfchart|helm|make|python3?) ")


EXAMPLE_NAMES = {"mnist"}  # the release name the documents use


def is_whole_command(command: Command, root: Path = REPO) -> bool:
    """Whether a code span in running text is a command one can type as it is: no placeholder (`FILE`,
    `<release>`, `...`, `[--set ...]`, `podman|docker`) and at least one argument that names something,
    a file of the repository or the example release (`helm template --dry-run=server` names an option)."""
    words = command.text.split()
    if any(re.search(r"\.\.\.|[<>\[\]|]|^[A-Z]{2,}$", word) for word in words):
        return False
    arguments = words[2:]  # after the program and its subcommand (or script, or first option)
    return any(word in EXAMPLE_NAMES or (root / word).exists() for word in arguments if not word.startswith("-"))


def inline_commands(path: Path, root: Path = REPO) -> list[Command]:
    """The `code spans` outside fenced blocks that are commands of CHECKED_PROGRAMS."""
    file = str(path.relative_to(root))
    found: list[Command] = []
    fenced = {number for block in fenced_blocks(path.read_text(encoding="utf-8"))
              for number in [block.start, *(n for n, _ in block.lines), block.start + len(block.lines) + 1]}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if number not in fenced:
            found += [Command(file, number, span) for span in re.findall(r"`([^`]+)`", line)
                      if CHECKED_PROGRAMS.match(span)]
    return found


def simple_commands(text: str) -> list[list[str]]:
    """The words of each simple command of a shell text (split at pipes, `&&`, `;` and newlines), with
    the placeholders a document writes (`[--set ...]`, `...`) left out."""
    found = []
    for part in re.split(r"\|\||&&|[|;\n]", text):
        words = [word.strip("[]") for word in part.split()]
        found.append([word for word in words if word and word != "..." and "=" not in word.split("-")[0]])
    return [words for words in found if words]


@cache
def help_text(program: tuple[str, ...], cwd: Path) -> str:
    result = subprocess.run([*program, "--help"], cwd=cwd, env=environment(cwd), capture_output=True, text=True,
                            timeout=TIMEOUT_SECONDS, stdin=subprocess.DEVNULL)
    return result.stdout + result.stderr


def option_problems(command: Command, copy: Path) -> list[str]:
    """Options, targets and scripts the command names that do not exist: checked for every command,
    the skipped ones too (their `--help`, the Makefile's targets, the script's text)."""
    found: list[str] = []
    for words in simple_commands(command.text):
        program = words[0].removeprefix(".venv/bin/")
        if program in ("tfchart", "helm"):
            subcommand = tuple(itertools.takewhile(lambda word: not word.startswith("-"), words[1:3]))
            for alternative in subcommand[0].split("|") if subcommand else [""]:
                asked = (program, *([alternative] if alternative else []), *subcommand[1:])
                known = help_text(asked, copy)
                found += [f"{command.where}: `{command.text}`: `{' '.join(asked)}` has no option {option}"
                          for option in options_of(words) if not re.search(rf"(?<![\w-]){option}\b", known)]
        elif program == "make" and len(words) > 1:
            targets = re.findall(r"^([\w-]+):", (copy / "Makefile").read_text(encoding="utf-8"), re.M)
            found += [f"{command.where}: `{command.text}`: the Makefile has no target {target}"
                      for target in words[1:] if not target.startswith("-") and target not in targets]
        elif program.startswith("python") and len(words) > 1 and words[1].endswith(".py"):
            script = copy / words[1]
            if not script.is_file():
                found.append(f"{command.where}: `{command.text}`: {words[1]} does not exist")
            else:
                source = script.read_text(encoding="utf-8")
                found += [f"{command.where}: `{command.text}`: {words[1]} has no option {option}"
                          for option in options_of(words) if f'"{option}"' not in source]
        elif program.startswith("python") and len(words) > 2 and words[1] == "-m":
            found += module_problems(command, words, copy)
    return found


def module_problems(command: Command, words: list[str], copy: Path) -> list[str]:
    """A `python -m` module of this repository that does not exist, or an option its package never spells."""
    package = copy / words[2].split(".")[0]
    if not (package / "__init__.py").is_file():
        return []  # not this repository's (pytest, bench runs by path)
    module = copy / words[2].replace(".", "/")
    if not (module.with_suffix(".py").is_file() or (module / "__main__.py").is_file()):
        return [f"{command.where}: `{command.text}`: there is no module {words[2]}"]
    source = "".join(path.read_text(encoding="utf-8") for path in package.rglob("*.py"))
    return [f"{command.where}: `{command.text}`: {words[2]} has no option {option}"
            for option in options_of(words[3:]) if f'"{option}"' not in source and option != "--help"]


def options_of(words: list[str]) -> list[str]:
    """The long and one-letter options among a command's words (`--set=x` is `--set`)."""
    return [word.split("=")[0] for word in words if re.fullmatch(r"--[a-z][\w-]*(=.*)?|-[a-zA-Z]", word)]
