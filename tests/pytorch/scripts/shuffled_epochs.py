"""A single-process PyTorch script: a shuffled DataLoader (RandomSampler, drawing its order
from the global RNG), dropout, Adam, three epochs, made preemptible by tiresias.

Usage: shuffled_epochs.py EPOCHS LOG WEIGHTS. Logs "epoch indices… loss" per batch.
"""

import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

import tiresias

epochs, log_path, weights_path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
torch.manual_seed(0)
x = torch.randn(40, 6)
data = TensorDataset(torch.arange(40), x, x.sum(dim=1, keepdim=True))
loader = DataLoader(data, batch_size=5, shuffle=True)
model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Dropout(0.3), torch.nn.Linear(16, 1))
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
state = tiresias.State(model=model, optimizer=optimizer, loader=loader)


@tiresias.preemptible
def train_step(xb: torch.Tensor, yb: torch.Tensor) -> float:
    loss = torch.nn.functional.mse_loss(model(xb), yb)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


with open(log_path.format(rank=0), "a") as log:
    for epoch in state.epochs(epochs):
        for index, xb, yb in loader:
            print(epoch, *index.tolist(), train_step(xb, yb).hex(), file=log, flush=True)
torch.save(model.state_dict(), weights_path)
