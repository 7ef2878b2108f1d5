"""PyTorch jobs as real processes planned by gang.plan (what agents spawn): a torchrun-style
DDP script with ``tiresias.State`` preempted by SIGTERM at a held step and resumed, against
an uninterrupted run; and a plain torchrun script with no Tiresias code."""

from __future__ import annotations

import random
import signal
from pathlib import Path

import pytest
from helpers import needs, wait_until
from launch.gangs import Gang, start

from coordinator.gang import GangRequest
from pytorch.runs import SCRIPTS, TIMEOUT, assert_same_run, losses, preempt_and_resume
from tiresias_launch import EXIT_CHECKPOINTED
from tiresias_launch.checkpoint import PAUSE_HOOK, CheckpointStore

pytestmark = [pytest.mark.torch, needs("torch", "needs PyTorch (the [torch] extra)")]

STEPS = 40
RANKS = 2


def test_ddp_state_resumes_bit_identically_after_sigterm(tmp_path: Path) -> None:
    argv = (str(SCRIPTS / "ddp_train.py"), str(STEPS), "log-{rank}", "weights.pt")
    hold = random.Random("ddp_train").randrange(1, STEPS)
    plain_dir, preempted_dir = preempt_and_resume(tmp_path, GangRequest(argv, workers=RANKS), hold)
    assert_same_run(plain_dir, preempted_dir, RANKS)


def test_epoch_loop_with_distributed_sampler_sees_every_sample_once(tmp_path: Path) -> None:
    """DistributedSampler + DataLoader workers + dropout + a per-epoch LR schedule, preempted
    mid-epoch: the resumed epoch yields exactly its unseen batches, and every loss and the
    final weights equal an uninterrupted run's."""
    epochs, per_epoch = 3, 6  # 96 samples, 2 ranks, batches of 8
    argv = (str(SCRIPTS / "ddp_sampler.py"), str(epochs), "log-{rank}", "weights.pt")
    request = GangRequest(argv, workers=RANKS)
    hold = random.Random("ddp_sampler").randrange(1, epochs * per_epoch)
    plain_dir, preempted_dir = preempt_and_resume(tmp_path, request, hold)
    for rank in range(RANKS):
        rows = [line.split() for line in losses(preempted_dir, rank)]
        for epoch in range(epochs):
            seen = [int(i) for row in rows if row[0] == str(epoch) for i in row[1:-1]]
            assert len(seen) == len(set(seen)) == 48, f"rank {rank} epoch {epoch}: {seen}"
    assert_same_run(plain_dir, preempted_dir, RANKS)


def test_shuffled_loader_resumes_its_own_permutation(tmp_path: Path) -> None:
    """A shuffled DataLoader draws each epoch's order from the global RNG when its pass
    starts: the resumed pass starts from the interrupted pass's RNG states, so it skips
    exactly the batches already trained, and dropout then continues where it was."""
    epochs, per_epoch = 3, 8
    argv = (str(SCRIPTS / "shuffled_epochs.py"), str(epochs), "log-{rank}", "weights.pt")
    hold = random.Random("shuffled_epochs").randrange(1, epochs * per_epoch)
    plain_dir, preempted_dir = preempt_and_resume(tmp_path, GangRequest(argv), hold)
    rows = [line.split() for line in losses(preempted_dir, 0)]
    for epoch in range(epochs):
        seen = [int(i) for row in rows if row[0] == str(epoch) for i in row[1:-1]]
        assert sorted(seen) == list(range(40)), f"epoch {epoch}: {seen}"
    assert_same_run(plain_dir, preempted_dir, ranks=1)


