"""PACKLIMIT learned from history (paper §3.3): the skew above which consolidating a job on
few machines pays off.

History is a list of observed runs: (job key, skew S_J, placement, mean iteration time). A key
seen both packed and spread gives one sample: its skew and whether packing helped (spread
iteration time / packed iteration time above 1 + ``margin``). A one-feature logistic
regression on skew predicts "packing helps"; PACKLIMIT is the skew where p = 0.5. Until there
are ``min_samples`` samples of both outcomes (or if the fit says packing helps *less* with more
skew, which contradicts the model) the configured default stands.

Pure: no I/O, no clock. The service feeds it observations and hands the value to the
``skew`` placement (``SkewAware.packlimit``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from coordinator.core.placement import DEFAULT_PACKLIMIT

PACKED, SPREAD = "packed", "spread"


@dataclass(frozen=True)
class Observation:
    """One run of a job: ``key`` names what is comparable across runs (a job id, or a model
    name when jobs of the same model repeat); ``placement`` is ``packed`` (one machine) or
    ``spread``; ``iter_time`` is its mean seconds per iteration."""

    key: str
    skew: float
    placement: str
    iter_time: float

    def __post_init__(self) -> None:
        if self.placement not in (PACKED, SPREAD):
            raise ValueError(f"placement must be {PACKED!r} or {SPREAD!r}, not {self.placement!r}")
        if not 0.0 <= self.skew <= 1.0:
            raise ValueError(f"skew must be in [0, 1], not {self.skew}")
        if not self.iter_time > 0:
            raise ValueError(f"iter_time must be positive, not {self.iter_time}")


def samples(observations: Iterable[Observation], margin: float = 0.05) -> list[tuple[float, bool]]:
    """(skew, packing helped) for every key observed under both placements, by key order."""
    by_key: dict[str, dict[str, list[Observation]]] = {}
    for o in observations:
        by_key.setdefault(o.key, {PACKED: [], SPREAD: []})[o.placement].append(o)
    out = []
    for key in sorted(by_key):
        packed, spread = by_key[key][PACKED], by_key[key][SPREAD]
        if not packed or not spread:
            continue
        runs = packed + spread
        skew = sum(o.skew for o in runs) / len(runs)
        ratio = (sum(o.iter_time for o in spread) / len(spread)) / (
            sum(o.iter_time for o in packed) / len(packed)
        )
        out.append((skew, ratio > 1.0 + margin))
    return out


def fit_logistic(
    points: Sequence[tuple[float, bool]], l2: float = 1e-3, iterations: int = 100
) -> tuple[float, float]:
    """(w, b) of p(helps | skew) = σ(w·skew + b) by Newton's method; the small L2 penalty on w
    keeps separable data (the usual case) from diverging."""
    w = b = 0.0
    for _ in range(iterations):
        gw, gb = l2 * w, 0.0
        hww, hwb, hbb = l2, 0.0, 1e-9
        for x, y in points:
            p = 1.0 / (1.0 + math.exp(-max(-500.0, min(500.0, w * x + b))))
            r = p - (1.0 if y else 0.0)
            s = p * (1.0 - p)
            gw += r * x
            gb += r
            hww += s * x * x
            hwb += s * x
            hbb += s
        det = hww * hbb - hwb * hwb
        if det <= 0:
            break
        dw = (hbb * gw - hwb * gb) / det
        db = (hww * gb - hwb * gw) / det
        w, b = w - dw, b - db
        if abs(dw) < 1e-10 and abs(db) < 1e-10:
            break
    return w, b


def learn_packlimit(
    observations: Iterable[Observation],
    default: float = DEFAULT_PACKLIMIT,
    min_samples: int = 4,
    margin: float = 0.05,
) -> float:
    """PACKLIMIT in [0, 1] from history, or ``default`` while history cannot tell."""
    points = samples(observations, margin)
    labels = {helps for _, helps in points}
    if len(points) < min_samples or labels != {True, False}:
        return default
    w, b = fit_logistic(points)
    if w <= 0:
        return default
    return min(1.0, max(0.0, -b / w))


class PackLimit:
    """The running PACKLIMIT: record observations as runs report, read ``value``."""

    def __init__(
        self, default: float = DEFAULT_PACKLIMIT, min_samples: int = 4, margin: float = 0.05
    ) -> None:
        self.default = default
        self.min_samples = min_samples
        self.margin = margin
        self.observations: list[Observation] = []

    def observe(self, key: str, skew: float, placement: str, iter_time: float) -> None:
        self.observations.append(Observation(key, skew, placement, iter_time))

    @property
    def value(self) -> float:
        return learn_packlimit(self.observations, self.default, self.min_samples, self.margin)
