"""The coordinator service: a single-threaded ZeroMQ event loop around the scheduler core.

Messages become core events, core decisions become commands to node agents. The loop owns a
monotonic clock (the core only ever sees ``now``), timers for the scheduler's next wakeup,
heartbeat timeouts and preemption deadlines, and a SQLite journal that is committed before
any command leaves, so a restarted coordinator picks up exactly where the old one stopped.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hmac
import itertools
import json
import logging
import os
import random
import secrets
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import zmq

from coordinator import protocol
from coordinator.core import events
from coordinator.core.config import DEFAULT_QUEUE_ORDER, DEFAULT_QUEUE_THRESHOLDS
from coordinator.core.explain import explain
from coordinator.core.gittins import ServiceDistribution
from coordinator.core.model import (
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
from coordinator.core.packlimit import PACKED, SPREAD, PackLimit
from coordinator.core.placement import DEFAULT_PACKLIMIT
from coordinator.core.scheduler import Scheduler
from coordinator.core.settings import Settings, build_scheduler, restore_scheduler, snapshot
from coordinator.gang import GangRequest, free_local_port, plan
from coordinator.service import dashboard, identity, profiler
from coordinator.service import keys as curve
from coordinator.service.agent import SETTLE
from coordinator.service.client import DEFAULT_ADDRESS
from coordinator.service.costs import measured_costs
from coordinator.service.history import History
from coordinator.service.metrics import Metrics
from coordinator.service.store import Store
from coordinator.service.views import job_view, node_view
from coordinator.sim.data import resolve_trace
from tiresias_launch.contract import EXIT_CHECKPOINTED, JOB_TOKEN

log = logging.getLogger("tiresias.coordinator")

#: Coordinator→agent "code" asking an unknown agent to register again.
REGISTER = "register"
LOG_FETCH_TIMEOUT = 3.0
LOG_BUDGET = protocol.MAX_MESSAGE_BYTES // 4
#: Requests that change state: refused once the state database cannot be written.
CHANGES = frozenset({"submit", "cancel", "advance", "register", "exited"})
#: Most jobs in one page of ``status``/``queue``, and the page's byte budget.
PAGE_JOBS = 500
LIST_BUDGET = protocol.MAX_MESSAGE_BYTES // 2
#: Default cap on workers (GPUs) and on parameter servers per job.
MAX_JOB_SIZE = 1024
#: Ports handed to jobs' servers on remote nodes: ``--port-base`` and the PORT_RANGE after it.
PORT_RANGE = 10000
#: Hosts that mean "this machine": a job's ports there are checked free with the OS.
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
#: Who may send what (docs/security.md); ``report`` is checked per job (owner or job token).
CLIENT_REQUESTS = frozenset({"submit", "status", "queue", "nodes", "cancel", "logs", "advance"})
AGENT_MESSAGES = frozenset({"register", "heartbeat", "exited", "log_data"})


@dataclass
class Options:
    """Everything ``tiresias-coordinator`` can be told; tests build it directly."""

    bind: str = DEFAULT_ADDRESS
    state: Path = Path("tiresias-state")
    policy: str = "tiresias-l"
    placement: str | None = None  # None: the policy's default placement
    thresholds: list[float] = field(default_factory=lambda: list(DEFAULT_QUEUE_THRESHOLDS))
    promote_knob: float = float("inf")
    packlimit: float | None = None
    interval: float = 0.0
    gittins_history: Path | None = None
    queue_order: str = DEFAULT_QUEUE_ORDER
    min_run: float = 0.0
    min_run_restores: float = 0.0
    cheap_victims: bool = False
    learn_thresholds: bool = False
    gittins_variant: str | None = None
    gittins_learn: bool = True
    heartbeat_timeout: float = 10.0
    grace: float = 30.0
    preempt_signal: str = "SIGTERM"
    checkpoint_root: Path | None = None
    metrics_port: int | None = None
    metrics_addr: str = "127.0.0.1"
    dashboard_port: int | None = None
    dashboard_addr: str = "127.0.0.1"
    curve_keys: Path | None = None
    #: Users who may act on every job (root always may).
    admins: frozenset[str] = frozenset()
    #: Whether jobs of root (uid 0) are accepted; off, they are refused at submit.
    allow_root_jobs: bool = False
    manual_clock: bool = False
    port_base: int = 30000
    snapshot_every: int = 500
    max_job_size: int = MAX_JOB_SIZE

    @property
    def checkpoints(self) -> Path:
        return (self.checkpoint_root or self.state / "checkpoints").resolve()

    def settings(self) -> Settings:
        """The core's settings (reads ``gittins_history``; OSError/CoreError when bad)."""
        samples = None
        if self.gittins_history is not None:
            with resolve_trace(self.gittins_history).open() as f:
                samples = tuple(ServiceDistribution.parse(f).samples)
        return Settings(
            **{f: getattr(self, f) for f in _SETTINGS if f != "thresholds"},
            thresholds=tuple(self.thresholds),
            gittins_samples=samples,
        )


#: Options that are core Settings of the same name.
_SETTINGS = tuple(
    f.name for f in dataclasses.fields(Settings) if f.name in Options.__dataclass_fields__
)


class Clock:
    """Core time in seconds: monotonic within a process and continued across restarts from
    the journal (``base``); or advanced only by ``advance`` requests (manual, for tests)."""

    def __init__(self, base: float, manual: bool) -> None:
        self.manual = manual
        self.base = base
        self._mono0 = time.monotonic()

    def now(self) -> float:
        return self.base if self.manual else self.base + time.monotonic() - self._mono0

    def advance(self, seconds: float) -> None:
        self.base += seconds


@dataclass
class LogFetch:
    """A client's ``logs`` request waiting for agents' ``log_data`` replies."""

    client: bytes
    req_id: int
    waiting: set[str]
    deadline: float
    files: dict[str, dict[str, Any]] = field(default_factory=dict)


