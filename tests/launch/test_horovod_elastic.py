"""Elastic Horovod (TensorFlow) Keras ``fit`` resized 4 → 2 → 4 (``TIRESIAS_MAX_WORKERS=4``),
against an uninterrupted rigid run at 4 ranks (docs/launcher.md, "Elastic jobs").

Each gang is planned by ``coordinator.gang`` from a ``--horovod --workers 2:4`` request and
spawned as real Horovod processes over Gloo, rank 0 hosting the rendezvous as under a node
agent. The elastic job is preempted at step 3 of its first run (4 ranks), resumed at 2 ranks
and preempted at step 6, then resumed at 4 ranks to its end (``TIRESIAS_HOLD_AT_STEP=3,6``).

At 2 ranks each rank stands for two of the 4: ``hvd.size()`` says 4, the script's
``shard(hvd.size(), hvd.rank())`` takes both ranks' shards and each step trains both ranks'
batches, so every step trains the rigid run's samples (each once per epoch), and the ranks'
mean loss and the final weights are the rigid run's to float32 rounding. The tolerance
(rtol 1e-5, atol 1e-6, about 100 float32 ulps) is that of the other elastic tests: at 2 ranks
a step's gradient is the mean of 2 partial means of 8 samples instead of 4 of 4; a sample
lost, repeated or trained at the wrong step moves the loss by far more (≥ 1e-3 here).

Scripts whose data the runtime cannot deal to fewer ranks run rigid, say why once, and
report ``resizable: false``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import msgpack
import numpy as np
import pytest
import zmq
from helpers import wait_until

from coordinator.gang import GangRequest
from tiresias_launch import EXIT_CHECKPOINTED

from .gangs import SCRIPTS, Gang, start

pytestmark = [
    pytest.mark.tf,
    pytest.mark.horovod,
    pytest.mark.skipif(importlib.util.find_spec("horovod") is None, reason="needs Horovod"),
]
TIMEOUT = 300
LEGACY = {"TF_USE_LEGACY_KERAS": "1"}
HOLDS = {"TIRESIAS_HOLD_AT_STEP": "3,6"}
TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}
SCRIPT = str(SCRIPTS / "horovod_elastic_fit.py")
CORPUS = Path(__file__).parents[1] / "corpus" / "scripts"


def _lines(path: str) -> list[str]:
    return Path(path).read_text().splitlines()


def _global_steps(results: Path, ranks: int) -> list[list[int]]:
    """Each step's samples over all ranks (sorted: at 2 ranks they come in another order)."""
    per_rank = [
        [[int(i) for i in line.strip("[]").split()] for line in _lines(f"{results}.ids-{r}")]
        for r in range(ranks)
    ]
    return [sorted(i for part in step for i in part) for step in zip(*per_rank, strict=True)]


def _leg(argv: tuple[str, ...], workdir: Path, world: int, restart: int, hold: int | None) -> Gang:
    """One run of the elastic job at ``world`` ranks; preempted at step ``hold`` (None: to
    its end)."""
    request = GangRequest(argv, workers=4, horovod=True, min_workers=2)
    placement = {"localhost": list(range(world))}
    gang = start(request, workdir, restart=restart, env={**LEGACY, **HOLDS}, placement=placement)
    if hold is None:
        assert gang.wait(TIMEOUT) == [0] * world, gang.tails()
        return gang
    holding = f"tiresias: holding at step {hold} until preempted"
    wait_until(lambda: holding in gang.logs[0].read_text(), TIMEOUT, f"the hold at {hold}")
    gang.signal()
    assert gang.wait(TIMEOUT) == [EXIT_CHECKPOINTED] * world, gang.tails()
    return gang


