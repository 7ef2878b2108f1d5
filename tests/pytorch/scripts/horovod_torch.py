"""A Horovod PyTorch script (``hvd.DistributedOptimizer``, parameters broadcast from rank 0)
made preemptible with tiresias.State; run with ``tiresias-run --horovod --workers N``.

Usage: horovod_torch.py STEPS LOG WEIGHTS. Each rank logs "step loss" lines to LOG (with
{rank}); rank 0 saves the final weights to WEIGHTS.
"""

import sys

import horovod.torch as hvd
import torch

import tiresias


def main() -> None:
    steps, log_path, weights_path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    hvd.init()
    rank, world = hvd.rank(), hvd.size()
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(32, 1)
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05 * world, momentum=0.9)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    state = tiresias.State(model=model, optimizer=optimizer)
    with open(log_path.format(rank=rank), "a") as log:
        for step in state.steps(steps):
            g = torch.Generator().manual_seed(step * world + rank)
            x = torch.randn(16, 8, generator=g)
            loss = torch.nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            print(step, loss.item().hex(), file=log, flush=True)
    if rank == 0:
        torch.save(model.state_dict(), weights_path)


if __name__ == "__main__":
    main()
