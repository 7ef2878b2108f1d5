"""A torchrun-style DDP script with a DistributedSampler, a DataLoader with worker processes,
dropout and a per-epoch LR schedule; its epoch loop is made preemptible by tiresias.

Usage: ddp_sampler.py EPOCHS LOG WEIGHTS. Each rank logs "epoch indices… loss" per batch.
"""

import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import tiresias


def main() -> None:
    epochs, log_path, weights_path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    x = torch.randn(96, 8, generator=torch.Generator().manual_seed(1))
    data = TensorDataset(torch.arange(96), x, x.sum(dim=1, keepdim=True))
    sampler = DistributedSampler(data, shuffle=True, seed=3)
    loader = DataLoader(data, batch_size=8, sampler=sampler, num_workers=2)
    net = torch.nn.Sequential(
        torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(32, 1)
    )
    model = DistributedDataParallel(net)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.8)
    state = tiresias.State(model=model, optimizer=optimizer, scheduler=scheduler, loader=loader)

    @tiresias.preemptible
    def train_step(xb: torch.Tensor, yb: torch.Tensor) -> float:
        loss = torch.nn.functional.mse_loss(model(xb), yb)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.item()

    with open(log_path.format(rank=rank), "a") as log:
        for epoch in state.epochs(epochs):
            for index, xb, yb in loader:
                loss = train_step(xb, yb)
                print(epoch, *index.tolist(), loss.hex(), file=log, flush=True)
            scheduler.step()
    if rank == 0:
        torch.save(net.state_dict(), weights_path)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
