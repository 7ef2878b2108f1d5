"""CheckpointStore: atomic saves, newest-complete restore, fallback, pruning, clear errors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import wait_until

from tiresias_launch.checkpoint import PAUSE_HOOK, Checkpoint, CheckpointError, CheckpointStore

MODEL = ["dense/kernel [4, 2] float32", "dense/bias [2] float32"]


def _writer(payload: bytes):
    def write(directory: Path) -> None:
        (directory / "data.bin").write_bytes(payload)

    return write


def _saved_steps(store: CheckpointStore) -> list[int]:
    return [c.manifest.step for c in store.complete()]


def test_save_is_complete_and_pruned_to_keep(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, "j1", keep=2)
    for step in (10, 20, 30):
        ckpt = store.save(step, MODEL, _writer(b"x" * step), {"epoch": step})
    assert _saved_steps(store) == [30, 20]
    assert ckpt.manifest.files == {"data.bin": 30}
    assert ckpt.manifest.position == {"epoch": 30}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-000000000020", "ckpt-000000000030"]


def test_directory_without_manifest_is_never_restored(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, "j1")
    store.save(5, MODEL, _writer(b"old"))
    (tmp_path / "ckpt-000000000009").mkdir()  # renamed but manifest unreadable
    (tmp_path / "ckpt-000000000009" / "MANIFEST.json").write_text("{trunc")
    (tmp_path / ".tmp-ckpt-000000000011-123").mkdir()  # killed mid-write
    restored: list[int] = []
    ckpt = store.restore(MODEL, lambda c: restored.append(c.manifest.step))
    assert ckpt is not None and restored == [5]
    store.remove_stale_temporaries()
    assert not list(tmp_path.glob(".tmp-*"))


def test_damaged_newest_falls_back_to_previous(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, "j1")
    store.save(1, MODEL, _writer(b"good"))
    store.save(2, MODEL, _writer(b"bad!"))

    def read(c: Checkpoint) -> None:
        if (c.path / "data.bin").read_bytes() == b"bad!":
            raise ValueError("crc mismatch")

    ckpt = store.restore(MODEL, read)
    assert ckpt is not None and ckpt.manifest.step == 1
    assert [(c.manifest.step, why) for c, why in store.damaged] == [(2, "ValueError: crc mismatch")]


def test_all_damaged_is_an_error_listing_each(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, "j1")
    store.save(1, MODEL, _writer(b"a"))
    store.save(2, MODEL, _writer(b"b"))

    def read(c: Checkpoint) -> None:
        raise OSError("unreadable")

    with pytest.raises(CheckpointError, match=r"(?s)every complete checkpoint is damaged.*ckpt-"):
        store.restore(MODEL, read)


def test_first_start_restores_nothing(tmp_path: Path) -> None:
    assert CheckpointStore(tmp_path / "absent", "j1").restore(MODEL, lambda c: None) is None


def test_other_job_is_a_clear_error(tmp_path: Path) -> None:
    CheckpointStore(tmp_path, "j1-aaaa", job_id="j1").save(1, MODEL, _writer(b"a"))
    manifest = json.loads(next(tmp_path.glob("ckpt-*/MANIFEST.json")).read_text())
    assert (manifest["job_id"], manifest["job_key"]) == ("j1", "j1-aaaa")
    # the same short id from another coordinator (a fresh --state) is another job
    with pytest.raises(
        CheckpointError,
        match=r"belongs to another job \('j1-aaaa'\), not to this one \('j1-bbbb'\)",
    ):
        CheckpointStore(tmp_path, "j1-bbbb", job_id="j1").restore(MODEL, lambda c: None)


def test_manifest_without_identity_is_foreign(tmp_path: Path) -> None:
    """A manifest written before job keys existed names only the short id: never ours."""
    CheckpointStore(tmp_path, "j1").save(1, MODEL, _writer(b"a"))
    path = next(tmp_path.glob("ckpt-*/MANIFEST.json"))
    raw = json.loads(path.read_text())
    del raw["job_key"]
    path.write_text(json.dumps(raw))
    with pytest.raises(CheckpointError, match="belongs to another job"):
        CheckpointStore(tmp_path, "j1-cccc", job_id="j1").restore(MODEL, lambda c: None)


def test_other_model_names_the_first_difference(tmp_path: Path) -> None:
    CheckpointStore(tmp_path, "j").save(1, MODEL, _writer(b"a"))
    other = ["dense/kernel [4, 3] float32", "dense/bias [3] float32"]
    with pytest.raises(
        CheckpointError,
        match=r"different model: checkpoint has 'dense/kernel \[4, 2\] float32', "
        r"model has 'dense/kernel \[4, 3\] float32'",
    ):
        CheckpointStore(tmp_path, "j").restore(other, lambda c: None)


SAVER = """
import sys
from pathlib import Path
from tiresias_launch.checkpoint import CheckpointStore
store = CheckpointStore(Path(sys.argv[1]), "j")
store.save(int(sys.argv[2]), ["v [1] float32"], lambda d: (d / "data.bin").write_bytes(b"z" * 64))
"""


@pytest.mark.slow  # starts a process
def test_sigkill_during_write_keeps_previous_checkpoint(tmp_path: Path) -> None:
    root, hook = tmp_path / "ckpt", tmp_path / "paused"
    subprocess.run([sys.executable, "-c", SAVER, str(root), "1"], check=True)
    env = {**os.environ, PAUSE_HOOK: str(hook)}
    proc = subprocess.Popen([sys.executable, "-c", SAVER, str(root), "2"], env=env)
    try:
        wait_until(hook.exists, 30, "the writer to reach the pause hook")
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(10) == -signal.SIGKILL
    finally:
        proc.kill()
    assert [p.name for p in root.glob(".tmp-ckpt-000000000002-*")]  # the half-written one
    store = CheckpointStore(root, "j")
    ckpt = store.restore(["v [1] float32"], lambda c: None)
    assert ckpt is not None and ckpt.manifest.step == 1
    assert json.loads((ckpt.path / "MANIFEST.json").read_text())["files"] == {"data.bin": 64}


def test_saving_a_durable_step_again_keeps_the_first(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, "j1")
    store.save(4, MODEL, _writer(b"first"))
    store.save(4, MODEL, _writer(b"second"))
    [ckpt] = store.complete()
    assert (ckpt.path / "data.bin").read_bytes() == b"first"
    assert not list(tmp_path.glob(".tmp-*"))


def test_a_stale_generation_cannot_commit_a_checkpoint(tmp_path: Path) -> None:
    """Restart 1 restored (claimed the directory) while a copy of restart 0 still runs
    elsewhere: restart 0's save is refused and leaves nothing; restart 1's goes through."""
    stale = CheckpointStore(tmp_path, "job", generation=0)
    current = CheckpointStore(tmp_path, "job", generation=1)
    stale.save(1, MODEL, _writer(b"a"))  # before the replacement: fine
    assert current.restore(MODEL, lambda c: None) is not None
    with pytest.raises(CheckpointError, match="restart 1 of this job runs now"):
        stale.save(2, MODEL, _writer(b"b"))
    assert _saved_steps(current) == [1]
    assert not list(tmp_path.glob(".tmp-*"))
    current.save(2, MODEL, _writer(b"c"))
    assert _saved_steps(current) == [2, 1]
