"""An ordinary torchrun-style DDP script, preemptible and elastic with tiresias.State.

    tiresias-run --workers 2:4 examples/train_elastic.py --weights final.pt

Asked with a range, the job runs at any world from 2 to 4 workers and trains as it would at
4: at world 2 each rank takes 2 of the script's batches of 32 (a per-rank batch of 64), the
DistributedSampler deals the 4-worker order over 2 ranks, and a resize resumes mid-epoch with
the optimizer, scheduler and RNG states (docs/launcher.md, "Elastic jobs"). Nothing in the
script is written for a particular world size.
"""

import argparse

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import tiresias

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=5)
parser.add_argument("--weights", default="final.pt", help="where rank 0 saves the final weights")
args = parser.parse_args()

dist.init_process_group()  # gloo on CPU, NCCL on GPUs
torch.manual_seed(0)
x = torch.randn(2048, 16, generator=torch.Generator().manual_seed(1))
data = TensorDataset(x, x.sum(dim=1, keepdim=True))
sampler = DistributedSampler(data, shuffle=True, seed=0)
loader = DataLoader(data, batch_size=32, sampler=sampler)
model = DistributedDataParallel(
    torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
state = tiresias.State(model=model, optimizer=optimizer, scheduler=scheduler, loader=loader)


@tiresias.preemptible  # one step: the preemption check before it
def train_step(xb: torch.Tensor, yb: torch.Tensor) -> float:
    loss = torch.nn.functional.mse_loss(model(xb), yb)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


for epoch in state.epochs(args.epochs):  # from the interrupted epoch on
    total = torch.zeros(2)
    for xb, yb in loader:  # a resumed epoch yields only its unseen batches
        total += torch.tensor([train_step(xb, yb) * len(xb), len(xb)])
    scheduler.step()
    dist.all_reduce(total)
    if dist.get_rank() == 0:
        print(f"epoch {epoch}: loss {total[0] / total[1]:.6f} on {dist.get_world_size()} workers")
if dist.get_rank() == 0:
    torch.save(model.module.state_dict(), args.weights)
dist.destroy_process_group()
