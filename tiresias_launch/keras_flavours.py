"""Where each Keras flavour (Keras 3, legacy tf_keras) keeps what the patched ``fit`` uses.

Kept apart from ``keras`` (the import hook) and ``keras_data`` (TensorFlow's side) so that
both read one table and neither imports the other back.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Flavour:
    """Where one Keras flavour keeps what the patched ``fit`` uses."""

    callbacks: str  # module with Callback, CallbackList and History
    dataset_base: str  # "module:Class" of PyDataset (Keras 3) or Sequence (tf_keras)
    split: str  # "module:function" taking the validation split the way fit does
    floatx: str  # "module:function" giving the float type fit converts arrays to
    verbosity: Callable[[Any, Any], Any]  # (verbose, model) → what fit passes on
    #: Iterators fit creates of a finite tf.data dataset: (once per fit call, per epoch);
    #: each draws new shuffle seeds, so a resume must create as many first.
    dataset_iterators: tuple[int, int]
    #: The same for a dataset whose batch count is unknown (it ends with an exhausted
    #: iterator).
    unknown_iterators: tuple[int, int]
    #: Iterators made of a ``validation_data`` dataset per validation pass, and which of
    #: them the pass iterates (the others draw seeds unused).
    validation_iterators: tuple[int, int]
    #: fit can start an epoch at a batch (tf_keras: the hook BackupAndRestore uses), so a
    #: stream (infinite dataset) resumes in one fit over one iterator.
    starts_mid_epoch: bool

    def load(self, spec: str) -> Any:
        module, name = spec.split(":")
        return getattr(importlib.import_module(module), name)


def _tf_keras_verbosity(verbose: Any, model: Any) -> Any:
    from tf_keras.src.engine.training import _get_verbosity

    return _get_verbosity(verbose, model.distribute_strategy)


#: Module that defines ``Model`` → its flavour.
TARGETS = {
    "keras.src.models.model": Flavour(
        "keras.src.callbacks",
        "keras.src.trainers.data_adapters.py_dataset_adapter:PyDataset",
        "keras.src.trainers.data_adapters.array_slicing:train_validation_split",
        "keras.src.backend:floatx",
        lambda verbose, model: verbose,  # Keras 3's ProgbarLogger resolves "auto" itself
        (0, 2),  # the epoch's, and one made for the next epoch and never used
        (0, 1),  # the epoch's, iterated to its end (it calls a last batch that never ends)
        (2, 0),  # the same for each evaluation
        False,
    ),
    "tf_keras.src.engine.training": Flavour(
        "tf_keras.src.callbacks",
        "tf_keras.src.utils.data_utils:Sequence",
        "tf_keras.src.engine.data_adapter:train_validation_split",
        "tf_keras.src.backend:floatx",
        _tf_keras_verbosity,
        (1, 1),  # one made before the first epoch and never used, then the epoch's
        (1, 1),
        (2, 1),  # the same for each evaluation (one epoch)
        True,
    ),
}
