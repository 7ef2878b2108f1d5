"""A PyTorch Lightning script written the usual way: a LightningModule with dropout and a
per-epoch LR schedule, a shuffled DataLoader, a validation set, ModelCheckpoint,
LearningRateMonitor and a CSVLogger, and ``Trainer.fit``. It knows nothing of tiresias.

Usage: lightning_fit.py EPOCHS DEVICES LOG WEIGHTS [TRAINER_ARG=INT…], e.g.
accumulate_grad_batches=2 val_check_interval=4. Each rank logs "epoch batch indices… loss"
per training batch and "val loss" per validation to LOG (with {rank}); rank 0 saves the final
weights and ModelCheckpoint's best score to WEIGHTS.
"""

import sys

import lightning as L
import torch
from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader, TensorDataset


class Regressor(L.LightningModule):
    def __init__(self, log_path: str) -> None:
        super().__init__()
        self.log_path = log_path
        self.net = torch.nn.Sequential(
            torch.nn.Linear(6, 32), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(32, 1)
        )

    def training_step(self, batch, batch_idx):
        index, x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        with open(self.log_path.format(rank=self.global_rank), "a") as log:
            print(self.current_epoch, batch_idx, *index.tolist(), loss.item().hex(), file=log)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        _, x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y), sync_dist=True)

    def on_validation_epoch_end(self):
        if not self.trainer.sanity_checking:
            with open(self.log_path.format(rank=self.global_rank), "a") as log:
                print("val", self.trainer.callback_metrics["val_loss"].item().hex(), file=log)

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.8)
        return [optimizer], [scheduler]


def main() -> None:
    epochs, devices, log_path, weights_path = sys.argv[1:5]
    overrides = {k: int(v) for k, v in (arg.split("=") for arg in sys.argv[5:])}
    L.seed_everything(7)
    x = torch.randn(120, 6)
    data = TensorDataset(torch.arange(120), x, x.sum(dim=1, keepdim=True))
    train, val = torch.utils.data.random_split(data, [96, 24])
    trainer = L.Trainer(
        max_epochs=int(epochs),
        accelerator="cpu",
        devices=int(devices),
        strategy="ddp" if int(devices) > 1 else "auto",
        callbacks=[ModelCheckpoint(monitor="val_loss", save_last=True), LearningRateMonitor()],
        logger=CSVLogger("logs"),
        log_every_n_steps=2,
        enable_progress_bar=False,
        **overrides,
    )
    model = Regressor(log_path)
    trainer.fit(
        model,
        DataLoader(train, batch_size=8, shuffle=True),
        DataLoader(val, batch_size=8),
    )
    if trainer.is_global_zero:
        best = trainer.checkpoint_callback.best_model_score
        torch.save({**model.net.state_dict(), "best_val_loss": best}, weights_path)


if __name__ == "__main__":
    main()
