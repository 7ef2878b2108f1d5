"""An ordinary PyTorch Lightning script: nothing Tiresias-specific in it.

    tiresias-run --workers 1 examples/train_lightning.py
    tiresias-run --workers 2 examples/train_lightning.py --devices 2   # DDP, gloo on CPU
    python -m tiresias_launch.exec examples/train_lightning.py         # what tiresias-run runs

The launcher starts every script through ``tiresias_launch.exec``, which patches
``Trainer.fit``: on SIGTERM training stops before the next batch, every rank joins in
``trainer.save_checkpoint`` and the process exits 75; the next start resumes ``fit`` from
that checkpoint at the exact batch, with the same shuffled order and the batches already
trained skipped.
"""

import argparse

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset


class Regressor(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Dropout(0.1), torch.nn.Linear(64, 1)
        )

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


parser = argparse.ArgumentParser()
parser.add_argument("--devices", type=int, default=1)
parser.add_argument("--epochs", type=int, default=20)
args = parser.parse_args()

L.seed_everything(0)
x = torch.randn(4096, 32)
loader = DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=64, shuffle=True)
trainer = L.Trainer(
    max_epochs=args.epochs,
    accelerator="cpu",
    devices=args.devices,
    strategy="ddp" if args.devices > 1 else "auto",
    callbacks=[ModelCheckpoint(save_last=True)],
)
trainer.fit(Regressor(), loader)