class Coordinator:
    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.metrics = Metrics()
        # options are checked (by building the scheduler) before the state directory exists,
        # so a refused start leaves nothing behind
        self.settings = opts.settings()
        fresh = build_scheduler(self.settings)
        identity.check_bind(opts.bind, opts.curve_keys is not None)
        self.store = Store(opts.state)
        self._peer = identity.NOBODY  # who sent the message being handled
        self.stop = threading.Event()
        self.ready = threading.Event()
        self._outbox: list[tuple[str, bytes]] = []  # (node, frame) sent after commit
        self._fetches: dict[int, LogFetch] = {}
        self._fetch_ids = itertools.count(1)
        # entered at a random point, so that two coordinators of one cluster rarely collide
        offset = random.randrange(PORT_RANGE)
        self._ports = (opts.port_base + (offset + i) % PORT_RANGE for i in itertools.count())
        self._dirty = True
        self._progress_dirty: set[str] = set()
        self._next_flush = 0.0
        self.routes: dict[str, bytes] = {}  # node → ZeroMQ routing id
        self.nodes_by_route: dict[bytes, str] = {}
        self.hosts: dict[str, str] = {}
        self.last_seen: dict[str, float] = {}
        self.deadlines: dict[str, float] = {}  # job → monotonic kill backstop
        self._node_gpus: dict[str, list[dict[str, Any]]] = {}
        #: Why the state database cannot be written any more (then nothing is accepted).
        self.disk_error: str | None = None
        #: Profiler stage hook: (report, number of PS) → S_J or None.
        self.skew_estimator: Callable[[dict[str, Any], int], float | None] = report_skew
        self.dashboard: dashboard.Dashboard | None = None
        self._recover(fresh)

    # --- state --------------------------------------------------------------------------
    def _core_options(self) -> None:
        """Replay is exact only under the options the journal was written with: refuse a
        restart that changes them."""
        o = self.opts
        gittins_history = str(o.gittins_history) if o.gittins_history else None
        mine = {**self.settings.journal_record(), "gittins_history": gittins_history}
        # options newer than the journal were at what is now their default
        defaults = Settings().journal_record()
        stored = self.store.get_meta("core_options")
        if stored is None or self.store.empty():  # nothing to replay: any options will do
            with self.store.tx():
                self.store.set_meta("core_options", mine)
            return
        for key, value in mine.items():
            was = stored.get(key, defaults.get(key))
            if was != value:
                raise ValueError(
                    f"state {o.state} was created with {key}={was!r} but this "
                    f"start asks for {value!r}; restart with the same scheduler options or "
                    f"use a new --state"
                )

    def _instance(self) -> str:
        """This state directory's random identity: job keys ``<job id>-<instance>`` are unique
        across state directories and coordinators, although every new state starts at j1."""
        instance = self.store.get_meta("instance")
        if instance is None:
            instance = secrets.token_hex(4)
            with self.store.tx():
                self.store.set_meta("instance", instance)
        return instance

    def _recover(self, fresh: Scheduler) -> None:
        self._core_options()
        self.instance = self._instance()
        replayed = self._load_state(fresh)
        # running jobs kept running while we were down: count that time too (wall clock)
        downtime = max(0.0, time.time() - self.store.get_meta("wall", time.time()))
        base = self.store.get_meta("now", 0.0) + (0.0 if self.opts.manual_clock else downtime)
        self.clock = Clock(base, self.opts.manual_clock)
        started = time.monotonic()
        # nodes the core knows must re-register before we schedule or declare them dead
        self.unconfirmed = set(self.sched.free_gpus())
        for n in self.unconfirmed:
            self.last_seen[n] = started
        if replayed is not None:
            log.info(
                "recovered %d jobs (%d journal events replayed); waiting for nodes %s",
                len(self.records),
                replayed,
                sorted(self.unconfirmed) or "none",
            )

    def _load_state(self, fresh: Scheduler | None = None) -> int | None:
        """Scheduler (``fresh``, or a new one, when nothing was snapshotted), job records and
        learned history as last committed; the number of journal events replayed (None for
        a fresh state directory)."""
        snapshot, journal = self.store.load()
        if snapshot is None:
            self.sched = fresh or build_scheduler(self.settings)
        else:
            self.sched = restore_scheduler(snapshot, self.settings)
        for kind, args in journal:
            event = events.from_wire(kind, args)  # CoreError: a journal this version cannot read
            try:
                self.sched.apply(event)
            except CoreError as e:  # it failed live too, and was journaled regardless
                log.debug("replayed %s failed again: %s", kind, e)
        self.history = History(self.store.db, self.sched)
        # in submission order (j1, j2, …): listings page through it
        self.records: dict[str, dict[str, Any]] = dict(
            sorted(self.store.jobs(), key=lambda item: int(item[0][1:]))
        )
        self.submit_keys = {
            (rec["request"].get("owner"), rec["request"]["key"]): job_id
            for job_id, rec in self.records.items()
            if rec["request"].get("key") is not None
        }
        self.packlimit = PackLimit(
            DEFAULT_PACKLIMIT if self.opts.packlimit is None else self.opts.packlimit
        )
        for key, skew, placement, iter_time in self.store.observations():
            self.packlimit.observe(key, skew, placement, iter_time)
        self.next_job = self.store.get_meta("next_job", 1)
        return len(journal) if journal or snapshot else None

    @contextmanager
    def _atomic(self) -> Iterator[None]:
        """Journal and records are committed together; commands leave only after commit.
        If anything fails half-way, nothing of it stays: the transaction is rolled back and
        the in-memory state reloaded from what was committed."""
        try:
            with self.store.tx():
                yield
                self.store.set_meta("now", self.clock.now())
                self.store.set_meta("wall", time.time())
        except BaseException:
            self._outbox.clear()
            self._progress_dirty.clear()
            with contextlib.suppress(sqlite3.Error):  # a failed disk: nothing is written again
                self._load_state()
            raise
        outbox, self._outbox = self._outbox, []
        for node, frame in outbox:
            self._to_node(node, frame)
        if self.store.since_snapshot >= self.opts.snapshot_every:
            try:
                self.store.save_snapshot(snapshot(self.sched))
            except sqlite3.Error as e:  # what was just committed stands: the journal has it
                self._disk_failed(e)

    def _disk_failed(self, e: sqlite3.Error) -> None:
        """The state database cannot be written: stop accepting changes (each would be lost)
        and say so, once in the log and in every refusal."""
        if self.disk_error is None:
            self.disk_error = (
                f"the state database {self.store.path} cannot be written ({e}); this "
                f"coordinator accepts no changes until it is restarted on a working disk "
                f"(everything acknowledged so far is safe)"
            )
            log.error("%s", self.disk_error)

    def _core(self, event: events.Event) -> list[Decision]:
        """Apply one core event and journal it (inside an ``_atomic`` block)."""
        decisions = self.sched.apply(event)
        self.store.append(*events.to_wire(event))
        return decisions

    def _save(self, job_id: str) -> None:
        self.store.put_job(job_id, self.records[job_id])

    def _step(self, job_id: str) -> int | None:
        """The training step the job last reported (for its history)."""
        return (self.records.get(job_id, {}).get("progress") or {}).get("step")

    def _key(self, job_id: str) -> str:
        """The job's storage key: its checkpoint directory and its log directory on nodes."""
        return self.records[job_id].get("key") or job_id

    # --- loop ---------------------------------------------------------------------------
    def run(self) -> None:
        socket_path = identity.ipc_path(self.opts.bind)
        if socket_path is not None:
            _claim_socket(Path(socket_path))
        ctx = zmq.Context.instance()
        auth = None
        self.sock = ctx.socket(zmq.ROUTER)
        self.sock.linger = 0
        self.sock.setsockopt(zmq.MAXMSGSIZE, protocol.SOCKET_MAX_BYTES)
        self.sock.setsockopt(zmq.ROUTER_MANDATORY, 0)
        if self.opts.curve_keys is not None:
            curve.apply_server(self.sock, self.opts.curve_keys)
            auth = curve.Authenticator(ctx, self.opts.curve_keys)
            auth.start()
        try:
            self.sock.bind(self.opts.bind)
        except zmq.ZMQError:
            if auth is not None:
                auth.stop()
            raise
        if socket_path is not None:  # every local user may connect: the uid says who it is
            os.chmod(socket_path, 0o777)
        self._peer_of = identity.curve_peer if socket_path is None else identity.ipc_peer
        self.address = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)
        if self.opts.metrics_port is not None:
            where = f"{self.opts.metrics_addr}:{self.opts.metrics_port}"
            try:
                self.metrics.serve(self.opts.metrics_port, self.opts.metrics_addr)
            except OSError as e:
                raise OSError(f"cannot serve metrics on {where}: {e.strerror}") from None
        if self.opts.dashboard_port is not None:
            self.dashboard = dashboard.serve_dashboard(self.store.path, self.opts)
        log.info(
            "coordinator listening on %s (policy %s, state %s)",
            self.address,
            self.opts.policy,
            self.opts.state,
        )
        self.ready.set()
        try:
            while not self.stop.is_set():
                if self.sock.poll(self._poll_ms()):
                    for _ in range(1000):  # drain a burst, then schedule once
                        try:
                            rid, *frames = self.sock.recv_multipart(zmq.NOBLOCK, copy=False)
                        except zmq.Again:
                            break
                        if len(frames) != 1:
                            self._refuse(
                                rid.bytes,
                                protocol.request_id(frames[0].bytes) if frames else None,
                                f"a message is one frame; got {len(frames)}",
                            )
                            continue
                        self._peer = self._peer_of(frames[0], self.opts.admins)
                        self._on_frame(rid.bytes, frames[0].bytes)
                try:
                    self._timers()
                except sqlite3.Error as e:
                    self._disk_failed(e)
        finally:
            self._flush_progress()
            if self.dashboard is not None:
                self.dashboard.close()
            self.sock.close(linger=0)
            if auth is not None:
                auth.stop()
            self.store.close()

    def _poll_ms(self) -> int:
        if self._dirty:
            return 0
        wake = None if self.unconfirmed else self.sched.next_wakeup(self.clock.now())
        timeout = 0.2
        if wake is not None and not self.clock.manual:
            timeout = min(timeout, max(0.0, wake - self.clock.now()))
        return int(timeout * 1000)

    def _timers(self) -> None:
        mono = time.monotonic()
        for job_id, deadline in list(self.deadlines.items()):
            if mono >= deadline:  # the agent should have killed it by now: insist
                del self.deadlines[job_id]
                run = self.records[job_id].get("run")
                if run is not None:
                    self._send_to_parts(job_id, run, "kill")
        for req, fetch in list(self._fetches.items()):
            if mono >= fetch.deadline:
                self._finish_fetch(req)
        if self.disk_error is not None:  # every change below would be lost
            return
        for node, seen in list(self.last_seen.items()):
            if mono - seen > self.opts.heartbeat_timeout:
                log.warning(
                    "node %s missed heartbeats for %.1fs; declaring it down", node, mono - seen
                )
                self._node_down(node)
        if mono >= self._next_flush:  # once a second: O(jobs) work stays off the hot path
            self._flush_progress()
            self._update_gauges()
            if self.dashboard is not None:
                jobs = self._listing({}, history=False)["jobs"]
                nodes = self._on_nodes(b"", {})["nodes"]
                self.dashboard.publish(dashboard.state(jobs, nodes, self.clock.now()))
            self._next_flush = mono + 1.0
        now = self.clock.now()
        wake = self.sched.next_wakeup(now)
        if not self.unconfirmed and (self._dirty or (wake is not None and wake <= now)):
            self._pass()

    def _pass(self) -> None:
        self._dirty = False
        now = self.clock.now()
        t0 = time.perf_counter()
        with self._atomic():
            decisions = self._core(events.Schedule(now))
            self.metrics.pass_latency.observe(time.perf_counter() - t0)
            self._act(decisions)
            self.history.record(self.sched, now, self._step)

    # --- decisions → commands -----------------------------------------------------------
    def _act(self, decisions: list[Decision]) -> None:
        now = self.clock.now()
        for d in decisions:
            alloc = json.dumps(d.allocation.to_wire()) if isinstance(d, Start) else None
            self.store.log_decision(now, type(d).__name__.lower(), d.job_id, alloc)
            if isinstance(d, Start):
                self._start(d)
            elif isinstance(d, Preempt):
                self.metrics.preemptions.inc()
                self._stop_run(d.job_id, "preempt")
            elif isinstance(d, Kill):
                self._stop_run(d.job_id, "kill")

    def _launches(
        self,
        job_id: str,
        key: str,
        req: dict[str, Any],
        allocation: dict[str, list[int]],
        restart: int,
        hosts: dict[str, str],
        port: Callable[[str], int],
    ) -> dict[str, bytes]:
        """The ``launch`` message for each node of one (re)start of a job."""
        gang = GangRequest(
            tuple(req["argv"]), req["workers"], req.get("ps", 0), req.get("horovod", False)
        )
        specs = plan(
            gang,
            job_id,
            allocation,
            None,
            self.opts.checkpoints,
            restart,
            port,
            hosts=hosts,
            job_key=key,
        )
        by_node: dict[str, list[dict[str, Any]]] = {}
        for s in specs:
            env = {
                **req.get("env", {}),
                **s.env,
                "TIRESIAS_PREEMPT_SIGNAL": self.opts.preempt_signal,
                JOB_TOKEN: req.get("token", ""),
            }
            by_node.setdefault(s.node, []).append(
                {
                    "role": s.role,
                    "task_index": s.task_index,
                    "argv": list(s.argv),
                    "env": env,
                    "gpus": list(s.gpus),
                    "cwd": req.get("cwd"),
                }
            )
        return {
            node: protocol.encode(
                "launch",
                job_id=job_id,
                job_key=key,
                restart=restart,
                processes=procs,
                grace=self.opts.grace,
                owner=req.get("owner", ""),
            )
            for node, procs in by_node.items()
        }

    def _check_deliverable(self, request: dict[str, Any]) -> None:
        """Refuse at submit a job whose launch could not reach an agent: plan it on nodes as
        big as the largest known one, with host names as long as any, and measure."""
        workers = request["workers"]
        per_node = max((len(g) for g in self._node_gpus.values()), default=workers)
        host = "h" * max([64, *map(len, self.hosts.values())])
        allocation = {
            f"n{i:06d}": list(range(min(per_node, workers - start)))
            for i, start in enumerate(range(0, workers, per_node))
        }
        hosts = dict.fromkeys(allocation, host)
        job_id = "j" * 12
        frames = self._launches(
            job_id, f"{job_id}-{self.instance}", request, allocation, 99999, hosts, lambda _: 65535
        )
        size = max(map(len, frames.values()))
        if size > protocol.MAX_MESSAGE_BYTES:
            raise protocol.ProtocolError(
                f"submit: the job's command and environment make a launch of {size} bytes "
                f"for one node, over the {protocol.MAX_MESSAGE_BYTES}-byte message limit; "
                f"shrink the environment or arguments (pass large data in files)"
            )

    def _job_port(self, node: str) -> int:
        """A TCP port for one of a job's servers (TF, Horovod rendezvous) on ``node``: one the
        OS says is free when the node is this machine, since other programs and other users'
        coordinators listen here too; else the next port of the ``--port-base`` range."""
        if self.hosts.get(node, node) in LOOPBACK_HOSTS:
            return free_local_port(node)
        return next(self._ports)

    def _start(self, d: Start) -> None:
        job = self.sched.job(d.job_id)
        rec = self.records[d.job_id]
        frames = self._launches(
            d.job_id,
            self._key(d.job_id),
            rec["request"],
            d.allocation.to_wire(),
            job.restarts,
            self.hosts,
            self._job_port,
        )
        rec["run"] = {
            "restart": job.restarts,
            "parts": dict.fromkeys(frames),
            "decided": None,
            "stopping": None,
            "allocation": d.allocation.to_wire(),
            "started": self.clock.now(),
        }
        rec["nodes_ever"] = sorted({*rec.get("nodes_ever", []), *frames})
        self._save(d.job_id)
        self.metrics.starts.inc()
        self._outbox.extend(frames.items())
        log.info("start %s (restart %d) on %s", d.job_id, job.restarts, d.allocation.to_wire())

    def _stop_run(self, job_id: str, why: str) -> None:
        rec = self.records[job_id]
        run = rec.get("run")
        if run is None:
            return
        run["stopping"] = run["stopping"] or why
        self._save(job_id)
        kind = "preempt" if why == "preempt" else "kill"
        self._send_to_parts(job_id, run, kind)
        grace = self.opts.grace if kind == "preempt" else 0.0
        self.deadlines[job_id] = time.monotonic() + grace + max(2.0, self.opts.heartbeat_timeout)
        log.info("%s %s (restart %d)", why, job_id, run["restart"])

    def _send_to_parts(
        self, job_id: str, run: dict[str, Any], kind: str, grace: float = 0.0
    ) -> None:
        fields: dict[str, Any] = {"job_id": job_id, "restart": run["restart"]}
        if kind == "kill" and grace:
            fields["grace"] = grace
        if kind == "preempt":
            fields |= {"signal": self.opts.preempt_signal, "grace": self.opts.grace}
        for node, outcome in run["parts"].items():
            if outcome is None:
                self._outbox.append((node, protocol.encode(kind, **fields)))
        if not self.store.in_transaction:
            outbox, self._outbox = self._outbox, []
            for node, frame in outbox:
                self._to_node(node, frame)

    def _to_node(self, node: str, frame: bytes) -> None:
        route = self.routes.get(node)
        if route is None:
            log.warning("node %s is not connected; command dropped (reconciled on register)", node)
            return
        self.sock.send_multipart([route, frame])

    # --- parts ending → job exits -------------------------------------------------------
    def _part_ended(
        self, job_id: str, node: str, outcome: str, processes: list[dict[str, Any]]
    ) -> None:
        """One node's processes of the current run are gone (or the node is)."""
        rec = self.records[job_id]
        run = rec["run"]
        run["parts"][node] = outcome
        failing = [p for p in processes if p["code"] not in (0, EXIT_CHECKPOINTED, None)]
        if processes:
            progress = rec.get("progress", {})
            rec["last_exit"] = {
                "node": node,
                "outcome": outcome,
                "restart": run["restart"],
                "step": progress.get("step") if progress.get("restart") == run["restart"] else None,
                "processes": [{k: p[k] for k in ("role", "task_index", "code")} for p in processes],
            }
        if outcome == "failed" and run["decided"] != "failed":
            run["decided"] = "failed"
            if failing:
                rec["exit_code"] = failing[0]["code"]
                rec["log_tail"] = failing[0].get("log_tail") or ""
        elif outcome in ("completed", "checkpointed", "preempted", "lost") and (
            run["decided"] is None or (run["decided"], outcome) == ("preempted", "checkpointed")
        ):
            run["decided"] = outcome  # the chief's checkpoint counts, however peers ended
        pending = [n for n, o in run["parts"].items() if o is None]
        if run["decided"] is not None and pending and run["stopping"] is None:
            run["stopping"] = "stop"  # the others cannot go on without this part
            # after a completion, peers get a moment to finish on their own
            settle = SETTLE if run["decided"] == "completed" else 0.0
            self._send_to_parts(job_id, run, "kill", grace=settle)
        if not pending:
            self._job_ended(job_id, run)
        self._save(job_id)

    def _job_ended(self, job_id: str, run: dict[str, Any]) -> None:
        rec = self.records[job_id]
        decided, stopping = run["decided"], run["stopping"]
        if decided in ("failed", "completed"):
            outcome = ExitOutcome(decided)
        elif decided == "lost":
            outcome = ExitOutcome.LOST
        elif decided in ("checkpointed", "preempted") or stopping in ("preempt", "kill"):
            outcome = ExitOutcome.CHECKPOINTED  # resumed from its last checkpoint, if any
        else:
            outcome = ExitOutcome.LOST
        self._learn_packlimit(job_id, run)
        if decided == "preempted":
            self._count_lost_work(job_id, run)
        rec["run"] = None
        self.deadlines.pop(job_id, None)
        self._core(events.Exited(job_id, self.clock.now(), outcome))
        state = self.sched.job(job_id).state
        if state.finished:
            rec["ended"] = time.time()
        if state is JobState.COMPLETED:
            rec["exit_code"] = 0
        elif state is JobState.CANCELLED:
            rec.setdefault("exit_code", 130)
        log.info(
            "job %s restart %d ended: %s → %s", job_id, run["restart"], outcome.value, state.value
        )
        self._dirty = True

    def _count_lost_work(self, job_id: str, run: dict[str, Any]) -> None:
        """A run stopped by preemption without a checkpoint: its steps since the last
        checkpoint (all of them, for a job that cannot be checkpointed) will run again."""
        rec = self.records[job_id]
        progress = rec.get("progress", {})
        if progress.get("restart") == run["restart"]:
            step = progress.get("step") or 0
            began = (progress.get("warmup") or {}).get("step") or 0
        else:  # no report from this run: it never got going
            step = began = 0
        saved = 0 if rec.get("checkpointable") is False else began
        saved = max(saved, (progress.get("checkpoint") or {}).get("step") or 0)
        job = self.sched.job(job_id)
        seconds = max(0.0, (job.wait_since or self.clock.now()) - run.get("started", 0.0))
        share = 1.0 if step <= began else min(1.0, max(0, step - saved) / (step - began))
        lost = rec.setdefault("lost", {"preemptions": 0, "steps": 0, "gpu_seconds": 0.0})
        lost["preemptions"] += 1
        lost["steps"] += max(0, step - saved)
        lost["gpu_seconds"] += job.gpus * seconds * share
        self.metrics.lost_gpu_seconds.inc(job.gpus * seconds * share)

    def _learn_packlimit(self, job_id: str, run: dict[str, Any]) -> None:
        """Feed a finished multi-GPU run (skew, packed or spread, iteration time) to the
        PACKLIMIT learner; journal a new value so replay places jobs the same way."""
        rec = self.records[job_id]
        progress = rec.get("progress", {})
        skew, iter_time = rec.get("skew"), progress.get("iter_time")
        if (
            skew is None
            or not iter_time
            or progress.get("restart") != run["restart"]
            or sum(map(len, run["allocation"].values())) < 2
            or not hasattr(self.sched.placement, "packlimit")
        ):
            return
        placement = PACKED if len(run["allocation"]) == 1 else SPREAD
        key = rec["request"].get("name") or job_id
        self.store.add_observation(key, skew, placement, iter_time)
        self.packlimit.observe(key, skew, placement, iter_time)
        if self.packlimit.value != self.sched.placement.packlimit:
            log.info("PACKLIMIT learned from history: %.3f", self.packlimit.value)
            self._core(events.SetPackLimit(self.packlimit.value))

    # --- nodes --------------------------------------------------------------------------
    def _node_down(self, node: str) -> None:
        """A silent node: the core stops its jobs' service now; their parts there are lost,
        survivors elsewhere are killed, and each job is resumed once all its parts are gone."""
        route = self.routes.pop(node, None)
        if route is not None:
            self.nodes_by_route.pop(route, None)
        self.last_seen.pop(node, None)
        self.unconfirmed.discard(node)
        with self._atomic():
            if node in self.sched.free_gpus():
                self._core(events.NodeDown(node, self.clock.now()))
            for job_id, rec in self.records.items():
                run = rec.get("run")
                if run is not None and _pending(run, node):
                    self._part_ended(job_id, node, "lost", [])
        self._dirty = True

    # --- messages -----------------------------------------------------------------------
    def _on_frame(self, rid: bytes, frame: bytes) -> None:
        try:
            msg = protocol.decode(frame)
        except protocol.ProtocolError as e:
            self._refuse(rid, protocol.request_id(frame), str(e))
            return
        except Exception as e:  # a validation bug must not kill the service either
            log.exception("a message could not be checked")
            self._refuse(rid, protocol.request_id(frame), f"internal error checking it: {e}")
            return
        t = msg["type"]
        handler = getattr(self, f"_on_{t}", None)
        if handler is None:
            self._refuse(rid, msg.get("id"), f"{t}: not a message the coordinator accepts")
            return
        denied = self._authorize(t, msg)
        if denied is not None:
            self._refuse(rid, msg.get("id"), denied)
            return
        self.metrics.count(t)
        if self.disk_error is not None and t in CHANGES:
            self._refuse(rid, msg.get("id"), f"{t}: {self.disk_error}")
            return
        node = self.nodes_by_route.get(rid)
        if node is not None:
            self.last_seen[node] = time.monotonic()
        try:
            reply = handler(rid, msg)
        except CoreError as e:
            self._refuse(rid, msg.get("id"), f"{t}: {e}")
            return
        except protocol.ProtocolError as e:
            self._refuse(rid, msg.get("id"), str(e), **({"code": e.code} if e.code else {}))
            return
        except sqlite3.Error as e:
            self._disk_failed(e)
            self._refuse(rid, msg.get("id"), f"{t}: {self.disk_error}")
            return
        except Exception as e:  # a bug must not kill the service; _atomic undid its writes
            log.exception("%s failed; nothing of it was applied", t)
            self._refuse(rid, msg.get("id"), f"{t}: internal error, nothing applied: {e}")
            return
        if reply is not None:
            self.sock.send_multipart([rid, protocol.ok(msg.get("id"), **reply)])

    def _refuse(self, rid: bytes, req_id: int | None, text: str, **fields: Any) -> None:
        self.metrics.bad_messages.inc()
        log.debug("refused a message: %s", text)
        self.sock.send_multipart([rid, protocol.error(req_id, text, **fields)])

    def _record(self, t: str, job_id: str) -> dict[str, Any]:
        rec = self.records.get(job_id)
        if rec is None:
            raise protocol.ProtocolError(f"{t}: unknown job id {job_id!r}")
        return rec

    def _authorize(self, t: str, msg: dict[str, Any]) -> str | None:
        """Why the sender may not send this message, or None when it may."""
        peer = self._peer
        if t in CLIENT_REQUESTS and peer.user is None:
            return f"{t}: {peer.describe()} may not make requests (docs/security.md)"
        if t == "advance" and not peer.admin:
            return f"advance: only an admin may move the clock, not {peer.describe()}"
        if t in AGENT_MESSAGES and peer.node not in (identity.ANY_NODE, msg["node"]):
            return f"{t}: {peer.describe()} may not speak for node {msg['node']!r}"
        return None

    def _may_manage(self, rec: dict[str, Any]) -> bool:
        """Whether the sender owns the job or is an admin."""
        owner = rec["request"].get("owner")
        return self._peer.admin or (owner is not None and self._peer.user == owner)

    def _owned(self, t: str, job_id: str, what: str) -> dict[str, Any]:
        """The job's record, if the sender may ``what`` it."""
        rec = self._record(t, job_id)
        if not self._may_manage(rec):
            raise protocol.ProtocolError(
                f"{t}: job {job_id} belongs to {rec['request'].get('owner')!r}; only its owner "
                f"or an admin may {what}"
            )
        return rec

    def _agent(self, rid: bytes, t: str, node: str) -> None:
        """Refuse agent messages from a connection that has not registered as ``node``."""
        if self.nodes_by_route.get(rid) != node:
            raise protocol.ProtocolError(
                f"{t}: node {node!r} is not registered on this connection; register first",
                code=REGISTER,
            )

    # client requests
    def _on_submit(self, rid: bytes, msg: dict[str, Any]) -> dict[str, Any]:
        try:
            GangRequest(
                tuple(msg["argv"]), msg["workers"], msg.get("ps") or 0, bool(msg.get("horovod"))
            )
        except ValueError as e:
            raise protocol.ProtocolError(f"submit: {e}") from None
        if msg.get("gpus") not in (None, msg["workers"]):
            raise protocol.ProtocolError(
                f"submit: 'gpus' ({msg['gpus']}) must equal 'workers' ({msg['workers']}); "
                f"every worker gets one GPU"
            )
        cap = self.opts.max_job_size
        for what in ("workers", "ps"):
            if (msg.get(what) or 0) > cap:
                raise protocol.ProtocolError(
                    f"submit: '{what}' is {msg[what]}, over this coordinator's limit of {cap} "
                    f"per job (tiresias-coordinator --max-job-size)"
                )
        owner = self._peer.user
        assert owner is not None  # _authorize
        if identity.is_root_user(owner) and not self.opts.allow_root_jobs:
            raise protocol.ProtocolError(
                "submit: jobs do not run as root here; submit as an unprivileged user (an "
                "admin may start the coordinator with --allow-root-jobs)"
            )
        job_id = f"j{self.next_job}"
        now = self.clock.now()
        spec = JobSpec(
            job_id,
            msg["workers"],
            arrival=now,
            duration=msg.get("duration"),
            skew=msg.get("skew"),
            model=msg.get("name"),
        )
        request = {
            k: msg[k]
            for k in ("argv", "workers", "ps", "horovod", "cwd", "env", "name", "key")
            if msg.get(k) is not None
        }
        request["owner"] = owner
        done = self.submit_keys.get((owner, request.get("key")))
        if done is not None:  # a retry of a submit whose reply was lost: the same job
            return {"job_id": done, "duplicate": True}
        request["token"] = secrets.token_urlsafe(24)  # for the job's runtime (report)
        self._check_deliverable(request)
        with self._atomic():
            try:
                self._core(events.Submit(spec, now))
            except CoreError as e:  # the id stays free for the next submit: do not name it
                raise protocol.ProtocolError(
                    f"submit: {str(e).replace(f'job {job_id}', 'the job')}; nothing was queued"
                ) from None
            self.next_job += 1
            self.store.set_meta("next_job", self.next_job)
            self.records[job_id] = {
                "key": f"{job_id}-{self.instance}",
                "request": request,
                "submitted": time.time(),
                "run": None,
                "skew": msg.get("skew"),
            }
            self._save(job_id)
        if "key" in request:
            self.submit_keys[(request.get("owner"), request["key"])] = job_id
        self._dirty = True
        log.info("submitted %s for %s: %s", job_id, owner, " ".join(msg["argv"])[:200])
        return {"job_id": job_id}

    def _on_cancel(self, rid: bytes, msg: dict[str, Any]) -> dict[str, Any]:
        job_id = msg["job_id"]
        self._owned("cancel", job_id, "cancel it")
        with self._atomic():
            decisions = self._core(events.Cancel(job_id, self.clock.now()))
            self._act(decisions)
            if self.sched.job(job_id).state.finished:  # it was not running
                self.records[job_id]["ended"] = time.time()
                self._save(job_id)
        self._dirty = True
        return {"job_id": job_id, "state": self.sched.job(job_id).state.value}

    def _on_status(self, rid: bytes, msg: dict[str, Any]) -> dict[str, Any]:
        now = self.clock.now()
        if msg.get("job_id"):
            self._record("status", msg["job_id"])
            view = self._views([self.sched.job(msg["job_id"])], now)[0]
            view["packlimit"] = getattr(self.sched.placement, "packlimit", None)
            view["history"] = self.history.of(msg["job_id"])
            return {"job": _fit(view, LIST_BUDGET)}
        return self._listing(msg, history=True)

    def _on_queue(self, rid: bytes, msg: dict[str, Any]) -> dict[str, Any]:
        return self._listing(msg, history=False)

    def _listing(self, msg: dict[str, Any], history: bool) -> dict[str, Any]:
        """One page of jobs in submission order: active ones, plus (``history``) finished
        ones when asked (``all``, or those that ended at or after ``since``, wall clock),
        only ``user``'s if given, after the job ``after``. A page stops at ``limit`` jobs or
        at the reply's byte budget; ``next`` is the cursor for the following page."""
        limit = min(msg.get("limit") or PAGE_JOBS, PAGE_JOBS)
        since = msg.get("since")
        everything = history and bool(msg.get("all"))
        after, user = msg.get("after"), msg.get("user")
        chosen: list[Job] = []
        more = False
        for job_id, rec in self._records_after(after):
            if user is not None and rec["request"].get("owner") != user:
                continue
            job = self.sched.job(job_id)
            if job.state.finished and not (
                everything
                or (history and since is not None and rec.get("ended", rec["submitted"]) >= since)
            ):
                continue
            if len(chosen) == limit:
                more = True
                break
            chosen.append(job)
        views, used = [], 0
        for view in self._views(chosen, self.clock.now()):
            view = _fit(view, LIST_BUDGET // 4)
            size = len(protocol.encode("ok", job=view))
            if views and used + size > LIST_BUDGET:
                more = True
                break
            views.append(view)
            used += size
        return {"jobs": views, "next": views[-1]["job_id"] if more and views else None}

    def _records_after(self, after: str | None) -> Iterator[tuple[str, dict[str, Any]]]:
        """Job records in submission order, starting after job ``after`` (None: the first)."""
        records = iter(self.records.items())
        if after is not None:
            self._record("status", after)
            for job_id, _ in records:
                if job_id == after:
                    break
        yield from records

    def _on_nodes(self, rid: bytes, msg: dict[str, Any]) -> dict[str, Any]:
        now = self.clock.now()
        used: dict[str, dict[int, str]] = {}
        for job in self.sched.jobs():
            if job.allocation is not None and not job.state.finished:
                for node, gpus in job.allocation.gpus:
                    used.setdefault(node, {}).update(dict.fromkeys(gpus, job.job_id))
        mono = time.monotonic()
        return {
            "nodes": [
                node_view(
                    name,
                    self.hosts.get(name),
                    self._node_gpus.get(name, []),
                    used.get(name, {}),
                    mono - self.last_seen[name] if name in self.last_seen else None,
                    name in self.routes,
                )
                for name in sorted(self.sched.free_gpus())
            ],
            "now": now,
        }

    def _on_advance(self, rid: bytes, msg: dict[str, Any]) -> dict[str, Any]:
        if not self.clock.manual:
            raise protocol.ProtocolError(
                "advance: the coordinator runs on the wall clock (start it with --manual-clock)"
            )
        if msg["seconds"] < 0:
            raise protocol.ProtocolError("advance: 'seconds' must be >= 0")
        self.clock.advance(msg["seconds"])
        self._dirty = True
        return {"now": self.clock.now()}

    def _on_logs(self, rid: bytes, msg: dict[str, Any]) -> None:
        rec = self._owned("logs", msg["job_id"], "read its logs")
        req = next(self._fetch_ids)
        offsets = msg.get("offsets") or {}
        nodes = [n for n in rec.get("nodes_ever", []) if n in self.routes]
        # the whole answer must fit one message: split a byte budget over the nodes (and
        # each agent over its files), with room for decoding and framing
        budget = min(msg.get("limit") or LOG_BUDGET, LOG_BUDGET)
        limit = budget // max(1, len(nodes))
        fetch = LogFetch(rid, msg["id"], set(nodes), time.monotonic() + LOG_FETCH_TIMEOUT)
        self._fetches[req] = fetch
        for node in nodes:
            prefix = f"{node}/"
            mine = {k[len(prefix) :]: v for k, v in offsets.items() if k.startswith(prefix)}
            self._to_node(
                node,
                protocol.encode(
                    "fetch_logs",
                    job_id=msg["job_id"],
                    job_key=self._key(msg["job_id"]),
                    req=req,
                    offsets=mine,
                    limit=limit,
                ),
            )
        if not nodes:
            self._finish_fetch(req)

    def _finish_fetch(self, req: int) -> None:
        fetch = self._fetches.pop(req)
        self.sock.send_multipart(
            [
                fetch.client,
                protocol.ok(fetch.req_id, files=fetch.files, missing=sorted(fetch.waiting)),
            ]
        )

    # agent messages
    def _on_log_data(self, rid: bytes, msg: dict[str, Any]) -> None:
        self._agent(rid, "log_data", msg["node"])
        fetch = self._fetches.get(msg["req"])
        if fetch is None or msg["node"] not in fetch.waiting:
            return  # late, or not asked: never a part of another node's answer
        for name, data in msg["files"].items():
            fetch.files[f"{msg['node']}/{name}"] = data
        fetch.waiting.discard(msg["node"])
        if not fetch.waiting:
            self._finish_fetch(msg["req"])

    def _on_register(self, rid: bytes, msg: dict[str, Any]) -> dict[str, Any]:
        node = msg["node"]
        gpus = sorted(g["index"] for g in msg["gpus"])
        if not gpus:
            raise protocol.ProtocolError("register: a node must declare at least one GPU")
        old = self.routes.get(node)
        if old is not None and old != rid:
            self.nodes_by_route.pop(old, None)
        self.routes[node] = rid
        self.nodes_by_route[rid] = node
        self.hosts[node] = msg.get("host") or node
        self.last_seen[node] = time.monotonic()
        known = set(self.sched.free_gpus())
        changed = (
            self._node_gpus.get(node) is not None
            and [g["index"] for g in self._node_gpus[node]] != gpus
        )
        self._node_gpus[node] = msg["gpus"]
        running = {r["job_id"]: r["restart"] for r in msg["running"]}
        with self._atomic():
            if node in known and changed:
                self._core(events.NodeDown(node, self.clock.now()))
                known.discard(node)
            if node not in known:
                self._core(events.NodeUp(Node(node, tuple(gpus)), self.clock.now()))
            self._reconcile(node, running)
        self.unconfirmed.discard(node)
        self._dirty = True
        log.info("node %s registered: %d GPUs, %d jobs running", node, len(gpus), len(running))
        return {"node": node}

    def _reconcile(self, node: str, running: dict[str, int]) -> None:
        """Make the agent's view and ours agree: kill what we do not expect, lose what it
        does not have."""
        for job_id, restart in running.items():
            run = self.records.get(job_id, {}).get("run")
            if run is None or run["restart"] != restart or not _pending(run, node):
                log.warning(
                    "node %s runs %s restart %d, which it should not; killing it",
                    node,
                    job_id,
                    restart,
                )
                self._outbox.append((node, protocol.encode("kill", job_id=job_id, restart=restart)))
        for job_id, rec in self.records.items():
            run = rec.get("run")
            if run is not None and _pending(run, node) and job_id not in running:
                log.warning("node %s no longer runs %s; it is lost", node, job_id)
                self._part_ended(job_id, node, "lost", [])

    def _on_heartbeat(self, rid: bytes, msg: dict[str, Any]) -> dict[str, Any]:
        self._agent(rid, "heartbeat", msg["node"])
        return {}

    def _on_exited(self, rid: bytes, msg: dict[str, Any]) -> dict[str, Any]:
        self._agent(rid, "exited", msg["node"])
        rec = self._record("exited", msg["job_id"])
        run = rec.get("run")
        node = msg["node"]
        if run is None or run["restart"] != msg["restart"] or not _pending(run, node):
            return {"stale": True}  # already accounted (a resent report) or an old run
        with self._atomic():
            self._part_ended(msg["job_id"], node, msg["outcome"], msg["processes"])
        return {}

    def _on_report(self, rid: bytes, msg: dict[str, Any]) -> None:
        job_id = msg["job_id"]
        rec = self._record("report", job_id)
        token = rec["request"].get("token", "").encode()
        offered = (msg.get("token") or "").encode()
        if not (self._may_manage(rec) or (token and hmac.compare_digest(token, offered))):
            raise protocol.ProtocolError(
                f"report: {self._peer.describe()} may not report on job {job_id} (it is not "
                f"the owner and has not the job's token)"
            )
        progress = rec.setdefault("progress", {})
        if progress.get("restart") != msg.get("restart"):  # a new run: its own facts only
            progress.pop("step", None)
        for k in ("step", "iterations", "iter_time", "gpu_time", "checkpoint", "warmup"):
            if msg.get(k) is not None:
                progress[k] = msg[k]
        progress["restart"] = msg.get("restart")
        said = msg.get("checkpointable")
        if (
            said is not None
            and msg.get("role") in (None, "chief")
            and said != rec.get("checkpointable")
        ):
            rec["checkpointable"] = said
            rec["checkpointable_why"] = msg.get("checkpointable_why")
            with self._atomic():
                self._core(events.UpdateCheckpointable(job_id, said, self.clock.now()))
                self._save(job_id)
            self._dirty = True
        costs = measured_costs(msg, self.sched.job(job_id))
        if costs is not None:
            with self._atomic():
                self._core(costs)
                self._save(job_id)
            self._dirty = True
        skew = self.skew_estimator(msg, rec["request"].get("ps", 0))
        if skew is not None and skew != rec.get("skew"):
            rec["skew"] = skew
            with self._atomic():
                self._core(events.UpdateSkew(job_id, float(skew)))
                self._save(job_id)
        else:
            self._progress_dirty.add(job_id)

    def _flush_progress(self) -> None:
        if self._progress_dirty and self.disk_error is None:
            try:
                with self.store.tx():
                    for job_id in self._progress_dirty:
                        self._save(job_id)
            except sqlite3.Error as e:
                self._disk_failed(e)
            self._progress_dirty.clear()

    # --- views --------------------------------------------------------------------------
    def _views(self, jobs: list[Job], now: float) -> list[dict[str, Any]]:
        active = sorted(
            (j for j in self.sched.jobs() if not j.state.finished),
            key=lambda j: self.sched.policy.key(j, now),
        )
        ranks = {j.job_id: i for i, j in enumerate(active, 1)}
        pending = explain(self.sched, now)
        views = []
        for j in jobs:
            rec = self.records.get(j.job_id, {"request": {}})
            view = job_view(j, rec, now, ranks.get(j.job_id))
            view["pending"] = pending[j.job_id].to_dict() if j.job_id in pending else None
            if not self._may_manage(rec):
                view["log_tail"] = None  # log content is the owner's
            views.append(view)
        return views

    def _update_gauges(self) -> None:
        queues: dict[int, int] = {}
        running = used = 0
        for job in self.sched.jobs():  # active jobs come first
            if job.state.finished:
                break
            if job.state is JobState.WAITING:
                queues[job.queue] = queues.get(job.queue, 0) + 1
            elif job.state in (JobState.RUNNING, JobState.PREEMPTING):
                running += 1
                used += job.gpus
        for q in range(self.sched.config.queues):
            self.metrics.queue_length.labels(str(q)).set(queues.get(q, 0))
        self.metrics.running_jobs.set(running)
        self.metrics.gpus_in_use.set(used)
        self.metrics.nodes_up.set(len(self.routes))
        self.metrics.gpus_total.set(sum(len(self._node_gpus.get(n, [])) for n in self.routes))


def report_skew(msg: dict[str, Any], num_ps: int) -> float | None:
    """S_J from a runtime report: its own ``skew`` if given, else the profiler stage's
    estimate from the model's tensor sizes (busiest PS, or largest all-reduce class)."""
    if msg.get("skew") is not None:
        return float(msg["skew"])
    return profiler.skew_from_report(msg.get("tensor_bytes"), num_ps)


def _fit(view: dict[str, Any], budget: int) -> dict[str, Any]:
    """A job view within ``budget`` bytes: a huge command line or log tail is cut short."""
    if len(protocol.encode("ok", job=view)) <= budget:
        return view
    argv = view["argv"]
    return {
        **view,
        "argv": [a[:200] for a in argv[:8]] + (["…"] if len(argv) > 8 else []),
        "log_tail": (view.get("log_tail") or "")[-2048:],
    }


def _claim_socket(path: Path) -> None:
    """Make the directory of an ipc:// socket, and refuse one where others could replace
    the socket with their own, or where a live coordinator already listens (binding would
    silently take its socket away)."""
    directory = path.parent
    directory.mkdir(mode=0o711, parents=True, exist_ok=True)
    st = directory.stat()
    if st.st_uid not in (0, os.geteuid()) or st.st_mode & 0o022:
        raise ValueError(
            f"socket directory {directory} is writable by other users, who could replace the "
            f"socket; use a directory only you (or root) may write"
        )
    if path.exists():
        with socket.socket(socket.AF_UNIX) as probe:
            try:
                probe.connect(str(path))
            except OSError:
                return  # left by a coordinator that is gone: binding replaces it
        raise OSError(f"cannot serve on ipc://{path}: another coordinator is serving there")


def _pending(run: dict[str, Any], node: str) -> bool:
    """Whether ``node``'s part of ``run`` has not ended yet."""
    return node in run["parts"] and run["parts"][node] is None
