"""An unmodified Lightning ``Trainer.fit`` script (shuffled DataLoader, dropout, momentum, a
per-epoch LR schedule, validation, ModelCheckpoint) preempted by SIGTERM at a seeded held
step mid-epoch and resumed: every batch once, in the same order, with the same loss, and
final weights bit-identical to an uninterrupted run; on 1 process and as a 2-process DDP gang
(gloo), where Lightning replaces the sampler with a DistributedSampler. Each validation's loss
and ModelCheckpoint's best score are equal too."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from helpers import needs
from launch.gangs import start

from coordinator.gang import GangRequest
from pytorch.runs import SCRIPTS, TIMEOUT, assert_same_run, losses, preempt_and_resume

pytestmark = [
    pytest.mark.torch,
    needs("lightning", "needs PyTorch Lightning (the [torch] extra)"),
]

EPOCHS = 3
TRAIN_SAMPLES = 96  # the script's split: 96 to train, 24 to validate, batches of 8


@pytest.mark.parametrize("ranks", [1, 2])
def test_lightning_fit_resumes_mid_epoch_exactly(tmp_path: Path, ranks: int) -> None:
    per_rank = TRAIN_SAMPLES // ranks
    batches = per_rank // 8
    argv = (str(SCRIPTS / "lightning_fit.py"), str(EPOCHS), str(ranks), "log-{rank}", "weights.pt")
    hold = random.Random(f"lightning_fit {ranks}").randrange(1, EPOCHS * batches)
    while hold % batches == 0:  # mid-epoch; epoch ends are test_…_at_an_epoch_end's
        hold += 1
    plain_dir, preempted_dir = preempt_and_resume(tmp_path, GangRequest(argv, workers=ranks), hold)
    for rank in range(ranks):
        rows = [line.split() for line in losses(preempted_dir, rank)]
        for epoch in range(EPOCHS):
            ours = [row for row in rows if row[0] == str(epoch)]  # not the "val" rows
            assert [int(row[1]) for row in ours] == list(range(batches))
            seen = [int(i) for row in ours for i in row[2:-1]]
            assert len(seen) == len(set(seen)) == per_rank, f"rank {rank} epoch {epoch}: {seen}"
    assert_same_run(plain_dir, preempted_dir, ranks)
    assert_same_logs(plain_dir, preempted_dir)


def assert_same_logs(plain_dir: Path, preempted_dir: Path) -> None:
    """One log directory (so ModelCheckpoint's state carried over), and the CSVLogger's
    metrics, logged every 2 steps with the learning rate, equal to the last digit."""
    logs = preempted_dir / "logs" / "lightning_logs"
    assert sorted(p.name for p in logs.iterdir()) == ["version_0"]
    metrics = Path("logs", "lightning_logs", "version_0", "metrics.csv")
    assert (preempted_dir / metrics).read_bytes() == (plain_dir / metrics).read_bytes()


def test_lightning_fit_with_accumulation_and_mid_epoch_validation(tmp_path: Path) -> None:
    """Gradients accumulated over 2 batches and a validation every 4: held after a
    validation, mid-epoch; the stop waits for an optimizer step (accumulated gradients are
    in no checkpoint), and the resumed run skips no validation and repeats none."""
    trainer = ("accumulate_grad_batches=2", "val_check_interval=4")
    argv = (str(SCRIPTS / "lightning_fit.py"), str(EPOCHS), "1", "log-{rank}", "weights.pt")
    hold = 12 * random.Random("lightning accumulate").randrange(EPOCHS) + 8
    request = GangRequest((*argv, *trainer))
    plain_dir, preempted_dir = preempt_and_resume(tmp_path, request, hold)
    assert_same_run(plain_dir, preempted_dir, 1)
    assert_same_logs(plain_dir, preempted_dir)
    assert sum(line.startswith("val") for line in losses(preempted_dir, 0)) == 3 * EPOCHS
    # between the two batches of an accumulation there is no stop check, so no hold either
    (tmp_path / "odd").mkdir()
    odd = start(request, tmp_path / "odd", env={"TIRESIAS_HOLD_AT_STEP": str(hold + 1)})
    assert odd.wait(TIMEOUT) == [0], odd.tails()
    assert "holding at step" not in odd.logs[0].read_text()


def test_lightning_fit_resumes_at_an_epoch_end(tmp_path: Path) -> None:
    """Held after an epoch's last batch: the stop comes before the next epoch's first batch,
    once that epoch's validation, ModelCheckpoint and LR step are done; every validation runs
    once."""
    argv = (str(SCRIPTS / "lightning_fit.py"), str(EPOCHS), "1", "log-{rank}", "weights.pt")
    plain_dir, preempted_dir = preempt_and_resume(tmp_path, GangRequest(argv), 12)
    assert_same_run(plain_dir, preempted_dir, 1)
    assert_same_logs(plain_dir, preempted_dir)
    assert sum(line.startswith("val") for line in losses(preempted_dir, 0)) == EPOCHS
