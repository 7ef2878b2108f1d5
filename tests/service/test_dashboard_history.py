"""The dashboard over time, of a real coordinator on a manual clock: the load as exact
step points, finished jobs with their JCT, node liveness, and a job's own page, over HTTP
and in headless Chromium."""

from __future__ import annotations

import json
import subprocess

import pytest
from helpers import free_port

from .conftest import Cluster, wait_until
from .test_dashboard import CHROMIUM, FOREVER, get, rendered, shows

QUICK = ("--steps", "2", "--step-time", "0.01")


def finished(port: int) -> dict[str, dict]:
    return {j["job_id"]: j for j in json.loads(get(port, "/api/finished?window=600")[2])}


def test_series_finished_jobs_and_their_jct(cluster: Cluster) -> None:
    port = free_port()
    cluster.start_coordinator("--manual-clock", "--dashboard-port", str(port))
    cluster.start_agent("n", gpus=2)
    cluster.wait_nodes("n")
    assert cluster.submit(*FOREVER, workers=2) == "j1"
    assert cluster.submit(*QUICK) == "j2"
    shows(port, running="j1", waiting="j2")
    points = json.loads(get(port, "/api/series")[2])
    assert (points[-1]["used"], points[-1]["total"], points[-1]["waiting"]) == (2, 2, {"Q1": 1})
    if CHROMIUM is not None:  # the shares: root's j1 holds every GPU in use, in Q1
        dom = rendered(port)
        for table in ("users", "queues"):
            rows = dom.split(f'<table id="{table}">', 1)[1].split("</table>", 1)[0]
            assert '<td class="num">2</td><td class="num">100 %</td>' in rows, rows
    cluster.client.request("advance", seconds=7.0)  # j2 waits 7 s of the coordinator's clock
    cluster.cli("cancel", "j1")
    wait_until(lambda: set(finished(port)) == {"j1", "j2"}, 60, "both jobs to finish")
    done = finished(port)
    assert {k: done["j2"][k] for k in ("state", "jct", "name", "owner", "gpus")} == {
        "state": "completed",
        "jct": 7.0,
        "name": "fake_job.py",
        "owner": "root",
        "gpus": 1,
    }
    assert (done["j1"]["state"], done["j1"]["jct"]) == ("cancelled", 7.0)

    def idle() -> bool:  # a point sampled after both ended (one between them has used 0 too)
        last = json.loads(get(port, "/api/series")[2])[-1]
        return (last["used"], last["waiting"]) == (0, {})

    wait_until(idle, 30, "a point with no GPU used and nothing waiting")
    points = json.loads(get(port, "/api/series?window=600")[2])
    assert (points[-1]["used"], points[-1]["waiting"]) == (0, {})
    for bad in ("abc", "-1", "nan"):
        assert get(port, f"/api/series?window={bad}")[0] == 400, bad
    assert finished(port) == done  # a second read is the same

    if CHROMIUM is None:
        pytest.skip("chromium is not installed (tools/install-test-deps.sh installs it)")
    dom = rendered(port)
    table = dom.split('<table id="finished">', 1)[1].split("</table>", 1)[0]
    row = next(r for r in table.split("<tr>") if 'data-job="j2"' in r)
    assert "<td>fake_job.py</td>" in row and "<td>completed</td>" in row and ">7.0s<" in row
    nodes = dom.split('<table id="nodes">', 1)[1].split("</table>", 1)[0]
    assert "<td>up</td>" in nodes
    assert '<svg id="plot-gpus"' in dom and "<polyline" in dom.split('id="plot-gpus"', 1)[1]
    page = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--virtual-time-budget=3000",
            "--dump-dom",
            f"http://127.0.0.1:{port}/?job=j2",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert "History of j2" in page and "completed after" in page
