"""Every shell block of README.md and docs/*.md runs, verbatim, in a temporary directory.

A ```` ```bash ```` or ```` ```console ```` block is run by ``bash -e -o pipefail`` in a fresh
directory that links the checkout's top-level folders (``models/``, ``examples/``, ``tools/``
…), so relative paths work and what a command writes stays in that directory; ``HOME`` is a
fresh folder too. Background jobs a block starts (``&``) are waited for, and must succeed.
Whatever the block leaves running is killed at its end.

An HTML comment on the line before the fence adjusts a block (the rendered page hides it):

    <!-- docs-test: illustrative: REASON -->          not run (needs several machines, root…)
    <!-- docs-test: replace "--steps 4000" "--steps 400"; timeout 300; mark tf -->

``replace OLD NEW`` runs the block with smaller arguments (every OLD becomes NEW), ``timeout
SECONDS`` (default 120) bounds it, ``mark NAME`` adds a pytest marker (``tf``, ``torch``,
``horovod``). Every test is marked ``docs`` (``pytest -m docs`` runs them all); its id names
the file and line of the block, and a block run with replacements says so in its output.
A block with no comment runs as written.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shlex
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SHELLS = ("bash", "console", "sh", "shell")
DIRECTIVE = re.compile(r"^<!--\s*docs-test:\s*(.*?)\s*-->$")
FENCE = re.compile(r"^```(\S*)\s*$")
DEFAULT_TIMEOUT = 120.0
#: The module each framework marker needs; a block marked so skips without it.
NEEDS = {"tf": "tensorflow", "torch": "torch", "horovod": "horovod"}
#: Left out of the run directory: what a block must not touch.
NOT_LINKED = {".git", ".venv", ".ci", "build", "docs", "tests"}


@dataclass
class Block:
    """One shell block of the docs, with what its directive says."""

    where: str  # "docs/service.md:72"
    text: str
    illustrative: str | None = None  # why it is not run
    replacements: list[tuple[str, str]] = field(default_factory=list)
    timeout: float = DEFAULT_TIMEOUT
    marks: list[str] = field(default_factory=list)

    def script(self) -> str:
        text = self.text
        for old, new in self.replacements:
            assert old in text, f"{self.where}: replace {old!r}: not in the block"
            text = text.replace(old, new)
        # wait for each background job, failing with the first that failed
        return text + '\nfor job in $(jobs -p); do wait "$job"; done\n'


def parse_directive(where: str, text: str, block: Block) -> None:
    if text.startswith("illustrative:"):  # the rest is the reason, whatever it holds
        block.illustrative = text.partition(":")[2].strip()
        if not block.illustrative:
            raise ValueError(f"{where}: an illustrative block says why it is not run")
        return
    for item in filter(None, (part.strip() for part in text.split(";"))):
        words = shlex.split(item)
        match words:
            case ["replace", old, new]:
                block.replacements.append((old, new))
            case ["timeout", seconds]:
                block.timeout = float(seconds)
            case ["mark", name]:
                block.marks.append(name)
            case _:
                raise ValueError(f"{where}: unknown docs-test directive {item!r}")


def blocks(path: Path) -> list[Block]:
    """The shell blocks of one Markdown file, in order."""
    lines = path.read_text().splitlines()
    found = []
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        if fence.group(1) in SHELLS:
            where = f"{path.relative_to(REPO)}:{i + 1}"
            block = Block(where, "\n".join(lines[i + 1 : end]))
            directive = DIRECTIVE.match(lines[i - 1].strip()) if i else None
            if directive:
                parse_directive(where, directive.group(1), block)
            found.append(block)
        i = end + 1
    return found


ALL = [b for path in DOCS for b in blocks(path)]


def params() -> list:
    out = []
    for b in ALL:
        marks = [pytest.mark.docs, *(getattr(pytest.mark, m) for m in b.marks)]
        if b.illustrative:
            marks.append(pytest.mark.skip(reason=f"illustrative: {b.illustrative}"))
        missing = [
            NEEDS[m] for m in b.marks if m in NEEDS and not importlib.util.find_spec(NEEDS[m])
        ]
        if missing:
            marks.append(pytest.mark.skip(reason=f"needs {', '.join(missing)}"))
        out.append(pytest.param(b, id=b.where, marks=marks))
    return out


def run_directory(tmp_path: Path) -> Path:
    """A directory that looks like the checkout to the block, but is not it."""
    here = tmp_path / "run"
    here.mkdir()
    for entry in REPO.iterdir():
        if entry.name not in NOT_LINKED and not entry.name.startswith("."):
            (here / entry.name).symlink_to(entry)
    (tmp_path / "home").mkdir()
    return here


@pytest.mark.parametrize("block", params())
def test_documented_command_runs(block: Block, tmp_path: Path) -> None:
    here = run_directory(tmp_path)
    script = tmp_path / "block.sh"
    script.write_text(block.script())
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIRESIAS_")}
    env |= {"HOME": str(tmp_path / "home"), "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    if block.replacements:
        print(
            f"{block.where} runs with " + ", ".join(f"{o!r} → {n!r}" for o, n in block.replacements)
        )
    with subprocess.Popen(
        ["bash", "-e", "-o", "pipefail", str(script)],
        cwd=here,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    ) as proc:
        try:
            out, _ = proc.communicate(timeout=block.timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            pytest.fail(f"{block.where} ran over {block.timeout:g} s:\n{out[-4000:]}")
        finally:
            with contextlib.suppress(ProcessLookupError):  # whatever the block left running
                os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, f"{block.where} exited {proc.returncode}:\n{out[-4000:]}"
    assert "Traceback (most recent call last)" not in out, f"{block.where}:\n{out[-4000:]}"


def test_every_directive_is_understood() -> None:
    """A directive that names no block, or a typo in one, fails here, not silently."""
    for path in DOCS:
        lines = path.read_text().splitlines()
        for n, line in enumerate(lines):
            if DIRECTIVE.match(line.strip()):
                following = lines[n + 1] if n + 1 < len(lines) else ""
                fence = FENCE.match(following)
                assert fence and fence.group(1) in SHELLS, (
                    f"{path.relative_to(REPO)}:{n + 1}: a docs-test comment must be the line "
                    "right before a shell block"
                )


def test_every_launcher_module_is_in_the_module_table() -> None:
    """docs/launcher.md opens with a table of the runtime's modules: a new module without
    its row fails here (a row may name a helper module beside its main one)."""
    table = (REPO / "docs" / "launcher.md").read_text().split("\n## ", 1)[0]
    modules = sorted(
        p.stem for p in (REPO / "tiresias_launch").glob("*.py") if p.stem != "__init__"
    )
    missing = [
        m for m in modules if f"`tiresias_launch.{m}`" not in table and f"`{m}`" not in table
    ]
    assert not missing, f"docs/launcher.md's module table lacks {missing}"
