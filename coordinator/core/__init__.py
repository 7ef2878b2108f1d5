"""The pure scheduling core: jobs, GPUs, policies and placement; no I/O, no clock, no
randomness. The CONTRACT is in ``coordinator.core.scheduler``; events are typed values
(``coordinator.core.events``) applied by ``Scheduler.apply``, and ``coordinator.core.settings``
turns one ``Settings`` into a scheduler for the service and the simulator alike.

Decisions taken here (each also documented where it is implemented):

- Queues: default K = 5 with thresholds at 3,250, 7,200, 36,000 and 360,000 GPU-seconds
  (``DEFAULT_QUEUE_THRESHOLDS``, chosen by simulation on Philly; ``learn_thresholds`` learns
  them from completed jobs instead); a job is in queue i while
  Q_i ≤ W_J × t_J < Q_{i+1}, so it is demoted at the exact moment its attained service
  reaches a threshold (``next_wakeup`` returns that moment).
- Inside a 2D-LAS queue: jobs that have started, FIFO by first start time, then never-started
  jobs by arrival; a newcomer therefore never preempts a job of its own queue.
- Starvation: δ_J counts from the moment a job stopped (preempted) or was submitted; at
  δ_J ≥ PROMOTEKNOB × t_J it goes to queue 0 with t_J = 0 and δ_J restarted.
- Gittins: index exactly as written, Δ = the job's queue threshold; the authors' variant is
  ``make_policy("tiresias-g", variant="authors")`` (Figure 7: 28/3 vs 30/3, both pinned).
- ``las``: without an interval, exact crossing wakeups and a ``quantum`` lead for running
  jobs (turns of at least ``quantum``); with an interval, plain attained-service order at
  ticks (Figure 7). ``gandiva``: turns of ``quantum`` seconds while jobs wait, least
  recently served first.
- Placement ``skew``: a job of unknown skew is consolidated (never slower for the job).
"""

from coordinator.core.config import (
    DEFAULT_QUEUE_ORDER,
    DEFAULT_QUEUE_THRESHOLDS,
    QUEUE_ORDERS,
    SchedulerConfig,
)
from coordinator.core.events import (
    Cancel,
    Event,
    Exited,
    NodeDown,
    NodeUp,
    Schedule,
    SetPackLimit,
    Submit,
    UpdateCheckpointable,
    UpdateCosts,
    UpdateSkew,
)
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
    default_placement,
    make_placement,
)
from coordinator.core.policies import POLICY_NAMES, Policy, make_policy
from coordinator.core.scheduler import Scheduler
from coordinator.core.settings import Settings, build_scheduler

__all__ = [
    "DEFAULT_PACKLIMIT",
    "DEFAULT_QUEUE_ORDER",
    "DEFAULT_QUEUE_THRESHOLDS",
    "GITTINS_VARIANTS",
    "PLACEMENT_NAMES",
    "POLICY_NAMES",
    "QUEUE_ORDERS",
    "Allocation",
    "Cancel",
    "CoreError",
    "Decision",
    "Event",
    "ExitOutcome",
    "Exited",
    "Job",
    "JobSpec",
    "JobState",
    "Kill",
    "Node",
    "NodeDown",
    "NodeUp",
    "Placement",
    "Policy",
    "Preempt",
    "Schedule",
    "Scheduler",
    "SchedulerConfig",
    "ServiceDistribution",
    "SetPackLimit",
    "Settings",
    "Start",
    "Submit",
    "UpdateCheckpointable",
    "UpdateCosts",
    "UpdateSkew",
    "build_scheduler",
    "default_placement",
    "make_placement",
    "make_policy",
]
