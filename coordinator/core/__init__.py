"""The pure scheduling core: jobs, GPUs, policies and placement; no I/O, no clock."""

from coordinator.core.config import DEFAULT_QUEUE_THRESHOLDS, SchedulerConfig
from coordinator.core.gittins import GITTINS_VARIANTS, ServiceDistribution
from coordinator.core.model import (
    Allocation,
    CoreError,
    Decision,
    ExitOutcome,
    Job,
    JobSpec,
    JobState,
    Kill,
    Node,
    Preempt,
    Start,
)
from coordinator.core.placement import (
    DEFAULT_PACKLIMIT,
    PLACEMENT_NAMES,
    Placement,
    make_placement,
)
from coordinator.core.policies import POLICY_NAMES, Policy, make_policy
from coordinator.core.scheduler import Scheduler

__all__ = [
    "DEFAULT_PACKLIMIT",
    "DEFAULT_QUEUE_THRESHOLDS",
    "GITTINS_VARIANTS",
    "PLACEMENT_NAMES",
    "POLICY_NAMES",
    "Allocation",
    "CoreError",
    "Decision",
    "ExitOutcome",
    "Job",
    "JobSpec",
    "JobState",
    "Kill",
    "Node",
    "Placement",
    "Policy",
    "Preempt",
    "Scheduler",
    "SchedulerConfig",
    "ServiceDistribution",
    "Start",
    "make_placement",
    "make_policy",
]
