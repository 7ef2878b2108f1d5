"""The shape of the source, read from it (no module is imported, so no TensorFlow):
no import cycle among the project's modules, and the packages stand in layers whose arrows
point one way: the launcher library never imports the coordinator (job processes carry only
``tiresias``/``tiresias_launch``; the contract they share lives in
``tiresias_launch.contract``), and the profiler and the shared command-line kit import
nothing above them; the run lifecycle sees the machines only through the executor
interface, and its two executors import each other nothing; no module is over about 400
lines; and the coordinator type-checks (mypy --strict, as ``.ci/run`` runs it)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = (
    "tiresias",
    "tiresias_cli",
    "tiresias_launch",
    "coordinator",
    "ibverbs_tap",
    "models",
    "tools",
)
#: "About 400" lines at most per module: a module that size does more than one job, and the
#: next reader cannot find what it owns (the coordinator once reached 1,435). The core's
#: Scheduler, whose persistence reads its private state, is the largest at under 450.
MAX_LINES = 450
#: Which packages each package may import: the layers, bottom first.
MAY_IMPORT = {
    "tiresias_cli": set(),
    "tiresias_launch": set(),
    "tiresias": {"tiresias_launch"},
    "ibverbs_tap": {"tiresias_cli", "tiresias_launch"},
    "coordinator": {"tiresias_cli", "tiresias_launch", "ibverbs_tap"},
}

#: The lifecycle: what decides and keeps what runs where, for any executor.
LIFECYCLE = ("coordinator.core", "coordinator.service", "coordinator.sim")
#: The one lifecycle module that picks an executor (``--executor``) and so imports them.
COMPOSITION_ROOT = "coordinator.service.compose"
EXECUTORS = "coordinator.executors"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules() -> dict[str, Path]:
    return {
        module_name(p): p
        for package in PACKAGES
        for p in sorted((REPO / package).rglob("*.py"))
        if ".venv" not in p.parts
    }


def imported(name: str, path: Path, modules: dict[str, Path]) -> Iterator[tuple[str, int]]:
    """(project module, line) for every import in ``path``, at any depth (a lazy import in a
    function is an arrow too); ``from package import module`` names the module."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names
            ]
        else:
            continue
        for target in targets:
            while target and target not in modules:  # ``import a.b.c`` of a package's name
                target = target.rpartition(".")[0]
            if target and target != name:
                yield target, node.lineno


def graph() -> dict[str, dict[str, int]]:
    modules = project_modules()
    return {m: dict(imported(m, p, modules)) for m, p in modules.items()}


def cycles(edges: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_walk_sees_the_arrows_it_must() -> None:
    """The walker is not blind: it finds known arrows (absolute, relative, lazy, ``from
    package import module``)."""
    edges = graph()
    assert "tiresias_launch.contract" in edges["coordinator.protocol"]
    assert "coordinator.gang" in edges["coordinator.service.gangs"]
    assert "tiresias_launch.keras_data" in edges["tiresias_launch.keras"]  # lazy, in a function
    assert "coordinator.core.model" in edges["coordinator.core.scheduler"]
    assert "coordinator.executors.agents.fleet" in edges[COMPOSITION_ROOT]
    assert "coordinator.executors.node" in edges["coordinator.executors.slurm.task"]
    assert cycles({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}) == [["a", "b", "c"]]


def test_no_import_cycles() -> None:
    edges = graph()
    found = cycles(edges)
    assert not found, "import cycles: " + "; ".join(" ↔ ".join(c) for c in found)


def test_package_arrows_point_down_the_layers() -> None:
    """Package by package, not only module by module: ``ibverbs_tap`` importing one coordinator
    module would be no module cycle, yet a two-way arrow between the packages."""
    edges = graph()
    wrong = [
        f"{module} imports {target} (line {line})"
        for module, targets in edges.items()
        if (package := module.split(".")[0]) in MAY_IMPORT
        for target, line in targets.items()
        if (other := target.split(".")[0]) != package and other not in MAY_IMPORT[package]
    ]
    assert not wrong, "\n".join(wrong)


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_the_lifecycle_imports_no_executor() -> None:
    """The run book, the request handlers, the server loop, the core and the simulator know
    the machines only as ``coordinator.service.executor.Executor``: a second executor (or a
    change inside one) touches no lifecycle module, and only the composition root picks."""
    wrong = [
        f"{module} imports {target} (line {line})"
        for module, targets in graph().items()
        if any(within(module, p) for p in LIFECYCLE) and module != COMPOSITION_ROOT
        for target, line in targets.items()
        if within(target, EXECUTORS)
    ]
    assert not wrong, "\n".join(wrong)


def test_the_executors_share_only_the_node_side_helpers() -> None:
    """The agents and Slurm are two executors side by side: neither imports the other; what
    both need on a node lives in ``coordinator.executors.node``."""
    executors = (f"{EXECUTORS}.agents", f"{EXECUTORS}.slurm")
    wrong = [
        f"{module} imports {target} (line {line})"
        for module, targets in graph().items()
        for mine in executors
        if within(module, mine)
        for target, line in targets.items()
        if any(within(target, other) for other in executors if other != mine)
    ]
    assert not wrong, "\n".join(wrong)


def test_no_module_is_over_about_400_lines() -> None:
    sizes = {name: len(path.read_text().splitlines()) for name, path in project_modules().items()}
    assert len(sizes) > 50  # the walk found the project
    over = {name: n for name, n in sizes.items() if n > MAX_LINES}
    assert not over, f"split these modules (over {MAX_LINES} lines): {over}"


@pytest.mark.slow  # runs mypy over the package
def test_the_coordinator_type_checks(tmp_path: Path) -> None:
    """``mypy`` with the project's configuration (``pyproject.toml``: strict, over the core,
    the service and the executors) finds nothing, run as ``.ci/run`` runs it: a process of its
    own in the repository, with no PYTHONPATH (in-process, or with the repository on the path,
    mypy reads the other packages it imports less strictly and once passed what CI failed)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MYPYPATH")}
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
