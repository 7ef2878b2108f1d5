"""PyTorch jobs as real processes planned by gang.plan (what agents spawn): a torchrun-style
DDP script with ``tiresias.State`` preempted by SIGTERM at a held step and resumed, against
an uninterrupted run; and a plain torchrun script with no Tiresias code."""

from __future__ import annotations

import random
import signal
from pathlib import Path

import pytest
from helpers import wait_until
from launch.gangs import start

from tiresias_launch import EXIT_CHECKPOINTED
from tiresias_launch.checkpoint import CheckpointStore
from tiresias_launch.gang import GangRequest

torch = pytest.importorskip("torch", reason="needs PyTorch (the [torch] extra)")
pytestmark = pytest.mark.torch

SCRIPTS = Path(__file__).parent / "scripts"
TIMEOUT = 180
STEPS = 40
RANKS = 2


def ddp_request() -> GangRequest:
    argv = (str(SCRIPTS / "ddp_train.py"), str(STEPS), "log-{rank}", "weights.pt")
    return GangRequest(argv, workers=RANKS)


def losses(directory: Path, rank: int) -> list[str]:
    return (directory / f"log-{rank}").read_text().splitlines()


def test_ddp_state_resumes_bit_identically_after_sigterm(tmp_path: Path) -> None:
    plain_dir, preempted_dir = tmp_path / "plain", tmp_path / "preempted"
    plain_dir.mkdir()
    preempted_dir.mkdir()
    plain = start(ddp_request(), plain_dir)
    assert plain.wait(TIMEOUT) == [0] * RANKS, plain.tails()

    hold = random.Random("ddp_train").randrange(1, STEPS)
    first = start(ddp_request(), preempted_dir, env={"TIRESIAS_HOLD_AT_STEP": str(hold)})
    holding = f"tiresias: holding at step {hold} until preempted"
    wait_until(
        lambda: all(holding in log.read_text() for log in first.logs),
        TIMEOUT,
        f"every rank to hold at step {hold}",
    )
    first.signal(signal.SIGTERM)
    assert first.wait(TIMEOUT) == [EXIT_CHECKPOINTED] * RANKS, first.tails()
    [ckpt] = CheckpointStore(preempted_dir / "ckpt" / "job", "job").complete()
    assert ckpt.manifest.step == hold
    for rank in range(RANKS):
        assert len(losses(preempted_dir, rank)) == hold

    second = start(ddp_request(), preempted_dir, restart=1)
    assert second.wait(TIMEOUT) == [0] * RANKS, second.tails()
    for rank in range(RANKS):  # every step once, with the same loss: data, RNG, momentum, LR
        assert losses(preempted_dir, rank) == losses(plain_dir, rank)
    resumed = torch.load(preempted_dir / "weights.pt")
    reference = torch.load(plain_dir / "weights.pt")
    assert resumed.keys() == reference.keys()
    assert all(torch.equal(resumed[k], reference[k]) for k in reference)


def test_plain_torchrun_script_runs_unchanged(tmp_path: Path) -> None:
    gang = start(GangRequest((str(SCRIPTS / "torchrun_plain.py"),), workers=3), tmp_path)
    assert gang.wait(TIMEOUT) == [0] * 3, gang.tails()
    lines = sorted(log.read_text().strip().splitlines()[-1] for log in gang.logs)
    assert lines == [f"rank {r}/3 local {r}: sum 6" for r in range(3)]
