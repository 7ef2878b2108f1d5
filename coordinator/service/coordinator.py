"""The coordinator service: a single-threaded ZeroMQ event loop around the scheduler core.

The loop owns the transport (one ROUTER socket for clients, runtimes and agents, CURVE on
tcp), the clocks (the core only ever sees ``now``), timers (the scheduler's next wakeup,
heartbeats, preemption backstops) and the SQLite journal: each message is handled in one
transaction (``atomic``), and the commands it decided leave only after it committed, so a
restarted coordinator picks up exactly where the old one stopped. What runs where is the
run book's (``runs.py``); the machines are the executor's (``executor.py``, and
``coordinator/executors``); client requests are handled in ``requests.py``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import zmq

from coordinator import protocol
from coordinator.core import events
from coordinator.core.model import CoreError, Decision, Start
from coordinator.core.scheduler import Scheduler
from coordinator.core.settings import build_scheduler, snapshot
from coordinator.service import (
    access,
    archive,
    compose,
    curve,
    dashboard,
    identity,
    profiler,
    recovery,
    requests,
    retire,
)
from coordinator.service.commands import Forget, send
from coordinator.service.executor import (
    Executor,
    ExecutorEvent,
    JobFound,
    LogData,
    NodeDrained,
    NodeJoined,
    NodeLost,
    PartExited,
    RunBegan,
)
from coordinator.service.gangs import RunSettings
from coordinator.service.job_events import History
from coordinator.service.logfetch import LogFetches
from coordinator.service.metrics import Metrics
from coordinator.service.options import Options
from coordinator.service.ports import JobPorts
from coordinator.service.records import ActiveIndex
from coordinator.service.runs import RunBook, When
from coordinator.service.store import Store

log = logging.getLogger("tiresias.coordinator")

#: Messages handled before timers and the pass run; read to clear a backlog before a node
#: is judged silent. A loop turn (the 0.2 s poll, plus handling) longer than STALL: the
#: process was stopped or starved, and that time counts against no node's heartbeats.
BURST, BACKLOG, STALL = 1000, 100_000, 1.0
#: The executor the options name, given the coordinator's ``send(route, frame)``.
ExecutorFactory = Callable[[Options, compose.Send], Executor]

#: Requests that change state: refused once the state database cannot be written.
CHANGES = frozenset({"submit", "cancel", "advance", "register", "exited"})


class Coordinator:
    """The server; also the run book's ``Ledger`` (core calls and records go to the journal)."""

    def __init__(self, opts: Options, executor_for: ExecutorFactory = compose.executor_for) -> None:
        """``executor_for``: the machines the options name, given this server's socket."""
        self.opts = opts
        self.metrics = Metrics()
        # options are checked (by building the scheduler) before the state directory exists,
        # so a refused start leaves nothing behind
        self.core_settings = opts.core_settings()
        fresh = build_scheduler(self.core_settings)
        identity.check_bind(opts.bind, opts.curve_keys is not None)
        # the executor is checked before the state directory exists
        self.executor: Executor = executor_for(opts, self._send)
        self.store = Store(opts.state)
        self.peer = identity.NOBODY  # who sent the message being handled
        self.stop = threading.Event()
        self.ready = threading.Event()
        self.logs = LogFetches(self._send)
        self.settings = RunSettings(
            opts.grace, opts.preempt_signal, opts.heartbeat_timeout, opts.checkpoints
        )
        self.job_port = JobPorts(opts.port_base)
        self.dirty = True
        self.progress_dirty: set[str] = set()
        self._next_flush = 0.0
        #: Why the state database cannot be written any more (then nothing is accepted).
        self.disk_error: str | None = None
        #: Profiler stage hook: (report, number of PS) → S_J or None.
        self.skew_estimator = profiler.SkewStage()
        self.dashboard: dashboard.Dashboard | None = None
        self._last_turn = time.monotonic()  # the end of the loop's last turn
        self.handlers: dict[str, Callable[[Coordinator, bytes, dict[str, Any]], Any]] = {
            **requests.CLIENT_HANDLERS,
            **self.executor.handlers(),
        }
        self._recover(fresh)

    # --- state --------------------------------------------------------------------------
    def _recover(self, fresh: Scheduler) -> None:
        recovery.check_core_options(self.store, self.opts, self.core_settings)
        self.instance = recovery.instance(self.store)
        replayed = self._load_state(fresh)
        # running jobs kept running while we were down: count that time too (wall clock)
        downtime = max(0.0, time.time() - self.store.get_meta("wall", time.time()))
        base = self.store.get_meta("now", 0.0) + (0.0 if self.opts.manual_clock else downtime)
        self.clock = recovery.Clock(base, self.opts.manual_clock)
        self.passed_at = self.clock.now()  # core time of the last scheduling pass
        # nodes the core knows must come back before we schedule or be declared lost
        started = time.monotonic()
        self.unconfirmed = set(self.sched.free_gpus())
        self.executor.expect(self.unconfirmed, started)
        if replayed is not None:
            log.info(
                "recovered %d jobs (%d journal events replayed); waiting for nodes %s",
                len(self.book.records),
                replayed,
                sorted(self.unconfirmed) or "none",
            )

    def _load_state(self, fresh: Scheduler | None = None) -> int | None:
        """Scheduler, run book and learned history as last committed; the number of
        journal events replayed (None for a fresh state directory)."""
        loaded = recovery.load(self.store, self.opts, self.core_settings, fresh)
        self.sched = loaded.sched
        self.history = History(self.store.db, self.sched)
        self.archive = archive.Archive(self.store.db)
        old = getattr(self, "book", None)
        self.book = RunBook(self.sched, self, self.settings, loaded.packlimit, self.metrics)
        self.book.records, self.active = loaded.records, ActiveIndex.of(loaded.records)
        self.book.ended = [j for j in loaded.records if self.sched.job(j).state.finished]
        if old is not None:  # what lives only in this process carries over
            self.book.deadlines, self.book.joined = old.deadlines, old.joined
        self.submit_keys = recovery.submit_keys(loaded.records)
        self.next_job = loaded.next_job
        return loaded.replayed

    @contextmanager
    def atomic(self) -> Iterator[None]:
        """Journal and records are committed together; commands leave only after commit.
        If anything fails half-way, nothing of it stays: the transaction is rolled back and
        the in-memory state reloaded from what was committed."""
        try:
            with self.store.tx():
                yield
                self.store.set_meta("now", self.clock.now())
                self.store.set_meta("wall", time.time())
        except BaseException:
            self.book.commands.clear()
            self.progress_dirty.clear()
            with contextlib.suppress(sqlite3.Error):  # a failed disk: nothing is written again
                self._load_state()
            raise
        self._send_commands()
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

    # Ledger: the run book's writes, inside ``atomic``
    def core(self, event: events.Event) -> list[Decision]:
        """Apply one core event and journal it."""
        decisions = self.sched.apply(event)
        self.store.append(*events.to_wire(event))
        return decisions

    def save(self, job_id: str) -> None:
        self.store.put_job(job_id, self.book.records[job_id].to_wire())

    def observe(self, key: str, skew: float, placement: str, iter_time: float) -> None:
        self.store.add_observation(key, skew, placement, iter_time)

    def decided(self, now: float, kind: str, job_id: str, allocation: str | None) -> None:
        self.store.log_decision(now, kind, job_id, allocation)

    def _send_commands(self) -> None:
        commands, self.book.commands = self.book.commands, []
        send(commands, self.executor)
        for cmd in commands:
            if isinstance(cmd, Forget):  # finished for good: nothing of it is measured again
                self.skew_estimator.forget(cmd.job_id)

    def when(self) -> When:
        return When(self.clock.now(), time.monotonic(), time.time())

    # --- loop ---------------------------------------------------------------------------
    def run(self) -> None:
        socket_path = identity.ipc_path(self.opts.bind)
        if socket_path is not None:
            identity.claim_socket(Path(socket_path))
        ctx: zmq.Context[Any] = zmq.Context.instance()
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
        peer_of = identity.curve_peer if socket_path is None else identity.ipc_peer
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
            self.opts.settings.policy,
            self.opts.state,
        )
        self.ready.set()
        self._peer_of = peer_of
        self._last_turn = time.monotonic()
        try:
            while not self.stop.is_set():
                if self.sock.poll(self._poll_ms()):
                    self._drain(BURST)  # a burst, then schedule once
                try:
                    self._timers()
                except sqlite3.Error as e:
                    self._disk_failed(e)
                self._last_turn = time.monotonic()
        finally:
            self._flush_progress()
            if self.dashboard is not None:
                self.dashboard.close()
            self.sock.close(linger=0)
            if auth is not None:
                auth.stop()
            self.store.close()

    def _drain(self, most: int) -> None:
        """Handle up to ``most`` messages already waiting on the socket."""
        for _ in range(most):
            try:
                rid, *frames = self.sock.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            if len(frames) != 1:
                self._refuse(
                    rid.bytes,
                    protocol.request_id(frames[0].bytes) if frames else None,
                    f"a message is one frame; got {len(frames)}",
                )
                continue
            self.peer = self._peer_of(frames[0], self.opts.admins)
            self.handle_frame(rid.bytes, frames[0].bytes)

    def _send(self, route: bytes, frame: bytes) -> None:
        self.sock.send_multipart([route, frame])

    def _poll_ms(self) -> int:
        if self.dirty:
            return 0
        wake = None if self.unconfirmed else self.sched.next_wakeup(self.clock.now())
        timeout = 0.2
        if wake is not None and not self.clock.manual:
            timeout = min(timeout, max(0.0, wake - self.clock.now()))
        return int(timeout * 1000)

    def _timers(self) -> None:
        mono = time.monotonic()
        if mono - self._last_turn > STALL:  # the process did not run: no node was silent
            log.warning("the coordinator did not run for %.1f s", mono - self._last_turn)
            self.executor.stalled(mono - self._last_turn)
        if self.executor.overdue(mono):  # first read what nodes sent while the loop was away
            self._drain(BACKLOG)
        self.book.overdue(mono)  # the executor should have stopped these by now: insist
        self._send_commands()
        self.logs.expire(mono)
        if self.disk_error is not None:  # every change below would be lost
            return
        for event in self.executor.poll(mono):
            self.apply(event)
        if mono >= self._next_flush:  # once a second: O(jobs) work stays off the hot path
            self._flush_progress()
            self.metrics.update(self.sched, self.executor.nodes().values())
            if self.dashboard is not None:
                jobs = requests.queue(self, b"", {"heads": 100})["jobs"]  # heads of lines
                nodes = requests.nodes(self, b"", {})["nodes"]
                self.dashboard.publish(dashboard.state(jobs, nodes, self.clock.now()))
            self._next_flush = mono + 1.0
        now = self.clock.now()
        wake = self.sched.next_wakeup(now)
        if not self.unconfirmed and (self.dirty or (wake is not None and wake <= now)):
            self._pass()

    def _pass(self) -> None:
        self.dirty = False
        now = self.clock.now()
        t0 = time.perf_counter()
        with self.atomic():
            decisions = self.core(events.Schedule(now))
            self.metrics.pass_latency.observe(time.perf_counter() - t0)
            self.act(decisions)
            self.history.record(self.sched, now, self.book.step_of)
            retire.retire_finished(self, now)  # their story told, they leave memory
        self.passed_at = now

    def act(self, decisions: list[Decision]) -> None:
        taken = {n for d in decisions if isinstance(d, Start) for n in d.allocation.nodes}
        hosts = {n: info.host for n in taken if (info := self.executor.node(n)) is not None}
        self.book.act(decisions, self.when(), hosts, lambda n: self.job_port(hosts.get(n, n)))

    # --- executor events ----------------------------------------------------------------
    def apply(self, event: ExecutorEvent) -> bool:
        """Act on what the executor says happened; False for news that is stale."""
        when = self.when()
        if isinstance(event, LogData):
            self.logs.data(event.req, event.node, dict(event.files))
            return True
        if isinstance(event, PartExited):
            if not self.book.is_current(event.job_id, event.restart, event.node):
                return False  # already accounted (a resent report) or an old run
            with self.atomic():
                self.book.part_ended(
                    event.job_id,
                    event.node,
                    event.outcome,
                    list(event.processes),
                    when,
                    None if self.clock.manual else event.ended,  # wall time: not manual time
                )
        elif isinstance(event, JobFound):
            requests.found(self, event)
        elif isinstance(event, RunBegan) and not self.clock.manual:
            with self.atomic():
                self.book.began(event.job_id, event.restart, event.wall, when)
        elif isinstance(event, NodeJoined):
            gpus = sorted(g["index"] for g in event.gpus)
            with self.atomic():
                self.book.node_up(event.node, gpus, event.running, when)
            self.unconfirmed.discard(event.node)
            log.info("node %s registered: %d GPUs, %d running", event.node, len(gpus),
                     len(event.running))  # fmt: skip
        elif isinstance(event, NodeLost):
            self.unconfirmed.discard(event.node)
            with self.atomic():
                self.book.node_lost(event.node, when)
        elif isinstance(event, NodeDrained):
            with self.atomic():
                self.book.node_drained(event.node, event.drained, event.why, when)
        self.dirty = self.dirty or self.book.changed
        self.book.changed = False
        return True

    # --- messages -----------------------------------------------------------------------
    def handle_frame(self, rid: bytes, frame: bytes) -> None:
        """One message from route ``rid`` (sent by ``self.peer``): checked, authorized,
        handled, answered."""
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
        handler = self.handlers.get(t)
        if handler is None:
            self._refuse(rid, msg.get("id"), f"{t}: not a message the coordinator accepts")
            return
        denied = access.authorize(self.peer, t, msg)
        if denied is not None:
            code = access.IDENTITY if t in access.AGENT_MESSAGES else None  # an agent gives up
            self._refuse(rid, msg.get("id"), denied, **({"code": code} if code else {}))
            return
        self.metrics.count(t)
        if self.disk_error is not None and t in CHANGES:
            self._refuse(rid, msg.get("id"), f"{t}: {self.disk_error}")
            return
        try:
            reply = handler(self, rid, msg)
        except CoreError as e:
            self._refuse(rid, msg.get("id"), f"{t}: {e}")
            return
        except protocol.ProtocolError as e:
            self._refuse(rid, msg.get("id"), str(e), **e.reply_fields())
            return
        except sqlite3.Error as e:
            self._disk_failed(e)
            self._refuse(rid, msg.get("id"), f"{t}: {self.disk_error}")
            return
        except Exception as e:  # a bug must not kill the service; atomic undid its writes
            log.exception("%s failed; nothing of it was applied", t)
            self._refuse(rid, msg.get("id"), f"{t}: internal error, nothing applied: {e}")
            return
        if reply is not None:
            self._send(rid, protocol.ok(msg.get("id"), **reply))

    def _refuse(self, rid: bytes, req_id: int | None, text: str, **fields: Any) -> None:
        self.metrics.bad_messages.inc()
        log.debug("refused a message: %s", text)
        self._send(rid, protocol.error(req_id, text, **fields))

    def _flush_progress(self) -> None:
        if self.progress_dirty and self.disk_error is None:
            try:
                with self.store.tx():
                    for job_id in self.progress_dirty:
                        self.save(job_id)
            except sqlite3.Error as e:
                self._disk_failed(e)
            self.progress_dirty.clear()
