"""Freed memory goes back to the system (``service/heap.py``): after a batch of finished
jobs, RSS follows the memory in use, not the peak of every batch before."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.service import heap
from coordinator.service.client import Client
from coordinator.service.coordinator import Options

from .conftest import in_process_coordinator
from .test_reconcile import ScriptedAgent

CHUNK = 4096  # over pymalloc's 512 bytes: from the C allocator, as buffers of a batch are
CHUNKS = 8000  # 32 MB
JOBS = 120


def anonymous_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
    raise AssertionError("no RssAnon")


@pytest.mark.skipif(heap.release() is False, reason="not glibc")
def test_freed_holes_below_live_blocks_go_back_to_the_system() -> None:
    batch = [bytearray(CHUNK) for _ in range(CHUNKS)]  # touched: resident
    pin = bytearray(CHUNK)  # a live block above them: the heap's top cannot shrink
    before = anonymous_kib()
    del batch
    freed = anonymous_kib()
    assert heap.release()
    after = anonymous_kib()
    assert before - freed < CHUNK * CHUNKS // 1024 // 4  # free() alone kept most of it
    assert freed - after > CHUNK * CHUNKS // 1024 // 2  # the trim gave it back
    del pin


def test_retiring_jobs_trims_once_per_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trims: list[int] = []
    monkeypatch.setattr(heap, "TRIM_EVERY", 50)
    monkeypatch.setattr(heap, "release", lambda: trims.append(1) or True)
    opts = Options(bind=f"ipc://{tmp_path}/c.sock", state=tmp_path / "s", allow_root_jobs=True)
    with in_process_coordinator(opts) as coord, Client(coord.address, timeout=10) as c:
        agent = ScriptedAgent(coord.address, "n1", 1)
        for _ in range(JOBS):  # j1 runs; the others wait and are cancelled one by one
            c.request("submit", argv=["x.py"], workers=1)
        for i in range(2, JOBS + 1):
            assert c.request("cancel", job_id=f"j{i}")["state"] == "cancelled"
        agent.close()
    assert coord.sched.retired >= 50  # read once its loop has stopped
    assert 1 <= len(trims) <= coord.sched.retired // 50  # once a batch, or once a pass
    assert not heap.crossed(50, 99) and heap.crossed(99, 100) and heap.crossed(40, 160)
