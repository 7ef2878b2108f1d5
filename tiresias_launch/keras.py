"""Makes unmodified Keras ``model.fit`` scripts preemptible (Keras 3 and legacy tf_keras).

``install()`` (run by ``python -m tiresias_launch.exec``) patches ``Model.fit`` as soon as
Keras defines it, through an import hook, so the user's file is never edited. The patched
``fit`` injects a callback that stops at a batch boundary when the gang agrees to, saves the
model, the optimizer and the (epoch, batch) position, and exits with EXIT_CHECKPOINTED; on
resume it restores them and continues at the exact batch: ``initial_epoch`` for whole epochs,
and for a partly done epoch a first ``fit`` over the remaining batches (``Dataset.skip`` or
sliced arrays), then the remaining epochs.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import inspect
import logging
import sys
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from tiresias_launch.checkpoint import Checkpoint, CheckpointError
from tiresias_launch.runtime import get_runtime

log = logging.getLogger(__name__)

#: Module that defines ``Model`` → the module holding that flavour's ``Callback`` base.
TARGETS = {
    "keras.src.models.model": "keras.src.callbacks.callback",
    "tf_keras.src.engine.training": "tf_keras.src.callbacks",
}
_PATCHED = "__tiresias_patched__"


def install() -> None:
    """Patch ``Model.fit`` of every Keras flavour, now if loaded, else when imported."""
    for name in TARGETS:
        if name in sys.modules:
            _patch_module(sys.modules[name])
    if not any(isinstance(f, _PatchingFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchingFinder())


def _patch_module(module: ModuleType) -> None:
    model_cls = module.Model
    if getattr(model_cls.fit, _PATCHED, False):
        return
    original = model_cls.fit
    callback_base = importlib.import_module(TARGETS[module.__name__]).Callback

    @functools.wraps(original)
    def fit(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _backs_up_itself(original, self, args, kwargs):
            return original(self, *args, **kwargs)
        return _PreemptibleFit(original, callback_base, self, args, kwargs).run()

    setattr(fit, _PATCHED, True)
    model_cls.fit = fit


def _backs_up_itself(original: Callable[..., Any], *call: Any) -> bool:
    """A ``fit`` with ``keras.callbacks.BackupAndRestore`` restores its own backup when it
    starts: the runtime then neither restores nor checkpoints that call (never twice, never
    over the script's own state), and the preemption signal keeps its default action."""
    model, args, kwargs = call
    try:
        callbacks = inspect.signature(original).bind(model, *args, **kwargs).arguments
    except TypeError:  # a wrong call: let fit itself say what is wrong
        return False
    if not any(type(c).__name__ == "BackupAndRestore" for c in callbacks.get("callbacks") or ()):
        return False
    get_runtime().cannot_checkpoint(
        "its fit uses keras.callbacks.BackupAndRestore, so a preemption stops it and it "
        "resumes from that callback's last backup"
    )
    return True


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader) -> None:
        self.inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        _patch_module(module)


