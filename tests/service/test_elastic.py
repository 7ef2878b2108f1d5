"""Elastic gangs through a real coordinator on a real socket: a ``MIN:MAX`` submit is checked
like every input and reaches the core as a range; the core's size shows as "2 of 2:4"; a
runtime that says its script cannot keep its global batch (``resizable: false``) pins the
job to the size it runs at, in the core, the record, the history and the journal."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinator.cli.tables import JOB_COLUMNS, format_job, table
from coordinator.service.client import Client, RequestError
from coordinator.service.coordinator import Coordinator, Options
from coordinator.service.views import gpus_text

from .conftest import in_process_coordinator, wait_until


def _options(state: Path) -> Options:
    """The nodes are this test's client, which sends no heartbeats: never declared lost."""
    return Options(
        bind=f"ipc://{state}/c.sock", state=state, allow_root_jobs=True, heartbeat_timeout=3600
    )


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture
def live(state: Path) -> Iterator[Coordinator]:
    with in_process_coordinator(_options(state)) as coord:
        yield coord


def _client(coord: Coordinator) -> Client:
    return Client(coord.address, timeout=5)


def _two_nodes_one_taken(c: Client) -> str:
    """Two nodes of 2 GPUs, and a rigid 2-GPU job on one of them: the id of that job."""
    for node in ("n1", "n2"):
        c.request("register", node=node, gpus=[{"index": 0}, {"index": 1}], running=[])
    return str(c.request("submit", argv=["t.py"], workers=2)["job_id"])


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"min_workers": 5}, "submit: 'min_workers' must be 1 to 'workers' (4), got 5"),
        ({"min_workers": 0}, "submit: 'min_workers' must be 1 to 'workers' (4), got 0"),
        ({"min_workers": "2"}, "field 'min_workers' must be int or nil, got str"),
        ({"min_workers": 2, "ps": 1}, "a parameter-server job takes a fixed number of workers"),
    ],
)
def test_a_bad_range_is_refused_and_nothing_is_queued(
    live: Coordinator, fields: dict[str, object], problem: str
) -> None:
    with _client(live) as c:
        with pytest.raises(RequestError) as err:
            c.request("submit", argv=["t.py"], workers=4, **fields)
        assert problem in str(err.value) and "\n" not in str(err.value)
        assert c.request("queue")["jobs"] == []
    assert not list(live.sched.jobs())


def test_a_range_reaches_the_core_and_the_views(live: Coordinator) -> None:
    with _client(live) as c:
        _two_nodes_one_taken(c)
        job = c.request("submit", argv=["t.py"], workers=4, min_workers=2)["job_id"]
        wait_until(lambda: c.request("status", job_id=job)["job"]["state"] == "running")
        rigid = c.request("submit", argv=["t.py"], workers=2, min_workers=2)["job_id"]
        held = c.request("status", job_id=job)["job"]
        # its runtime keeps the global batch at other sizes (a report of another run, or
        # from a rank that is not the chief, releases nothing)
        c.send("report", job_id=job, role="chief", restart=7, resizable=True)
        c.send("report", job_id=job, role="worker", task_index=1, restart=0, resizable=True)
        c.send("report", job_id=job, role="chief", restart=0, step=1, resizable=True)
        wait_until(lambda: live.sched.job(job).resizable, 5, "the release")
        view = c.request("status", job_id=job)["job"]
    assert live.sched.job(rigid).spec.min_gpus is None  # MIN == MAX: a fixed count
    assert held["held"] and "2 of 2:4 GPUs (held at its size until its runtime confirms" in (
        format_job(held)
    )
    assert [e["text"] for e in held["history"] if "held at" in e["text"]] == [
        "started on 2 of 4 GPUs, n2:0,1; held at 2 until its runtime confirms it can resize"
    ]
    spec = live.sched.job(job).spec  # released: below its ask, it yields to the rigid job
    assert (spec.min_gpus, spec.gpus, live.sched.job(job).held) == (2, 4, None)
    said = [e["text"] for e in view["history"] if e["text"].startswith("its runtime")]
    assert said == ["its runtime keeps the global batch: resized within 2 to 4 GPUs from now on"]
    assert not view["held"]
    assert (held["workers"], held["min_workers"], held["gpus"]) == (4, 2, 2)
    assert gpus_text(held) == "2 of 2:4"
    assert gpus_text({**held, "placement": None, "gpus": 4}) == "2:4"  # waiting
    assert "2 of 2:4" in table([held], JOB_COLUMNS)
    assert "shape      2 to 4 workers, 0 ps, 2 of 2:4 GPUs\n" in format_job({**held, "held": False})


def test_a_job_that_cannot_keep_its_batch_is_pinned_to_its_size(
    live: Coordinator, state: Path
) -> None:
    with _client(live) as c:
        rigid = _two_nodes_one_taken(c)
        job = c.request("submit", argv=["t.py"], workers=4, min_workers=2)["job_id"]
        wait_until(lambda: live.sched.job(job).state.value == "running")
        # a report of another run, or from a rank that is not the chief, pins nothing
        c.send("report", job_id=job, role="chief", restart=7, resizable=False)
        c.send("report", job_id=job, role="worker", task_index=1, restart=0, resizable=False)
        c.send("report", job_id=rigid, role="chief", restart=0, resizable=False)
        c.send("report", job_id=job, role="chief", restart=0, step=1, resizable=False)
        wait_until(lambda: live.book.records[job].request.min_workers is None, 5, "the pin")
        view = c.request("status", job_id=job)["job"]
    assert (live.sched.job(job).spec.gpus, live.sched.job(job).gpus) == (2, 2)
    assert (view["workers"], view["min_workers"], gpus_text(view)) == (2, None, "2")
    pinned = [e["text"] for e in view["history"] if e["text"].startswith("pinned")]
    assert pinned == [
        "pinned to 2 GPUs (2:4 asked): its script cannot keep its global batch at another size"
    ]
    assert live.sched.job(rigid).spec.gpus == 2
    live.stop.set()


def test_a_pin_outlives_a_restart(state: Path) -> None:
    with in_process_coordinator(_options(state)) as coord, _client(coord) as c:
        _two_nodes_one_taken(c)
        job = c.request("submit", argv=["t.py"], workers=4, min_workers=2)["job_id"]
        wait_until(lambda: coord.sched.job(job).state.value == "running")
        c.send("report", job_id=job, role="chief", restart=0, resizable=False)
        wait_until(lambda: coord.book.records[job].request.min_workers is None, 5, "the pin")
    with in_process_coordinator(_options(state)) as coord:  # the journal replayed
        assert (coord.sched.job(job).spec.gpus, coord.sched.job(job).spec.min_gpus) == (2, None)
        assert coord.book.records[job].request.workers == 2
