"""Empirical service distribution and the Gittins index (paper §3.2, Discretized 2D-Gittins).

Index as written in the paper/ARCHITECTURE.md, for a job with attained service ``a``:

    G(a, Δ) = P(S − a ≤ Δ | S > a) / E[min(S − a, Δ) | S > a]

``variant="authors"`` reproduces the authors' public simulator, whose expectation sums ``S``
(not ``S − a``) for the samples that finish within Δ. The two differ on purpose: on the paper's
Figure 7 example (samples {4, 8, 12}) the index as written gives an average JCT of 28/3, the
authors' variant the published 10 (30/3). Keep both; do not "fix" one into the other.

Samples are kept sorted with prefix sums, so one index at a fixed Δ costs two bisections.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable

from coordinator.core.model import CoreError

GITTINS_VARIANTS: tuple[str, ...] = ("as-written", "authors")


class ServiceDistribution:
    """Samples of total GPU service S (GPU-seconds). ``add`` learns online from completed jobs;
    new samples are merged in batches (once they reach ``rebuild_fraction`` of the known ones)
    so that learning stays cheap on long traces."""

    def __init__(self, samples: Iterable[float] = (), *, rebuild_fraction: float = 0.01) -> None:
        self._sorted: list[float] = sorted(_check(s) for s in samples)
        self._pending: list[float] = []
        self._rebuild_fraction = rebuild_fraction
        self.version = 0  # bumped whenever indexes may change (new samples merged)
        self._prefix: list[float] = []
        self._reprefix()

    @classmethod
    def parse(cls, lines: Iterable[str], **kwargs: float) -> ServiceDistribution:
        """Samples from the lines of a one-column CSV with header ``duration`` (GPU-seconds),
        e.g. traces/yarn-gput1000.csv. The caller opens the file: the core does no I/O."""
        it = iter(lines)
        header = next(it, "").strip()
        if header != "duration":
            raise CoreError(f"service samples need a 'duration' header, got {header!r}")
        return cls((float(x) for x in (ln.strip() for ln in it) if x), **kwargs)

    def __len__(self) -> int:
        return len(self._sorted) + len(self._pending)

    @property
    def samples(self) -> list[float]:
        return self._sorted + self._pending

    def add(self, sample: float) -> None:
        self._pending.append(_check(sample))
        if len(self._pending) >= max(1.0, self._rebuild_fraction * len(self._sorted)):
            self._sorted = sorted(self._sorted + self._pending)
            self._pending = []
            self._reprefix()
            self.version += 1

    def _reprefix(self) -> None:
        acc = 0.0
        self._prefix = [0.0]
        for s in self._sorted:
            acc += s
            self._prefix.append(acc)

    def gittins_index(
        self, a: float, delta: float | None = None, variant: str = "as-written"
    ) -> float:
        """G(a, Δ); with ``delta=None`` the supremum over all Δ (attained at Δ = s − a for a
        sample s). 0.0 when no sample exceeds ``a`` (the job outlived all history)."""
        if variant not in GITTINS_VARIANTS:
            raise CoreError(f"unknown Gittins variant {variant!r}; valid: {GITTINS_VARIANTS}")
        authors = variant == "authors"
        if delta is not None:
            return self.index(a, delta, authors)
        s, n = self._sorted, len(self._sorted)
        i = bisect.bisect_right(s, a)
        best, j = 0.0, i
        while j < n:
            j = bisect.bisect_right(s, s[j], j)
            best = max(best, self._ratio(a, i, j, s[j - 1] - a, authors))
        return best

    def index(self, a: float, delta: float, authors: bool) -> float:
        """``gittins_index`` at a fixed Δ without argument checks: the per-pass fast path."""
        s = self._sorted
        i = bisect.bisect_right(s, a)
        return self._ratio(a, i, bisect.bisect_right(s, a + delta, i), delta, authors)

    def _ratio(self, a: float, i: int, j: int, delta: float, authors: bool) -> float:
        """Samples s[i:] exceed a; s[i:j] finish within Δ. The 1/m of P and E cancel."""
        done = j - i
        if done == 0:
            return 0.0
        within = self._prefix[j] - self._prefix[i]
        if not authors:
            within -= done * a
        return done / (within + (len(self._sorted) - j) * delta)

    def quantiles(self, count: int) -> list[float]:
        """``count`` evenly spaced order statistics of the merged samples (all of them when
        there are fewer): a sketch that keeps the shape of the distribution."""
        s = self._sorted
        if len(s) <= count:
            return list(s)
        return [s[round(i * (len(s) - 1) / (count - 1))] for i in range(count)]

    def thresholds(
        self, *, floor: float, spacing: float, max_queues: int, grid: int = 400
    ) -> tuple[float, ...]:
        """Queue thresholds derived from the Gittins index (full horizon) of this
        distribution. A job's queue ends where its index falls below the index the queue's
        jobs had when they entered it: past that point, a job that has run longer is a worse
        bet than a fresh one, so it should yield, while within a queue (index at or above
        the entry's) serving the job that has run longest, FIFO, is right. Thresholds are at
        least ``floor`` GPU-s and ``spacing`` × the previous one (noise in a small sample
        would otherwise split queues finely, and each split costs preemptions); at most
        ``max_queues`` queues. Candidates are ``grid`` quantiles of the samples below the
        99.5th percentile (the extreme tail is a few jobs: no queue of its own); the index is
        computed on a 2,000-point sketch, so a call costs O(grid × 2,000) whatever the
        history."""
        sketch = ServiceDistribution(self.quantiles(2000))
        out: list[float] = []
        entry = sketch.gittins_index(0.0)
        top = sketch._sorted[-1] if sketch._sorted else 0.0
        for a in sorted(set(self.quantiles(grid)[: int(0.995 * grid)])):
            if a >= top:  # no job of the history outlived it: nothing to learn there
                break
            if len(out) == max_queues - 1:
                break
            if a < max(floor, spacing * (out[-1] if out else 0.0)):
                continue
            g = sketch.gittins_index(a)
            if g < entry:
                out.append(a)
                entry = g
        return tuple(out)

    def export_state(self) -> dict[str, object]:
        return {
            "sorted": list(self._sorted),
            "pending": list(self._pending),
            "rebuild_fraction": self._rebuild_fraction,
        }

    @classmethod
    def from_state(cls, d: dict[str, object]) -> ServiceDistribution:
        dist = cls(d["sorted"], rebuild_fraction=d["rebuild_fraction"])  # type: ignore[arg-type]
        dist._pending = [float(x) for x in d["pending"]]  # type: ignore[attr-defined]
        return dist


def _check(s: float) -> float:
    s = float(s)
    if not (s >= 0 and math.isfinite(s)):
        raise CoreError(f"service samples must be finite and >= 0, got {s}")
    return s
