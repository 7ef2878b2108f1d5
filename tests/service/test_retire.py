"""Finished jobs leave the core once the coordinator has stored them (``events.Retire``):
snapshots hold the active jobs only, however many jobs finished, and every finished job
still answers, from its record, across a restart."""

from __future__ import annotations

import gc
import types
from pathlib import Path
from typing import Any

import msgpack

from coordinator.service.client import Client
from coordinator.service.coordinator import Options
from coordinator.service.store import Store

from .conftest import in_process_coordinator
from .test_reconcile import ScriptedAgent
from .test_scale_views import crowd

JOBS = 300


def test_a_snapshot_holds_the_active_jobs_only(tmp_path: Path) -> None:
    state = tmp_path / "s"
    opts = Options(
        bind=f"ipc://{tmp_path}/c.sock", state=state, snapshot_every=50, allow_root_jobs=True
    )
    with in_process_coordinator(opts) as coord, Client(coord.address, timeout=10) as c:
        agent = ScriptedAgent(coord.address, "n1", 1)
        for _ in range(JOBS):
            c.request("submit", argv=["x.py"], workers=1)
        for i in range(2, JOBS + 1):  # j1 runs; the others wait and are cancelled
            assert c.request("cancel", job_id=f"j{i}")["state"] == "cancelled"
        # answered after the pass that followed the last cancel
        assert c.request("status", job_id="j1")["job"]["state"] == "running"
        assert c.request("cancel", job_id="j2")["state"] == "cancelled"  # said, not redone
        agent.close()
    store = Store(state)
    snap, journal = store.load()
    store.close()
    assert snap is not None
    scheduler = snap["scheduler"]
    replayed = {args["job_id"] for kind, args in journal if kind == "retire"}
    assert scheduler["retired"] + len(replayed) == JOBS - 1
    assert {j["job_id"] for j in scheduler["jobs"]} <= {"j1", *replayed}
    assert len(msgpack.packb(snap)) < 20_000  # was ~300 bytes per finished job
    with in_process_coordinator(opts) as coord, Client(coord.address, timeout=10) as c:
        assert [j.job_id for j in coord.sched.jobs()] == ["j1"]
        assert coord.sched.retired == JOBS - 1
        assert c.request("status", job_id="j7")["job"]["state"] == "cancelled"
        everything = c.request("status", all=True, limit=5)["jobs"]
        assert [(j["job_id"], j["state"]) for j in everything][:2] == [
            ("j1", "running"),
            ("j2", "cancelled"),
        ]


def held(root: object, ids: set[str]) -> set[str]:
    """Those of ``ids`` reachable from ``root`` through containers and instances, not
    through classes, modules or functions (which reach everything the process has)."""
    found: set[str] = set()
    seen: set[int] = set()
    todo: list[Any] = [root]
    while todo:
        o = todo.pop()
        if id(o) in seen or isinstance(o, _OPAQUE):
            continue
        seen.add(id(o))
        if type(o) is str:
            found.update({o} & ids)
        else:
            todo.extend(gc.get_referents(o))
    return found


_OPAQUE = (type, types.ModuleType, types.FunctionType, types.MethodType, types.BuiltinFunctionType)


def test_nothing_of_a_finished_job_stays_in_memory(tmp_path: Path) -> None:
    """Once archived, no object of the coordinator holds a finished job's id: its memory
    follows the active jobs, however many finished (scale_bench's RSS after 100,000)."""
    c = crowd(tmp_path, 10, 300)
    assert held(c, {f"j{i}" for i in range(1, 301)}) == set()
    assert held(c, {"j301", "j310"}) == {"j301", "j310"}  # the active ones are found
    c.store.close()
