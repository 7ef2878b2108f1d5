"""Discrete-event simulation of the scheduling core on a virtual clock.

The clock jumps between exact event times: arrivals, completions computed from each job's
true duration, ends of modelled checkpoints and the core's own ``next_wakeup`` (threshold
crossings, promotions, time slices and, only when configured, a fixed re-evaluation interval).
Decisions are applied the way the live service applies them, so the ordered decision list
of a run is what the service must reproduce from the same events.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from coordinator.core import events
from coordinator.core.explain import explain
from coordinator.core.history import Timeline
from coordinator.core.model import (
    CoreError,
    Decision,
    ExitOutcome,
    Job,
    JobSpec,
    Kill,
    Node,
    Preempt,
    Start,
)
from coordinator.core.settings import Settings, build_scheduler
from coordinator.sim.profiles import DEFAULT_PROFILE, profile

# Same-instant order: free GPUs first, then let new jobs in, then schedule.
_COMPLETE, _CHECKPOINTED = 0, 1
_MAX_PASSES_PER_INSTANT = 10_000
ELASTIC_ALPHA = 0.05  # serial share of a step: 8 GPUs train 5.9x as fast as 1


@dataclass(frozen=True)
class SimOptions:
    """Knobs of one run: the core's ``settings`` (each run's policy replaces theirs) and the
    simulator's own. Build one from flat names with :meth:`of`."""

    settings: Settings = field(default_factory=Settings)
    # K, checked against the thresholds when given (None: as many as they make)
    queues: int | None = None
    # Preemption cost: seconds to checkpoint (GPUs stay held) and to restore (added to the
    # resumed run), or "model" for the per-model table in ``profiles``. None: free.
    preempt_cost: float | Literal["model"] | None = None
    # Run-time multiplier (≥ 1) for a job with skew above PACKLIMIT placed on > 1 machine.
    packing_slowdown: float | None = None
    # Keep every decision with its time in SimResult.decisions (tests compare orders). Off by
    # default: on a long trace a time-sharing policy's log alone takes a gigabyte.
    keep_decisions: bool = False
    # Keep each job's pending reasons and history in words (JobResult.reasons, .history), as
    # the live service tells them (coordinator.core.explain and .history); --out writes them.
    explain: bool = False
    # Elastic jobs (docs/simulator.md "Elastic jobs"): this share of the jobs that ask for 2
    # or more GPUs, drawn with ``elastic_seed``, runs on any count from a quarter of its ask
    # (at least 1) up to it; trace rows that give their own range keep it.
    elastic_fraction: float | None = None
    elastic_seed: int = 0
    # Amdahl-style scaling of an elastic job: on w GPUs it trains at w / (1 + alpha (w - 1))
    # (its trace duration is at its ask), so fewer GPUs are each a little more efficient.
    elastic_alpha: float = ELASTIC_ALPHA

    @classmethod
    def of(cls, **options: object) -> SimOptions:
        """Default options with ``options`` (see :meth:`replace`)."""
        return cls().replace(**options)

    def replace(self, **options: object) -> SimOptions:
        """These options with ``options`` changed: ``Settings`` fields (``thresholds``: the
        queue thresholds, as ``--thresholds`` and ``--sweep thresholds`` name them) and
        ``SimOptions`` ones; None keeps the value."""
        given = {name: value for name, value in options.items() if value is not None}
        if "thresholds" in given:
            given["queue_thresholds"] = given.pop("thresholds")
        settings = {name: given.pop(name) for name in list(given) if name in _SETTINGS}
        return dataclasses.replace(
            self,
            settings=dataclasses.replace(self.settings, **settings),  # type: ignore[arg-type]
            **given,  # type: ignore[arg-type]
        )


_SETTINGS = {f.name for f in dataclasses.fields(Settings)}


@dataclass
class JobResult:
    """What happened to one job. Times are in trace seconds."""

    job_id: str
    gpus: int
    arrival: float
    duration: float
    first_start: float | None = None
    finish: float | None = None
    queueing: float = 0.0  # total time WAITING (before the first start and after preemptions)
    preemptions: int = 0
    resizes: int = 0  # checkpointed restarts at another size (elastic jobs; in preemptions)
    model: str | None = None
    # with SimOptions.explain: (time, queue, reason, text) each time the reason or queue of
    # its wait changed, and (time, text) of each event of its history. Empty tuples without
    # it: a replay keeps every job's result, and two empty lists each were most of what
    # the garbage collector walked (and what made it run) on a long trace.
    reasons: Sequence[tuple[float, int, str, str]] = ()
    history: Sequence[tuple[float, str]] = ()

    @property
    def jct(self) -> float:
        assert self.finish is not None, f"job {self.job_id} did not finish"
        return self.finish - self.arrival


