"""The pure scheduling core: jobs, GPUs, policies and placement; no I/O, no clock, no
randomness. Events are typed values (``coordinator.core.events``) applied by
``Scheduler.apply``, and ``coordinator.core.settings`` turns one ``Settings`` into a
scheduler for the service and the simulator alike.

Decisions taken here (each also documented where it is implemented):

- Queues: default K = 5 with thresholds at 3,250, 7,200, 36,000 and 360,000 GPU-seconds
  (``DEFAULT_QUEUE_THRESHOLDS``, chosen by simulation on Philly; ``learn_thresholds`` learns
  them from completed jobs instead); a job is in queue i while
  Q_i ≤ W_J × t_J < Q_{i+1}, so it is demoted at the exact moment its attained service
  reaches a threshold (``next_wakeup`` returns that moment).
- Inside a 2D-LAS queue (``queue_order``): running jobs ahead of waiting ones, each FIFO by
  first start, never-started jobs last by arrival ("running-first", the default: a running
  job is preempted only for a job of a higher queue), or FIFO by first start alone
  ("first-start"); a newcomer never preempts a job of its own queue. With
  ``service_groups`` (off by default), waiting jobs of a queue rank by the Gittins index of
  their group's learned service (Δ = the service left before their next demotion), FIFO on
  ties; groups learn from completed jobs only (``coordinator.core.gittins.ServiceGroups``).
- Starvation: δ_J counts from the moment a job stopped (preempted) or was submitted; at
  δ_J ≥ PROMOTEKNOB × t_J it goes to queue 0 with t_J = 0 and δ_J restarted.
- Gittins: index exactly as written, Δ = the job's queue threshold; the authors' variant is
  ``make_policy("tiresias-g", variant="authors")`` (Figure 7: 28/3 vs 30/3, both pinned).
- ``las``: without an interval, exact crossing wakeups and a ``quantum`` lead for running
  jobs (turns of at least ``quantum``); with an interval, plain attained-service order at
  ticks (Figure 7). ``gandiva``: turns of ``quantum`` seconds while jobs wait, least
  recently served first.
- Placement ``skew``: a job of unknown skew is consolidated (never slower for the job).

CONTRACT (used by coordinator/service and coordinator/sim; extend, don't change):

    sched = build_scheduler(Settings(policy="tiresias-l", ...), nodes)  # core.settings
    sched.apply(event) -> list[Decision]   # one typed event (coordinator.core.events):
        Submit(spec, now)                  #   CoreError if invalid (duplicate id, too large…)
        Exited(job_id, now, outcome, ended=None)  # all processes of the job have exited
                                           #   (a running one's service counts to ended)
        Began(job_id, at, now)             #   the current run really started at ``at``
        Cancel(job_id, now)                #   [] for a waiting job, [Kill] for a running one
        NodeUp(node, now) / NodeDown(name, now)
        NodeDrain(name, drained, now)      #   up, its jobs run on, no new ones (or again)
        UpdateSkew(job_id, skew) ; UpdateCheckpointable(job_id, checkpointable, now)
        UpdateCosts(job_id, checkpoint_s, restore_s)   # measured or modelled seconds
        SetPackLimit(value)                #   a learned PACKLIMIT (skew placement)
        Retire(job_id)                     #   the shell stored the finished job: forget it
        Schedule(now)                      #   one scheduling pass: its decisions
    Each event also has its method (sched.submit(spec, now), sched.schedule(now), …, with
    node_down returning the ids of the jobs it stopped); the service journals events, the
    simulator and tests call either.
    sched.next_wakeup(now) -> float | None         # next time the policy wants a pass with no
                                                   # outside event (threshold crossing,
                                                   # starvation promotion, interval, time slice)
    sched.job(job_id) -> Job ; sched.jobs() -> Iterable[Job] (active first, then those
    finished and not retired yet) ; sched.retired -> int (jobs retired, ever)
    sched.free_gpus() -> {node: (free indices)} ; sched.policy.key(job, now) (rank of any
    active job) ; sched.export_state() -> dict (JSON/msgpack-able) ;
    Scheduler.from_state(d, policy, placement)
    sched.nodes() -> {name: Node} (up) ; sched.guards() -> {job: end of its minimum run}
    (read by coordinator.core.explain).

Semantics:
- ``Start`` marks the job RUNNING at ``now`` and takes its GPUs (with ``await_begin`` it
  accrues no service and runs no policy timer until ``Began``: ``Job.awaiting``).
  ``Preempt`` marks it PREEMPTING: its service stops accruing at ``now`` but its GPUs stay
  taken until ``exited(…, CHECKPOINTED)``, which makes it WAITING again. The simulator
  applies the exits itself (at ``now`` or after a modelled checkpoint cost) and calls
  ``schedule`` again.
- ``exited(COMPLETED)`` → COMPLETED; ``FAILED`` → FAILED; ``CHECKPOINTED``/``LOST`` → WAITING
  (restarts += 1), or CANCELLED when a cancel was requested.
- Deterministic: the same calls in the same order give the same decisions (ties by arrival,
  then job id). No wall clock, no randomness, no I/O.
- A pass costs O(jobs it looks at until the cluster is full), not O(all jobs ever seen):
  finished jobs leave the active structures. A finished job stays answerable (``job``) until
  ``Retire``; then nothing of it is kept but what the policy learned (service samples) and
  the count, so a snapshot holds the active jobs only. A retired job's id is unknown to the
  core (the shell keeps ids unique).
- Details pinned by tests/core: ``cancel`` also answers [Kill] for a PREEMPTING job (the
  shell may escalate) and [] for a finished one; ``node_down`` stops the service of the jobs
  it returns (PREEMPTING) and forgets the node's GPUs, while their GPUs on other nodes stay
  taken until ``exited(…, LOST)``; ``exited`` for a job that holds no GPUs, an unknown job,
  time going backwards, or ``node_up`` of a node already up raise CoreError.
"""

from coordinator.core.config import (
    DEFAULT_QUEUE_ORDER,
    DEFAULT_QUEUE_THRESHOLDS,
    QUEUE_ORDERS,
    SchedulerConfig,
)
from coordinator.core.events import (
    Began,
    Cancel,
    Event,
    Exited,
    NodeDown,
    NodeDrain,
    NodeUp,
    Retire,
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
    "Began",
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
    "NodeDrain",
    "NodeUp",
    "Placement",
    "Policy",
    "Preempt",
    "Retire",
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
