"""Train a reference model with PyTorch on synthetic, step-seeded data; ``torchrun``-style.

Run it with plain ``python``, with ``torchrun --nproc-per-node N``, or under ``tiresias-run
--workers N``: with more than one process it trains data-parallel (DDP, gloo on CPU, NCCL on
GPUs). With Tiresias installed the loop is preemptible through ``tiresias.State``; without
it, the same training runs, just not preemptible. The batch of step ``s`` on rank ``r`` is a
pure function of ``(seed, s, r)``, so a resumed job trains exactly the batches it would have.

    python models/train_torch.py --model resnet50 --steps 20
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

# models/ is in the checkout, not in the wheel
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from models import flags, torch_nets

try:
    import tiresias
except ImportError:  # plain PyTorch: the same training, just not preemptible
    tiresias = None


def synthetic_batch(
    step: int, rank: int, args: argparse.Namespace
) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(args.seed * 1_000_003 + step * 1_009 + rank)
    size = args.image_size
    images = torch.rand((args.batch_size, 3, size, size), generator=g)
    labels = torch.randint(0, args.num_classes, (args.batch_size,), generator=g)
    return images, labels


def main(argv: Sequence[str] | None = None) -> None:
    args = flags.arg_parser(__doc__.split("\n\n")[0], torch_nets.NAMES).parse_args(argv)
    args.image_size = args.image_size or torch_nets.MIN_SIZE[args.model]
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    rank = dist.get_rank() if distributed else 0
    device = torch.device(
        f"cuda:{os.environ.get('LOCAL_RANK', '0')}" if torch.cuda.is_available() else "cpu"
    )
    torch.manual_seed(args.seed)
    net = torch_nets.build(args.model, args.image_size, args.num_classes).to(device)
    model = DistributedDataParallel(net) if distributed else net
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    if tiresias:
        steps = tiresias.State(model=model, optimizer=optimizer).steps(args.steps)
    else:
        steps = iter(range(args.steps))
    for step in steps:
        images, labels = (t.to(device) for t in synthetic_batch(step, rank, args))
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if rank == 0 and (step % args.log_every == 0 or step == args.steps - 1):
            print(f"step {step} loss {loss.item():.6f}", flush=True)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
