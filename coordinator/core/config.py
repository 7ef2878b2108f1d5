"""Scheduler configuration shared by the scheduler and the policies."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from coordinator.core.gittins import SERVICE_FEATURES
from coordinator.core.model import CoreError

#: Default thresholds in GPU-seconds of attained service: K = 5 queues, at 3,250 and 7,200
#: (the authors' dlas-gpu), 10 and 100 GPU-hours. Measured with tiresias-sim on 18 runs of 9
#: Philly week-long slices against the authors' simulator (docs/results/reference.md) and on
#: Table 5's ten weeks: the first two keep the median near the oracles' (most Philly jobs
#: use one GPU for under an hour), the last two stop a day-long or a large short job from
#: waiting behind month-long ones in one FIFO last queue (Table 5's average JCT: 41,951 s
#: against 110,507 s with the former single threshold at 36,000). See docs/simulator.md.
DEFAULT_QUEUE_THRESHOLDS: tuple[float, ...] = (3250.0, 7200.0, 36000.0, 360000.0)


def thresholds_text(thresholds: tuple[float, ...]) -> str:
    """Thresholds as ``--thresholds`` takes them: comma-separated GPU-seconds."""
    return ",".join(f"{t:g}" for t in thresholds)


#: Orders inside a 2D-LAS queue. "first-start": FIFO by first start time, so a job that was
#: preempted earlier evicts a later-started running job of its own queue. "running-first":
#: running jobs ahead of waiting ones (each group FIFO by first start), so a running job is
#: only ever preempted for a job of a higher queue (the authors' dlas-gpu rule).
QUEUE_ORDERS: tuple[str, ...] = ("running-first", "first-start")
DEFAULT_QUEUE_ORDER = "running-first"


#: An elastic job grows only after running this many times its checkpoint and restore cost:
#: under least-attained-service, the run still ahead is expected to be about the run so far.
ELASTIC_PAYBACK = 10.0


@dataclass(frozen=True)
class SchedulerConfig:
    """``queue_thresholds``: Q_1^hi < … < Q_{K-1}^hi in GPU-seconds of attained service (K =
    len + 1 queues). ``promote_knob``: PROMOTEKNOB (∞ disables starvation promotion).
    ``interval``: also re-evaluate every ``interval`` seconds while jobs wait (0 = only at
    events and policy wakeups). ``reject_oversized``: refuse jobs larger than every GPU the
    cluster has ever had. ``queue_order``: the order inside a queue (``QUEUE_ORDERS``).
    ``min_run`` / ``min_run_restores``: a started job may not be preempted before it has run
    ``min_run`` seconds and ``min_run_restores`` × its restore cost (no thrashing: a job pays
    its restore before it trains). ``cheap_victims``: with "running-first", the running jobs
    of a queue that are cheapest to stop and restart (checkpoint + restore cost) rank last,
    so they are preempted first. Both off by default: neither won on the measured slices
    (docs/simulator.md). ``learn_thresholds``: tiresias-l and tiresias-g replace
    ``queue_thresholds`` (their starting point) by thresholds learned from completed jobs'
    service (``coordinator.core.queued.Queued``). ``service_groups``: features
    (``SERVICE_FEATURES``) that group similar jobs; tiresias-l and tiresias-g then rank the
    waiting jobs of a queue by the Gittins index of what completed jobs of their group
    needed (``coordinator.core.gittins.ServiceGroups``); empty: FIFO by first start.
    ``await_begin``: a started job awaits its run's real begin (``Began``, which the shell's
    executor reports: Slurm starts a released job on its next pass, or later) before its
    service accrues and its policy timers run; off where a start is its begin (the agents
    spawn at the launch, the simulator starts at the decision). ``elastic_payback``: an
    elastic job below its ask grows only once it has run this many times its checkpoint and
    restore cost (``coordinator.core.elastic``)."""

    queue_thresholds: tuple[float, ...] = DEFAULT_QUEUE_THRESHOLDS
    promote_knob: float = math.inf
    interval: float = 0.0
    reject_oversized: bool = True
    queue_order: str = DEFAULT_QUEUE_ORDER
    min_run: float = 0.0
    min_run_restores: float = 0.0
    cheap_victims: bool = False
    learn_thresholds: bool = False
    service_groups: tuple[str, ...] = ()
    await_begin: bool = False
    elastic_payback: float = ELASTIC_PAYBACK

    def __post_init__(self) -> None:
        q = tuple(float(x) for x in self.queue_thresholds)
        object.__setattr__(self, "queue_thresholds", q)
        if any(not 0 < x < math.inf for x in q) or any(a >= b for a, b in itertools.pairwise(q)):
            raise CoreError(f"queue_thresholds must be positive and increasing, got {q}")
        if not self.promote_knob > 0:
            raise CoreError(f"promote_knob must be > 0 (inf disables), got {self.promote_knob}")
        if not (self.interval >= 0 and math.isfinite(self.interval)):
            raise CoreError(f"interval must be a finite number >= 0, got {self.interval}")
        for name in ("min_run", "min_run_restores", "elastic_payback"):
            value = getattr(self, name)
            if not (value >= 0 and math.isfinite(value)):
                raise CoreError(f"{name} must be a finite number >= 0, got {value}")
        if self.queue_order not in QUEUE_ORDERS:
            raise CoreError(
                f"unknown queue order {self.queue_order!r}; valid: {', '.join(QUEUE_ORDERS)}"
            )
        groups = tuple(str(f) for f in self.service_groups)
        object.__setattr__(self, "service_groups", groups)
        bad = [f for f in groups if f not in SERVICE_FEATURES]
        if bad or len(set(groups)) < len(groups):
            raise CoreError(
                f"service groups are distinct features among {', '.join(SERVICE_FEATURES)}, "
                f"got {', '.join(map(str, bad or groups))}"
            )
        if groups and self.queue_order != "running-first":
            raise CoreError("service groups rank waiting jobs: they need queue order running-first")

    @property
    def queues(self) -> int:
        return len(self.queue_thresholds) + 1

    def to_dict(self) -> dict[str, object]:
        return {
            "queue_thresholds": list(self.queue_thresholds),
            "promote_knob": None if math.isinf(self.promote_knob) else self.promote_knob,
            "interval": self.interval,
            "reject_oversized": self.reject_oversized,
            "queue_order": self.queue_order,
            "min_run": self.min_run,
            "min_run_restores": self.min_run_restores,
            "cheap_victims": self.cheap_victims,
            "learn_thresholds": self.learn_thresholds,
            "service_groups": list(self.service_groups),
            "await_begin": self.await_begin,
            "elastic_payback": self.elastic_payback,
        }

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> SchedulerConfig:
        knob = d.get("promote_knob")
        return cls(
            queue_thresholds=tuple(d["queue_thresholds"]),  # type: ignore[arg-type]
            promote_knob=math.inf if knob is None else float(knob),  # type: ignore[arg-type]
            interval=float(d["interval"]),  # type: ignore[arg-type]
            reject_oversized=bool(d["reject_oversized"]),
            # snapshots from before the option ordered by first start
            queue_order=str(d.get("queue_order", "first-start")),
            min_run=float(d.get("min_run", 0.0)),  # type: ignore[arg-type]
            min_run_restores=float(d.get("min_run_restores", 0.0)),  # type: ignore[arg-type]
            cheap_victims=bool(d.get("cheap_victims", False)),
            learn_thresholds=bool(d.get("learn_thresholds", False)),
            service_groups=tuple(d.get("service_groups", ())),  # type: ignore[arg-type]
            await_begin=bool(d.get("await_begin", False)),
            elastic_payback=float(d.get("elastic_payback", ELASTIC_PAYBACK)),  # type: ignore[arg-type]
        )
