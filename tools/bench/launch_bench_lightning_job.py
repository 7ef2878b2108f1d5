"""Lightning training job used by launch_bench.py --framework lightning: the wide MLP of
launch_bench_torch_job.py under an unmodified ``Trainer.fit``, as one process or a DDP gang
(gloo).

argv: hidden_width progress_path. Trains "forever" (one long epoch); after each batch rank 0
rewrites progress_path with the number of batches done, so the bench knows it is training.
"""

import os
import sys
from pathlib import Path

import lightning as L
import torch


class WideMLP(L.LightningModule):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.Linear(width, 1))

    def training_step(self, batch, batch_idx):
        return self.net(batch[0]).square().mean()

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), 1e-3)  # two moments per weight: state = 3x


class Progress(L.Callback):
    def on_train_batch_end(self, trainer, *_):
        if trainer.is_global_zero:
            progress.write_text(str(trainer.global_step))


width, progress = int(sys.argv[1]), Path(sys.argv[2])
devices = int(os.environ.get("WORLD_SIZE", "1"))
data = torch.utils.data.TensorDataset(torch.randn(8 * 10**6, 1).expand(-1, width))
trainer = L.Trainer(
    max_epochs=1,
    accelerator="cpu",
    devices=devices,
    strategy="ddp" if devices > 1 else "auto",
    logger=False,
    enable_checkpointing=False,
    enable_progress_bar=False,
    callbacks=[Progress()],
)
trainer.fit(WideMLP(width), torch.utils.data.DataLoader(data, batch_size=8))
