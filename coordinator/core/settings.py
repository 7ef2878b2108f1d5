"""How the core is configured: one ``Settings`` value and one ``build_scheduler`` shared by the
live service and the simulator, so a live cluster and ``tiresias-sim`` given the same options
decide alike. Also the snapshot a shell journals, and the scheduler restored from it."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from coordinator.core.config import DEFAULT_QUEUE_ORDER, DEFAULT_QUEUE_THRESHOLDS, SchedulerConfig
from coordinator.core.gittins import ServiceDistribution
from coordinator.core.model import CoreError, Node
from coordinator.core.placement import (
    DEFAULT_PACKLIMIT,
    Placement,
    default_placement,
    make_placement,
)
from coordinator.core.policies import Policy, make_policy
from coordinator.core.scheduler import Scheduler


@dataclass(frozen=True)
class Settings:
    """Every scheduling option (``SchedulerConfig`` documents the queue ones).
    ``placement`` None: the policy's default. ``queues``: K, checked against the thresholds
    when given. ``packlimit`` None: ``DEFAULT_PACKLIMIT``. ``gittins_samples``: the seed of
    tiresias-g's service distribution and of learned thresholds; ``gittins_learn``:
    tiresias-g adds each completed job's service to it; ``gittins_variant`` None: the
    index as the paper writes it."""

    policy: str = "tiresias-l"
    placement: str | None = None
    queues: int | None = None
    thresholds: tuple[float, ...] = DEFAULT_QUEUE_THRESHOLDS
    promote_knob: float = math.inf
    interval: float = 0.0
    queue_order: str = DEFAULT_QUEUE_ORDER
    min_run: float = 0.0
    min_run_restores: float = 0.0
    cheap_victims: bool = False
    learn_thresholds: bool = False
    service_groups: tuple[str, ...] = ()
    packlimit: float | None = None
    gittins_samples: tuple[float, ...] | None = None
    gittins_variant: str | None = None
    gittins_learn: bool = True

    @property
    def packlimit_value(self) -> float:
        return DEFAULT_PACKLIMIT if self.packlimit is None else self.packlimit

    def config(self) -> SchedulerConfig:
        """The scheduler's configuration; CoreError for a bad knob."""
        if self.queues is not None and self.queues != len(self.thresholds) + 1:
            raise CoreError(
                f"{self.queues} queues need {self.queues - 1} thresholds, "
                f"got {len(self.thresholds)}"
            )
        return SchedulerConfig(
            queue_thresholds=self.thresholds,
            promote_knob=self.promote_knob,
            interval=self.interval,
            queue_order=self.queue_order,
            min_run=self.min_run,
            min_run_restores=self.min_run_restores,
            cheap_victims=self.cheap_victims,
            learn_thresholds=self.learn_thresholds,
            service_groups=self.service_groups,
        )

    def make_policy(self) -> Policy:
        params: dict[str, object] = {}
        if self.policy in ("tiresias-l", "tiresias-g") and self.gittins_samples is not None:
            params["distribution"] = ServiceDistribution(self.gittins_samples)
        if self.policy == "tiresias-g":
            params["learn"] = self.gittins_learn
            if self.gittins_variant is not None:
                params["variant"] = self.gittins_variant
        elif self.policy == "las" and self.interval:
            params["crossings"] = False  # a fixed interval replaces exact crossing times
        return make_policy(self.policy, **params)

    def make_placement(self) -> Placement:
        name = self.placement or default_placement(self.policy)
        return make_placement(name, packlimit=self.packlimit_value)

    def journal_record(self) -> dict[str, Any]:
        """The options replay depends on, msgpack-able (the seed samples are not here: the
        shell names where it read them). A journal is replayed only under the same record."""
        record = asdict(self)
        del record["gittins_samples"]
        record["thresholds"] = list(self.thresholds)
        record["service_groups"] = list(self.service_groups)
        record["promote_knob"] = None if math.isinf(self.promote_knob) else self.promote_knob
        return record


def build_scheduler(settings: Settings, nodes: tuple[Node, ...] | list[Node] = ()) -> Scheduler:
    """The core configured by ``settings`` on ``nodes`` (the service starts with none: nodes
    join as their agents register). CoreError for a bad knob."""
    return Scheduler(
        nodes,
        policy=settings.make_policy(),
        placement=settings.make_placement(),
        config=settings.config(),
    )


def snapshot(sched: Scheduler) -> dict[str, Any]:
    """Everything replay starts from: the core's state and the learned PACKLIMIT in force."""
    return {
        "scheduler": sched.export_state(),
        "packlimit": getattr(sched.placement, "packlimit", None),
    }


def restore_scheduler(state: dict[str, Any], settings: Settings) -> Scheduler:
    """The scheduler of a ``snapshot``: its config (queues, PROMOTEKNOB…) and learned history
    come from the snapshot, the plug-ins from ``settings``."""
    sched = Scheduler.from_state(
        state["scheduler"], settings.make_policy(), settings.make_placement()
    )
    if state["packlimit"] is not None and hasattr(sched.placement, "packlimit"):
        sched.set_packlimit(state["packlimit"])
    return sched
