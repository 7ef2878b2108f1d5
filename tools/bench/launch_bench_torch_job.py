"""PyTorch training job used by launch_bench.py --framework torch: a wide MLP whose state has
a chosen size, as one process or a DDP gang (gloo).

argv: hidden_width progress_path. Runs steps forever through tiresias.State; after each step
the chief rewrites progress_path with the step number, so the bench knows it is training.
"""

import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import tiresias

width, progress = int(sys.argv[1]), Path(sys.argv[2])
distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
if distributed:
    dist.init_process_group("gloo")
net = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.Linear(width, 1))
model = DistributedDataParallel(net) if distributed else net
optimizer = torch.optim.Adam(model.parameters(), 1e-3)  # two moments per weight: state = 3x
x = torch.randn(8, width)
state = tiresias.State(model=model, optimizer=optimizer)
chief = tiresias.get_runtime().env.is_chief
for step in state.steps(10**12):
    loss = model(x).square().mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if chief:
        progress.write_text(str(step + 1))
