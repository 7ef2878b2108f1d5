"""A PyTorch Lightning DDP script written for torchrun: devices and nodes from the
environment torchrun gives, a shuffled DataLoader with a per-rank batch of 4, momentum and a
per-epoch LR schedule, ``Trainer.fit``. It knows nothing of tiresias.

Usage: elastic_fit.py EPOCHS LOG WEIGHTS. Each rank logs "step epoch indices… loss" per
training batch to LOG (with {rank}); rank 0 saves the final weights to WEIGHTS.
"""

import os
import sys

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset


class Regressor(L.LightningModule):
    def __init__(self, log_path: str) -> None:
        super().__init__()
        self.log_path = log_path
        self.net = torch.nn.Sequential(
            torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)
        )

    def training_step(self, batch, batch_idx):
        index, x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        with open(self.log_path.format(rank=self.global_rank), "a") as log:
            step = self.global_step + 1
            print(step, self.current_epoch, *index.tolist(), loss.item().hex(), file=log)
        return loss

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)
        return [optimizer], [scheduler]


def main() -> None:
    epochs, log_path, weights_path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    L.seed_everything(7)
    x = torch.randn(58, 8, generator=torch.Generator().manual_seed(1))
    data = TensorDataset(torch.arange(58), x, x.sum(dim=1, keepdim=True) + x[:, :1] ** 2)
    trainer = L.Trainer(
        max_epochs=epochs,
        accelerator="cpu",
        devices=int(os.environ.get("LOCAL_WORLD_SIZE", 1)),
        num_nodes=int(os.environ.get("GROUP_WORLD_SIZE", 1)),
        strategy="ddp",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    model = Regressor(log_path)
    trainer.fit(model, DataLoader(data, batch_size=4, shuffle=True))
    if trainer.is_global_zero:
        torch.save(model.net.state_dict(), weights_path)


if __name__ == "__main__":
    main()
