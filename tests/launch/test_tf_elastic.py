"""Elastic TensorFlow jobs resized 4 → 2 → 4 (``TIRESIAS_MAX_WORKERS=4``), against an
uninterrupted rigid run at 4 workers (docs/launcher.md, "Elastic jobs").

Each gang is planned by ``coordinator.gang`` (a ``--workers 2:4`` request: its processes get
``TIRESIAS_MAX_WORKERS=4``) and spawned as real processes. The elastic job is preempted at
step 3 of its first run (4 workers), resumed at 2 workers and preempted at step 6, then
resumed at 4 workers to its end (``TIRESIAS_HOLD_AT_STEP=3,6``); a second job starts at 2
workers (2 → 4 → 2), whose batch at 4 its chief learns by running the script as at 4 workers
up to ``fit`` (``tiresias_launch.keras_probe``).

Keras MultiWorkerMirrored ``fit`` keeps the largest world's training: the same samples in the
same global order at every step, each once per epoch, and the losses and final weights of the
rigid run to float32 rounding. The tolerance (rtol 1e-5, atol 1e-6) is about 100 float32 ulps:
at 2 workers each step's gradient is the mean of 2 partial means instead of 4, so its last
bits differ, and 8 Adam steps of a tiny model carry that on without growing it much; a wrong
batch or a sample lost or repeated moves the loss by far more (≥ 1e-3 here).

Horovod's are in ``test_horovod_elastic.py``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import wait_until

from coordinator.gang import GangRequest
from tiresias_launch import EXIT_CHECKPOINTED

from .gangs import SCRIPTS, Gang, start

pytestmark = pytest.mark.tf
TIMEOUT = 300
LEGACY = {"TF_USE_LEGACY_KERAS": "1"}
HOLDS = {"TIRESIAS_HOLD_AT_STEP": "3,6"}
TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}


def _ids(path: Path) -> list[list[int]]:
    """The ids each step trained on, from a worker's ``tf.print`` lines ``[3 41 …]``."""
    return [[int(i) for i in line.strip("[]\n").split()] for line in path.open()]


def _global_steps(results: Path, workers: int) -> list[list[int]]:
    """Each step's global batch: the workers' slices in rank order."""
    ranks = [_ids(Path(f"{results}.ids-{r}")) for r in range(workers)]
    return [[i for part in step for i in part] for step in zip(*ranks, strict=True)]


def _leg(request: GangRequest, workdir: Path, world: int, restart: int, hold: int | None) -> Gang:
    """One run of the elastic job at ``world`` workers, planned as the coordinator plans it
    (``TIRESIAS_MAX_WORKERS``); preempted while it holds at ``hold`` (None: to its end)."""
    placement = {"localhost": list(range(world))}
    gang = start(request, workdir, restart=restart, env={**LEGACY, **HOLDS}, placement=placement)
    if hold is None:
        assert gang.wait(TIMEOUT) == [0] * len(gang.procs), gang.tails()
        return gang
    holding = f"tiresias: holding at step {hold} until preempted"
    wait_until(lambda: holding in gang.logs[0].read_text(), TIMEOUT, f"the hold at {hold}")
    gang.signal()
    assert gang.wait(TIMEOUT) == [EXIT_CHECKPOINTED] * len(gang.procs), gang.tails()
    return gang


@pytest.fixture(scope="module")
def rigid(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An uninterrupted rigid run at 4 workers: its results' prefix."""
    rigid_dir = tmp_path_factory.mktemp("rigid")
    request = GangRequest((str(SCRIPTS / "mwms_elastic_fit.py"), str(rigid_dir / "out")), workers=4)
    gang = start(request, rigid_dir, env=LEGACY)
    assert gang.wait(TIMEOUT) == [0] * 4, gang.tails()
    return rigid_dir / "out"


def _resized(rigid: Path, workdir: Path, legs: list[tuple[int, int | None]]) -> list[str]:
    """Run the elastic job's ``legs`` (world, held step) and check it trained as the rigid
    run; each leg's chief log."""
    expected = _global_steps(rigid, 4)
    steps, losses, chiefs = [], [], []
    for leg, (workers, hold) in enumerate(legs):
        results = workdir / f"leg{leg}"
        argv = (str(SCRIPTS / "mwms_elastic_fit.py"), str(results))
        gang = _leg(GangRequest(argv, workers=4, min_workers=2), workdir, workers, leg, hold)
        steps += _global_steps(results, workers)
        losses += [float.fromhex(v) for v in Path(f"{results}.loss-0").read_text().split()]
        chiefs.append(gang.logs[0].read_text())
    assert steps == expected  # the same samples in the same order at every step
    for epoch in (expected[:4], expected[4:]):
        assert sorted(i for step in epoch for i in step) == list(range(64))  # once each
    rigid_losses = [float.fromhex(v) for v in Path(f"{rigid}.loss-0").read_text().split()]
    np.testing.assert_allclose(losses, rigid_losses, **TOLERANCE)
    weights = np.load(workdir / f"leg{len(legs) - 1}.weights.npy")
    np.testing.assert_allclose(weights, np.load(f"{rigid}.weights.npy"), **TOLERANCE)
    return chiefs


def test_multi_worker_mirrored_fit_resized_4_2_4_trains_as_the_rigid_run(
    rigid: Path, tmp_path: Path
) -> None:
    chiefs = _resized(rigid, tmp_path, [(4, 3), (2, 6), (4, None)])
    assert "resumed on 4 of 4 workers (the checkpoint's run had 2)" in chiefs[2]


def test_a_job_started_below_its_largest_world_learns_its_batch_there_2_4_2(
    rigid: Path, tmp_path: Path
) -> None:
    """Its first run, at 2 of 4 workers, has no record of the batch at 4: the chief runs the
    script as at 4 workers up to ``fit`` to learn it (16, not the 8 the script has at 2),
    and the job trains as the rigid 4-worker run from its first step."""
    chiefs = _resized(rigid, tmp_path, [(2, 3), (4, 6), (2, None)])
    learned = "up to fit: global batch 16, 4 steps per epoch, which this run at 2 workers"
    assert f"{learned} trains with, and its learning rate there, 0.01 (its 0.005 here)" in chiefs[0]
    assert "runs rigid" not in "".join(chiefs)
    assert "resumed on 2 of 4 workers (the checkpoint's run had 4)" in chiefs[2]
