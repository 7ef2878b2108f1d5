"""The read-only dashboard of a real coordinator, over real HTTP and in headless Chromium
(Debian's ``chromium``, installed by tools/install-test-deps.sh): the page shows a submitted
job with the reason it waits, and updates when a job is preempted."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from helpers import free_port

from .conftest import Cluster, wait_until

FOREVER = ("--steps", "1000000", "--step-time", "0.05")
CHROMIUM = shutil.which("chromium")


def get(port: int, path: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as reply:
            return reply.status, reply.headers["Content-Type"], reply.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read()


def state(port: int) -> dict[str, Any]:
    return json.loads(get(port, "/api/state")[2])


def rendered(port: int) -> str:
    """The page's DOM once its script has fetched and drawn the state."""
    assert CHROMIUM is not None
    out = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",  # the tests run as root
            "--disable-gpu",
            "--virtual-time-budget=3000",
            "--dump-dom",
            f"http://127.0.0.1:{port}/",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def waiting_row(dom: str, job_id: str) -> str:
    table = dom.split('<table id="waiting">', 1)[1].split("</table>", 1)[0]
    rows = [r for r in table.split("<tr>") if f'data-job="{job_id}"' in r]
    return rows[0] if rows else ""


def preempt_through_the_dashboard(
    cluster: Cluster, waiting: Callable[[int], None], preempted: Callable[[int], None]
) -> None:
    """j1 (2 GPUs) runs and j2 waits: ``waiting(port)``; j1 reaches 4 GPU-s, is demoted,
    and j2 takes its GPUs: ``preempted(port)``."""
    port = free_port()
    cluster.start_coordinator("--manual-clock", "--thresholds", "4", "--dashboard-port", str(port))
    cluster.start_agent("n", gpus=2)
    cluster.wait_nodes("n")
    assert cluster.submit(*FOREVER, workers=2) == "j1"
    assert cluster.submit(*FOREVER) == "j2"
    shows(port, running="j1", waiting="j2")
    waiting(port)
    cluster.client.request("advance", seconds=2.0)
    shows(port, running="j2", waiting="j1")
    preempted(port)


def shows(port: int, running: str, waiting: str) -> None:
    """Wait until the dashboard's snapshot has exactly these running and waiting jobs."""

    def listed(kind: str) -> list[str]:
        return [j["job_id"] for j in state(port)[kind]]

    wait_until(
        lambda: listed("running") == [running] and listed("waiting") == [waiting],
        60,
        f"the dashboard to show {running} running and {waiting} waiting",
    )


def test_dashboard_api_shows_jobs_reasons_and_preemptions(cluster: Cluster) -> None:
    def waiting(port: int) -> None:
        status, kind, page = get(port, "/")
        assert (status, kind) == (200, "text/html; charset=utf-8")
        assert b"<h1>Tiresias</h1>" in page
        assert get(port, "/nothing")[0] == 404
        assert get(port, "/api/job/nope")[:2] == (404, "application/json")  # not [] with 200
        shown = state(port)
        assert shown["gpus"] == {"total": 2, "used": 2}
        assert [g["job"] for g in shown["nodes"][0]["gpus"]] == ["j1", "j1"]
        assert shown["waiting"][0]["pending"]["reason"] == "gpus"
        assert all(j["log_tail"] is None for j in shown["running"] + shown["waiting"])

    def preempted(port: int) -> None:
        events = json.loads(get(port, "/api/events")[2])
        assert [(e["job_id"], e["kind"]) for e in events[:2]] == [
            ("j2", "started"),
            ("j1", "preempted"),
        ]
        history = json.loads(get(port, "/api/job/j1")[2])
        assert [e["kind"] for e in history] == ["submitted", "started", "demoted", "preempted"]

    preempt_through_the_dashboard(cluster, waiting, preempted)


@pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (tools/install-test-deps.sh installs it)"
)
def test_dashboard_page_in_headless_chromium(cluster: Cluster) -> None:
    def waiting(port: int) -> None:
        row = waiting_row(rendered(port), "j2")
        assert "Q1 #1 (1 overall)" in row
        assert "waiting for 1 GPU (0 free): the 1 job ahead of it (Q1: 1) holds or needs 2" in row

    def preempted(port: int) -> None:
        dom = rendered(port)
        row = waiting_row(dom, "j1")
        assert "in Q2 since its service passed 4 GPU-s" in row
        assert re.search(r'<td>4\.0 <svg [^>]*class="spark"><polyline points="1\.0,1\.0 ', row), row
        assert waiting_row(dom, "j2") == ""
        events = dom.split('<table id="events">', 1)[1]
        assert re.search(
            r"<td>preempted( at step \d+)? for j2 \(Q1\), a higher queue than its Q2</td>", events
        ), events

    preempt_through_the_dashboard(cluster, waiting, preempted)


def test_dashboard_refuses_a_taken_port(cluster: Cluster) -> None:
    taken = free_port()
    cluster.start_coordinator("--dashboard-port", str(taken))
    (cluster.tmp / "other").mkdir()
    other = Cluster(cluster.tmp / "other")
    refused = subprocess.run(
        [
            sys.executable,
            "-m",
            "coordinator.service.cli",
            "--bind",
            other.address,
            "--state",
            str(other.state),
            "--dashboard-port",
            str(taken),
        ],
        capture_output=True,
        text=True,
        env=cluster.env,
        timeout=60,
    )
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1
    assert f"cannot serve the dashboard on 127.0.0.1:{taken}: Address already in use" in (
        refused.stderr
    )
