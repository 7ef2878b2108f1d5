"""Every private name of a framework that the runtime relies on, in one table, and the check
that runs before a patch uses them.

The patches of Keras ``fit`` and Lightning ``Trainer.fit`` and the resumable PyTorch samplers
reach into framework internals, which move between releases. Each patch checks its names
first; where one is missing the job runs unpatched (it trains as under plain ``python``) and
says once why it cannot be checkpointed exactly, instead of failing the user's import or
``fit``. ``python -m tiresias_launch.compat`` prints the table for docs/launcher.md.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
from dataclasses import dataclass
from typing import Any

from tiresias_launch.keras_flavours import TARGETS


@dataclass(frozen=True)
class Internal:
    """A name inside a framework: ``path`` (dotted attributes) of module ``module``, or,
    when ``instance``, of an instance of the class ``module`` names (set in its
    ``__init__``, so looked up on the object)."""

    framework: str  # the distribution it ships in
    module: str
    path: str
    use: str
    instance: bool = False

    @property
    def name(self) -> str:
        return f"{self.module}:{self.path}"

    def found(self, on: Any = None) -> bool:
        try:
            obj = on if self.instance else importlib.import_module(self.module)
            for part in self.path.split("."):
                obj = getattr(obj, part)
        except Exception:  # a module that moved or fails to import: not found either way
            return False
        return True


_TF_GRAPH = Internal(
    "tensorflow",
    "tensorflow.python.data.ops.dataset_ops",
    "DatasetV2._as_serialized_graph",
    "reads what a tf.data pipeline carries across epochs (shuffles, caches)",
)
#: Looked up where it is used (a fingerprint is never needed to train): without it a
#: ``State``'s ``tf.data`` iterator has no fingerprint.
TF_ITERATOR_DATASET = Internal(
    "tensorflow",
    "tf.data iterator",
    "_dataset",
    "fingerprints the dataset a State's tf.data iterator reads",
    True,
)


def _keras(module: str) -> tuple[Internal, ...]:
    flavour = TARGETS[module]
    dist = module.split(".")[0]

    def spec(s: str, use: str) -> Internal:
        where, name = s.split(":")
        return Internal(dist, where, name, use)

    common = (
        Internal(dist, module, "Model.fit", "the patched fit"),
        Internal(
            dist,
            "keras optimizer",
            "_distribution_strategy",
            "State finds the strategy an optimizer was made under (else the current one)",
            True,
        ),
        *(
            Internal(dist, flavour.callbacks, n, "one callback list over a resumed fit's phases")
            for n in ("Callback", "CallbackList", "History")
        ),
        spec(flavour.dataset_base, "positions a PyDataset/Sequence mid-epoch"),
        spec(flavour.split, "takes validation_split the way fit does"),
        spec(flavour.floatx, "converts arrays the way fit does"),
    )
    if dist == "keras":
        return (
            *common,
            Internal(
                dist,
                "keras.src.trainers.trainer",
                "Trainer._symbolic_build",
                "builds an unbuilt model before the restore",
            ),
            Internal(
                dist,
                "keras.src.trainers.trainer",
                "Trainer.get_metrics_result",
                "logs of an epoch resumed after its last batch",
            ),
        )
    return (
        *common,
        Internal(dist, module, "_get_verbosity", "the verbosity fit passes on"),
        Internal(
            dist,
            module,
            "Model._maybe_load_initial_counters_from_ckpt",
            "starts an epoch at a batch (the hook BackupAndRestore uses)",
        ),
    )


def _lightning(root: str) -> tuple[Internal, ...]:
    dist = root.split(".")[0]
    module = f"{root}.trainer.trainer"
    trainer = f"{module}.Trainer"
    return (
        Internal(dist, module, "Trainer.fit", "the patched fit"),
        Internal(dist, f"{root}.callbacks", "Callback", "the stop check and checkpoint"),
        Internal(
            dist,
            f"{root}.loops.fit_loop",
            "_process_dataloader",
            "makes the training loaders resumable",
        ),
        Internal(
            dist,
            trainer,
            "_signal_connector.received_sigterm",
            "replaces Lightning's SIGTERM stop",
            True,
        ),
        Internal(
            dist,
            trainer,
            "fit_loop.epoch_loop._batches_that_stepped",
            "the logging step after a resume",
            True,
        ),
        Internal(
            dist,
            trainer,
            "fit_loop._combined_loader",
            "the loaders' pass states in the checkpoint",
            True,
        ),
    )


def _tf_data(name: str, *paths: str) -> tuple[Internal, ...]:
    """Attributes of a ``tf.data`` transformation that an elastic fit redoes on other
    batches (``tiresias_launch.keras_elastic``)."""
    module = f"tensorflow.python.data.ops.{name}"
    use = "an elastic fit batches its tf.data input again at the largest world's size"
    return tuple(Internal("tensorflow", module, p, use, True) for p in ("_input_dataset", *paths))


#: What each patch relies on: the Keras flavours' modules, the Lightning roots, PyTorch, and
#: (by class name) the tf.data transformations an elastic fit rebatches.
INTERNALS: dict[str, tuple[Internal, ...]] = {
    # the graph read comes last: a moved Keras name is still found without importing TF
    **{module: (*_keras(module), _TF_GRAPH) for module in TARGETS},
    **{root: _lightning(root) for root in ("lightning.pytorch", "pytorch_lightning")},
    "tensorflow": (TF_ITERATOR_DATASET,),
    "torch": (
        Internal(
            "torch",
            "torch.utils.data",
            "Sampler.__iter__",
            "a loader's sampler gets a resumable subclass of its class, swapped in place "
            "(`__class__`; a sampler whose class refuses it is not resumed mid-epoch, said once)",
        ),
    ),
    "_BatchDataset": _tf_data("batch_op._BatchDataset", "_batch_size", "_drop_remainder"),
    "_ParallelBatchDataset": _tf_data(
        "batch_op._ParallelBatchDataset", "_batch_size", "_drop_remainder", "_num_parallel_calls"
    ),
    "_PrefetchDataset": _tf_data("prefetch_op._PrefetchDataset", "_buffer_size"),
    "_RepeatDataset": _tf_data("repeat_op._RepeatDataset", "_count"),
    "_OptionsDataset": _tf_data("dataset_ops._OptionsDataset"),
}


def first_missing(feature: str, on: Any = None) -> Internal | None:
    """The first name of ``feature`` (a key of INTERNALS) not found, in table order (so a
    moved Keras name is found without importing TensorFlow); instance names are looked up
    on ``on`` when given, else skipped."""
    for internal in INTERNALS[feature]:
        if (on is not None or not internal.instance) and not internal.found(on):
            return internal
    return None


@functools.cache
def version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist.replace("_", "-"))
    except importlib.metadata.PackageNotFoundError:
        return "(version unknown)"


def why_unpatched(what: str, moved: Internal) -> str:
    """The reason a patch is not applied, for ``Runtime.cannot_checkpoint``."""
    return (
        f"{moved.framework} {version(moved.framework)} has no {moved.name}, which tiresias "
        f"uses ({moved.use}), so {what} runs unpatched: a preemption stops it and it "
        "restarts from its last own checkpoint or step 0"
    )


_said: set[str] = set()


def unpatched(feature: str, what: str, moved: Internal) -> None:
    """Say once per feature that ``what`` runs unpatched, and why (the job log gets one
    ``tiresias:`` line; the coordinator hears the job cannot be checkpointed)."""
    if feature in _said:
        return
    _said.add(feature)
    from tiresias_launch.runtime import get_runtime

    get_runtime().cannot_checkpoint(why_unpatched(what, moved))


def markdown() -> str:
    """The table for docs/launcher.md."""
    rows = ["| framework | name | used for |", "| --- | --- | --- |"]
    seen = set()
    for internals in INTERNALS.values():
        for i in internals:
            if i.name not in seen:
                seen.add(i.name)
                where = f"`{i.module}` instance: `{i.path}`" if i.instance else f"`{i.name}`"
                rows.append(f"| {i.framework} | {where} | {i.use} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(markdown())