@dataclass
class SimResult:
    policy: str
    options: SimOptions
    gpus: int  # GPUs in the cluster
    jobs: list[JobResult]  # completed jobs, in arrival order
    decisions: list[tuple[float, Decision]]  # with keep_decisions: each with its time, in order
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (job id, core's reason)
    passes: int = 0  # Scheduler.schedule calls
    events: int = 0  # arrivals, completions, checkpoint ends and policy wakeups handled
    busy_gpu_seconds: float = 0.0  # GPUs held by jobs (running or checkpointing)

    @property
    def makespan(self) -> float:
        if not self.jobs:
            return 0.0
        return max(j.finish or 0.0 for j in self.jobs) - min(j.arrival for j in self.jobs)

    @property
    def utilization(self) -> float:
        span = self.makespan
        return self.busy_gpu_seconds / (self.gpus * span) if span > 0 else 0.0

    @property
    def preemptions(self) -> int:
        return sum(j.preemptions for j in self.jobs)


@dataclass
class _Run:
    """Simulator-side truth about an active job: progress the core cannot see (restore time
    and packing slowdown do not advance training)."""

    spec: JobSpec
    record: JobResult
    checkpoint_s: float
    restore_s: float
    done: float = 0.0  # seconds of training done, at full speed
    work_start: float = 0.0  # when the current run starts training (after its restore)
    held_since: float = 0.0  # when it took its GPUs
    slowdown: float = 1.0
    held: int = 0  # GPUs of the current run
    wait_since: float = 0.0
    version: int = 0  # bumps on preemption so a stale completion event is ignored


def simulate(
    specs: Iterable[JobSpec],
    cluster_nodes: Sequence[Node],
    policy_name: str,
    *,
    progress: Callable[[int], None] | None = None,
    **options: object,
) -> SimResult:
    """Run ``specs`` (each with a true ``duration``) through the core under ``policy_name``.
    ``options``: as ``SimOptions.of`` takes them; ``progress(n)``: n more jobs completed or
    skipped."""
    return run(specs, cluster_nodes, policy_name, SimOptions.of(**options), progress)


def run(
    specs: Iterable[JobSpec],
    cluster_nodes: Sequence[Node],
    policy_name: str,
    options: SimOptions,
    progress: Callable[[int], None] | None = None,
) -> SimResult:
    """``simulate`` with the options already gathered (the CLI and tools build them once)."""
    return _Simulation(list(specs), cluster_nodes, policy_name, options).run(progress)


class _Simulation:
    def __init__(
        self, specs: list[JobSpec], nodes: Sequence[Node], policy: str, opts: SimOptions
    ) -> None:
        for s in specs:
            if s.duration is None:
                raise ValueError(f"job {s.job_id}: the simulator needs a true duration")
        self.specs = elastic_specs(sorted(specs, key=lambda s: (s.arrival, s.job_id)), opts)
        self.opts = opts
        settings = core_settings(policy, opts)
        self.sched = build_scheduler(settings, nodes)
        self.packlimit = settings.packlimit_value
        self.result = SimResult(
            policy, opts, sum(len(n.gpus) for n in nodes), jobs=[], decisions=[]
        )
        self.runs: dict[str, _Run] = {}
        self.events: list[tuple[float, int, int, str, int]] = []  # time, kind, seq, job, ver
        self.seq = 0
        self.timeline = Timeline() if opts.explain else None
        # with explain: each job submitted → the lists of its record's reasons and history
        self.notes: dict[str, tuple[list[tuple[float, int, str, str]], list[tuple[float, str]]]]
        self.notes = {}
        self.finished: list[str] = []  # completed at this instant, retired after it

    def run(self, progress: Callable[[int], None] | None) -> SimResult:
        specs, sched, result = self.specs, self.sched, self.result
        nxt = 0  # next arrival
        wakeup: float | None = None
        now = -math.inf
        while True:
            t = wakeup if wakeup is not None else math.inf  # the earliest of the three
            self._drop_stale()
            if self.events and self.events[0][0] < t:
                t = self.events[0][0]
            if nxt < len(specs) and specs[nxt].arrival < t:
                t = specs[nxt].arrival
            if t == math.inf:
                break
            now = t
            result.events += t == wakeup
            done = self._apply_events(now)
            while nxt < len(specs) and specs[nxt].arrival <= now:
                done += not self._arrive(specs[nxt], now)
                nxt += 1
                result.events += 1
            self._schedule(now)
            if self.timeline is not None:
                self._explain(now)
            for job_id in self.finished:  # the report has them: the core forgets them
                sched.retire(job_id)
            self.finished.clear()
            if done and progress:
                progress(done)
            wakeup = sched.next_wakeup(now)
            if wakeup is not None and wakeup <= now:
                wakeup = math.nextafter(now, math.inf)  # never stall the clock
        if self.runs:
            raise RuntimeError(
                f"simulation under {result.policy} stalled with {len(self.runs)} unfinished "
                f"job(s), e.g. {next(iter(self.runs))}"
            )
        result.jobs.sort(key=lambda r: (r.arrival, r.job_id))
        return result

    def _drop_stale(self) -> None:
        """Forget the completions of runs that were preempted, so that they make no instant
        (a pass at a time where nothing happened would re-rank and demote as an event)."""
        events = self.events
        while events and events[0][1] == _COMPLETE:
            _, _, _, job_id, version = events[0]
            run = self.runs.get(job_id)  # None: a faster later run (grown) completed first
            if run is not None and version == run.version:
                return
            heapq.heappop(events)

    def _push(self, t: float, kind: int, job_id: str, version: int) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, kind, self.seq, job_id, version))

    def _apply_events(self, now: float) -> int:
        """Completions and finished checkpoints due at ``now``; returns completions."""
        completed = 0
        while self.events and self.events[0][0] <= now:
            _, kind, _, job_id, version = heapq.heappop(self.events)
            run = self.runs.get(job_id)
            if kind == _COMPLETE:
                if run is None or version != run.version:
                    continue  # it was preempted before finishing
                self.result.events += 1
                self.sched.exited(job_id, now, ExitOutcome.COMPLETED)
                self._release(run, now)
                run.record.finish = now
                self.result.jobs.append(run.record)
                self.finished.append(job_id)
                del self.runs[job_id]
                completed += 1
            else:
                self.result.events += 1
                self._checkpointed(self.runs[job_id], now)
        return completed

    def _arrive(self, spec: JobSpec, now: float) -> bool:
        """Submit ``spec``; False when the core refuses it (then it is skipped, counted)."""
        try:
            self.sched.submit(spec, now)
        except CoreError as e:
            self.result.skipped.append((spec.job_id, str(e)))
            return False
        known = profile(spec.model) or DEFAULT_PROFILE
        cost = self.opts.preempt_cost
        ckpt, restore = (
            (known.checkpoint_s, known.restore_s) if cost == "model" else (cost or 0.0,) * 2
        )
        if ckpt or restore:
            self.sched.update_costs(spec.job_id, ckpt, restore)
        record = JobResult(
            spec.job_id, spec.gpus, spec.arrival, float(spec.duration or 0.0), model=spec.model
        )
        self.runs[spec.job_id] = _Run(spec, record, ckpt, restore, wait_since=now)
        if self.timeline is not None:
            notes = self.notes[spec.job_id] = [], []
            record.reasons, record.history = notes
        return True

    def _explain(self, now: float) -> None:
        """Note what happened at ``now`` and why each waiting job waits, when that changed."""
        assert self.timeline is not None
        for e in self.timeline.observe(self.sched, now):
            self.notes[e.job_id][1].append((e.time, e.text))

        def changed(job: Job, reason: str) -> bool:
            reasons = self.notes[job.job_id][0]
            return not reasons or reasons[-1][1:3] != (job.queue, reason)

        for p in explain(self.sched, now, changed).values():
            self.notes[p.job_id][0].append((now, p.queue, p.reason, p.text))

    def _schedule(self, now: float) -> None:
        """Passes at ``now`` while they free GPUs: a preemption whose checkpoint is free exits
        at once, and the next pass hands its GPUs out. A pass that only started jobs leaves
        nothing for another pass at the same instant (CONTRACT), so none is run."""
        for _ in range(_MAX_PASSES_PER_INSTANT):
            decisions = self.sched.schedule(now)
            self.result.passes += 1
            freed = False
            if self.opts.keep_decisions:
                self.result.decisions += [(now, d) for d in decisions]
            for d in decisions:
                if isinstance(d, Start):
                    self._start(self.runs[d.job_id], d, now)
                elif isinstance(d, Preempt):
                    run = self.runs[d.job_id]
                    run.record.resizes += d.stop.size is not None
                    freed |= self._preempt(run, now)
                elif isinstance(d, Kill):
                    raise RuntimeError(f"core killed {d.job_id}, but the simulator cancels none")
            if not freed:
                return
        raise RuntimeError(
            f"{self.result.policy}: still deciding after {_MAX_PASSES_PER_INSTANT} passes "
            f"at t={now}"
        )

    def _start(self, run: _Run, start: Start, now: float) -> None:
        record = run.record
        if record.first_start is None:
            record.first_start = now
        record.queueing += now - run.wait_since
        run.held_since = now
        run.work_start = now + (run.restore_s if record.preemptions else 0.0)
        factor = self.opts.packing_slowdown
        skew = run.spec.skew
        spread = len(start.allocation.nodes) > 1
        sensitive = skew is not None and self.packlimit is not None and skew > self.packlimit
        run.held = start.allocation.count
        if run.spec.min_gpus is not None:  # its runtime keeps the global batch: it says so
            self.sched.apply(events.Release(run.spec.job_id, now))
        run.slowdown = factor if factor and spread and sensitive else 1.0
        if run.held != run.spec.gpus:  # an elastic job below its ask trains slower
            alpha = self.opts.elastic_alpha
            run.slowdown *= amdahl(run.spec.gpus, alpha) / amdahl(run.held, alpha)
        finish = run.work_start + (record.duration - run.done) * run.slowdown
        self._push(finish, _COMPLETE, record.job_id, run.version)

    def _preempt(self, run: _Run, now: float) -> bool:
        """Stop ``run``; True when its GPUs are free again at once (no checkpoint cost)."""
        run.version += 1
        run.done += max(0.0, now - run.work_start) / run.slowdown
        run.record.preemptions += 1
        if run.checkpoint_s > 0:
            self._push(now + run.checkpoint_s, _CHECKPOINTED, run.record.job_id, run.version)
            return False
        self._checkpointed(run, now)
        return True

    def _checkpointed(self, run: _Run, now: float) -> None:
        self.sched.exited(run.record.job_id, now, ExitOutcome.CHECKPOINTED)
        self._release(run, now)
        run.wait_since = now

    def _release(self, run: _Run, now: float) -> None:
        self.result.busy_gpu_seconds += run.held * (now - run.held_since)


