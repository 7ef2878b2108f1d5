"""The bounds every message's values keep, checked at the edge (``protocol.validate``) so
that nothing a peer sends reaches the journal, the core or a log as a value no job could
have: containers nested past ``MAX_DEPTH`` (a recursive check would blow the stack), NaN or
infinity, integers SQLite and JSON cannot hold exactly, and durations past a lifetime."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

#: Deepest nesting of maps and lists below a message's top level (a launch needs 3).
MAX_DEPTH = 8
#: Largest integer (and float) magnitude: exact in a double, in JSON and in SQLite.
MAX_INT = 2**53
#: Longest duration in seconds any field may state (about 31 years).
MAX_SECONDS = 1e9
#: Most GPU-seconds a job may have attained (10,000 GPUs for MAX_SECONDS).
MAX_GPU_SECONDS = 1e13
#: Top-level fields that are durations in seconds, by message type.
DURATIONS: Mapping[str, tuple[str, ...]] = {
    "submit": ("duration",),
    "report": ("iter_time",),
    "launch": ("grace",),
    "preempt": ("grace",),
    "kill": ("grace",),
    "advance": ("seconds",),
}
#: The runtime's own maps in a ``report``: each key a count (steps, bytes, epochs) or, where
#: named here, seconds.
FACT_MAPS = ("checkpoint", "warmup")
FACT_SECONDS = frozenset({"seconds", "build", "restore", "first_step"})


class BoundsError(ValueError):
    """A value out of bounds; the text names the field."""


def check_value(where: str, value: Any) -> None:
    """Every number in ``value`` (at any depth up to MAX_DEPTH) is finite and at most
    MAX_INT in magnitude; iterative, so no input can exhaust the stack, and level by level,
    so a reply of thousands of jobs costs a type test per value, not a tuple and a
    generator step each."""
    level, depth = [value], 0
    while level:
        deeper: list[Any] = []
        for item in level:
            kind = type(item)
            if kind is dict or kind is list:
                if depth >= MAX_DEPTH:
                    raise BoundsError(f"{where} is nested deeper than {MAX_DEPTH} levels")
                deeper.extend(item.values() if kind is dict else item)
            elif kind is float:
                if not math.isfinite(item):
                    if depth == 0:
                        raise BoundsError(f"{where} must be a finite number, got {item!r}")
                    raise BoundsError(f"{where} must not contain NaN or infinity")
                if item > MAX_INT or item < -MAX_INT:
                    raise BoundsError(f"{where} holds {item!r}, beyond ±{MAX_INT}")
            elif kind is int and (item > MAX_INT or item < -MAX_INT):
                raise BoundsError(f"{where} holds {item}, beyond ±{MAX_INT}")
        level, depth = deeper, depth + 1


def check_message(t: str, msg: Mapping[str, Any]) -> None:
    """The generic bounds on every field of a message of type ``t`` but its ``id`` (the
    sender's own token, only echoed back), then the durations and the report's own maps."""
    for name, value in msg.items():
        if name != "id":
            check_value(f"{t}: '{name}'", value)
    for name in DURATIONS.get(t, ()):
        _at_most(f"{t}: '{name}'", msg.get(name), MAX_SECONDS)
    if t == "report":
        _at_most("report: 'gpu_time'", msg.get("gpu_time"), MAX_GPU_SECONDS)
        for name in FACT_MAPS:
            facts = msg.get(name) or {}
            for key, value in facts.items():
                where = f"report: '{name}.{key}'"
                if type(value) not in (int, float) or value < 0:
                    raise BoundsError(f"{where} must be a number >= 0, got {value!r}")
                _at_most(where, value, MAX_SECONDS if key in FACT_SECONDS else MAX_INT)


def _at_most(where: str, value: Any, limit: float) -> None:
    if value is not None and value > limit:
        raise BoundsError(f"{where} must be at most {limit:g}, got {value!r}")
