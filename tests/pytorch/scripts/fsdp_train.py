"""A torchrun-style FSDP script (FSDP2's ``fully_shard`` per layer, gloo on CPU) made
preemptible with tiresias.State: each rank holds half of every parameter and of Adam's state.

Usage: fsdp_train.py STEPS LOG WEIGHTS. Each rank logs "step loss" lines to LOG (with {rank});
rank 0 saves the full (gathered) final weights to WEIGHTS.
"""

import sys

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import fully_shard

import tiresias


def main() -> None:
    steps, log_path, weights_path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 64), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(64, 1)
    )
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10, gamma=0.7)
    state = tiresias.State(model=model, optimizer=optimizer, scheduler=scheduler)
    with open(log_path.format(rank=rank), "a") as log:
        for step in state.steps(steps):
            g = torch.Generator().manual_seed(step * world + rank)
            x = torch.randn(16, 8, generator=g)
            loss = torch.nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
            print(step, loss.item().hex(), file=log, flush=True)
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
    if rank == 0:
        torch.save(full, weights_path)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
