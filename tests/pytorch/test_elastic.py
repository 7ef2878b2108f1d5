"""Elastic PyTorch jobs resumed at another world size train as an uninterrupted rigid run:
4 → 2 → 4 workers, as real gloo gangs planned by gang.plan (tests/pytorch/resize.py), for a
DDP State loop, FSDP2 and Lightning DDP; the re-dealt loader on its own; and the rigid
fallback of a script whose batch cannot be kept."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import needs
from launch.gangs import start

from coordinator.gang import GangRequest
from pytorch.resize import every_sample_once_per_epoch, resize_and_compare
from pytorch.runs import SCRIPTS, TIMEOUT
from tiresias_launch.env import parse

pytestmark = [pytest.mark.torch, needs("torch", "needs PyTorch (the [torch] extra)")]

EPOCHS, SAMPLES = 3, 58  # world 4, batches of 4: 15 samples per rank, 4 steps per epoch
HOLDS = (5, 10)  # mid-epoch: epoch 1 batch 1, epoch 2 batch 2


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_state_loop_resized_4_2_4_trains_as_the_rigid_run(tmp_path: Path, strategy: str) -> None:
    argv = (str(SCRIPTS / "elastic_train.py"), strategy, str(EPOCHS), "log-{rank}", "weights.pt")
    steps = resize_and_compare(tmp_path, argv, HOLDS)
    every_sample_once_per_epoch(steps, SAMPLES)


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_state_loop_accumulating_4_2_4_trains_as_the_rigid_run(
    tmp_path: Path, strategy: str
) -> None:
    """TIRESIAS_ELASTIC_BATCH=accumulate: the same unmodified script at world 2 runs two
    micro-steps of its own per-rank batch per step (DDP without sync, FSDP2 without
    reduce-scatter, until the last), each exactly a world-4 rank's batch and loss."""
    argv = (str(SCRIPTS / "elastic_train.py"), strategy, str(EPOCHS), "log-{rank}", "weights.pt")
    steps = resize_and_compare(tmp_path, argv, HOLDS, accumulate=True)
    every_sample_once_per_epoch(steps, SAMPLES)


def test_a_loader_of_single_samples_accumulates_by_itself_4_2_4(tmp_path: Path) -> None:
    """batch_size=None: the per-rank batch is one sample and cannot grow, so at world 2 the
    job accumulates 2 single-sample micro-steps per step without being asked; 2 epochs of
    15 steps, resized mid-epoch and across the epoch's end (holds 5 and 20)."""
    argv = (str(SCRIPTS / "elastic_train.py"), "ddp", "2", "log-{rank}", "weights.pt", "none")
    steps = resize_and_compare(tmp_path, argv, (5, 20), accumulate=True, asked=False)
    every_sample_once_per_epoch(steps, SAMPLES)


@needs("lightning", "needs PyTorch Lightning (the [torch] extra)")
def test_lightning_ddp_fit_resized_4_2_4_trains_as_the_rigid_run(tmp_path: Path) -> None:
    """Lightning replaces the loader's sampler with a DistributedSampler of its own; the
    runtime re-deals it and scales the per-rank batch in the loader Lightning builds."""
    argv = (str(SCRIPTS / "elastic_fit.py"), str(EPOCHS), "log-{rank}", "weights.pt")
    steps = resize_and_compare(tmp_path, argv, HOLDS)
    every_sample_once_per_epoch(steps, SAMPLES)


