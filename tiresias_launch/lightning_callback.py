"""The callback that makes a Lightning ``Trainer.fit`` preemptible (see
:mod:`tiresias_launch.lightning`, which patches ``fit`` to add it); imported once ``fit``
runs, so torch is loaded by then."""

from __future__ import annotations

import csv
import importlib
import inspect
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from tiresias_launch import elastic, torch_resize
from tiresias_launch.checkpoint import Checkpoint
from tiresias_launch.runtime import Runtime, get_runtime
from tiresias_launch.torch import (
    describe,
    join_gang,
    resumable,
    resume_pass,
    rng_states,
    set_rng_states,
    tensor_bytes,
)

CKPT_FILE = "lightning.ckpt"
#: Why a Lightning job that needs gradient accumulation at a smaller world runs rigid: its
#: loops count micro-batches, which a resumed epoch would have to translate.
NO_ACCUMULATION = (
    "it would accumulate gradients (TIRESIAS_ELASTIC_BATCH=accumulate, or a DataLoader of "
    "single samples), which the runtime does not do under Lightning"
)


def callback(root: str, trainer: Any, model: torch.nn.Module) -> Any:
    """The runtime's callback for ``trainer``, a ``Callback`` of Lightning package ``root``."""
    callback_base = importlib.import_module(f"{root}.callbacks").Callback
    cls = type("TiresiasPreemption", (_Preemption, callback_base), {})
    return cls(get_runtime(), trainer, model)


def preemptible_fit(original: Callable[..., Any], root: str, call: inspect.BoundArguments) -> Any:
    trainer, model = call.arguments["self"], call.arguments["model"]
    preemption = callback(root, trainer, model)
    trainer.callbacks.insert(0, preemption)  # our stop check before user callbacks see a batch
    ckpt = preemption.restore()
    if ckpt is not None:  # ours is newer than any ckpt_path the script names
        call.arguments["ckpt_path"] = str(ckpt.path / CKPT_FILE)
        call.arguments["weights_only"] = False  # it holds RNG states; we wrote it
        # Lightning warns that a plain DataLoader cannot resume mid-epoch: here it does
        warnings.filterwarnings("ignore", message=r"You're resuming from a checkpoint that ended")
    return original(*call.args, **call.kwargs)


