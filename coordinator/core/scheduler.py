"""The scheduler core: one object that takes events and returns decisions.

CONTRACT (used by coordinator/service and coordinator/sim; extend, don't change):

    sched = Scheduler(cluster_nodes, policy=make_policy("tiresias-l", ...),
                      placement=make_placement("skew", ...), config=SchedulerConfig(...))
    sched.submit(spec, now)            # raises CoreError if invalid (duplicate id, too large…)
    sched.exited(job_id, now, outcome) # all processes of the job have exited
    sched.cancel(job_id, now) -> list[Decision]   # [] for a waiting job, [Kill] for a running one
    sched.node_up(node, now) / sched.node_down(name, now) -> list[str] (job ids lost)
    sched.update_skew(job_id, skew)
    sched.schedule(now) -> list[Decision]          # one scheduling pass
    sched.next_wakeup(now) -> float | None         # next time the policy wants a pass with no
                                                   # outside event (threshold crossing,
                                                   # starvation promotion, interval, time slice)
    sched.job(job_id) -> Job ; sched.jobs() -> Iterable[Job] (active first)
    sched.export_state() -> dict (JSON/msgpack-able) ; Scheduler.from_state(d, policy, placement)

Semantics:
- ``Start`` marks the job RUNNING at ``now`` and takes its GPUs. ``Preempt`` marks it
  PREEMPTING: its service stops accruing at ``now`` but its GPUs stay taken until
  ``exited(…, CHECKPOINTED)``, which makes it WAITING again. The simulator applies the exits
  itself (at ``now`` or after a modelled checkpoint cost) and calls ``schedule`` again.
- ``exited(COMPLETED)`` → COMPLETED; ``FAILED`` → FAILED; ``CHECKPOINTED``/``LOST`` → WAITING
  (restarts += 1), or CANCELLED when a cancel was requested.
- Deterministic: the same calls in the same order give the same decisions (ties by arrival,
  then job id). No wall clock, no randomness, no I/O.
- A pass costs O(jobs it looks at until the cluster is full), not O(all jobs ever seen):
  finished jobs leave the active structures.
"""
