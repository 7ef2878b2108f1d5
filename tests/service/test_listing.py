"""``status`` and ``queue`` at any number of jobs: replies come in pages that each fit one
message, active jobs by default, history on request (``--all``, ``--since``)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinator import protocol
from coordinator.cli.jobs import list_jobs
from coordinator.service.client import Client
from coordinator.service.coordinator import Coordinator, Options

from .conftest import in_process_coordinator
from .test_reconcile import ScriptedAgent

pytestmark = pytest.mark.slow  # starts real processes

JOBS = 1200
ARG = "a" * 1000  # ~1.2 MB of views in all: over one message on purpose


@pytest.fixture(scope="module")
def crowded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Coordinator, float]]:
    state = tmp_path_factory.mktemp("listing")
    options = Options(bind=f"ipc://{state}/c.sock", state=Path(state), allow_root_jobs=True)
    with in_process_coordinator(options) as coord, Client(coord.address, timeout=10) as c:
        agent = ScriptedAgent(coord.address, "n1", 1)
        for _ in range(JOBS):
            c.request("submit", argv=["x.py", ARG], workers=1)
        before_cancel = time.time()
        for i in range(3, JOBS + 1):  # j1 runs, j2 waits, the rest are cancelled
            c.request("cancel", job_id=f"j{i}")
        yield coord, before_cancel
        agent.close()


def test_every_page_fits_one_message(crowded: tuple[Coordinator, float]) -> None:
    coord, _ = crowded
    with Client(coord.address, timeout=10) as c:
        first = c.request("status", all=True)
        assert first["next"] is not None and len(first["jobs"]) < JOBS
        assert len(protocol.encode("ok", **first)) <= protocol.MAX_MESSAGE_BYTES
        every = list_jobs(c, "status", all=True)
        assert [j["job_id"] for j in every] == [f"j{i}" for i in range(1, JOBS + 1)]


def test_active_by_default_history_on_request(crowded: tuple[Coordinator, float]) -> None:
    coord, before_cancel = crowded
    with Client(coord.address, timeout=10) as c:
        assert [j["job_id"] for j in list_jobs(c, "status")] == ["j1", "j2"]
        assert [j["job_id"] for j in list_jobs(c, "queue", all=True)] == ["j1", "j2"]
        recent = list_jobs(c, "status", since=before_cancel)
        assert len(recent) == JOBS
        assert [j["job_id"] for j in list_jobs(c, "status", since=time.time() + 60)] == [
            "j1",
            "j2",
        ]
        assert [j["job_id"] for j in list_jobs(c, "status", limit=1)] == ["j1", "j2"]


def test_cli_pages_through_history(crowded: tuple[Coordinator, float]) -> None:
    coord, _ = crowded
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "coordinator.cli",
            "status",
            "--all",
            "--json",
            "--coordinator",
            coord.address,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    jobs = json.loads(out.stdout)
    assert len(jobs) == JOBS and jobs[-1]["state"] == "cancelled"


def test_user_filter(crowded: tuple[Coordinator, float]) -> None:
    coord, _ = crowded
    with Client(coord.address, timeout=10) as c:
        assert len(list_jobs(c, "status", all=True, user="root")) == JOBS
        assert list_jobs(c, "status", all=True, user="nobody") == []
        assert [j["job_id"] for j in list_jobs(c, "queue", user="root")] == ["j1", "j2"]
