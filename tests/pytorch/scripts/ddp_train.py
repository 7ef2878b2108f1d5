"""A torchrun-style DDP training script (gloo on CPU) made preemptible with tiresias.State.

Usage: ddp_train.py STEPS LOG WEIGHTS. Each rank logs "step loss" lines to LOG (with {rank});
rank 0 saves the final weights to WEIGHTS. The data of a step is seeded by the step, so it
does not depend on how many steps ran before.
"""

import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import tiresias


def main() -> None:
    steps, log_path, weights_path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(32, 1)
    )
    model = DistributedDataParallel(net)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10, gamma=0.7)
    state = tiresias.State(model=model, optimizer=optimizer, scheduler=scheduler)
    with open(log_path.format(rank=rank), "a") as log:
        for step in state.steps(steps):
            g = torch.Generator().manual_seed(step * world + rank)
            x = torch.randn(16, 8, generator=g)
            y = x.sum(dim=1, keepdim=True)
            loss = torch.nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
            print(step, loss.item().hex(), file=log, flush=True)
    if rank == 0:
        torch.save(net.state_dict(), weights_path)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