def test_horovod_fit_resized_4_2_4_trains_as_the_rigid_run(tmp_path: Path) -> None:
    rigid_dir, elastic_dir = tmp_path / "rigid", tmp_path / "elastic"
    rigid_dir.mkdir()
    elastic_dir.mkdir()
    rigid = GangRequest((SCRIPT, str(rigid_dir / "out")), workers=4, horovod=True)
    gang = start(rigid, rigid_dir, env=LEGACY)
    assert gang.wait(TIMEOUT) == [0] * 4, gang.tails()
    expected = _global_steps(rigid_dir / "out", 4)

    steps, losses = [], []
    for leg, (world, hold) in enumerate([(4, 3), (2, 6), (4, None)]):
        results = elastic_dir / f"leg{leg}"
        gang = _leg((SCRIPT, str(results)), elastic_dir, world, leg, hold)
        steps += _global_steps(results, world)
        losses += [float.fromhex(v) for v in Path(f"{results}.loss").read_text().split()]
        chief = gang.logs[0].read_text()
        assert "runs rigid" not in chief, chief
        if leg == 1:
            assert "resumed on 2 of 4 workers (the checkpoint's run had 4): each rank " in chief
    assert "resumed on 4 of 4 workers (the checkpoint's run had 2)" in chief

    assert len(expected) == 8 and steps == expected  # the same samples at every step
    for epoch in (expected[:4], expected[4:]):
        assert sorted(i for step in epoch for i in step) == list(range(64))  # once each
    rigid_losses = [float.fromhex(v) for v in (rigid_dir / "out.loss").read_text().split()]
    np.testing.assert_allclose(losses, rigid_losses, **TOLERANCE)
    weights = np.load(elastic_dir / "leg2.weights.npy")
    np.testing.assert_allclose(weights, np.load(rigid_dir / "out.weights.npy"), **TOLERANCE)


def _rigid_notice(argv: tuple[str, ...], workdir: Path, world: int) -> str:
    """Run an elastic 2:4 Horovod job at ``world`` to its end; the one rigid line its chief
    said, checked against its reports (``resizable: false`` once, the notice once)."""
    router = zmq.Context.instance().socket(zmq.ROUTER)
    coordinator = f"tcp://127.0.0.1:{router.bind_to_random_port('tcp://127.0.0.1')}"
    try:
        request = GangRequest(argv, workers=4, horovod=True, min_workers=2)
        placement = {"localhost": list(range(world))}
        gang = start(request, workdir, coordinator=coordinator, placement=placement, env=LEGACY)
        assert gang.wait(TIMEOUT) == [0] * world, gang.tails()
        reports = []
        while router.poll(200):
            reports.append(msgpack.unpackb(router.recv_multipart()[1]))
    finally:
        router.close(linger=0)
    said = [line for line in gang.logs[0].read_text().splitlines() if "runs rigid" in line]
    assert len(said) == 1, said
    chief = [m for m in reports if m["role"] == "chief"]
    assert [m["resizable"] for m in chief if m.get("resizable") is not None] == [False]
    assert [m["notice"] for m in chief if m.get("notice")] == [said[0].removeprefix("tiresias: ")]
    return said[0]


def test_a_first_run_below_its_largest_world_runs_rigid_and_says_so_once(tmp_path: Path) -> None:
    said = _rigid_notice((str(SCRIPTS / "custom_loop.py"), "3", "log-{rank}"), tmp_path, 2)
    assert "its first run is at 2 of 4 workers: hvd.size() must say 4" in said


@pytest.mark.parametrize(
    ("script", "why"),
    [
        ((SCRIPT, "{out}", "--shuffle-shard"), "has a shuffle between its shard(hvd.size()"),
        ((str(CORPUS / "horovod_fit.py"), "{out}"), "is not a tf.data pipeline sharded with"),
    ],
    ids=["shuffled_after_the_shard", "horovod_example"],
)
def test_a_fit_whose_data_cannot_be_dealt_runs_rigid(
    script: tuple[str, ...], why: str, tmp_path: Path
) -> None:
    argv = tuple(a.replace("{out}", str(tmp_path / "out")) for a in script)
    said = _rigid_notice(argv, tmp_path, 4)
    assert "this job runs rigid, at 4 workers: its " in said and why in said, said