def test_a_checkpoint_killed_mid_write_leaves_the_previous_one(tmp_path: Path) -> None:
    """Run A checkpoints at step a; run B is SIGKILLed while writing its checkpoint at step
    b > a (after the data files, before the manifest); run C restores a and the job ends
    exactly as an uninterrupted one."""
    argv = (str(SCRIPTS / "ddp_train.py"), str(STEPS), "log-{rank}", "weights.pt")
    request = GangRequest(argv, workers=1)
    plain_dir, job_dir = tmp_path / "plain", tmp_path / "job"
    plain_dir.mkdir()
    job_dir.mkdir()
    plain = start(request, plain_dir)
    assert plain.wait(TIMEOUT) == [0], plain.tails()
    a, b = 7, 19

    def held_run(restart: int, hold: int, env: dict[str, str]) -> Gang:
        gang = start(
            request, job_dir, restart=restart, env={"TIRESIAS_HOLD_AT_STEP": str(hold), **env}
        )
        holding = f"tiresias: holding at step {hold} until preempted"
        wait_until(lambda: holding in gang.logs[0].read_text(), TIMEOUT, f"the hold at {hold}")
        gang.signal(signal.SIGTERM)
        return gang

    first = held_run(0, a, {})
    assert first.wait(TIMEOUT) == [EXIT_CHECKPOINTED], first.tails()
    hook = tmp_path / "writing"
    # counted as a first run: a run after a preemption never holds (TIRESIAS_HOLD_AT_STEP)
    second = held_run(0, b, {PAUSE_HOOK: str(hook)})
    wait_until(hook.exists, TIMEOUT, "run B to be inside its checkpoint write")
    second.signal(signal.SIGKILL)
    second.wait(TIMEOUT)
    [ckpt] = CheckpointStore(job_dir / "ckpt" / "job", "job").complete()
    assert ckpt.manifest.step == a  # B's half-written one is not complete

    third = start(request, job_dir, restart=2)
    assert third.wait(TIMEOUT) == [0], third.tails()
    steps = [int(line.split()[0]) for line in losses(job_dir, 0)]
    assert steps == [*range(b), *range(a, STEPS)]  # B's steps a…b-1 are done again from a
    assert losses(job_dir, 0)[b:] == losses(plain_dir, 0)[a:]
    import torch

    resumed, reference = torch.load(job_dir / "weights.pt"), torch.load(plain_dir / "weights.pt")
    assert all(torch.equal(resumed[k], reference[k]) for k in reference)


def test_plain_torchrun_script_runs_unchanged(tmp_path: Path) -> None:
    gang = start(GangRequest((str(SCRIPTS / "torchrun_plain.py"),), workers=3), tmp_path)
    assert gang.wait(TIMEOUT) == [0] * 3, gang.tails()
    lines = sorted(log.read_text().strip().splitlines()[-1] for log in gang.logs)
    assert lines == [f"rank {r}/3 local {r}: sum 6" for r in range(3)]
    said = [
        log.read_text().count("this job cannot be checkpointed: torchrun_plain.py")
        for log in gang.logs
    ]
    assert said == [1, 0, 0]  # nothing to checkpoint: the chief says so once


def test_fsdp_state_resumes_from_its_shards_bit_identically(tmp_path: Path) -> None:
    """FSDP2 on 2 gloo ranks: the checkpoint holds one torch.distributed.checkpoint shard
    file per rank (and each rank's RNG file), and the resumed run equals an uninterrupted one."""
    argv = (str(SCRIPTS / "fsdp_train.py"), str(STEPS), "log-{rank}", "weights.pt")
    hold = random.Random("fsdp_train").randrange(1, STEPS)
    plain_dir, preempted_dir = preempt_and_resume(tmp_path, GangRequest(argv, workers=RANKS), hold)
    [ckpt] = CheckpointStore(preempted_dir / "ckpt" / "job", "job").complete()
    files = set(ckpt.manifest.files)
    assert {"__0_0.distcp", "__1_0.distcp", ".metadata"} <= files, files
    assert {"state-rank0.pt", "state-rank1.pt"} <= files
    assert_same_run(plain_dir, preempted_dir, RANKS)


@pytest.mark.horovod
def test_horovod_torch_state_resumes_bit_identically(tmp_path: Path) -> None:
    """Horovod's PyTorch binding on 2 Gloo ranks (``--horovod``): the ranks agree on the stop
    step through ``hvd.allreduce``; the resumed run equals an uninterrupted one."""
    hvd = pytest.importorskip("horovod.torch", reason="needs Horovod")
    if not hasattr(hvd, "init"):  # the module imports, with a warning, when built without it
        pytest.skip("needs Horovod built with PyTorch (HOROVOD_WITH_PYTORCH=1)")
    argv = (str(SCRIPTS / "horovod_torch.py"), str(STEPS), "log-{rank}", "weights.pt")
    hold = random.Random("horovod_torch").randrange(1, STEPS)
    request = GangRequest(argv, workers=RANKS, horovod=True)
    plain_dir, preempted_dir = preempt_and_resume(tmp_path, request, hold)
    assert_same_run(plain_dir, preempted_dir, RANKS)
