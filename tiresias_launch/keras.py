"""Makes unmodified Keras ``model.fit`` scripts preemptible (Keras 3 and legacy tf_keras).

``install()`` (run by ``python -m tiresias_launch.exec``) patches ``Model.fit`` as soon as
Keras defines it, through an import hook, so the user's file is never edited. The patched
``fit`` stops at a batch boundary when the gang agrees to, saves the model, the optimizer,
the data position and the state of the stock callbacks, and exits with EXIT_CHECKPOINTED.
On resume it continues at the exact batch, and callbacks cannot tell: a partly done epoch
runs as one ``fit`` over its remaining batches (numbered from where they left off), then
one ``fit`` for the remaining epochs, both driving one ``CallbackList`` that begins and ends
training once and carries ``History`` and callback state over from the checkpoint.

What "the remaining batches" are depends on the input (:mod:`tiresias_launch.keras_data`).
Each ``fit`` call of a process is numbered; the checkpoint records the number and the
``History`` of the calls already finished, so a script calling ``fit`` in a loop resumes the
interrupted call and gets the recorded ``History`` back from the calls before it.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

from tiresias_launch import compat
from tiresias_launch.checkpoint import Checkpoint, CheckpointError
from tiresias_launch.imports import patch_on_import
from tiresias_launch.keras_backups import backs_up_itself
from tiresias_launch.keras_callbacks import history_record, make_callback_list, step_reporter
from tiresias_launch.keras_flavours import TARGETS, Flavour
from tiresias_launch.runtime import Runtime, get_runtime

if TYPE_CHECKING:  # they import TensorFlow: only once a Keras fit runs
    from tiresias_launch import keras_data, keras_elastic

log = logging.getLogger(__name__)


_PATCHED = "__tiresias_patched__"


def install() -> None:
    """Patch ``Model.fit`` of every Keras flavour, now if loaded, else when imported."""
    patch_on_import(dict.fromkeys(TARGETS, _patch_module))


def _patch_module(module: ModuleType) -> None:
    feature = module.__name__
    model_cls = getattr(module, "Model", None)
    if model_cls is None or not hasattr(model_cls, "fit"):
        compat.unpatched(feature, "its Keras fit", compat.INTERNALS[feature][0])
        return
    if getattr(model_cls.fit, _PATCHED, False):
        return
    original = model_cls.fit
    flavour = TARGETS[feature]

    @functools.wraps(original)
    def fit(self: Any, *args: Any, **kwargs: Any) -> Any:
        # the other names live in modules loaded by now: checked at the first call
        moved = compat.first_missing(feature)
        if moved is not None:
            compat.unpatched(feature, "its Keras fit", moved)
            return original(self, *args, **kwargs)
        backed_up = backs_up_itself(original, self, args, kwargs)
        if backed_up is not None:  # its own backups, with a callback reporting its steps
            reporter = step_reporter(flavour, get_runtime().step_done)
            backed_up.arguments["callbacks"] = [*backed_up.arguments["callbacks"], reporter]
            return original(*backed_up.args, **backed_up.kwargs)
        return _PreemptibleFit(original, flavour, self, args, kwargs).run()

    setattr(fit, _PATCHED, True)
    model_cls.fit = fit


@dataclass
class _Job:
    """What this process knows about the job across its ``fit`` calls."""

    plan: Checkpoint | None  # the checkpoint to resume from (read at the first fit call)
    calls: int = 0  # fit calls started in this process
    step: int = 0  # batches trained by the job, all fit calls and runs together
    restored: bool = False  # the runtime's one restore has been done
    finished: list[dict[str, Any]] = field(default_factory=list)  # History of each done call
    #: Each call's batch at the job's largest world (elastic jobs: tiresias_launch.keras_elastic)
    batches: dict[str, Any] = field(default_factory=dict)

    @property
    def position(self) -> dict[str, Any]:
        return self.plan.manifest.position if self.plan else {}

    @property
    def resume_call(self) -> int | None:
        """Number of the fit call the checkpoint was written in (older ones: the first)."""
        return self.position.get("fit_call", 0) if self.plan else None


_job: _Job | None = None


def _the_job(rt: Runtime) -> _Job:
    global _job
    if _job is None:
        complete = rt.store.complete()
        _job = _Job(complete[0] if complete else None)
        _job.finished = list(_job.position.get("finished_fits", []))
        _job.batches = dict(_job.position.get("batches", {}))
    return _job


class _PreemptibleFit:
    """One call of the user's ``fit``: replayed from the checkpoint, resumed, or run."""

    def __init__(
        self,
        original: Callable[..., Any],
        flavour: Flavour,
        model: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> None:
        self.original = original
        self.flavour = flavour
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
        self.job = _the_job(self.rt)
        self.call = self.job.calls
        self.job.calls += 1
        self.epoch = 0
        self.batch = 0  # batches of the current epoch done
        self.fit_step = 0  # batches trained by this fit call, all runs together
        self.checkpointer: Any = None
        self.callbacks: Any = None
        self.source: keras_data.Source | None = None
        self.restored_callbacks: dict[str, Any] = {}  # callback state from the checkpoint
        self.restored_metrics: list[Any] = []  # metric totals of the partly done epoch
        self.inputs: dict[str, Any] = {}  # their fingerprints (tiresias_launch.fingerprint)
        self.batching: keras_elastic.Batching | None = None  # an elastic job's batch kept
        self.metrics: dict[str, Any] = {}  # the metric totals the next checkpoint keeps

    @property
    def log_scale(self) -> int:
        """tf_keras sums the replicas' metric results unless told otherwise, so a resized
        run's logs are scaled to the largest world's (tiresias_launch.keras_elastic)."""
        summed = getattr(self.model, "distribute_reduction_method", None) in ("auto", "sum")
        return self.batching.log_scale if self.batching and summed else 1

    def arg(self, name: str) -> Any:
        """An argument of the user's call, or ``fit``'s default for it."""
        return self.arguments.get(name, self.defaults.get(name))

    def run(self) -> Any:
        from tiresias_launch import horovod_elastic, keras_data, keras_elastic, keras_probe

        resume_call = self.job.resume_call
        finished = resume_call is not None and self.call < resume_call
        position = self.job.position if resume_call == self.call else {}
        record = self.job.batches.get(str(self.call))
        if self.rt.env.mode == "horovod":  # each rank its own batches
            self.batching = horovod_elastic.keep_batch(self.rt, self.arg, record)
        else:
            learn = None if self.call else functools.partial(keras_probe.learn, self.rt, self.model)
            self.batching = keras_elastic.keep_global_batch(self.rt, self.arg, record, learn)
        self.arguments.update(self.batching.overrides)
        if self.batching.record is not None:
            self.job.batches[str(self.call)] = self.batching.record
        epochs, first_epoch = self.arg("epochs"), self.arg("initial_epoch") or 0
        strategy = getattr(self.model, "distribute_strategy", None)
        self.source = keras_data.source_for(
            self.arguments,
            self.defaults,
            self.flavour,
            position,
            getattr(strategy, "num_replicas_in_sync", 1),
            self.call,
        )
        if finished:  # its input is left as the call left it: a later call continues it
            record = self.job.finished[self.call]
            self._replay_inputs(first_epoch, first_epoch + len(record["epoch"]), True)
            self.source.replay_call(record)
            return self._replay(record)
        epoch, batch = position.get("epoch", first_epoch), position.get("batch", 0)
        self.fit_step = position.get("fit_step", position.get("step", 0))  # older layouts
        self.inputs = self._inputs()
        if position:
            from tiresias_launch.fingerprint import inputs_changed

            self.source.resumes(self.rt.started)
            inputs_changed(self.rt, position.get("inputs", {}), self.inputs)
        # before the RNG states are restored
        why_replay = self._replay_inputs(first_epoch, epoch, False)
        if position and not self.source.resumes_mid_epoch:
            log.warning(
                "tiresias: %s; epoch %d restarts from its first batch (%d batches run twice)"
                " in the order Keras feeds it",
                self.source.why_inexact,
                epoch + 1,
                batch,
            )
            self.fit_step -= batch
            batch = 0
        elif position and (
            why := self.source.why_inexact
            or why_replay
            or (batch and self.source.why_inexact_mid_epoch)
        ):
            log.warning(
                "tiresias: resuming at epoch %d, batch %d: %s draws new shuffle seeds, so "
                "the batches from here are as many as without the preemption but not the same",
                epoch + 1,
                batch,
                why,
            )
        self._prepare(resumed=bool(position))
        self.callbacks = make_callback_list(self.flavour)(self, epochs, position)
        if batch and self.flavour.starts_mid_epoch and self.source.stream:
            self._fit_from_batch(epoch, epochs, batch)
        else:
            self._fit_in_phases(epoch, epochs, batch)
        history = self.callbacks.history
        self.job.finished.append(
            {
                "model": self.model.name,
                "params": history.params,
                **history_record(history),
                **self.source.call_record(),
            }
        )
        return history

    def _replay_inputs(self, first_epoch: int, epoch: int, whole_call: bool) -> str:
        """Replay the training and validation inputs' epochs ``first_epoch``..``epoch`` (of
        a call that finished, ``whole_call``); why that was not exact ('' when it was)."""
        from tiresias_launch import tf_data

        assert self.source is not None
        why = self.source.replay_epochs(epoch - first_epoch, whole_call)
        if not tf_data.replay_validation(
            self.arg("validation_data"),
            self.arg("validation_freq"),
            range(first_epoch, epoch),
            self.flavour.validation_iterators,
        ):
            why = why or "a cached validation dataset reshuffling after its cache"
        return why

    def _inputs(self) -> dict[str, Any]:
        """Fingerprints of the rows trained on and validated on (arrays: after the split)."""
        from tiresias_launch import fingerprint, keras_data

        training, validation = self.arg("x"), self.arg("validation_data")
        if self.batching is not None and self.batching.unbatched is not None:  # any world
            training = self.batching.unbatched
        elif isinstance(self.source, keras_data.ArraySource):
            training = self.source.tensors
            validation = self.source.fixed.get("validation_data", validation)
        return fingerprint.of_inputs(training=training, validation=validation)

    def _fit_in_phases(self, epoch: int, epochs: int, batch: int) -> None:
        """The rest of a partly done epoch as one fit, then the remaining epochs."""
        phases = [(epoch, epochs, batch)]
        if batch and epoch + 1 < epochs:
            phases = [(epoch, epoch + 1, batch), (epoch + 1, epochs, 0)]
        consumed = self.fit_step
        for i, (start, end, skip) in enumerate(phases):
            if i and self.model.stop_training:  # a callback stopped training in phase 1
                break
            self.callbacks.offset = self.callbacks.start = skip
            self.callbacks.last_phase = i == len(phases) - 1
            overrides = self.source.phase(start, skip, consumed)
            consumed += (self.source.steps or 0) - skip
            self._fit(start, end, overrides)

    def _fit_from_batch(self, epoch: int, epochs: int, batch: int) -> None:
        """One fit that starts epoch ``epoch`` at ``batch`` (tf_keras numbers its batches
        from there itself) over one iterator of the stream."""
        self.callbacks.offset, self.callbacks.start = 0, batch
        overrides = self.source.phase(epoch, 0, self.fit_step)
        self.model._maybe_load_initial_counters_from_ckpt = lambda *_: (epoch, batch)
        try:
            self._fit(epoch, epochs, overrides)
        finally:
            del self.model._maybe_load_initial_counters_from_ckpt

    def _fit(self, initial_epoch: int, epochs: int, overrides: dict[str, Any]) -> None:
        arguments = {**self.arguments, **overrides}
        arguments.update(initial_epoch=initial_epoch, epochs=epochs, callbacks=self.callbacks)
        self.original(self.model, **arguments)

    def _replay(self, record: dict[str, Any]) -> Any:
        """A call finished before the preemption: its recorded History, without training."""
        if record["model"] != self.model.name:
            raise CheckpointError(
                f"fit call {self.call + 1} trained model {record['model']!r} before the "
                f"preemption but trains {self.model.name!r} now: the script does not repeat "
                "its fit calls in the same order, so it cannot be resumed"
            )
        history = importlib.import_module(self.flavour.callbacks).History()
        history.set_model(self.model)
        history.set_params(record["params"])
        history.epoch, history.history = list(record["epoch"]), dict(record["history"])
        self.model.history = history
        log.info("tiresias: fit call %d finished before the preemption; not rerun", self.call + 1)
        return history

    def _prepare(self, resumed: bool) -> None:
        """Join the gang, build the model if Keras would only build it in the first step,
        and restore (first call of the process) or adopt (later calls) the checkpointer."""
        from tiresias_launch import keras_build
        from tiresias_launch.tensorflow import join_gang

        join_gang(self.rt, getattr(self.model, "distribute_strategy", None))
        keras_build.build(self.model, self.source)
        if not _is_built(self.model):
            if resumed:
                raise CheckpointError(
                    "tiresias cannot restore this fit: the model is not built and its input "
                    "gives no sample batch to build it; build the model before fit"
                )
            return  # created at the first batch, once Keras has built the model
        self._make_checkpointer(resumed)

    def _make_checkpointer(self, resumed: bool) -> None:
        from tiresias_launch.tensorflow import Checkpointer, tensor_facts

        self.checkpointer = Checkpointer(
            {
                "model": self.model,
                "optimizer": self.model.optimizer,
                "seeds": _seed_states(self.model),
            },
            extra=(self._extra_state, self._restore_extra),
        )
        self.rt.reporter.note(**tensor_facts(self.checkpointer.trainable, self.rt.env.num_ps))
        if self.job.restored:
            return
        self.job.restored = True
        restored = self.checkpointer.restore(self.rt)
        got = restored.manifest.step if restored else None
        wanted = self.job.plan.manifest.step if (self.job.plan and resumed) else None
        if got != wanted:
            raise CheckpointError(
                f"the checkpoint of step {wanted} could not be restored (got {got}), so "
                "this fit cannot continue at its position"
            )
        if restored:
            self.job.step = restored.manifest.step

    def _extra_state(self) -> dict[str, Any]:
        return {"callbacks": self.callbacks.state() if self.callbacks else {}, **self.metrics}

    def _restore_extra(self, state: dict[str, Any]) -> None:
        from tiresias_launch import keras_data

        self.restored_callbacks = state.get("callbacks", {})
        self.restored_metrics = keras_data.restored_metrics(state, self.rt.env)

    def save(self) -> Checkpoint | None:
        if self.checkpointer is None:
            return None  # preempted before the first batch of an unbuilt model: nothing new
        from tiresias_launch import keras_data

        self.metrics = keras_data.saved_metrics(self.model, self.rt.env)  # every rank
        strategy = getattr(self.model, "distribute_strategy", None)
        position = {
            "epoch": self.epoch,
            "batch": self.batch,
            "step": self.job.step,
            "fit_call": self.call,
            "fit_step": self.fit_step,
            "finished_fits": self.job.finished,
            "batches": self.job.batches,
            "inputs": self.inputs,
            **(self.source.position() if self.source else {}),
        }
        return self.checkpointer.save(self.rt, self.job.step, position, strategy)

    # -- the preemption callback's hooks -----------------------------------------------
    def epoch_begins(self, epoch: int, batch: int) -> None:
        """After Keras reset the metrics: a partly done epoch gets its totals back, so its
        logs and History average over all of its batches."""
        from tiresias_launch import keras_data

        self.epoch, self.batch = epoch, batch
        if self.source is not None:
            self.source.epoch_begins(epoch)
        if batch and self.restored_metrics:
            variables = keras_data.metric_variables(self.model)
            if len(variables) != len(self.restored_metrics):
                log.warning("tiresias: metrics changed since the checkpoint; not restored")
            else:
                for v, value in zip(variables, self.restored_metrics, strict=True):
                    v.assign(value)
            self.restored_metrics = []

    def batch_begins(self) -> None:
        if self.rt.should_stop(self.job.step):
            self.rt.stop(self.save)

    def batch_ends(self, batch: int, seconds: float) -> None:
        if self.checkpointer is None:
            self._make_checkpointer(resumed=False)
        self.job.step += 1
        self.fit_step += 1
        self.batch = batch + 1
        self.rt.step_done(self.job.step, seconds)


def _is_built(model: Any) -> bool:
    return bool(getattr(model, "built", False)) and bool(model.variables)


def _seed_states(model: Any) -> list[Any]:
    """Keras 3 ``SeedGenerator`` states (Dropout and other random layers): model variables
    that ``tf.train.Checkpoint`` of the model does not reach."""
    return [v.value for v in model.variables if v.name == "seed_generator_state"]
