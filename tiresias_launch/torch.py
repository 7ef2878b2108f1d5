"""PyTorch adapter: the checkpointer behind ``tiresias.State`` for torch objects.

A PyTorch State saves every object given (model, optimizer, LR scheduler, ``GradScaler``, or
anything else with ``state_dict``/``load_state_dict``) into one ``torch.save`` file, with the
step (the data position for step-indexed input) and the torch, CUDA, NumPy and Python RNG
states, through the runtime's atomic checkpoint store. Only the chief writes; every rank
restores before its first step. In a multi-process gang (``torch.distributed`` initialised,
as ``init_process_group()`` does from the environment ``tiresias-run`` gives) the ranks agree
on the stop step through one tiny all-reduce.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from tiresias_launch.checkpoint import Checkpoint
from tiresias_launch.runtime import Agreement, ReduceSum, Runtime

STATE_FILE = "state.pt"


def _module(model: torch.nn.Module) -> torch.nn.Module:
    """The model inside a DistributedDataParallel (or DataParallel) wrapper."""
    inner = getattr(model, "module", None)
    return inner if isinstance(inner, torch.nn.Module) else model


def _rng_states() -> dict[str, Any]:
    states: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def _set_rng_states(states: Mapping[str, Any]) -> None:
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def torch_reduce_sum() -> ReduceSum:
    """A sum over the gang's ranks on the default process group (on the GPU for NCCL)."""
    device = "cuda" if dist.get_backend() == "nccl" else "cpu"

    def reduce_sum(values: Sequence[float]) -> Sequence[float]:
        t = torch.tensor(list(values), dtype=torch.float64, device=device)
        dist.all_reduce(t)
        return t.tolist()

    return reduce_sum


class TorchCheckpointer:
    """Saves and restores a set of torch objects the way the gang shape needs."""

    def __init__(self, objects: Mapping[str, Any]) -> None:
        unsaveable = [
            name
            for name, o in objects.items()
            if not (hasattr(o, "state_dict") and hasattr(o, "load_state_dict"))
        ]
        if unsaveable:
            raise ValueError(
                f"tiresias.State: {', '.join(unsaveable)} cannot be checkpointed (no "
                "state_dict/load_state_dict); pass models, optimizers, schedulers and scalers"
            )
        self.objects = dict(objects)
        self.modules = [_module(o) for o in objects.values() if isinstance(o, torch.nn.Module)]
        if not self.modules:
            raise ValueError("tiresias.State needs the model (a torch.nn.Module), e.g. model=…")
        self.described = [
            f"{name} {list(t.shape)} {t.dtype}"
            for m in self.modules
            for name, t in m.state_dict().items()
        ]

    def join(self, rt: Runtime) -> None:
        """Collective stop decisions in multi-process gangs (idempotent)."""
        rt.install_signal_handlers()
        if not rt.env.multi_process or rt.agreement is not None:
            return
        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError(
                "tiresias.State in a multi-process job: call "
                "torch.distributed.init_process_group() before creating it"
            )
        reduce_sum = torch_reduce_sum()
        rt.agreement = Agreement(reduce_sum, dist.get_world_size())
        rt.barrier = lambda: reduce_sum([0.0])

    def facts(self, num_ps: int) -> dict[str, Any]:
        """Per-tensor sizes of the trainable parameters, for skew-aware placement."""
        sizes = [
            p.numel() * p.element_size()
            for m in self.modules
            for p in m.parameters()
            if p.requires_grad
        ]
        return {"tensor_bytes": sizes}

    def restore(self, rt: Runtime) -> Checkpoint | None:
        return rt.restore(self.described, self._read)

    def save(self, rt: Runtime, step: int, position: dict[str, Any]) -> Checkpoint | None:
        """Write a checkpoint of ``step``; only the chief's copy is kept."""
        if not rt.needs_save(step):
            return None
        return rt.save(step, self.described, self._write, position)

    def _write(self, directory: Path) -> None:
        state = {name: o.state_dict() for name, o in self.objects.items()}
        torch.save({"objects": state, "rng": _rng_states()}, directory / STATE_FILE)

    def _read(self, ckpt: Checkpoint) -> None:
        saved = torch.load(ckpt.path / STATE_FILE, map_location="cpu", weights_only=False)
        missing = sorted(set(self.objects) - set(saved["objects"]))
        if missing:
            raise ValueError(f"checkpoint {ckpt.path} has no state for {', '.join(missing)}")
        for name, o in self.objects.items():
            o.load_state_dict(saved["objects"][name])
        _set_rng_states(saved["rng"])