class _PatchingFinder(importlib.abc.MetaPathFinder):
    """Finds the Keras ``Model`` modules through the other finders and wraps their loader."""

    def find_spec(
        self, name: str, path: Any, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name not in TARGETS:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _PatchingLoader(spec.loader)
                return spec
        return None


def _skip(data: Any, batches: int, batch_size: int) -> Any | None:
    """``data`` without its first ``batches`` batches, or None when that cannot be done."""
    if data is None:
        return data
    import tensorflow as tf

    if isinstance(data, tf.data.Dataset):
        return data.skip(batches)
    if hasattr(data, "shape") and hasattr(data, "__getitem__"):
        return data[batches * batch_size :]
    if isinstance(data, (list, tuple)):
        parts = [_skip(d, batches, batch_size) for d in data]
        return None if any(p is None for p in parts) else type(data)(parts)
    if isinstance(data, dict):
        parts = {k: _skip(v, batches, batch_size) for k, v in data.items()}
        return None if any(p is None for p in parts.values()) else parts
    return None


class _PreemptibleFit:
    """One call of the user's ``fit``, split around the restored position."""

    def __init__(
        self,
        original: Callable[..., Any],
        callback_base: type,
        model: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> None:
        self.original = original
        self.model = model
        signature = inspect.signature(original)
        bound = signature.bind(model, *args, **kwargs)
        self.arguments = {k: v for k, v in bound.arguments.items() if k not in ("self", "kwargs")}
        self.arguments.update(bound.arguments.get("kwargs", {}))
        self.defaults = {
            name: p.default
            for name, p in signature.parameters.items()
            if p.default is not inspect.Parameter.empty
        }
        self.rt = get_runtime()
        self.callback = _make_callback(callback_base)(self)
        self.step = 0
        self.epoch = 0
        self.batch = 0
        self.first_batch = 0  # batches of the first epoch already done before a resume
        self.planned_step: int | None = None
        self.restored: Checkpoint | None = None
        self.checkpointer: Any = None

    def arg(self, name: str) -> Any:
        """An argument of the user's call, or ``fit``'s default for it."""
        return self.arguments.get(name, self.defaults.get(name))

    def run(self) -> Any:
        planned = self._plan_restore()
        self.planned_step = planned.manifest.step if planned else None
        epoch, batch = (
            (planned.manifest.position["epoch"], planned.manifest.position["batch"])
            if planned
            else (self.arg("initial_epoch"), 0)
        )
        self.first_batch = batch
        # An infinite dataset is iterated once across epochs (steps_per_epoch is required), so
        # each call skips every batch consumed so far; finite data restarts every epoch.
        infinite = _is_infinite(self.arg("x"))
        consumed = self.planned_step or 0
        if batch == 0:
            return self._fit(
                epoch, self.arg("epochs"), self._data_after(consumed if infinite else 0)
            )
        per_epoch = self.arg("steps_per_epoch")
        first = self._data_after(consumed if infinite else batch)
        if per_epoch:
            first["steps_per_epoch"] = per_epoch - batch
        history = self._fit(epoch, epoch + 1, first)
        if epoch + 1 >= self.arg("epochs"):
            return history
        rest = self._fit(
            epoch + 1,
            self.arg("epochs"),
            self._data_after(consumed + per_epoch - batch) if infinite else {},
        )
        for key, values in history.history.items():
            rest.history[key] = values + rest.history.get(key, [])
        return rest

    def _fit(self, initial_epoch: int, epochs: int, overrides: dict[str, Any]) -> Any:
        callbacks = [*(self.arg("callbacks") or []), self.callback]
        arguments = {**self.arguments, **overrides}
        arguments.update(initial_epoch=initial_epoch, epochs=epochs, callbacks=callbacks)
        return self.original(self.model, **arguments)

    def _plan_restore(self) -> Checkpoint | None:
        """Restore now when the model is built; else read the position and restore at the
        start of training (``on_train_begin``), checking we got that same checkpoint."""
        if self.model.built and getattr(self.model, "optimizer", None) is not None:
            self._restore()
            return self.restored
        complete = self.rt.store.complete()
        return complete[0] if complete else None

    def _restore(self) -> None:
        from tiresias_launch.tensorflow import Checkpointer, join_gang, tensor_facts

        if self.checkpointer is not None:
            return
        self.checkpointer = Checkpointer({"model": self.model, "optimizer": self.model.optimizer})
        join_gang(self.rt, getattr(self.model, "distribute_strategy", None))
        self.restored = self.checkpointer.restore(self.rt)
        self.step = self.restored.manifest.step if self.restored else 0
        self.rt.reporter.note(**tensor_facts(self.checkpointer.trainable, self.rt.env.num_ps))

    def _data_after(self, batches: int) -> dict[str, Any]:
        """``x``/``y``/``sample_weight`` without their first ``batches`` batches; ``{}`` (run
        them again, at-least-once) when the input type cannot be skipped."""
        if batches == 0:
            return {}
        batch_size = self.arg("batch_size") or 32
        given = {k: self.arg(k) for k in ("x", "y", "sample_weight")}
        skipped = {k: _skip(v, batches, batch_size) for k, v in given.items()}
        if any(given[k] is not None and v is None for k, v in skipped.items()):
            log.warning(
                "tiresias: cannot skip %d batches of %s; repeating them (at-least-once)",
                batches,
                type(given["x"]).__name__,
            )
            return {}
        return {k: v for k, v in skipped.items() if given[k] is not None}

    def save(self) -> Checkpoint | None:
        strategy = getattr(self.model, "distribute_strategy", None)
        position = {"epoch": self.epoch, "batch": self.batch, "step": self.step}
        return self.checkpointer.save(self.rt, self.step, position, strategy)


def _is_infinite(x: Any) -> bool:
    import tensorflow as tf

    return isinstance(x, tf.data.Dataset) and int(x.cardinality()) == tf.data.INFINITE_CARDINALITY


def _make_callback(base: type) -> Callable[[_PreemptibleFit], Any]:
    """The preemption callback as a subclass of this Keras flavour's ``Callback``."""

    class PreemptionCallback(base):  # type: ignore[misc, valid-type]
        def __init__(self, fit: _PreemptibleFit) -> None:
            super().__init__()
            self.fit = fit
            self._t0 = 0.0

        def on_train_begin(self, logs: Any = None) -> None:
            fit = self.fit
            fit._restore()  # no-op when the model was built before fit
            got = fit.restored.manifest.step if fit.restored else None
            if got != fit.planned_step:
                raise CheckpointError(
                    f"the checkpoint of step {fit.planned_step} could not be restored (got "
                    f"{got}); build the model before fit so the data position can follow"
                )

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self.fit.epoch = epoch
            self.fit.batch, self.fit.first_batch = self.fit.first_batch, 0

        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            fit = self.fit
            if fit.rt.should_stop(fit.step):
                fit.rt.stop(fit.save)
            self._t0 = time.perf_counter()

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            fit = self.fit
            fit.step += 1
            fit.batch += 1
            fit.rt.step_done(fit.step, time.perf_counter() - self._t0)

    return PreemptionCallback