def amdahl(gpus: int, alpha: float) -> float:
    """Training speed on ``gpus`` GPUs, in one GPU's: w / (1 + alpha (w - 1))."""
    return gpus / (1.0 + alpha * (gpus - 1))


def elastic_specs(specs: list[JobSpec], opts: SimOptions) -> list[JobSpec]:
    """``specs`` with ``opts.elastic_fraction`` of the multi-GPU ones made elastic, on
    [max(1, gpus // 4), gpus], drawn with ``opts.elastic_seed`` (same jobs for every
    policy of a run)."""
    share = opts.elastic_fraction
    if not share:
        return specs
    draw = random.Random(opts.elastic_seed)
    return [
        dataclasses.replace(s, min_gpus=max(1, s.gpus // 4))
        if s.min_gpus is None and s.gpus > 1 and draw.random() < share
        else s
        for s in specs
    ]


def core_settings(policy: str, opts: SimOptions) -> Settings:
    """The core ``Settings`` of ``policy`` under ``opts``; CoreError for a bad knob."""
    settings = dataclasses.replace(opts.settings, policy=policy)
    if opts.queues is not None and opts.queues != settings.queues:
        raise CoreError(
            f"{opts.queues} queues need {opts.queues - 1} thresholds, "
            f"got {len(settings.queue_thresholds)}"
        )
    return settings
