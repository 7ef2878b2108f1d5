"""Public facade of the Tiresias job runtime (``import tiresias``).

``State``, ``preemptible`` (TensorFlow or PyTorch) and ``strategy`` (TensorFlow) load on
first use, so importing the facade stays cheap for processes that never train.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tiresias_launch import EXIT_CHECKPOINTED
from tiresias_launch.runtime import get_runtime

if TYPE_CHECKING:
    from tiresias_launch.state import State, preemptible
    from tiresias_launch.tensorflow import strategy

__all__ = ["EXIT_CHECKPOINTED", "State", "get_runtime", "preemptible", "report", "strategy"]


def report(**fields: Any) -> None:
    """Attach facts to the next progress report, e.g. ``report(skew=0.4)`` when the script
    knows its skew better than the runtime (fields: skew, tensor_bytes)."""
    unknown = set(fields) - {"skew", "tensor_bytes"}
    if unknown:
        raise ValueError(f"tiresias.report: unknown fields {sorted(unknown)}")
    get_runtime().reporter.note(**fields)


def __getattr__(name: str) -> Any:
    if name in ("State", "preemptible"):
        from tiresias_launch import state

        return getattr(state, name)
    if name == "strategy":
        from tiresias_launch import tensorflow

        return tensorflow.strategy
    raise AttributeError(f"module 'tiresias' has no attribute {name!r}")
