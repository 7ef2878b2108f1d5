"""Runs of an elastic PyTorch job as the coordinator drives one: world 4, preempted and
resumed at world 2, preempted again and resumed at world 4 (each run of the ``--workers 2:4``
gang planned by gang.plan on the GPUs the core gave it, with a hold at a chosen step per
run); and the comparison with an uninterrupted rigid run at world 4, step by step.

Tolerance: the resized run computes the same sums in another order (a rank of world 2 sums
a batch of 8 where two ranks of world 4 sum 4 each, and the all-reduce adds 2 terms, not 4),
so float32 results may differ in their last bits, and the differences grow a little with the
steps. ``RTOL`` is 1e-5 (about 100 float32 ulps) on losses and weights; a resize that lost
the global batch or the sample order differs in the first digits.
"""

from __future__ import annotations

import signal
from collections import defaultdict
from pathlib import Path

from helpers import wait_until
from launch.gangs import start

from coordinator.gang import GangRequest
from pytorch.runs import TIMEOUT
from tiresias_launch import EXIT_CHECKPOINTED
from tiresias_launch.checkpoint import CheckpointStore

TOP = 4
WORLDS = (4, 2, 4)
RTOL, ATOL = 1e-5, 1e-6

#: step → one (epoch, sample indices, loss) per rank that ran it
Steps = dict[int, list[tuple[int, list[int], float]]]


def resize_and_compare(
    tmp_path: Path,
    argv: tuple[str, ...],
    holds: tuple[int, int],
    accumulate: bool = False,
    asked: bool = True,
) -> Steps:
    """An uninterrupted rigid run at world 4, and the elastic job at worlds 4 → 2 → 4, held
    and preempted at ``holds`` (one per resize); asserts they trained alike, step by step.
    With ``accumulate`` the job runs with TIRESIAS_ELASTIC_BATCH=accumulate: at world 2 each
    rank runs 2 micro-steps per step, each exactly one world-4 rank's batch (and loss); not
    ``asked``: the job accumulates without the variable. Returns the elastic job's steps."""
    rigid_dir, elastic_dir = tmp_path / "rigid", tmp_path / "elastic"
    rigid_dir.mkdir()
    elastic_dir.mkdir()
    rigid = start(GangRequest(argv, workers=TOP), rigid_dir)
    assert rigid.wait(TIMEOUT) == [0] * TOP, rigid.tails()
    env = {"TIRESIAS_HOLD_AT_STEP": ",".join(map(str, holds))}
    if accumulate and asked:
        env["TIRESIAS_ELASTIC_BATCH"] = "accumulate"
    request = GangRequest(argv, workers=TOP, min_workers=min(WORLDS))  # --workers 2:4
    ran: dict[int, int] = {}  # step → the world that ran it
    for restart, world in enumerate(WORLDS):
        placement = {"localhost": list(range(world))}  # the world the core decided
        gang = start(request, elastic_dir, restart=restart, env=env, placement=placement)
        if restart < len(holds):
            hold = holds[restart]
            holding = f"tiresias: holding at step {hold} until preempted"
            wait_until(
                lambda gang=gang, holding=holding: all(
                    holding in log.read_text() for log in gang.logs
                ),
                TIMEOUT,
                f"every rank of world {world} to hold at step {hold}",
            )
            gang.signal(signal.SIGTERM)
            assert gang.wait(TIMEOUT) == [EXIT_CHECKPOINTED] * world, gang.tails()
            newest = CheckpointStore(elastic_dir / "ckpt" / "job", "job").complete()[0]
            assert newest.manifest.step == hold
        else:
            assert gang.wait(TIMEOUT) == [0] * world, gang.tails()
        begin = holds[restart - 1] if restart else 0
        end = holds[restart] if restart < len(holds) else max(read_steps(rigid_dir))
        ran |= dict.fromkeys(range(begin + 1, end + 1), TOP if accumulate else world)
    if restart:  # the chief said how it resumed at the new world
        said = (elastic_dir / "chief-0-r1.log").read_text()
        assert "resumed on 2 of 4 workers (the checkpoint's run had 4)" in said, said
        assert ("micro-steps" in said) == accumulate, said
    reference, elastic = read_steps(rigid_dir), read_steps(elastic_dir)
    assert sorted(elastic) == sorted(reference)  # every step once
    for step, rows in elastic.items():
        assert len(rows) == ran[step], f"step {step}: {len(rows)} ranks logged it"
        assert _samples(rows) == _samples(reference[step]), f"step {step} trained other samples"
        assert _loss(rows) == _close(_loss(reference[step])), f"step {step}"
        if accumulate:  # each micro-step is one world-4 rank's: its batch, in order, its loss
            assert sorted(rows) == [_close_row(row) for row in sorted(reference[step])], step
    assert_same_weights(rigid_dir / "weights.pt", elastic_dir / "weights.pt")
    return elastic


def read_steps(directory: Path) -> Steps:
    """Every rank's "step epoch indices… loss" lines (``log-RANK``), by step."""
    steps: Steps = defaultdict(list)
    for log in sorted(directory.glob("log-*")):
        for line in log.read_text().splitlines():
            step, epoch, *indices, loss = line.split()
            steps[int(step)].append((int(epoch), [int(i) for i in indices], float.fromhex(loss)))
    return dict(steps)


def _samples(rows: list[tuple[int, list[int], float]]) -> list[int]:
    return sorted(i for _, indices, _ in rows for i in indices)


def _loss(rows: list[tuple[int, list[int], float]]) -> float:
    """The step's loss over the global batch: ranks hold equal shares of it."""
    return sum(loss for _, _, loss in rows) / len(rows)


def _close(value: float) -> object:
    import pytest

    return pytest.approx(value, rel=RTOL, abs=ATOL)


def _close_row(row: tuple[int, list[int], float]) -> object:
    epoch, indices, loss = row
    return (epoch, indices, _close(loss))


def assert_same_weights(reference: Path, resized: Path) -> None:
    import torch

    want, got = torch.load(reference), torch.load(resized)
    assert want.keys() == got.keys()
    for name in want:
        assert torch.allclose(got[name], want[name], rtol=RTOL, atol=ATOL), name


def every_sample_once_per_epoch(steps: Steps, samples: int) -> None:
    """Each epoch trains every sample, and repeats only what DistributedSampler pads the epoch
    with at world 4 (it pads to a multiple of the world: the first samples of its order)."""
    by_epoch: dict[int, list[int]] = defaultdict(list)
    for rows in steps.values():
        for epoch, indices, _ in rows:
            by_epoch[epoch].extend(indices)
    padded = -samples % TOP
    for epoch, seen in by_epoch.items():
        assert set(seen) == set(range(samples)), f"epoch {epoch} missed samples"
        assert len(seen) == samples + padded, f"epoch {epoch}: {len(seen)} samples trained"
