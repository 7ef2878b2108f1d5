"""``tiresias.State`` and ``@tiresias.preemptible``: a custom training loop becomes
preemptible with two added lines, in TensorFlow or PyTorch::

    state = tiresias.State(model=model, optimizer=optimizer)   # restores if resuming
    for step in state.steps(total_steps):                      # stops, saves, exits 75
        train_step(batch(step))

An epoch loop over a PyTorch ``DataLoader`` resumes mid-epoch when the loader is given::

    state = tiresias.State(model=model, optimizer=optimizer, loader=loader)
    for epoch in state.epochs(num_epochs):   # from the interrupted epoch on
        for x, y in loader:                  # a resumed epoch yields only its unseen batches
            train_step(x, y)                 # decorated with @tiresias.preemptible

An elastic PyTorch job that accumulates gradients below its largest world runs each step as
several calls of the step function (micro-steps); the stop check comes only between steps.

The loop logic (stop checks at step boundaries, step timing, the step, epoch and batch as the
data position) is the same for every framework; what is saved and how the gang agrees to
stop belongs to the framework's checkpointer (``tiresias_launch.tensorflow.Checkpointer``,
``tiresias_launch.torch.TorchCheckpointer``), chosen from the objects given.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, ParamSpec, Protocol, TypeVar

from tiresias_launch import fingerprint
from tiresias_launch.checkpoint import Checkpoint
from tiresias_launch.runtime import Runtime, get_runtime

P = ParamSpec("P")
R = TypeVar("R")


class MicroSteps(Protocol):
    """Gradient accumulation: each step runs as ``count`` calls of the loop's step."""

    count: int

    def begin(self, index: int) -> None: ...


class FrameworkCheckpointer(Protocol):
    """What State needs from a framework: save and restore its objects, and make the stop
    decision collective in multi-process gangs."""

    def restore(self, rt: Runtime) -> Checkpoint | None: ...

    def save(self, rt: Runtime, step: int, position: dict[str, Any]) -> Checkpoint | None: ...

    def join(self, rt: Runtime) -> None: ...

    def facts(self, num_ps: int) -> dict[str, Any]: ...

    def begin_epoch(self, epoch: int, skip_batches: int) -> None: ...

    @property
    def accumulation(self) -> MicroSteps | None: ...


def checkpointer_for(objects: Mapping[str, Any]) -> FrameworkCheckpointer:
    """PyTorch's checkpointer when any object is a torch module or optimizer, else
    TensorFlow's. Only a framework the script already imported is looked at."""
    torch = sys.modules.get("torch")
    if torch is not None and any(
        isinstance(o, torch.nn.Module | torch.optim.Optimizer) for o in objects.values()
    ):
        from tiresias_launch.torch import TorchCheckpointer

        return TorchCheckpointer(objects)
    from tiresias_launch.tensorflow import Checkpointer

    return Checkpointer(dict(objects))


class State:
    """Checkpointable training state of one custom loop; restores itself on creation."""

    _current: State | None = None

    def __init__(self, **objects: Any) -> None:
        if not objects:
            raise ValueError("tiresias.State needs the objects to checkpoint, e.g. model=…")
        self._rt = get_runtime()
        self._checkpointer = checkpointer_for(objects)
        self._checkpointer.join(self._rt)
        self.restored = self._checkpointer.restore(self._rt)
        self.step = self.restored.manifest.step if self.restored else 0
        position = self.restored.manifest.position if self.restored else {}
        self.epoch = int(position.get("epoch", 0))
        self._epoch_start = self.step - int(position.get("batch", 0))
        self._rt.reporter.note(**self._checkpointer.facts(self._rt.env.num_ps))
        self._rt.save_at_exit = self.save
        self._by_epoch = "epoch" in position  # the position has epochs once epochs() ran
        self._inputs = fingerprint.of_state(objects)
        self._micro, self._calls, self._micro_seconds = 0, 0, 0.0  # micro-steps of this step
        if self.restored:
            fingerprint.inputs_changed(self._rt, position.get("inputs", {}), self._inputs)
        State._current = self

    @classmethod
    def current(cls) -> State:
        if cls._current is None:
            raise RuntimeError("create tiresias.State(model=…, optimizer=…) before training")
        return cls._current

    def steps(self, total: int) -> Iterator[int]:
        """Yield step numbers from the restored step up to ``total``; at a step boundary where
        the gang agrees to stop, checkpoint and exit with EXIT_CHECKPOINTED."""
        while self.step < total or self._micro:  # a step's micro-steps all run
            self.before_step()
            before, t0 = self._calls, time.perf_counter()
            yield self.step
            if self._calls == before:  # not already counted by a @preemptible step function
                self.after_step(time.perf_counter() - t0)

    def epochs(self, total: int) -> Iterator[int]:
        """Yield epoch numbers from the restored one up to ``total``. Each epoch starts the
        given loader's epoch (``set_epoch``); the interrupted epoch skips the batches it
        trained before the preemption, so every sample is seen once per epoch."""
        self._by_epoch = True
        while self.epoch < total:
            self._checkpointer.begin_epoch(self.epoch, self.step - self._epoch_start)
            yield self.epoch
            self.epoch += 1
            self._epoch_start = self.step

    def before_step(self) -> None:
        """A stop can only come between steps; a micro-step tells the accumulation its place."""
        if self._micro == 0 and self._rt.should_stop(self.step):
            self._rt.stop(self.save)
        accumulation = self._checkpointer.accumulation
        if accumulation is not None:
            accumulation.begin(self._micro)

    def after_step(self, seconds: float) -> None:
        """Count the call; ``step`` is the step being trained from its first micro-step on,
        and it is done (timed, reported) after its last."""
        accumulation = self._checkpointer.accumulation
        count = accumulation.count if accumulation is not None else 1
        self._calls += 1
        if self._micro == 0:
            self.step += 1
        self._micro, self._micro_seconds = self._micro + 1, self._micro_seconds + seconds
        if self._micro == count:
            self._rt.step_done(self.step, self._micro_seconds)
            self._micro, self._micro_seconds = 0, 0.0

    def save(self) -> Checkpoint | None:
        """Write a checkpoint of the current step (the chief's copy is kept)."""
        position: dict[str, Any] = {
            "step": self.step,
            "inputs": self._inputs,
            "world": self._rt.env.num_workers,  # the batches a resize must re-deal
        }
        if self._by_epoch:
            position |= {"epoch": self.epoch, "batch": self.step - self._epoch_start}
        return self._checkpointer.save(self._rt, self.step, position)


def preemptible(fn: Callable[P, R]) -> Callable[P, R]:
    """Mark ``fn`` as one training step: each call is one step of the current State, with the
    stop check before it and timing after it (for loops that do not use ``State.steps``)."""

    @functools.wraps(fn)
    def step(*args: P.args, **kwargs: P.kwargs) -> R:
        state = State.current()
        state.before_step()
        t0 = time.perf_counter()
        out = fn(*args, **kwargs)
        state.after_step(time.perf_counter() - t0)
        return out

    return step
