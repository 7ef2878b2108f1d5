"""Gradient accumulation for elastic PyTorch ``State`` loops (docs/launcher.md, "Elastic
jobs"): at world W of a job whose global batch is defined at W_max, each rank runs
k = W_max/W micro-steps per step, micro-step j on the batch max-world rank r + j·W would have
had (``tiresias_launch.torch_resize``), and the optimizer steps once per step.

The script's own step function runs unchanged, once per micro-step: the runtime makes its
``optimizer.step()`` a no-op on all but the last micro-step, and its ``zero_grad`` and LR
scheduler ``step`` no-ops while gradients are held (from a skipped optimizer step to the real
one), so ``zero_grad(); backward(); step()`` and ``backward(); step(); zero_grad()`` both
accumulate. Gradients are not synced until the last micro-step (DDP: ``no_sync``'s flag;
FSDP2: ``set_requires_gradient_sync``), and each micro-step's share is divided by k (DDP and
plain modules: a hook on every parameter; FSDP2: its reduction divides by W_max), so the
gradient the optimizer (and a ``clip_grad_norm_`` before it) sees is the largest world's mean.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel


class Accumulation:
    """``count`` micro-steps per step over the objects a ``State`` was given."""

    def __init__(self, count: int, top: int, objects: Mapping[str, Any]) -> None:
        self.count = count
        self._last = True  # whether the running micro-step is the step's last
        self._holding = False  # gradients are accumulating: a skipped optimizer step since
        modules = [o for o in objects.values() if isinstance(o, torch.nn.Module)]
        self._sync: list[Callable[[bool], None]] = []
        for module in modules:
            self._divide(module, count, top)
            for m in {module, getattr(module, "module", module)}:
                _replace(m, "zero_grad", self._unless_holding)
        for o in objects.values():
            if isinstance(o, torch.optim.Optimizer):
                _replace(o, "step", self._on_last)
                _replace(o, "zero_grad", self._unless_holding)
            elif isinstance(o, torch.optim.lr_scheduler.LRScheduler):
                _held_scheduler(o, self)

    @staticmethod
    def why_not(objects: Mapping[str, Any]) -> str | None:
        """What in ``objects`` the accumulation cannot drive, or None."""
        for name, o in objects.items():
            if isinstance(o, torch.amp.GradScaler):
                return f"its {name} (a GradScaler) unscales every micro-step's gradients"
            if type(o).__name__ == "FullyShardedDataParallel":
                return f"its {name} is an FSDP1 wrapper (FSDP2's fully_shard accumulates)"
        return None

    def begin(self, index: int) -> None:
        """Micro-step ``index`` of the step starts: gradients sync only on the last."""
        self._last = index == self.count - 1
        for sync in self._sync:
            sync(self._last)

    def _divide(self, module: torch.nn.Module, count: int, top: int) -> None:
        """Make each micro-step add 1/count of its gradient, and sync only when told."""
        from torch.distributed.fsdp import FSDPModule

        if isinstance(module, FSDPModule):
            for m in module.modules():
                if isinstance(m, FSDPModule):  # a mean over the largest world's ranks: a
                    m.set_gradient_divide_factor(float(top))  # sum, then a division (Gloo
                    m.set_force_sum_reduction_for_comms(True)  # has no PREMUL_SUM)
            self._sync.append(module.set_requires_gradient_sync)
            return
        if isinstance(module, DistributedDataParallel):
            ddp = module
            self._sync.append(lambda last: setattr(ddp, "require_backward_grad_sync", last))
        for p in module.parameters():
            if p.requires_grad:  # before accumulation, so before DDP's reducer sees it
                p.register_hook(lambda grad: grad / count)

    def _on_last(self, real: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if not self._last:
            self._holding = True
            return None
        self._holding = False
        return real(*args, **kwargs)

    def _unless_holding(self, real: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return None if self._holding else real(*args, **kwargs)


def _held_scheduler(scheduler: Any, accumulation: Accumulation) -> None:
    """Make ``scheduler.step()`` a no-op while gradients are held, by swapping its class for
    a subclass (its ``state_dict`` is its ``__dict__``: an attribute would be saved)."""
    cls = type(scheduler)

    def step(self: Any, *args: Any, **kwargs: Any) -> Any:
        return accumulation._unless_holding(functools.partial(cls.step, self), *args, **kwargs)

    scheduler.__class__ = type(f"Held{cls.__name__}", (cls,), {"step": step})


def _replace(obj: Any, name: str, gate: Callable[..., Any]) -> None:
    """Route ``obj.name(...)`` through ``gate(real, ...)``, as a bound method (an LR scheduler
    made later wraps an optimizer's ``step`` through its ``__func__``)."""
    real = getattr(obj, name)

    @functools.wraps(real)  # keeps an LR scheduler's mark on a step it wrapped
    def gated(self: Any, *args: Any, **kwargs: Any) -> Any:
        return gate(real, *args, **kwargs)

    setattr(obj, name, types.MethodType(gated, obj))
