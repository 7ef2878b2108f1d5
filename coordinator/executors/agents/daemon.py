"""Node agent: one per machine. Discovers GPUs, registers with the coordinator, spawns the
processes it is given (each in its own process group, logging to a file), signals and kills
them on command, and reports how each job's local processes ended.

The agent is deliberately dumb about policy: it never decides what runs, only reports. Exit
reports are kept until the coordinator acknowledges them, so a coordinator restart loses none.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import secrets
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import msgpack
import zmq

from coordinator import protocol
from coordinator.executors.agents.parts import Part, Proc, die_with_agent
from coordinator.executors.node import (
    PREEMPTION_DEATHS,
    RunAs,
    private_file,
    read_logs,
    run_as,
)
from coordinator.protocol import Stopping
from coordinator.service.client import ADDRESS_ENV as COORDINATOR_ENV
from coordinator.service.client import dealer
from coordinator.service.curve import ClientKeys
from coordinator.service.executor import SETTLE
from coordinator.service.profiler import MEASURE_SECONDS, Tapped
from tiresias_launch.contract import CHECKPOINT_DIR, EXIT_CHECKPOINTED, SERVER_KEY

log = logging.getLogger("tiresias.agent")

#: Seconds the rest of a job gets to exit after one of its processes failed or the chief ended.
STOP_GRACE = 5.0
#: Refusals of this agent (another live agent holds its node name, or its key or uid may not
#: speak for that name) before it gives up.
MAX_TAKEN_REFUSALS = 3


class AgentRefused(RuntimeError):
    """The coordinator will not take this agent (``run()`` raises it; the CLI exits 2)."""


class Agent:
    """The agent's event loop; ``run()`` until ``stop`` is set (or forever)."""

    def __init__(
        self,
        coordinator: str,
        gpus: list[dict[str, Any]],
        name: str | None = None,
        workdir: Path | None = None,
        keys: ClientKeys | None = None,
        heartbeat: float = 1.0,
        host: str | None = None,
        tap: bool = True,
    ) -> None:
        self.coordinator = coordinator
        self.gpus = gpus
        self.name = name or socket.gethostname()
        self.host = host or self.name
        self.workdir = (workdir or Path.cwd() / "tiresias-agent" / self.name).resolve()
        self.keys = keys
        self.heartbeat = heartbeat
        self.tap = tap  # run PS jobs under ibverbs-tap (where it is built) to measure S_J
        self._next_measure = 0.0
        self.stop = threading.Event()
        self.parts: dict[str, Part] = {}
        self._ctx: zmq.Context[Any] = zmq.Context.instance()
        self._sock: zmq.Socket[Any] | None = None
        self._ids = itertools.count(1)
        self._pending: dict[int, tuple[str | None, dict[str, Any]]] = {}  # id → (kind, message)
        self._last_reply = 0.0
        self._register_id = 0  # id of the last register sent
        self._next_beat = 0.0
        self.registered = threading.Event()
        #: This agent process, the same across reconnects: the coordinator tells a
        #: reconnect of ours from a second agent started with the same name.
        self.instance = secrets.token_hex(8)
        self.epoch = 0  # of this node's connection, from the last register's reply
        self._register_at: float | None = None  # a refused register is tried again then
        self._taken_refusals = 0
        self.refused: str | None = None

    # --- connection -------------------------------------------------------------------
    def _connect(self) -> None:
        if self._sock is not None:
            self._sock.close(linger=0)
        self._sock = dealer(self._ctx, self.coordinator, self.keys)
        self._pending.clear()
        self.registered.clear()
        self._last_reply = time.monotonic()
        self._register()

    def _send(self, msg_type: str, **fields: Any) -> int:
        rid = next(self._ids)
        assert self._sock is not None
        try:  # never block the loop on a coordinator that is away: _tick reconnects
            self._sock.send(protocol.encode(msg_type, id=rid, **fields), zmq.NOBLOCK)
        except zmq.Again:
            return rid
        self._pending[rid] = (msg_type, fields)
        return rid

    def _register(self) -> None:
        # finished parts still count as running until their exit report is acknowledged
        running = [{"job_id": p.job_id, "restart": p.restart} for p in self.parts.values()]
        self._register_at = None
        self._register_id = self._send(
            "register",
            node=self.name,
            instance=self.instance,
            host=self.host,
            gpus=self.gpus,
            running=running,
        )
        for part in self.parts.values():
            if part.reported is not None:  # finished, not yet acknowledged: say it again
                self._send("exited", **part.reported)

    # --- loop -------------------------------------------------------------------------
    def run(self) -> None:
        self.workdir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.workdir.chmod(0o700)  # job logs: for the owner, through the coordinator
        self._connect()
        try:
            while not self.stop.is_set():
                assert self._sock is not None
                if self._sock.poll(100):
                    while self._sock.poll(0):
                        self._on_frame(self._sock.recv())
                self._tick(time.monotonic())
        finally:
            for part in self.parts.values():
                for p in part.alive:
                    p.signal(signal.SIGKILL)
            if self._sock is not None:
                self._sock.close(linger=0)
        if self.refused is not None:
            raise AgentRefused(self.refused)

    def _tick(self, now: float) -> None:
        if self._register_at is not None and now >= self._register_at:
            self._register()
        if now - self._last_reply > max(5.0, 5 * self.heartbeat):
            log.warning("no reply from the coordinator at %s; reconnecting", self.coordinator)
            self._connect()
        if now >= self._next_beat:
            self._next_beat = now + self.heartbeat
            self._send("heartbeat", node=self.name)
            # resend exit reports not yet acknowledged (the reply may have been lost)
            unacked = {f["job_id"] for k, f in self._pending.values() if k == "exited"}
            for part in self.parts.values():
                if part.reported is not None and part.job_id not in unacked:
                    self._send("exited", **part.reported)
        if now >= self._next_measure:
            self._next_measure = now + MEASURE_SECONDS
            for part in self.parts.values():
                self._measure(part)
        for part in list(self.parts.values()):
            self._reap(part, now)

    def _measure(self, part: Part) -> None:
        """Report a running PS job's bytes per PS, as its processes here exchanged them, with
        the job's token (the profiler stage turns them into S_J when the runtime says
        nothing better)."""
        if part.tapped is None or part.reported is not None or part.stopping is not None:
            return
        pids = [p.popen.pid for p in part.alive if p.popen is not None and p.role != "ps"]
        try:
            per_ps = part.tapped.measure(pids)
        except Exception:  # one job's unreadable profile must not stop the node's agent
            log.exception("job %s: cannot measure its traffic", part.job_id)
            return
        if per_ps is None:
            return
        assert self._sock is not None
        frame = protocol.encode(
            "report",
            job_id=part.job_id,
            restart=part.restart,
            token=part.tapped.token,
            node=self.name,
            ps_bytes=per_ps,
        )
        with contextlib.suppress(zmq.Again):  # fire and forget, as the runtime's reports
            self._sock.send(frame, zmq.NOBLOCK)

    def _reap(self, part: Part, now: float) -> None:
        for p in part.alive:
            code = p.popen.poll() if p.popen is not None else protocol.EXIT_NOT_STARTED
            if code is None:
                continue
            p.code = code
            if part.stopping is not None:
                continue
            if code == EXIT_CHECKPOINTED:
                part.unprompted_checkpoint = True
                self._stop(part, Stopping.STOP, STOP_GRACE, now)
            elif code in PREEMPTION_DEATHS:  # preempted from outside Tiresias, by default
                part.unprompted_preemption = True
                self._stop(part, Stopping.STOP, STOP_GRACE, now)
            elif code != 0:
                part.failed = True
                self._stop(part, Stopping.STOP, STOP_GRACE, now)
            elif p.role == "chief":
                part.chief_done = True
                self._stop(part, Stopping.STOP, SETTLE, now, sig=None)
        if part.alive and part.deadline is not None and now >= part.deadline:
            for p in part.alive:
                log.info("job %s %s ignored the signal; killing it", part.job_id, p.name)
                p.signal(signal.SIGKILL)
            part.deadline = None
        if not part.alive and part.reported is None:
            for p in part.procs:  # leftovers of the process group (grandchildren)
                p.signal(signal.SIGKILL)
            if part.tapped is not None:
                part.tapped.clean(p.popen.pid for p in part.procs if p.popen is not None)
            part.reported = {
                "node": self.name,
                "job_id": part.job_id,
                "restart": part.restart,
                "outcome": part.outcome().value,
                "processes": [
                    {
                        "role": p.role,
                        "task_index": p.task_index,
                        "code": p.code,
                        "log_tail": p.tail(),
                    }
                    for p in part.procs
                ],
            }
            log.info("job %s restart %d: %s", part.job_id, part.restart, part.reported["outcome"])
            self._send("exited", **part.reported)

    def _stop(
        self,
        part: Part,
        why: Stopping,
        grace: float,
        now: float,
        sig: signal.Signals | None = signal.SIGTERM,
    ) -> None:
        """Send ``sig`` (None: nothing yet) and SIGKILL whatever is left after ``grace``."""
        part.stopping = why
        part.deadline = None if sig is signal.SIGKILL else now + grace  # nothing to ignore
        if sig is not None:
            for p in part.alive:
                p.signal(sig)

    # --- messages ---------------------------------------------------------------------
    def _on_frame(self, frame: bytes) -> None:
        try:
            msg = protocol.decode(frame)
        except protocol.ProtocolError as e:
            log.error("bad message from the coordinator: %s", e)
            self._refused_launch(frame, str(e))
            return
        self._last_reply = time.monotonic()
        handler = getattr(self, f"_on_{msg['type']}", None)
        if handler is None:
            log.error("unexpected message type %r from the coordinator", msg["type"])
            return
        try:
            handler(msg)
        except Exception:  # one job's bad command must not take the node's other jobs down
            log.exception("could not handle %s for job %s", msg["type"], msg.get("job_id"))

    def _refused_launch(self, frame: bytes, reason: str) -> None:
        """A launch we cannot read still names its job: report that run failed, so the
        coordinator frees its GPUs instead of waiting for it forever."""
        try:
            msg = msgpack.unpackb(frame, raw=False, strict_map_key=False)
        except Exception:  # not even msgpack: nothing to report on
            return
        if not isinstance(msg, dict) or msg.get("type") != "launch":
            return
        job_id, restart = msg.get("job_id"), msg.get("restart")
        old = self.parts.get(job_id) if isinstance(job_id, str) else None
        fresh = old is None or (type(restart) is int and old.restart < restart)
        if isinstance(job_id, str) and type(restart) is int and fresh:
            note = f"tiresias-agent: refused the launch: {reason}"
            proc = Proc("chief", 0, None, Path(os.devnull), note=note)
            self.parts[job_id] = Part(job_id, restart, [proc])

    def _on_ok(self, msg: dict[str, Any]) -> None:
        kind, fields = self._pending.pop(msg.get("id") or 0, (None, {}))
        if kind == "register":
            epoch = msg.get("epoch")
            self.epoch = epoch if type(epoch) is int else 0
            self._taken_refusals = 0
            self.registered.set()
        elif kind == "exited":
            part = self.parts.get(fields["job_id"])
            if part is not None and part.restart == fields["restart"] and part.reported:
                del self.parts[part.job_id]

    def _on_error(self, msg: dict[str, Any]) -> None:
        kind, _ = self._pending.pop(msg.get("id") or 0, (None, {}))
        if msg.get("code") == "register":  # the coordinator restarted and forgot us
            # it answers in order: a message sent after our last register was refused, so
            # that register never reached this coordinator (it went to one that is gone)
            waiting = self._register_at is not None  # a refused register is tried later
            if (msg.get("id") or 0) > self._register_id and not waiting:
                log.warning("coordinator does not know this node; registering again")
                self._register()
        elif msg.get("code") in ("node_taken", "identity"):  # fleet.NODE_TAKEN, access.IDENTITY
            self._taken_refusals += 1
            log.error("coordinator refused %s: %s", kind or "register", msg["error"])
            if self._taken_refusals >= MAX_TAKEN_REFUSALS:
                self.refused = msg["error"]
                self.stop.set()
            else:
                retry = msg.get("retry_after")
                if not (isinstance(retry, int | float) and 0 < retry <= 3600):
                    retry = 1.0
                self._register_at = time.monotonic() + retry
        else:
            log.error("coordinator refused %s: %s", kind, msg["error"])

    def _on_launch(self, msg: dict[str, Any]) -> None:
        job_id, restart = msg["job_id"], msg["restart"]
        if msg.get("epoch", self.epoch) != self.epoch:  # for an earlier connection of ours:
            log.warning("ignored a launch of %s meant for connection %s", job_id, msg["epoch"])
            return  # the coordinator loses it when our register's running list lacks it
        old = self.parts.get(job_id)
        if old is not None and old.restart >= restart:
            return  # a duplicate launch (resent after a reconnect): never run a job twice
        for p in old.alive if old is not None else ():  # a stale run must not linger
            p.signal(signal.SIGKILL)
        logdir = self._logdir(msg)
        tapped = Tapped.of(msg["processes"]) if self.tap else None
        procs = [
            self._spawn(job_id, restart, logdir, spec, msg["owner"], tapped)
            for spec in msg["processes"]
        ]
        self.parts[job_id] = Part(job_id, restart, procs, tapped=tapped)
        log.info("launched job %s restart %d: %d processes", job_id, restart, len(procs))

    def _spawn(
        self,
        job_id: str,
        restart: int,
        logdir: Path,
        spec: dict[str, Any],
        owner: str,
        tapped: Tapped | None,
    ) -> Proc:
        """Start one process as ``owner``; one that cannot start (full disk, bad cwd, missing
        program, unknown owner) is a process that exited 127, with the reason as its log
        tail."""
        path = logdir / f"{spec['role']}-{spec['task_index']}.log"
        env = {**os.environ, **spec["env"]}  # the planner set CUDA_VISIBLE_DEVICES
        if tapped is not None:
            env = tapped.environ(env)
        env[COORDINATOR_ENV] = self.coordinator  # the route this node knows works
        if self.keys is not None:  # the runtime reports with its job's token over CURVE
            env[SERVER_KEY] = self.keys.server_public.decode()
        try:
            logdir.mkdir(mode=0o700, parents=True, exist_ok=True)
            with open(private_file(path), "ab") as out:
                out.write(f"=== {job_id} restart {restart} on {self.name} ===\n".encode())
                out.flush()
                user = run_as(owner)
                if user is not None:
                    env |= {"HOME": user.home, "USER": user.name, "LOGNAME": user.name}
                    self._checkpoint_dir_for(user, spec["env"].get(CHECKPOINT_DIR))
                popen = subprocess.Popen(
                    spec["argv"],
                    env=env,
                    cwd=spec.get("cwd") or None,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    preexec_fn=die_with_agent,  # runs after the uid change (PDEATHSIG)
                    user=None if user is None else user.uid,
                    group=None if user is None else user.gid,
                    extra_groups=None if user is None else user.groups,
                )
        except (OSError, ValueError, subprocess.SubprocessError) as e:
            note = f"tiresias-agent: cannot start {spec['argv'][:1]} on {self.name}: {e}"
            log.error("job %s: %s", job_id, note)
            with contextlib.suppress(OSError), open(private_file(path), "ab") as out:
                out.write(f"{note}\n".encode())
            return Proc(spec["role"], spec["task_index"], None, path, note=note)
        return Proc(spec["role"], spec["task_index"], popen, path)

    @staticmethod
    def _checkpoint_dir_for(owner: RunAs, directory: str | None) -> None:
        """The job's checkpoint directory, made and handed to its owner (the root above it
        is the operator's)."""
        if directory:
            path = Path(directory)
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chown(path, owner.uid, owner.gid)

    def _logdir(self, msg: dict[str, Any]) -> Path:
        """A job's logs live under its key, unique across coordinators (ids restart at j1)."""
        return self.workdir / "logs" / str(msg.get("job_key") or msg["job_id"])

    def _part(self, msg: dict[str, Any]) -> Part | None:
        part = self.parts.get(msg["job_id"])
        restart = msg.get("restart")
        if part is None or (restart is not None and part.restart != restart):
            return None
        return part

    def _on_preempt(self, msg: dict[str, Any]) -> None:
        part = self._part(msg)
        if part is None:
            return
        self._reap(part, time.monotonic())  # an exit before the signal is not a preemption
        if part.reported is not None or part.stopping is not None:
            return
        try:
            sig = signal.Signals[msg["signal"]]
        except KeyError:
            log.error("preempt with unknown signal %r; using SIGTERM", msg["signal"])
            sig = signal.SIGTERM
        self._stop(part, Stopping.PREEMPT, float(msg["grace"]), time.monotonic(), sig)

    def _on_kill(self, msg: dict[str, Any]) -> None:
        part = self._part(msg)
        if part is None or part.reported is not None:
            return
        grace = float(msg.get("grace") or 0.0)
        self._stop(part, Stopping.KILL, grace, time.monotonic(), None if grace else signal.SIGKILL)

    def _on_fetch_logs(self, msg: dict[str, Any]) -> None:
        files = read_logs(self._logdir(msg), msg["offsets"], msg["limit"])
        assert self._sock is not None
        with contextlib.suppress(zmq.Again):  # the coordinator times the fetch out
            self._sock.send(
                protocol.encode("log_data", node=self.name, req=msg["req"], files=files),
                zmq.NOBLOCK,
            )
