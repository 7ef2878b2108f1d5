"""The runtime's measured restore cost reaches the scheduler live: with
``--min-run-restores``, a job that measured its warm-up keeps its GPUs for that many times
its restore cost, so a newcomer preempts the other job of its queue instead.

The coordinator runs on its manual clock, so both jobs start at t=0, both are demoted at
the same instant, and the only difference between them is the cost one of them measured."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coordinator.core.events import UpdateCosts
from coordinator.core.model import Job, JobSpec
from coordinator.service.costs import measured_costs
from coordinator.service.store import Store

from .conftest import Cluster, wait_until

SCRIPTS = Path(__file__).parent / "scripts"


@pytest.mark.parametrize(("min_run_restores", "victim"), [("1000", "j1"), ("0", "j2")])
def test_a_measured_restore_cost_protects_a_job_from_preemption(
    cluster: Cluster, min_run_restores: str, victim: str
) -> None:
    pytest.importorskip("torch")
    cluster.start_coordinator(
        "--manual-clock", "--thresholds", "4", "--min-run-restores", min_run_restores
    )
    cluster.start_agent("n", gpus=2)
    cluster.wait_nodes("n")

    def submit(script: Path, *args: str) -> str:
        out = cluster.cli("submit", "--json", "--workers", "1", str(script), *args)
        return str(json.loads(out.stdout)["job_id"])

    plain = submit(SCRIPTS / "sleep_forever.py")  # measures nothing: no cost known
    measured = submit(SCRIPTS / "torch_loop.py")
    assert (plain, measured) == ("j1", "j2")  # ties of start and arrival: j1 ranks first
    wait_until(
        lambda: (cluster.job(measured)["progress"].get("warmup") or {}).get("first_step"),
        120,
        "the torch job's warm-up report",
    )
    assert cluster.state_of(plain) == "running"
    cluster.client.request("advance", seconds=10.0)  # both have 10 GPU-s: the second queue
    newcomer = submit(Path(__file__).parents[2] / "examples" / "fake_job.py", "--steps", "2")
    wait_until(lambda: cluster.state_of(newcomer) == "completed", 60, "the newcomer")

    audit = Store(cluster.state)
    preempted = [job for _, kind, job, _ in audit.decisions() if kind == "preempt"]
    audit.close()
    assert preempted == [victim]


WARMUP = {"build": 2.0, "restore": 0.5, "step": 30, "first_step": 1.5}


@pytest.mark.parametrize(
    ("report", "expected"),
    [
        ({"role": "chief", "warmup": WARMUP}, (0.0, 4.0)),
        ({"warmup": WARMUP, "checkpoint": {"seconds": 3.0, "bytes": 9, "step": 30}}, (3.0, 4.0)),
        ({"role": "chief", "checkpoint": {"seconds": 3.0}}, (3.0, 0.0)),
        ({"role": "worker", "warmup": WARMUP}, None),  # the chief speaks for the job
        ({"role": "chief", "warmup": {"build": 2.0, "restore": 0.5}}, None),  # not over yet
        ({"role": "chief", "warmup": {**WARMUP, "restore": "slow"}}, None),
        ({"role": "chief", "checkpoint": {"seconds": -1.0}}, None),
        ({"role": "chief", "checkpoint": {"seconds": float("nan")}}, None),
        ({"role": "chief"}, None),
    ],
)
def test_costs_read_from_a_report(
    report: dict[str, object], expected: tuple[float, float] | None
) -> None:
    job = Job(JobSpec("j1", 1, arrival=0.0))
    event = measured_costs(report, job)
    assert event == (None if expected is None else UpdateCosts("j1", *expected))
    if event is not None:  # the same numbers again change nothing
        job.checkpoint_cost, job.restore_cost = event.checkpoint_s, event.restore_s
        assert measured_costs(report, job) is None