class _Preemption:
    """The callback ``fit`` gets: stop checks, the checkpoint, and the exact resume. It is
    mixed into the Lightning flavour's ``Callback`` class when ``fit`` starts."""

    def __init__(self, rt: Runtime, trainer: Any, model: torch.nn.Module) -> None:
        self.rt = rt
        self.trainer = trainer
        self.described = describe([model])
        self.step = 0  # training batches done, over all epochs and restarts
        self.position = {"epoch": 0, "batch": 0}
        #: The restored state; what the first resumed batch starts from (RNG states, Lightning's
        #: logging step) and the loader passes the interrupted epoch started from, until used.
        self.resume: dict[str, Any] | None = None
        self._first_batch: dict[str, Any] | None = None
        self._pending_passes: list[Any] = []
        self._saved: dict[str, Any] = {}
        self._t0 = 0.0
        rt.reporter.note(tensor_bytes=tensor_bytes([model]))

    @property
    def state_key(self) -> str:
        return "TiresiasPreemption"

    # -- resume -------------------------------------------------------------------------
    def restore(self) -> Checkpoint | None:
        """Find this job's newest checkpoint and read our part of it (Lightning reads the rest
        inside ``fit``); loggers take the version they had."""
        ckpt = self.rt.restore(self.described, self._read)
        if ckpt is not None:
            for logger, version in zip(self.trainer.loggers, self.resume["loggers"], strict=False):
                if getattr(logger, "_version", 0) is None:  # not chosen by the script
                    logger._version = version
                    self._keep_csv_rows(logger)
        return ckpt

    def _keep_csv_rows(self, logger: Any) -> None:
        """A CSVLogger deletes the ``metrics.csv`` it finds in its directory when it starts
        (Lightning's own resume writes to a new version): put the rows logged before the
        preemption back, with their columns, and it appends to them."""
        if type(logger).__name__ != "CSVLogger" or not self.rt.env.is_chief:
            return
        metrics = Path(logger.log_dir, "metrics.csv")
        if metrics.is_file():
            rows = metrics.read_bytes()  # as written (csv ends its lines with \r\n)
            writer = logger.experiment  # creating it deletes the file
            metrics.write_bytes(rows)
            writer.metrics_keys = next(csv.reader(rows.decode().splitlines()[:1]))

    def _read(self, ckpt: Checkpoint) -> None:
        saved = torch.load(ckpt.path / CKPT_FILE, map_location="cpu", weights_only=False, mmap=True)
        self.load_state_dict(saved["callbacks"][self.state_key])

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Called by our restore, and by Lightning once it has loaded the checkpoint."""
        self.resume = state
        self.step, self.position = state["step"], dict(state["position"])
        ranks = state["ranks"]
        # at another world every rank takes the chief's states, as its DDP ranks share them
        mine = ranks[self._rank()] if len(ranks) == self.trainer.world_size else ranks[0]
        self._first_batch = {"rng": mine["rng"], "stepped": state["stepped"]}
        self._pending_passes = list(mine["passes"])

    def state_dict(self) -> dict[str, Any]:
        return self._saved

    def _rank(self) -> int:
        """This process's rank (0 when the restore reads the checkpoint, before Lightning sets
        up its strategy; the rank's own entry is taken again when Lightning loads it)."""
        return int(self.trainer.global_rank) if self.trainer.world_size > 1 else 0

    def prepare_loader(self, loader: Any) -> Any:
        """Make a training loader Lightning built resumable; right after a restore, its pass
        starts from the RNG states the interrupted pass started with (recreating its order)
        and skips the batches already trained."""
        if not isinstance(loader, torch.utils.data.DataLoader):
            return loader
        per_rank = self._keep_global_batch(loader)
        sampler = resumable(loader.batch_sampler or loader.sampler)
        if self._pending_passes:
            elastic.resumed(self.rt, (self.resume or {}).get("world"), per_rank)
            resume_pass(sampler, self.position["batch"], self._pending_passes.pop(0))
            # Lightning starts this iterator before it sets the sampler's epoch
            for s in (loader.sampler, getattr(loader.batch_sampler, "sampler", None)):
                if hasattr(s, "set_epoch"):
                    s.set_epoch(self.position["epoch"])
        return loader

    def _keep_global_batch(self, loader: torch.utils.data.DataLoader[Any]) -> str:
        """An elastic job's training loader yields its largest world's global batches
        (tiresias_launch.torch_resize), or the job runs rigid; what each rank takes."""
        env = self.rt.env
        if not env.elastic:
            return ""
        factor = elastic.factor(env)
        why = factor if isinstance(factor, str) else torch_resize.why_not(loader, env)
        if env.elastic_batch == "accumulate" or torch_resize.micro_steps_only(loader):
            why = why or NO_ACCUMULATION
        elastic.declare(self.rt, why)
        if why is not None or isinstance(factor, str) or not self.rt.resizable:
            return ""
        return torch_resize.rescale(loader, factor, env.max_workers or factor)

    # -- hooks ----------------------------------------------------------------------------
    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        join_gang(self.rt)  # also takes the signals back from Lightning's handler
        # a signal Lightning's handler saw while fit started is in the runtime's flag too
        # (that handler calls the one it found); Lightning would end fit on it
        trainer._signal_connector.received_sigterm = False
        self.rt.save_at_exit = self.save

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, idx: int) -> None:
        """The stop check before a batch, once everything of the batch before it (every
        callback's and the module's batch-end hooks, a validation, an epoch's end) is done:
        a checkpoint here resumes with this batch and skips nothing. With gradient
        accumulation only where an optimizer step has just been taken (accumulated gradients
        are in no checkpoint)."""
        self.position = {"epoch": trainer.current_epoch, "batch": idx}
        if self._first_batch is not None:
            set_rng_states(self._first_batch["rng"])
            # Lightning counts one logging step more on a restart, for a checkpoint taken at
            # a batch end; this one was taken at a batch start
            trainer.fit_loop.epoch_loop._batches_that_stepped = self._first_batch["stepped"]
            self._first_batch = None
        if idx % trainer.accumulate_grad_batches == 0 and self.rt.should_stop(self.step):
            self.rt.stop(self.save)
        self._t0 = time.perf_counter()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, *args: Any) -> None:
        self.step += 1
        self.rt.step_done(self.step, time.perf_counter() - self._t0)

    # -- preemption -----------------------------------------------------------------------
    def save(self) -> Checkpoint | None:
        """``trainer.save_checkpoint`` into the store, with every rank's RNG and loader pass
        states in our callback's part of it; every rank takes part (it ends in a barrier)."""
        if not self.rt.needs_save(self.step):
            return None
        trainer = self.trainer
        loaders = trainer.fit_loop._combined_loader
        mine = {
            "rng": rng_states(),
            "passes": [
                getattr(loader.batch_sampler or loader.sampler, "_tiresias_pass_rng", None)
                for loader in (loaders.flattened if loaders is not None else [])
                if isinstance(loader, torch.utils.data.DataLoader)
            ],
        }
        ranks = [mine]
        if trainer.world_size > 1 and dist.is_available() and dist.is_initialized():
            ranks = [None] * dist.get_world_size()
            dist.all_gather_object(ranks, mine)
        self._saved = {
            "step": self.step,
            "position": self.position,
            "stepped": trainer.fit_loop.epoch_loop._batches_that_stepped,
            "ranks": ranks,
            "loggers": [logger.version for logger in trainer.loggers],
            "world": trainer.world_size,
        }

        def write(directory: Path) -> None:
            trainer.save_checkpoint(directory / CKPT_FILE, weights_only=False)

        position = {**self.position, "world": trainer.world_size}
        ckpt = self.rt.save(self.step, self.described, write, position, every_rank_writes=True)
        for logger in trainer.loggers:  # the process exits next: flush what was logged
            logger.finalize("preempted")
        return ckpt
