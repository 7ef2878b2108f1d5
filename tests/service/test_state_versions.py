"""The journal of a state directory outlives the coordinator version that wrote it: one
written before the state schema was versioned (``data/state-v1.sql``, dumped from a
coordinator of that time, with each job's status as that coordinator answered it) is
replayed to the same answers (to every field it answered); one of a newer schema is
refused in one line naming it."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from helpers import wait_until

from coordinator.core.model import JobState
from coordinator.service import recovery
from coordinator.service.cli import main as coordinator_main
from coordinator.service.client import Client
from coordinator.service.coordinator import Coordinator, Options
from coordinator.service.store import SCHEMA_VERSION, Store, pack, unpack

from .conftest import Cluster, in_process_coordinator

DATA = Path(__file__).parent / "data"


def _old_state(tmp_path: Path) -> Path:
    state = tmp_path / "s"
    state.mkdir(mode=0o700)
    db = sqlite3.connect(state / "coordinator.sqlite")
    db.executescript((DATA / "state-v1.sql").read_text())
    db.close()
    return state


def test_a_state_from_before_schema_versions_replays_to_the_same_answers(
    tmp_path: Path,
) -> None:
    state = _old_state(tmp_path)
    before = json.loads((DATA / "state-v1-views.json").read_text())
    opts = Options(
        bind=f"ipc://{tmp_path}/c.sock", state=state, manual_clock=True, allow_root_jobs=True
    )
    with in_process_coordinator(opts) as coord, Client(coord.address, timeout=5) as c:
        after = [c.request("status", job_id=v["job_id"])["job"] for v in before]
        # j1 was submitted with key k1: a resent submit is still the same job
        again = c.request("submit", argv=["train.py"], workers=1, key="k1")
    # newer coordinators say more (pending reasons, histories); what the old one said stands
    assert [{k: a.get(k) for k in b} for a, b in zip(after, before, strict=True)] == before
    assert [v["state"] for v in after] == ["running", "completed", "running", "cancelled"]
    assert (again["job_id"], again["duplicate"]) == ("j1", True)
    store = Store(state)
    assert store.get_meta("schema") == SCHEMA_VERSION
    store.close()


def written_before(state: Path, option: str) -> None:
    """Make ``state`` what a coordinator from before ``option`` existed wrote: neither its
    journal record nor its scheduler snapshot names it."""
    db = sqlite3.connect(state / "coordinator.sqlite")
    with db:
        (blob,) = db.execute("SELECT value FROM meta WHERE key = 'core_options'").fetchone()
        record = unpack(blob)
        del record[option]
        db.execute("UPDATE meta SET value = ? WHERE key = 'core_options'", (pack(record),))
        for seq, snap in db.execute("SELECT seq, state FROM snapshot").fetchall():
            old = unpack(snap)
            del old["scheduler"]["config"][option]
            db.execute("UPDATE snapshot SET state = ? WHERE seq = ?", (pack(old), seq))
    db.close()


def test_a_state_from_before_await_begin_restarts_under_slurm_with_it(cluster: Cluster) -> None:
    """An older ``--executor slurm`` coordinator's state (no await_begin in its record) is
    replayed as written, then carries on awaiting begins: not refused, nothing lost, and the
    runs it had started stay begun."""
    cluster.start_coordinator("--snapshot-every", "2")
    cluster.start_agent("n1", 2)
    cluster.wait_nodes("n1")
    jobs = [cluster.submit("--steps", "1000", "--step-time", "0.05") for _ in range(3)]
    wait_until(lambda: cluster.state_of(jobs[1]) == "running", 15, "two jobs to run")
    cluster.close()
    state = cluster.state
    written_before(state, "await_begin")
    upgraded = Options(state=state, executor="slurm")
    settings = upgraded.core_settings()
    store = Store(state)
    recovery.check_core_options(store, upgraded, settings)
    loaded = recovery.load(store, upgraded, settings)
    assert loaded.sched.config.await_begin
    assert [j.job_id for j in loaded.sched.jobs()] == jobs
    running = [j for j in loaded.sched.jobs() if j.state is JobState.RUNNING]
    assert [j.job_id for j in running] == jobs[:2] and not any(j.awaiting for j in running)
    snapshot, journal = store.load()  # what ran before is in the snapshot it now starts from
    assert journal == [] and snapshot is not None
    assert store.get_meta("core_options")["await_begin"] is True
    recovery.check_core_options(store, upgraded, settings)  # upgraded once, then as any state
    with pytest.raises(ValueError, match="created with await_begin=True"):  # chosen: refused
        recovery.check_core_options(store, Options(state=state), Options().core_settings())
    store.close()


def test_a_state_of_a_newer_schema_is_refused_naming_its_version(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = _old_state(tmp_path)
    store = Store(state)
    with store.tx():
        store.set_meta("schema", SCHEMA_VERSION + 1)
    store.close()
    with pytest.raises(ValueError, match=f"state schema version {SCHEMA_VERSION + 1}"):
        Coordinator(Options(state=state))
    code = coordinator_main(["--bind", f"ipc://{tmp_path}/c.sock", "--state", str(state)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and f"schema version {SCHEMA_VERSION + 1}" in err[0], err
    db = sqlite3.connect(state / "coordinator.sqlite")  # the refused state is as it was
    assert db.execute("SELECT COUNT(*) FROM jobs").fetchone()[0] == 4
    db.close()
