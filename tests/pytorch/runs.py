"""Runs of a PyTorch job's processes as a node agent spawns them: uninterrupted, and held at a
step, preempted there by SIGTERM and resumed; and the comparison of the two."""

from __future__ import annotations

import signal
from pathlib import Path

from helpers import wait_until
from launch.gangs import start

from coordinator.gang import GangRequest
from tiresias_launch import EXIT_CHECKPOINTED
from tiresias_launch.checkpoint import CheckpointStore

SCRIPTS = Path(__file__).parent / "scripts"
TIMEOUT = 180


def losses(directory: Path, rank: int) -> list[str]:
    """A rank's log: one line per step (and "val …" lines where the script validates)."""
    return (directory / f"log-{rank}").read_text().splitlines()


def preempt_and_resume(tmp_path: Path, request: GangRequest, hold: int) -> tuple[Path, Path]:
    """An uninterrupted run, and a run held at step ``hold``, stopped there by SIGTERM
    and resumed; returns their directories."""
    plain_dir, preempted_dir = tmp_path / "plain", tmp_path / "preempted"
    plain_dir.mkdir()
    preempted_dir.mkdir()
    ranks = request.workers
    plain = start(request, plain_dir)
    assert plain.wait(TIMEOUT) == [0] * ranks, plain.tails()

    first = start(request, preempted_dir, env={"TIRESIAS_HOLD_AT_STEP": str(hold)})
    holding = f"tiresias: holding at step {hold} until preempted"
    wait_until(
        lambda: all(holding in log.read_text() for log in first.logs),
        TIMEOUT,
        f"every rank to hold at step {hold}",
    )
    first.signal(signal.SIGTERM)
    assert first.wait(TIMEOUT) == [EXIT_CHECKPOINTED] * ranks, first.tails()
    [ckpt] = CheckpointStore(preempted_dir / "ckpt" / "job", "job").complete()
    assert ckpt.manifest.step == hold
    for rank in range(ranks):
        steps = [line for line in losses(preempted_dir, rank) if not line.startswith("val")]
        assert len(steps) == hold

    second = start(request, preempted_dir, restart=1)
    assert second.wait(TIMEOUT) == [0] * ranks, second.tails()
    return plain_dir, preempted_dir


def assert_same_run(plain_dir: Path, preempted_dir: Path, ranks: int) -> None:
    """Every step once, with the same loss (data, RNG, momentum, LR), and equal weights."""
    for rank in range(ranks):
        assert losses(preempted_dir, rank) == losses(plain_dir, rank)
    import torch

    resumed = torch.load(preempted_dir / "weights.pt")
    reference = torch.load(plain_dir / "weights.pt")
    assert resumed.keys() == reference.keys()
    assert all(torch.equal(resumed[k], reference[k]) for k in reference)
