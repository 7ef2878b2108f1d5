"""The callbacks of a resumed Keras ``fit``: one ``CallbackList`` that drives every phase of a
call (training begins and ends once, batch numbers continue) with the preemption callback
first, and the state of the stock callbacks that rides in the checkpoint."""

from __future__ import annotations

import functools
import importlib
import time
from collections.abc import Callable
from typing import Any, Protocol

from tiresias_launch.keras_flavours import Flavour

#: Stock callbacks whose state must survive a preemption: class name → attributes.
CALLBACK_STATE = {
    "History": ("epoch", "history"),
    "EarlyStopping": ("wait", "stopped_epoch", "best", "best_weights", "best_epoch"),
    "ReduceLROnPlateau": ("wait", "cooldown_counter", "best"),
    "ModelCheckpoint": (
        "best",
        "epochs_since_last_save",
        "_batches_seen_since_last_saving",
        "_last_batch_seen",
    ),
}


class FitHooks(Protocol):
    """What the callbacks need of the preemptible ``fit`` they serve."""

    model: Any
    source: Any
    restored_callbacks: dict[str, Any]
    log_scale: int  # logged metric values are multiplied by it (an elastic job's, resized)

    def arg(self, name: str) -> Any: ...
    def epoch_begins(self, epoch: int, batch: int) -> None: ...
    def batch_begins(self) -> None: ...
    def batch_ends(self, batch: int, seconds: float) -> None: ...


def history_record(history: Any) -> dict[str, Any]:
    """History as JSON (it rides in the checkpoint manifest)."""
    return {
        "epoch": [int(e) for e in history.epoch],
        "history": {k: [float(v) for v in vs] for k, vs in history.history.items()},
    }


def _metric_results(model: Any) -> dict[str, Any]:
    results = getattr(model, "get_metrics_result", None)  # Keras 3
    return dict(results()) if results is not None else {}


def _callback_state(callback: Any) -> dict[str, Any] | None:
    classes = [c.__name__ for c in type(callback).__mro__]
    names = next((CALLBACK_STATE[c] for c in classes if c in CALLBACK_STATE), None)
    if names is None:
        return None
    return {n: getattr(callback, n) for n in names if hasattr(callback, n)}


@functools.cache
def make_callback_list(flavour: Flavour) -> Callable[..., Any]:
    """One ``CallbackList`` for every ``fit`` of a call, as a subclass of this flavour's."""
    module = importlib.import_module(flavour.callbacks)

    class PreemptionCallback(module.Callback):  # type: ignore[misc, name-defined]
        """First in the list, so no other callback sees a batch that is not run: stop
        checks, position and step accounting."""

        def __init__(self, fit: FitHooks, batches: ResumableCallbackList) -> None:
            super().__init__()
            self.fit = fit
            self.batches = batches
            self._t0 = 0.0

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self.fit.epoch_begins(epoch, self.batches.start)
            self.batches.start = 0

        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            self.fit.batch_begins()
            self._t0 = time.perf_counter()

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            self.fit.batch_ends(batch, time.perf_counter() - self._t0)

    class ResumableCallbackList(module.CallbackList):  # type: ignore[misc, name-defined]
        """The user's callbacks, History, progress bar and ours, across the phases of one
        resumed ``fit``: training begins and ends once, batches of a partly done epoch keep
        their numbers (``offset``), and stock callbacks get their saved state back."""

        def __init__(self, fit: FitHooks, epochs: int, position: dict[str, Any]) -> None:
            user = fit.arg("callbacks") or []
            if isinstance(user, module.CallbackList):
                user = user.callbacks
            self.offset = 0  # added to Keras's batch numbers (the rest of an epoch, in phases)
            self.start = 0  # batches of the next epoch already done
            self.last_phase = True
            self.began = self.ended = False
            self.trained, self.totals = False, None
            self.resumed = bool(position)
            self.fit = fit
            verbose = flavour.verbosity(fit.arg("verbose"), fit.model)
            super().__init__(
                [PreemptionCallback(fit, self), *user],
                add_history=True,
                add_progbar=verbose != 0,
                model=fit.model,
                verbose=verbose,
                epochs=epochs,
                steps=fit.source.steps if fit.source else None,
            )

        @property
        def history(self) -> Any:
            return next(c for c in self.callbacks if isinstance(c, module.History))

        def state(self) -> dict[str, Any]:
            states = {}
            for i, callback in enumerate(self.callbacks):
                s = _callback_state(callback)
                if s is not None:
                    states[f"{i}:{type(callback).__name__}"] = s
            return states

        def on_train_begin(self, logs: Any = None) -> None:
            if self.began:
                return
            self.began = True
            if self.resumed:
                for callback in self.callbacks:  # continue the file, do not truncate it
                    if any(c.__name__ == "CSVLogger" for c in type(callback).__mro__):
                        callback.append = True
            super().on_train_begin(logs)
            saved = self.fit.restored_callbacks if self.resumed else {}
            for i, callback in enumerate(self.callbacks):
                for name, value in saved.get(f"{i}:{type(callback).__name__}", {}).items():
                    setattr(callback, name, value)

        def on_train_end(self, logs: Any = None) -> None:
            if self.ended or not (self.last_phase or self.fit.model.stop_training):
                return
            self.ended = True
            super().on_train_end(logs)

        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            super().on_train_batch_begin(batch + self.offset, logs)

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            self.trained = True
            super().on_train_batch_end(batch + self.offset, self.scaled(logs))

        def on_test_batch_end(self, batch: int, logs: Any = None) -> None:
            super().on_test_batch_end(batch, self.scaled(logs))

        def on_test_end(self, logs: Any = None) -> None:
            super().on_test_end(self.scaled(logs))

        def scaled(self, logs: Any) -> Any:
            """The logs of the job's largest world (``FitHooks.log_scale``)."""
            k = self.fit.log_scale
            if k == 1 or not isinstance(logs, dict):
                return logs
            return {
                n: v * k if isinstance(v, float | int) or hasattr(v, "dtype") else v
                for n, v in logs.items()
            }

        # Keras 3 ends an epoch of unknown length with a batch that begins and never ends:
        # a checkpoint taken there resumes into an epoch with no batches left, whose logs
        # Keras leaves empty; they are the restored totals, read before validation.
        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self.trained, self.totals = False, None
            super().on_epoch_begin(epoch, logs)

        def on_test_begin(self, logs: Any = None) -> None:
            if not self.trained and self.totals is None:
                self.totals = _metric_results(self.fit.model)
            super().on_test_begin(logs)

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            if not self.trained:
                totals = self.totals if self.totals is not None else _metric_results(self.fit.model)
                logs = {**totals, **(logs or {})}
            super().on_epoch_end(epoch, self.scaled(logs))

    return ResumableCallbackList


def step_reporter(flavour: Flavour, step_done: Callable[[int, float], None]) -> Any:
    """A callback that only reports steps (epochs before × batches per epoch + batch), for a
    ``fit`` left to its own backups: its first report after a restart tells the coordinator
    where the backup resumed it, and so what the preemption lost."""
    base = importlib.import_module(flavour.callbacks).Callback

    class ReportSteps(base):  # type: ignore[misc, valid-type]
        epoch, t0 = 0, 0.0

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self.epoch = epoch

        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            self.t0 = time.perf_counter()

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            per_epoch = (self.params or {}).get("steps") or 0
            step_done(self.epoch * per_epoch + batch + 1, time.perf_counter() - self.t0)

    return ReportSteps()
