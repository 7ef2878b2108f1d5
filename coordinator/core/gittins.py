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
from typing import Any

from coordinator.core.model import CoreError, Job

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
            if within <= 0.0:  # prefix sums rounded away samples a hair above a
                within = math.fsum(s - a for s in self._sorted[i:j])  # each > 0 exactly
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


#: What a job's group may be made of (``ServiceGroups``): its owner, virtual cluster, GPU
#: count, model (the trace's job name), and its submission batch.
SERVICE_FEATURES: tuple[str, ...] = ("user", "vc", "gpus", "model", "batch")


def service_features(text: str) -> tuple[str, ...]:
    """Comma-separated job features that group similar jobs ("none": no groups)."""
    if text.strip().lower() == "none":
        return ()
    names = tuple(n.strip() for n in text.split(","))
    bad = [n for n in names if n not in SERVICE_FEATURES]
    if bad or len(set(names)) < len(names):
        raise ValueError(
            f"expected distinct features among {', '.join(SERVICE_FEATURES)} (or none), "
            f"got {text!r}"
        )
    return names


#: A group's own distribution ranks its jobs once it has this many completed jobs; fewer
#: fall back to the next coarser group, then to every completed job.
GROUP_MIN_SAMPLES = 3
#: Jobs of one group (less the batch) submitted within this many seconds of the first one
#: form one batch: a sweep, or a user's burst of similar runs.
BATCH_SPAN = 3600.0
WHOLE_JOB = 1e300  # Δ past every sample (finite: no sample is left to weigh it)


class ServiceGroups:
    """Service distributions learned per group of similar jobs, for ranking jobs that have
    not finished by what finished jobs like them needed. A job's group is the tuple of its
    ``features`` (``SERVICE_FEATURES``); its ranking distribution is that of the finest group
    with at least ``min_samples`` completed jobs: the group itself, then the group without
    its batch, then every completed job. Only finished jobs teach it (``learn``), never a
    job's own future. ``index`` is the Gittins index of the job's attained service under
    that distribution: a job of a group that usually ends soon after ranks first. Each
    distribution's ``version`` tells the policy which waiting jobs to re-rank. Memory grows
    with the history, like ``ServiceDistribution``'s: one distribution per group seen."""

    def __init__(
        self,
        features: Iterable[str],
        *,
        min_samples: int = GROUP_MIN_SAMPLES,
        batch_span: float = BATCH_SPAN,
    ) -> None:
        self.features = tuple(features)
        unknown = [f for f in self.features if f not in SERVICE_FEATURES]
        if unknown or not self.features:
            raise CoreError(
                f"service groups need features among {', '.join(SERVICE_FEATURES)}, "
                f"got {', '.join(self.features) or 'none'}"
            )
        self.min_samples = min_samples
        self.batch_span = batch_span
        self.everyone = ServiceDistribution()
        self._groups: dict[tuple[object, ...], ServiceDistribution] = {}
        self._batch_of: dict[str, float] = {}  # active job → arrival of its batch's first job
        self._last: dict[tuple[object, ...], float] = {}  # group less batch → its last batch
        self._memo: dict[tuple[object, ...], float] = {}  # (group, version, service) → index
        self._levels: dict[str, list[tuple[object, ...]]] = {}  # active job → its groups

    def levels(self, job: Job) -> list[tuple[object, ...]]:
        """``job``'s groups, finest first (the last, ``()``, is everyone)."""
        if (known := self._levels.get(job.job_id)) is not None:
            return known
        s = job.spec
        values: list[object] = []
        for f in self.features:
            if f == "batch":
                values.append(self._batch(job))
            elif f == "gpus":
                values.append(s.gpus)
            else:
                values.append(getattr(s, f))
        out = [tuple(values)]
        if "batch" in self.features and len(self.features) > 1:
            i = self.features.index("batch")
            out.append(tuple(v for j, v in enumerate(values) if j != i))
        self._levels[job.job_id] = levels = [*out, ()]
        return levels

    def _batch(self, job: Job) -> float:
        """The job's batch, assigned when it is first seen (jobs arrive in order)."""
        s = job.spec
        if (b := self._batch_of.get(s.job_id)) is not None:
            return b
        key = tuple(s.gpus if f == "gpus" else getattr(s, f) for f in self.features if f != "batch")
        last = self._last.get(key)
        b = last if last is not None and 0 <= s.arrival - last <= self.batch_span else s.arrival
        self._last[key] = b
        self._batch_of[s.job_id] = b
        return b

    def distribution(self, job: Job) -> tuple[tuple[object, ...], ServiceDistribution]:
        """The group whose distribution ranks ``job`` now, and that distribution."""
        for level in self.levels(job)[:-1]:
            d = self._groups.get(level)
            if d is not None and len(d) >= self.min_samples:
                return level, d
        return (), self.everyone

    def index(self, job: Job, horizon: float | None = None) -> float:
        """G(a, Δ) of ``job``'s attained GPU service a in its ranking distribution, with Δ =
        ``horizon`` (None: the rest of the job)."""
        level, d = self.distribution(job)
        a = job.spec.gpus * job.total_executed
        memo = (level, d.version, a, horizon)
        if (g := self._memo.get(memo)) is None:
            if len(self._memo) > 100_000:
                self._memo.clear()
            g = self._memo[memo] = d.index(a, WHOLE_JOB if horizon is None else horizon, False)
        return g

    def learn(self, job: Job, service: float) -> list[tuple[object, ...]]:
        """Add a completed job's service to each of its groups; returns those groups."""
        levels = self.levels(job)
        for level in levels[:-1]:
            self._groups.setdefault(level, ServiceDistribution()).add(service)
        self.everyone.add(service)
        return levels

    def forget(self, job_id: str) -> None:
        """A job left the system: its batch is no longer needed (the batch itself lives on
        in ``_last`` while jobs keep joining it)."""
        self._batch_of.pop(job_id, None)
        self._levels.pop(job_id, None)

    def export_state(self) -> dict[str, object]:
        return {
            "everyone": self.everyone.export_state(),
            "groups": [[list(k), d.export_state()] for k, d in self._groups.items()],
            "batch_of": dict(self._batch_of),
            "last": [[list(k), v] for k, v in self._last.items()],
        }

    def load_state(self, d: dict[str, Any]) -> None:
        self.everyone = ServiceDistribution.from_state(d["everyone"])
        self._groups = {tuple(k): ServiceDistribution.from_state(v) for k, v in d["groups"]}
        self._batch_of = {k: float(v) for k, v in d["batch_of"].items()}
        self._last = {tuple(k): float(v) for k, v in d["last"]}


def _check(s: float) -> float:
    s = float(s)
    if not (s >= 0 and math.isfinite(s)):
        raise CoreError(f"service samples must be finite and >= 0, got {s}")
    return s
