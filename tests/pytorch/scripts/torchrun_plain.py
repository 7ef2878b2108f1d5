"""A plain torchrun script: no Tiresias import. Each rank all-reduces its rank + 1 and rank 0
prints the sum, which is world_size * (world_size + 1) / 2."""

import os

import torch
import torch.distributed as dist

dist.init_process_group()  # env:// from RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
rank = dist.get_rank()
total = torch.tensor([float(rank + 1)])
dist.all_reduce(total)
print(
    f"rank {rank}/{dist.get_world_size()} local {os.environ['LOCAL_RANK']}: sum {total.item():g}",
    flush=True,
)
dist.destroy_process_group()
