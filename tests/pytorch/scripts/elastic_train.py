"""A torchrun-style training script, written the usual way: a DistributedSampler, a
DataLoader with a per-rank batch of 4, momentum or Adam, a per-epoch LR schedule, and DDP or
FSDP2 (``fully_shard`` per layer); tiresias.State makes its epoch loop preemptible.

Usage: elastic_train.py ddp|fsdp EPOCHS LOG WEIGHTS [BATCH]; BATCH "none" trains one
sample per step (``batch_size=None``). Each rank logs
"step epoch indices… loss" per batch to LOG (with {rank}); rank 0 saves the full final
weights to WEIGHTS.
"""

import sys

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import tiresias


def main() -> None:
    strategy, epochs, log_path, weights_path = sys.argv[1], int(sys.argv[2]), *sys.argv[3:5]
    batch = None if sys.argv[5:] == ["none"] else 4
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    x = torch.randn(58, 8, generator=torch.Generator().manual_seed(1))
    data = TensorDataset(torch.arange(58), x, x.sum(dim=1, keepdim=True) + x[:, :1] ** 2)
    sampler = DistributedSampler(data, shuffle=True, seed=3)
    loader = DataLoader(data, batch_size=batch, sampler=sampler)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    if strategy == "fsdp":
        for layer in net:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer)
        model = fully_shard(net)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
    else:
        model = DistributedDataParallel(net)
        lr = 0.05 if batch else 0.005  # one sample per rank and step: smaller steps
        optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)
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
                print(
                    state.step, epoch, *index.reshape(-1).tolist(), loss.hex(), file=log, flush=True
                )
            scheduler.step()
    weights = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
    if rank == 0:
        torch.save(weights, weights_path)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
