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

from coordinator.service.cli import main as coordinator_main
from coordinator.service.client import Client
from coordinator.service.coordinator import Coordinator, Options
from coordinator.service.store import SCHEMA_VERSION, Store

from .conftest import in_process_coordinator

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
