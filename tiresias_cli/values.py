"""Value types shared by every command line (``tiresias``, ``tiresias-run``,
``tiresias-coordinator``, ``tiresias-agent``, ``tiresias-sim``, ``ibverbs-tap``): a value out
of range is a usage error naming the option, exit code 2, never a traceback or a silent
acceptance.

Each parser is a plain function that raises ``ValueError`` with the message a user reads;
:class:`Checked` makes it a click type."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click

#: Largest count any option takes: far above any cluster, and within every wire format.
MAX_COUNT = 2**31 - 1


class Checked(click.ParamType):  # type: ignore[type-arg]
    """A click type from a parser function; its ``ValueError`` is the usage error's text."""

    def __init__(self, parse: Callable[[str], Any], metavar: str) -> None:
        self.parse = parse
        self.name = metavar.lower()
        self.metavar = metavar

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return self.metavar

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):  # a default, already a value
            return value
        try:
            return self.parse(value)
        except ValueError as e:
            self.fail(str(e), param, ctx)


def _number(
    text: str, kind: Callable[[str], float], ok: Callable[[float], bool], expected: str
) -> float:
    """``text`` as a finite ``kind`` for which ``ok`` holds; else a ValueError that says
    what was ``expected``."""
    try:
        value = kind(text)
    except (ValueError, OverflowError):
        raise ValueError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"expected a finite number, got {text!r}")
    if not ok(value):
        raise ValueError(f"expected {expected}, got {text!r}")
    return value


def seconds(text: str) -> float:
    """A duration: finite, >= 0."""
    return _number(text, float, lambda v: v >= 0, "seconds >= 0")


def positive_seconds(text: str) -> float:
    """A period: finite, > 0."""
    return _number(text, float, lambda v: v > 0, "seconds > 0")


def fraction(text: str) -> float:
    """A share such as a skew or PACKLIMIT: in [0, 1]."""
    return _number(text, float, lambda v: 0.0 <= v <= 1.0, "a number in [0, 1]")


def factor(text: str) -> float:
    """A multiple of something: finite, >= 0."""
    return _number(text, float, lambda v: v >= 0, "a finite number >= 0")


def count(text: str) -> int:
    """A whole number >= 0 (and at most ``MAX_COUNT``)."""
    value = _number(text, int, lambda v: 0 <= v <= MAX_COUNT, f"a whole number 0 to {MAX_COUNT}")
    return int(value)


def positive_count(text: str) -> int:
    """A whole number >= 1 (and at most ``MAX_COUNT``)."""
    value = count(text)
    if value < 1:
        raise ValueError(f"expected a whole number >= 1, got {text!r}")
    return value


@dataclass(frozen=True)
class Workers:
    """``--workers``: the most workers and, for an elastic gang, the fewest it may run on
    (None: a fixed count)."""

    most: int
    least: int | None = None

    def __str__(self) -> str:
        return str(self.most) if self.least is None else f"{self.least}:{self.most}"


def worker_count(text: str) -> Workers:
    """``--workers``: a whole number >= 1, or a range ``MIN:MAX`` (1 <= MIN <= MAX) for an
    elastic gang; ``MIN == MAX`` is a fixed count."""
    lo, sep, hi = text.partition(":")
    if not sep:
        return Workers(positive_count(text))
    low, high = positive_count(lo), positive_count(hi)
    if low > high:
        raise ValueError(f"expected MIN:MAX with MIN <= MAX, got {text!r}")
    return Workers(high, None if low == high else low)


def fixed_count(text: str) -> int:
    """``--ps``: a whole number >= 0; a range is refused, since no framework here resumes a
    parameter-server job at another number of servers."""
    if ":" in text:
        raise ValueError(
            f"{text!r}: parameter servers are a fixed count (no framework here resumes a job "
            "at another number of them); ranges are for --workers"
        )
    return count(text)


def port(text: str) -> int:
    """A TCP port, 0 to 65535."""
    value = count(text)
    if value > 65535:
        raise ValueError(f"expected a TCP port 0 to 65535, got {text!r}")
    return value


def comma_floats(text: str) -> list[float]:
    """Comma-separated numbers, such as queue thresholds."""
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"expected comma-separated numbers, got {text!r}") from None


SECONDS = Checked(seconds, "SECONDS")
POSITIVE_SECONDS = Checked(positive_seconds, "SECONDS")
FRACTION = Checked(fraction, "X")
FACTOR = Checked(factor, "X")
COUNT = Checked(count, "N")
POSITIVE_COUNT = Checked(positive_count, "N")
WORKERS = Checked(worker_count, "N|MIN:MAX")
PS_COUNT = Checked(fixed_count, "N")
PORT = Checked(port, "PORT")
FLOATS = Checked(comma_floats, "X,…")
