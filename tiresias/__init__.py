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


def report(step: int | None = None, **fields: Any) -> None:
    """Tell the coordinator what only the script knows.

    ``report(step=n)``, once per iteration (at its top, ``n`` the iterations done), from a
    loop that checkpoints itself (no ``State``, no ``fit``): the coordinator then sees its
    progress and, from a run's first call, the step it resumed at. ``report(skew=0.4)``
    when the script knows its skew better than the runtime (fields: skew, tensor_bytes).
    """
    unknown = set(fields) - {"skew", "tensor_bytes"}
    if unknown:
        raise ValueError(f"tiresias.report: unknown fields {sorted(unknown)}")
    if step is not None and (type(step) is not int or step < 0):
        raise ValueError(f"tiresias.report: step must be a count of iterations, not {step!r}")
    rt = get_runtime()
    if fields:
        rt.reporter.note(**fields)
    if step is not None:
        rt.step_reported(step)


def __getattr__(name: str) -> Any:
    if name in ("State", "preemptible"):
        from tiresias_launch import state

        return getattr(state, name)
    if name == "strategy":
        from tiresias_launch import tensorflow

        return tensorflow.strategy
    raise AttributeError(f"module 'tiresias' has no attribute {name!r}")
