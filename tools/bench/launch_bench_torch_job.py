"""PyTorch training job used by launch_bench.py --framework torch: a wide MLP whose state has a
chosen size, as one process or a DDP gang (gloo).

argv: hidden_width progress_path [plain_path]. Runs steps forever through tiresias.State;
after each step the chief rewrites progress_path with the step number, so the bench knows it
is training. With plain_path it is the baseline instead: the same loop without tiresias,
which loads plain_path (``torch.load``) if it exists and, on SIGTERM, ``torch.save``s the
state dicts there (fsynced) and exits 75 at once (``os._exit``, as the runtime does), as a
script that saves itself would.
"""

import os
import signal
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

width, progress = int(sys.argv[1]), Path(sys.argv[2])
plain = Path(sys.argv[3]) if len(sys.argv) > 3 else None
distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
if distributed:
    dist.init_process_group("gloo")
net = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.Linear(width, 1))
model = DistributedDataParallel(net) if distributed else net
optimizer = torch.optim.Adam(model.parameters(), 1e-3)  # two moments per weight: state = 3x
x = torch.randn(8, width)


def train_step() -> None:
    loss = model(x).square().mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def plain_loop(path: Path) -> None:
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    if path.exists():
        saved = torch.load(path)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
    step = 0
    while not stop:
        train_step()
        step += 1
        progress.write_text(str(step))
    with open(path, "wb") as fh:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os._exit(75)  # as the runtime exits: no interpreter teardown


if plain is not None:
    plain_loop(plain)
import tiresias  # noqa: E402  (the baseline above never imports it)

state = tiresias.State(model=model, optimizer=optimizer)
chief = tiresias.get_runtime().env.is_chief
for step in state.steps(10**12):
    train_step()
    if chief:
        progress.write_text(str(step + 1))
