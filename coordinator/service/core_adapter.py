"""The seam between the service and the pure core: how options become a Scheduler, and how a
journaled event is applied. Live handling and crash replay both go through ``apply_event``, so
they cannot drift apart."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from coordinator.core.config import SchedulerConfig
from coordinator.core.gittins import ServiceDistribution
from coordinator.core.model import ExitOutcome, JobSpec, Node
from coordinator.core.placement import default_placement, make_placement
from coordinator.core.policies import Policy, make_policy
from coordinator.core.scheduler import Scheduler
from coordinator.sim.data import resolve_trace

if TYPE_CHECKING:
    from coordinator.service.coordinator import Options


def _policy(opts: Options) -> Policy:
    if opts.gittins_history is not None:
        with resolve_trace(opts.gittins_history).open() as f:
            return make_policy(opts.policy, distribution=ServiceDistribution.parse(f))
    return make_policy(opts.policy)


def _placement(opts: Options) -> Any:
    name = opts.placement or default_placement(opts.policy)
    if opts.packlimit is None:
        return make_placement(name)
    return make_placement(name, packlimit=opts.packlimit)


def build_scheduler(opts: Options) -> Scheduler:
    """An empty cluster; nodes join as their agents register."""
    config = SchedulerConfig(
        queue_thresholds=tuple(opts.thresholds),
        promote_knob=opts.promote_knob,
        interval=opts.interval,
    )
    return Scheduler([], policy=_policy(opts), placement=_placement(opts), config=config)


def snapshot(sched: Scheduler) -> dict[str, Any]:
    """Everything replay starts from: the core's state and the learned PACKLIMIT in force."""
    return {
        "scheduler": sched.export_state(),
        "packlimit": getattr(sched.placement, "packlimit", None),
    }


def restore_scheduler(state: dict[str, Any], opts: Options) -> Scheduler:
    """The scheduler of a snapshot; its config (queues, PROMOTEKNOB) and learned history
    come from the snapshot, the plug-ins from today's options."""
    sched = Scheduler.from_state(state["scheduler"], _policy(opts), _placement(opts))
    if state["packlimit"] is not None and hasattr(sched.placement, "packlimit"):
        sched.placement.packlimit = state["packlimit"]
    return sched


def apply_event(sched: Scheduler, kind: str, args: dict[str, Any]) -> Any:
    """Apply one journaled core call; returns what the core returned."""
    now = args.get("now")
    if kind == "schedule":
        return sched.schedule(now)
    if kind == "submit":
        return sched.submit(JobSpec(**args["spec"]), now)
    if kind == "exited":
        return sched.exited(args["job_id"], now, ExitOutcome(args["outcome"]))
    if kind == "cancel":
        return sched.cancel(args["job_id"], now)
    if kind == "node_up":
        return sched.node_up(Node(args["name"], tuple(args["gpus"])), now)
    if kind == "node_down":
        return sched.node_down(args["name"], now)
    if kind == "update_skew":
        return sched.update_skew(args["job_id"], args["skew"])
    if kind == "checkpointable":
        return sched.update_checkpointable(args["job_id"], args["value"], now)
    if kind == "packlimit":  # a newly learned PACKLIMIT (skew placement only)
        sched.placement.packlimit = args["value"]
        return None
    raise ValueError(f"unknown journal event {kind!r}")
