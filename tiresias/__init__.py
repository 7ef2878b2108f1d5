"""Public facade of the Tiresias job runtime (``import tiresias``).

TensorFlow-backed names (``State``, ``preemptible``, ``strategy``) load on first use, so
importing the facade stays cheap for processes that never train.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tiresias_launch import EXIT_CHECKPOINTED
from tiresias_launch.runtime import get_runtime

if TYPE_CHECKING:
    from tiresias_launch.tensorflow import State, preemptible, strategy

__all__ = ["EXIT_CHECKPOINTED", "State", "get_runtime", "preemptible", "report", "strategy"]

_LAZY = {"State", "preemptible", "strategy"}


def report(**fields: Any) -> None:
    """Attach facts to the next progress report, e.g. ``report(skew=0.4)`` when the script
    knows its skew better than the runtime (fields: skew, tensor_bytes)."""
    unknown = set(fields) - {"skew", "tensor_bytes"}
    if unknown:
        raise ValueError(f"tiresias.report: unknown fields {sorted(unknown)}")
    get_runtime().reporter.note(**fields)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from tiresias_launch import tensorflow

        return getattr(tensorflow, name)
    raise AttributeError(f"module 'tiresias' has no attribute {name!r}")
