"""Test tiers. ``python -m pytest -m "not slow"`` is the fast tier: the pure tests (core,
run book, protocol, views, CLI parsing) that start no process, framework or daemon. A test is
``slow`` by what it uses: a marker of a real framework or daemon, a fixture that starts real
coordinators, agents or Slurm, a folder of tests that run real training processes, or its
module's own ``slow`` mark. The tier is enforced, not hoped for: a test outside it that
starts a process fails, saying to mark it. Collecting the suite imports no framework
(``tests/test_tiers.py``).

The whole suite runs in two pytest-xdist workers (``.ci/run``: ``-n 2 --dist loadfile``), so
one works while the other waits on its processes. A worker takes a module at a time, so a
module's fixtures start once, and the modules of a folder in ``ONE_WORKER_FOLDERS`` go to
one worker together, since they share a session's daemons (``ModuleScheduling``)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

#: Markers of tests that run real frameworks, daemons or namespaces.
SLOW_MARKERS = frozenset({"tf", "torch", "horovod", "netns", "slurm", "docs"})
#: Fixtures that start real processes (coordinators, agents, Slurm daemons).
SLOW_FIXTURES = frozenset({"cluster", "curve_cluster", "capped_cluster", "slurm_cluster", "slurm"})
#: Folders whose tests run real training processes or the profiler's preload library.
SLOW_FOLDERS = frozenset({"corpus", "e2e", "models", "pytorch", "slurm", "tap"})
#: Folders whose tests share session-scoped daemons (Slurm with slurmdbd and MariaDB): one
#: xdist worker runs all their modules.
ONE_WORKER_FOLDERS = frozenset({"slurm"})
#: Modules a fast collection must not have imported.
FRAMEWORKS = ("tensorflow", "torch", "keras", "tf_keras", "lightning", "horovod", "matplotlib")
#: Set to a file path, collection writes the frameworks it imported there (test_tiers.py).
PROBE = "TIRESIAS_COLLECTION_PROBE"
TESTS = Path(__file__).parent


def is_slow(item: pytest.Item) -> bool:
    folder = Path(item.path).relative_to(TESTS).parts[0]
    return (
        bool(SLOW_MARKERS & {m.name for m in item.iter_markers()})
        or bool(SLOW_FIXTURES & set(getattr(item, "fixturenames", ())))
        or folder in SLOW_FOLDERS
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if is_slow(item):
            item.add_marker(pytest.mark.slow)


if importlib.util.find_spec("xdist") is not None:  # without it the suite runs in one process
    from xdist.scheduler import LoadFileScheduling

    class ModuleScheduling(LoadFileScheduling):
        """``--dist loadfile``, with each folder of ``ONE_WORKER_FOLDERS`` one unit."""

        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]  # tests/slurm/test_cli.py
            folder = Path(module).relative_to(TESTS.name).parts[0]
            return f"{TESTS.name}/{folder}" if folder in ONE_WORKER_FOLDERS else module

    def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
        return ModuleScheduling(config, log) if config.getoption("dist") == "loadfile" else None


def pytest_collection_finish(session: pytest.Session) -> None:
    if probe := os.environ.get(PROBE):
        loaded = sorted(m for m in FRAMEWORKS if m in sys.modules)
        Path(probe).write_text(json.dumps(loaded))


@pytest.fixture(autouse=True)
def _fast_tests_start_no_process(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test of the fast tier that starts a process fails, naming itself."""
    if request.node.get_closest_marker("slow") is not None:
        yield
        return
    real = subprocess.Popen.__init__

    def refuse(self: subprocess.Popen[Any], *args: Any, **kwargs: Any) -> None:
        raise AssertionError(
            f"{request.node.nodeid} starts a process ({args[:1]}): mark its module "
            "`pytestmark = pytest.mark.slow` (tests/conftest.py)"
        )

    subprocess.Popen.__init__ = refuse  # type: ignore[method-assign]
    try:
        yield
    finally:
        subprocess.Popen.__init__ = real  # type: ignore[method-assign]
