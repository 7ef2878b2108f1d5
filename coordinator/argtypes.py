"""Argument types shared by every command line (``tiresias``, ``tiresias-run``,
``tiresias-coordinator``, ``tiresias-agent``, ``tiresias-sim``): a value out of range is an
argparse error naming the option, exit code 2, never a traceback or a silent acceptance."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

#: Largest count any option takes: far above any cluster, and within every wire format.
MAX_COUNT = 2**31 - 1


def _number(text: str, kind: Callable[[str], float]) -> float:
    try:
        value = kind(text)
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def seconds(text: str) -> float:
    """A duration: finite, >= 0."""
    value = _number(text, float)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected seconds >= 0, got {text!r}")
    return value


def positive_seconds(text: str) -> float:
    """A period: finite, > 0."""
    value = _number(text, float)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected seconds > 0, got {text!r}")
    return value


def fraction(text: str) -> float:
    """A share such as a skew or PACKLIMIT: in [0, 1]."""
    value = _number(text, float)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}")
    return value


def count(text: str) -> int:
    """A whole number >= 0 (and at most ``MAX_COUNT``)."""
    value = _number(text, int)
    if not 0 <= value <= MAX_COUNT:
        raise argparse.ArgumentTypeError(f"expected a whole number 0 to {MAX_COUNT}, got {text!r}")
    return int(value)


def positive_count(text: str) -> int:
    """A whole number >= 1 (and at most ``MAX_COUNT``)."""
    value = count(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def port(text: str) -> int:
    """A TCP port, 0 to 65535."""
    value = count(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"expected a TCP port 0 to 65535, got {text!r}")
    return value
