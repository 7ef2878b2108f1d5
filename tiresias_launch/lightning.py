"""Makes unmodified PyTorch Lightning ``Trainer.fit`` scripts preemptible.

``install()`` (run by ``python -m tiresias_launch.exec``) patches ``Trainer.fit`` of
``lightning.pytorch`` and ``pytorch_lightning`` as they are imported. The patched ``fit`` adds
one callback (:mod:`tiresias_launch.lightning_callback`) that asks the gang, before every
training batch, whether to stop; then every rank calls ``trainer.save_checkpoint`` into the
runtime's atomic store (the call is collective: it ends in a barrier; rank 0 writes) and exits
with EXIT_CHECKPOINTED. On the next start ``fit`` resumes from that checkpoint
(``ckpt_path``) exactly, mid-epoch.

What Lightning does and what is added:

- Lightning's checkpoint carries the model, optimizers, LR schedulers, precision state, the
  loops' progress counters and every callback's state (ModelCheckpoint's best-k,
  EarlyStopping, …), and its loops restart mid-epoch from it.
- Lightning restarts a plain ``DataLoader`` from the beginning of the epoch. The training
  loaders Lightning builds (its DDP ``DistributedSampler`` included) are made resumable as in
  :mod:`tiresias_launch.torch`: the interrupted epoch's pass starts from the RNG states the
  original pass started with (a shuffled order is recreated) and skips, by index, the batches
  already trained.
- Lightning saves no global RNG states; each rank's are kept in the callback's state and
  applied at the first resumed batch, so dropout continues where it was.
- Lightning's SIGTERM handler (it stops ``fit`` as if training had finished) is replaced by
  the runtime's once training starts.
- Loggers keep their version across restarts (and a CSVLogger its rows), so
  ``ModelCheckpoint``'s directory, and with it its state, is the same after a resume.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from types import ModuleType
from typing import Any

from tiresias_launch import compat
from tiresias_launch.imports import patch_on_import

#: Lightning's two package names (``lightning`` bundles ``lightning.pytorch``).
ROOTS = ("lightning.pytorch", "pytorch_lightning")
_PATCHED = "__tiresias_patched__"


def install() -> None:
    """Patch ``Trainer.fit`` and the fit loop's loader set-up of both Lightning packages."""
    patches: dict[str, Callable[[ModuleType], None]] = {}
    for root in ROOTS:
        patches[f"{root}.trainer.trainer"] = _patch_trainer
        patches[f"{root}.loops.fit_loop"] = _patch_fit_loop
    patch_on_import(patches)


def _patch_trainer(module: ModuleType) -> None:
    root = module.__name__.removesuffix(".trainer.trainer")
    trainer_cls = getattr(module, "Trainer", None)
    if trainer_cls is None or not hasattr(trainer_cls, "fit"):
        compat.unpatched(root, "its Lightning fit", compat.INTERNALS[root][0])
        return
    if getattr(trainer_cls.fit, _PATCHED, False):
        return
    original = trainer_cls.fit

    @functools.wraps(original)
    def fit(self: Any, *args: Any, **kwargs: Any) -> Any:
        moved = compat.first_missing(root, on=self)
        if moved is not None:
            compat.unpatched(root, "its Lightning fit", moved)
            return original(self, *args, **kwargs)
        try:
            call = inspect.signature(original).bind(self, *args, **kwargs)
        except TypeError:  # a wrong call: let fit itself say what is wrong
            return original(self, *args, **kwargs)
        from tiresias_launch import lightning_callback  # imports torch: Lightning has

        return lightning_callback.preemptible_fit(original, root, call)

    setattr(fit, _PATCHED, True)
    trainer_cls.fit = fit


def _patch_fit_loop(module: ModuleType) -> None:
    """The fit loop builds its training loaders through ``_process_dataloader`` (which may
    re-instantiate them with a ``DistributedSampler``) and starts iterating them right after:
    the one place to make them resumable."""
    original = getattr(module, "_process_dataloader", None)
    if original is None or getattr(original, _PATCHED, False):
        return  # moved: the patched fit finds it missing and runs unpatched

    @functools.wraps(original)
    def process(trainer: Any, *args: Any, **kwargs: Any) -> Any:
        loader = original(trainer, *args, **kwargs)
        preemption = next((c for c in trainer.callbacks if hasattr(c, "prepare_loader")), None)
        return loader if preemption is None else preemption.prepare_loader(loader)

    setattr(process, _PATCHED, True)
    module._process_dataloader = process
