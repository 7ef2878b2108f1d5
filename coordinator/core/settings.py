"""How the core is configured: one ``Settings`` value and one ``build_scheduler`` shared by the
live service and the simulator, so a live cluster and ``tiresias-sim`` given the same options
decide alike. Also the snapshot a shell journals, and the scheduler restored from it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from coordinator.core.authors_rules import RULES, AuthorsG, AuthorsL
from coordinator.core.config import SchedulerConfig
from coordinator.core.gittins import ServiceDistribution
from coordinator.core.model import CoreError, Node
from coordinator.core.placement import (
    DEFAULT_PACKLIMIT,
    PackLimited,
    Placement,
    default_placement,
    make_placement,
    packlimit_of,
)
from coordinator.core.policies import Policy, make_policy
from coordinator.core.scheduler import Scheduler


@dataclass(frozen=True)
class Settings(SchedulerConfig):
    """Every scheduling option: the scheduler's configuration (``SchedulerConfig`` documents
    those fields) and the plug-ins it runs with. ``placement`` None: the policy's default.
    ``packlimit`` None: ``DEFAULT_PACKLIMIT``. ``gittins_samples``: the seed of tiresias-g's
    service distribution and of learned thresholds; ``gittins_learn``: tiresias-g adds each
    completed job's service to it; ``gittins_variant`` None: the index as the paper writes
    it. ``rules`` (``RULES``): "authors" runs tiresias-l/-g under the rules of the authors'
    simulator (``coordinator.core.authors_rules``); "authors-our-order" and
    "authors-exact-demotion" switch one of them back to ours."""

    policy: str = "tiresias-l"
    placement: str | None = None
    packlimit: float | None = None
    gittins_samples: tuple[float, ...] | None = None
    gittins_variant: str | None = None
    gittins_learn: bool = True
    rules: str = "ours"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.rules not in RULES:
            raise CoreError(f"unknown rules {self.rules!r}; valid: {', '.join(RULES)}")

    @property
    def packlimit_value(self) -> float:
        return DEFAULT_PACKLIMIT if self.packlimit is None else self.packlimit

    def config(self) -> SchedulerConfig:
        """The scheduler's configuration alone."""
        return SchedulerConfig(**{f.name: getattr(self, f.name) for f in fields(SchedulerConfig)})

    def make_policy(self) -> Policy:
        params: dict[str, object] = {}
        if self.rules != "ours" and self.policy in ("tiresias-l", "tiresias-g"):
            cls = AuthorsG if self.policy == "tiresias-g" else AuthorsL
            return cls(
                None if self.gittins_samples is None else ServiceDistribution(self.gittins_samples),
                order="ours" if self.rules == "authors-our-order" else "list",
                demotion="exact" if self.rules == "authors-exact-demotion" else "events",
            )
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
        record = {**asdict(self), **self.config().to_dict()}
        del record["gittins_samples"], record["reject_oversized"]  # no shell sets it
        record["thresholds"] = record.pop("queue_thresholds")  # the journal's older name
        return record


def build_scheduler(settings: Settings, nodes: Sequence[Node] = ()) -> Scheduler:
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
        "packlimit": packlimit_of(sched.placement),
    }


def restore_scheduler(state: dict[str, Any], settings: Settings) -> Scheduler:
    """The scheduler of a ``snapshot``: its config (queues, PROMOTEKNOB…) and learned history
    come from the snapshot, the plug-ins from ``settings``."""
    sched = Scheduler.from_state(
        state["scheduler"], settings.make_policy(), settings.make_placement()
    )
    if state["packlimit"] is not None and isinstance(sched.placement, PackLimited):
        sched.set_packlimit(state["packlimit"])
    return sched
