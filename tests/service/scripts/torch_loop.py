"""A PyTorch training loop made preemptible with ``tiresias.State``, as the README shows: it
trains until it is stopped, one small step every 50 ms."""

import time

import torch

import tiresias

model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
state = tiresias.State(model=model, optimizer=optimizer)
for _step in state.steps(1_000_000):
    optimizer.zero_grad()
    model(torch.ones(8, 4)).pow(2).mean().backward()
    optimizer.step()
    time.sleep(0.05)
