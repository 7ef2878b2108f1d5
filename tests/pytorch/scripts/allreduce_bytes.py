"""A torchrun script that all-reduces a 1 Mi-float (4 MiB) tensor three times over gloo."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
tensor = torch.ones(1 << 20)
for _ in range(3):
    dist.all_reduce(tensor)
print(f"rank {dist.get_rank()}: {tensor[0].item():g}", flush=True)
dist.destroy_process_group()
