"""A Keras ``fit`` that backs itself up with ``keras.callbacks.BackupAndRestore``.

The callback restores its own backup when ``fit`` starts, so the runtime neither restores
nor checkpoints such a call (never twice, never over the script's own state), and a
preemption stops the process as it would stop a plain run, except in the middle of one of
the callback's writes: a signal that arrives then stops it once the backup is whole.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from tiresias_launch.contract import OWN_CHECKPOINTS
from tiresias_launch.runtime import get_runtime
from tiresias_launch.signals import HeldDuringWrites

#: The callback's hooks that write or delete its backup (Keras 3 and tf_keras alike).
WRITING_HOOKS = ("on_epoch_end", "on_train_batch_end", "on_train_end")
_HELD = "__tiresias_held__"


def backs_up_itself(original: Callable[..., Any], *call: Any) -> inspect.BoundArguments | None:
    """The bound arguments of a ``fit`` call with a ``BackupAndRestore`` callback (a
    subclass too), its backups' writes held whole against preemption; else None."""
    model, args, kwargs = call
    try:
        bound = inspect.signature(original).bind(model, *args, **kwargs)
    except TypeError:  # a wrong call: let fit itself say what is wrong
        return None
    callbacks = list(bound.arguments.get("callbacks") or ())
    backups = [c for c in callbacks if _is_backup(c)]
    if not backups:
        return None
    rt = get_runtime()
    rt.cannot_checkpoint(
        "its fit uses keras.callbacks.BackupAndRestore, so a preemption stops it and "
        f"{OWN_CHECKPOINTS} (that callback's last backup)"
    )
    guard = HeldDuringWrites(rt.env.preempt_signals)
    for backup in backups:
        _hold_writes(backup, guard)
    bound.arguments["callbacks"] = callbacks
    return bound


def _is_backup(callback: object) -> bool:
    return any(k.__name__ == "BackupAndRestore" for k in type(callback).__mro__)


def _hold_writes(backup: Any, guard: HeldDuringWrites) -> None:
    """Run each writing hook of this callback object under ``guard`` (once per object,
    whatever the number of fit calls it serves)."""
    if getattr(backup, _HELD, False):
        return
    for name in WRITING_HOOKS:
        hook = getattr(backup, name)

        @functools.wraps(hook)
        def held(*args: Any, _hook: Callable[..., Any] = hook, **kwargs: Any) -> Any:
            with guard.write():
                return _hook(*args, **kwargs)

        setattr(backup, name, held)
    setattr(backup, _HELD, True)