def _global_batches(samples: int, drop_last: bool, batch: int, world: int) -> list[list[int]]:
    """Each step's samples over all ranks of ``world``, its loaders re-dealt for a largest
    world of 4 (in-process: a DistributedSampler needs no process group given its rank)."""
    import torch
    from torch.utils.data import DataLoader, DistributedSampler

    from tiresias_launch import torch_resize

    data = torch.utils.data.TensorDataset(torch.arange(samples))
    env = parse({"TIRESIAS_NUM_WORKERS": str(world), "TIRESIAS_MAX_WORKERS": "4"})
    steps: list[list[int]] = []
    for rank in range(world):
        sampler = DistributedSampler(data, world, rank, shuffle=True, seed=5, drop_last=drop_last)
        sampler.set_epoch(2)
        loader = DataLoader(data, batch_size=batch, sampler=sampler, drop_last=drop_last)
        assert torch_resize.why_not(loader, env) is None
        torch_resize.rescale(loader, 4 // world, 4)
        torch_resize.rescale(loader, 4 // world, 4)  # idempotent
        for step, (indices,) in enumerate(loader):
            steps[step:] = steps[step:] or [[]]
            steps[step].extend(indices.tolist())
    return [sorted(s) for s in steps]


@pytest.mark.parametrize("samples", [58, 64, 22])
@pytest.mark.parametrize("drop_last", [False, True])
def test_a_re_dealt_loader_trains_the_largest_worlds_global_batches(
    samples: int, drop_last: bool
) -> None:
    """Uneven epochs (padded, or their tail dropped), last partial batches (or dropped ones),
    and an epoch of two steps: at worlds 2 and 1 each step trains exactly the samples world 4
    trains at that step."""
    reference = _global_batches(samples, drop_last, 4, world=4)
    assert reference
    for world in (2, 1):
        assert _global_batches(samples, drop_last, 4, world) == reference, world


def _max_world_ranks_batches(
    samples: int, batch: int | None, world: int, accumulate: bool
) -> list[list[list[int]]]:
    """Per step, the batch each rank of world 4 trains in it, as a world of ``world`` trains
    them: with ``accumulate``, rank q's micro-step j of each step stands for rank q + j·world
    (``batch=None``: a loader of single samples, one sample per micro-step)."""
    import torch
    from torch.utils.data import DataLoader, DistributedSampler

    from tiresias_launch import torch_resize

    data = torch.utils.data.TensorDataset(torch.arange(samples))
    env = parse({"TIRESIAS_NUM_WORKERS": str(world), "TIRESIAS_MAX_WORKERS": "4"})
    factor = 4 // world
    steps: list[list[list[int]]] = []
    for rank in range(world):
        sampler = DistributedSampler(data, world, rank, shuffle=True, seed=5)
        sampler.set_epoch(1)
        loader = DataLoader(data, batch_size=batch, sampler=sampler)
        assert torch_resize.why_not(loader, env) is None
        torch_resize.rescale(loader, factor, 4, accumulate)
        torch_resize.rescale(loader, factor, 4, accumulate)  # idempotent
        if batch is not None:
            assert len(loader) == -(-len(sampler) // (batch * factor))  # steps, not micro-steps
        for micro, (indices,) in enumerate(loader):
            step, stands_for = divmod(micro, factor)
            steps[step:] = steps[step:] or [[[] for _ in range(4)]]
            steps[step][rank + stands_for * world] = indices.reshape(-1).tolist()
    return steps


@pytest.mark.parametrize("batch", [4, None])
def test_accumulating_ranks_train_the_largest_worlds_rank_batches(batch: int | None) -> None:
    """58 samples (a padded epoch, short last batches): at world 2 (and 1) each micro-step
    trains exactly the batch one world-4 rank trains at that step, in its order."""
    reference = _max_world_ranks_batches(58, batch, 4, accumulate=False)
    assert len(reference) == (4 if batch else 15)
    for world in (2, 1):
        assert _max_world_ranks_batches(58, batch, world, accumulate=True) == reference, world


def test_loaders_whose_batch_cannot_be_kept_say_why() -> None:
    import torch
    from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, RandomSampler

    from tiresias_launch import torch_resize

    data = torch.utils.data.TensorDataset(torch.arange(16))
    env = parse({"TIRESIAS_NUM_WORKERS": "2", "TIRESIAS_MAX_WORKERS": "4"})
    dealt = DistributedSampler(data, 2, 0)

    class Buckets(BatchSampler):
        pass

    assert torch_resize.why_not(DataLoader(data, batch_size=None, sampler=dealt), env) is None
    assert torch_resize.micro_steps_only(DataLoader(data, batch_size=None, sampler=dealt))
    cases = {
        "batches with a Buckets": DataLoader(data, batch_sampler=Buckets(dealt, 4, False)),
        "samples with a RandomSampler": DataLoader(data, batch_size=4, sampler=RandomSampler(data)),
        "has num_replicas=4, not this world's 2": DataLoader(
            data, batch_size=4, sampler=DistributedSampler(data, 4, 0)
        ),
    }
    for said, loader in cases.items():
        why = torch_resize.why_not(loader, env)
        assert why is not None and said in why, why


def test_a_script_whose_batch_cannot_be_kept_runs_rigid_and_says_so_once(tmp_path: Path) -> None:
    """A State loop that makes its own batches (no DataLoader given) at world 2 of 4: it
    trains at its own per-rank batch, and the chief says once why it runs rigid."""
    argv = (str(SCRIPTS / "ddp_train.py"), "3", "log-{rank}", "weights.pt")
    request = GangRequest(argv, workers=4, min_workers=2)
    gang = start(request, tmp_path, placement={"localhost": [0, 1]})
    assert gang.wait(TIMEOUT) == [0, 0], gang.tails()
    why = "this job runs rigid, at 2 workers: tiresias.State was given no DataLoader"
    assert [log.read_text().count(why) for log in gang.logs] == [1, 0]


@pytest.mark.parametrize("zero_grad_first", [True, False])
def test_accumulation_steps_the_optimizer_and_scheduler_once_per_step(
    zero_grad_first: bool,
) -> None:
    """In process, a plain module: 2 micro-steps of 3 samples, written either way round
    (zero_grad before backward, or after step), train as one step of 6 does, and a per-step
    scheduler steps once per step; the scheduler's state_dict stays saveable."""
    import io

    import torch

    from tiresias_launch.torch_accumulate import Accumulation

    def make() -> tuple[torch.nn.Module, torch.optim.Optimizer, object]:
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        return model, optimizer, torch.optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.5)

    def train(model, optimizer, scheduler, x, y) -> None:  # the script's own step
        if zero_grad_first:
            optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        scheduler.step()
        if not zero_grad_first:
            model.zero_grad()

    x = torch.randn(18, 4, generator=torch.Generator().manual_seed(1))
    y = x.sum(dim=1, keepdim=True)
    whole = make()
    for step in range(3):
        train(*whole, x[6 * step : 6 * step + 6], y[6 * step : 6 * step + 6])
    micro = make()
    accumulation = Accumulation(
        2, 2, dict(zip(("model", "optimizer", "scheduler"), micro, strict=True))
    )
    for step in range(3):
        for j in range(2):
            accumulation.begin(j)
            rows = slice(6 * step + j * 3, 6 * step + j * 3 + 3)
            train(*micro, x[rows], y[rows])
    for want, got in zip(whole[0].parameters(), micro[0].parameters(), strict=True):
        assert torch.allclose(got, want, rtol=1e-6, atol=1e-7)
    assert micro[2].get_last_lr() == whole[2].get_last_lr() == [0.1 * 0.5**3]
    saved = io.BytesIO()
    torch.save(micro[2].state_dict(), saved)  # as a checkpoint does; it loads again
    assert torch.load(io.BytesIO(saved.getvalue()), weights_only=False)["last_epoch"] == 3


def test_what_accumulation_cannot_drive_is_said() -> None:
    import torch

    from tiresias_launch.torch_accumulate import Accumulation

    why = Accumulation.why_not({"scaler": torch.amp.GradScaler("cpu", enabled=False)})
    assert why is not None and "GradScaler" in why, why
    assert Accumulation.why_not({"model": torch.nn.Linear(2, 1)}) is None
