"""The coordinator at the paper's scale, against a 100-job baseline, in one run (docs/service.md).

Three real coordinator processes, each behind its real socket, started alike (no ``setsid``:
all share the shell's scheduler autogroup), each with its light agents (one process of
DEALER sockets per coordinator, one per node, 8 GPUs each, speaking the agents' protocol:
register, heartbeats, ``exited`` at once for short jobs, ``log_data`` for log fetches); each
agent process sends B's 1,000 nodes' heartbeats (500 a second), so every loop carries the
same traffic. Each node first sends ``WARM`` heartbeats, one at a time, so that what libzmq
keeps per connection is resident before any reading, as after 17 minutes' uptime:

- A, the baseline: 100 finished jobs, then 100 active ones of 1-8 GPUs (they all run);
- F, day one on a full cluster: 100 finished, then the 2,000 jobs B fills its GPUs with;
- B: 1,000, 10,000 and ``--finished`` (100,000) finished jobs, 1,000 at a time, its RSS
  read after each, then the same 2,000 and ``--waiting`` (10,000) more.

With the same nodes everywhere, B/A is the cost of the jobs alone; the issue's bound is per
job count ("at most 2x what it costs with 100 jobs"). A's jobs all run, so a page that shows
waiting jobs, each with its reason, holds more in B than in A: B/F compares the same full
cluster with 200 jobs in line and 100 finished against 12,000 and 100,000.

Then every view is asked of A, F and B in turn (A F B A F B, ``--pairs`` times), timed on the
wall and in the coordinator's CPU time (/proc): listing pages (first, after a cursor, of the
history), ``queue``'s first screen, ``status JOB`` (active, finished), ``logs``, ``nodes``,
the dashboard's API, ``/metrics`` (each asked REPEAT times per sample), the ``tiresias
queue`` and ``tiresias queue --json --all`` commands (run as installed: their bytecode
cached, under ``PYTHONPYCACHEPREFIX``); report absorption (reports/s) the same way; then the
passes of the measuring phase (p50/p99, from the coordinator's own histogram: bucket
bounds). Last, each state's snapshot is exported in this process, in turn. The views so far
go to stderr after each round (a run cut short still tells them); ``--table`` prints them
as docs/service.md's table. State directories go under ``--dir`` (default /dev/shm, so that
the journal's fsync, the disk's cost, stays out of what is measured).

    python tools/bench/scale_bench.py [--nodes 1000] [--waiting 10000] [--finished 100000]
        [--pairs 5] [--dir /dev/shm] [--table]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import msgpack
import zmq

from coordinator import protocol
from coordinator.core.settings import snapshot
from coordinator.gang import free_local_port
from coordinator.service.client import Client, RequestError
from coordinator.service.options import Options
from coordinator.service.recovery import load
from coordinator.service.store import Store

GPUS = 8
REPEAT = 10  # requests per sample: the coordinator's CPU time is counted in 10 ms ticks
WINDOW = 256  # requests in flight while filling
BATCH = 1000  # finished jobs submitted at once
HEARTBEAT = 2.0  # seconds between a light agent's heartbeats
#: Heartbeats each light agent sends, one at a time, before the measuring starts. libzmq gives every
#: connection's pipe, each way, chunks of 256 message slots (16 KiB) allocated up front; their
#: pages become resident as messages pass, until two chunks a way are: about 40 KiB a node
#: after ~512 messages, then flat (100 nodes: +4.2 MiB in 60 s at 10 beats/s, then none for
#: 2 minutes). At one beat per 2 s that takes 17 minutes of uptime, so without this warm-up
#: B's RSS grew with the clock (+9.7 MiB in 157 s, no job at all) and read as history.
WARM = 2 * 256 + 64


# --- light agents (their own process) ----------------------------------------------------
def agents(address: str, nodes: int, beats: float, warmed: Path) -> None:
    """``nodes`` agents on one poller: short jobs (script ``short.py``) complete at once,
    others run until killed; log fetches are answered with no data. ``beats`` heartbeats a
    second in all (every node in turn), so that a few nodes load their coordinator's loop
    as many would. First each sends ``WARM`` heartbeats, and ``warmed`` is created once all
    are answered."""
    ctx = zmq.Context.instance()
    socks: dict[zmq.Socket, str] = {}
    for i in range(nodes):
        s = ctx.socket(zmq.DEALER)
        s.linger = 0
        s.connect(address)
        socks[s] = f"n{i:04d}"
    poller = zmq.Poller()
    for s in socks:
        poller.register(s, zmq.POLLIN)

    def register(s: zmq.Socket) -> None:
        gpus = [{"index": g} for g in range(GPUS)]
        s.send(protocol.encode("register", id=0, node=socks[s], gpus=gpus, running=[]))

    for s in socks:
        register(s)
    warming = dict.fromkeys(socks, WARM)  # one in flight a node: no backlog to keep a peak of
    for s, node in socks.items():
        s.send(protocol.encode("heartbeat", id=3, node=node))
    beat, every = time.monotonic(), nodes / beats
    while True:
        for s, _ in poller.poll(min(200, every * 1000)):
            while s.poll(0):
                msg = msgpack.unpackb(s.recv(), raw=False)
                node, t = socks[s], msg["type"]
                if t == "launch" and "short.py" in msg["processes"][0]["argv"]:
                    done = [{"role": p["role"], "task_index": p["task_index"], "code": 0}
                            for p in msg["processes"]]  # fmt: skip
                    s.send(protocol.encode("exited", id=1, node=node, job_id=msg["job_id"],
                                           restart=msg["restart"], outcome="completed",
                                           processes=done))  # fmt: skip
                elif t in ("kill", "preempt"):
                    s.send(protocol.encode("exited", id=1, node=node, job_id=msg["job_id"],
                                           restart=msg["restart"], outcome="killed",
                                           processes=[]))  # fmt: skip
                elif t == "fetch_logs":
                    s.send(protocol.encode("log_data", node=node, req=msg["req"], files={}))
                elif t == "error" and msg.get("code") == "register":
                    register(s)
                elif t == "ok" and msg.get("id") == 3:
                    warming[s] -= 1
                    if warming[s]:
                        s.send(protocol.encode("heartbeat", id=3, node=node))
                    elif not any(warming.values()):
                        warmed.touch()
        if time.monotonic() - beat > every:
            beat = time.monotonic()
            for s, node in socks.items():
                s.send(protocol.encode("heartbeat", id=2, node=node))


# --- one coordinator ---------------------------------------------------------------------
class Side:
    """A coordinator process, its agents, and a pipelined submitter."""

    def __init__(self, name: str, root: Path, nodes: int, beats: float) -> None:
        self.name, self.state = name, root / name
        self.address = f"ipc://{root}/{name}.sock"
        self.dashboard, self.metrics = free_local_port(), free_local_port()
        log = (root / f"{name}.log").open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "coordinator.service.cli", "--bind", self.address,
             "--state", str(self.state), "--allow-root-jobs", "--thresholds", "1e12",
             "--heartbeat-timeout", "60", "--dashboard-port", str(self.dashboard),
             "--metrics-port", str(self.metrics)],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        self.client = Client(self.address, timeout=120)
        deadline = time.monotonic() + 60
        while True:
            try:
                self.client.request("nodes", timeout=1.0)
                break
            except RequestError:
                assert time.monotonic() < deadline, f"coordinator {name} did not answer"
        warmed = root / f"{name}.warmed"
        self.agents = subprocess.Popen(
            [sys.executable, __file__, "agents", self.address, str(nodes), str(beats),
             str(warmed)],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        while not warmed.exists():  # every connection's buffers resident
            assert self.agents.poll() is None, f"the agents of {name} stopped"
            time.sleep(0.2)

    def submit(self, shapes: list[tuple[str, int]]) -> None:
        """Submit one job per (script, GPUs), ``WINDOW`` at a time in flight."""
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.linger = 0
        sock.connect(self.address)
        sent = answered = 0
        while answered < len(shapes):
            while sent < len(shapes) and sent - answered < WINDOW:
                script, gpus = shapes[sent]
                sock.send(protocol.encode("submit", id=sent, argv=[script], workers=gpus))
                sent += 1
            reply = msgpack.unpackb(sock.recv(), raw=False)
            assert reply["type"] == "ok", reply
            answered += 1
        sock.close()

    def settle(self) -> dict[str, int]:
        """The queue's counts, once they stay the same for a second."""
        counts = self.counts()
        while True:
            time.sleep(1.0)
            before, counts = counts, self.counts()
            if counts == before:
                return counts

    def counts(self) -> dict[str, int]:
        queues = self.client.request("queue", heads=0)["queues"]
        return {k: sum(q[k] for q in queues) for k in ("running", "waiting")}

    def cpu(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError("no VmRSS")

    def close(self) -> None:
        self.client.close()
        for p in (self.agents, self.proc):
            p.terminate()
            p.wait(30)


def finish(side: Side, n: int) -> None:
    """``n`` more finished jobs, ``BATCH`` at a time: history grows as a year of it does,
    never with more active at once (a batch of 90,000 made up to ~60,000 of them active
    together, and RSS then kept that peak, not the history)."""
    for start in range(0, n, BATCH):
        side.submit([("short.py", 1)] * min(BATCH, n - start))
        while side.counts() != {"running": 0, "waiting": 0}:
            time.sleep(0.2)


# --- measurements ------------------------------------------------------------------------
def timed(side: Side, what: Any, repeat: int = 1) -> tuple[float, float]:
    """(wall ms, coordinator CPU ms) of one ``what()``, the mean of ``repeat``."""
    cpu, t0 = side.cpu(), time.perf_counter()
    for _ in range(repeat):
        what()
    return (time.perf_counter() - t0) * 1e3 / repeat, (side.cpu() - cpu) * 1e3 / repeat


def views(side: Side, finished: int, cursor: str, env: dict[str, str]) -> dict[str, Any]:
    """What each view asks: the same shape of question of every side (``cursor``: an active
    job deep in its line; ``env``: the commands' environment)."""
    c = side.client
    first, mid_active = finished + 1, cursor
    cli = [sys.executable, "-m", "coordinator.cli", "queue", "--coordinator", side.address]

    def command(*args: str) -> Any:
        return lambda: subprocess.run([*cli, *args], check=True, capture_output=True, env=env)

    def http(port: int, path: str) -> Any:
        return lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=60).read()

    def churn() -> None:  # two passes: after the submit, after the cancel
        job = c.request("submit", argv=["long.py"], workers=1)["job_id"]
        c.request("cancel", job_id=job)

    return {
        "submit + cancel": churn,
        "queue page (100)": lambda: c.request("queue", limit=100),
        "queue page after a cursor": lambda: c.request("queue", limit=100, after=mid_active),
        "queue first screen": lambda: c.request("queue", heads=10),
        "status --all page (100)": lambda: c.request("status", all=True, limit=100),
        "status --all, mid-history": lambda: c.request(
            "status", all=True, limit=100, after=f"j{finished // 2}"
        ),
        "status JOB (active)": lambda: c.request("status", job_id=mid_active),
        "status JOB (finished)": lambda: c.request("status", job_id=f"j{finished // 2}"),
        "logs JOB": lambda: c.request("logs", job_id=f"j{first}"),
        "nodes": lambda: c.request("nodes"),
        "dashboard /api/state": http(side.dashboard, "/api/state"),
        "dashboard /api/job/ID": http(side.dashboard, f"/api/job/j{first}"),
        "/metrics": http(side.metrics, "/metrics"),
        "tiresias queue (command)": command(),
        "tiresias queue --json --all (command)": command("--json", "--all"),
    }


def reports(side: Side, job: str, n: int = 20000) -> None:
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.connect(side.address)
    frame = protocol.encode("report", job_id=job, step=1, iter_time=0.1, restart=0)
    for _ in range(n):
        sock.send(frame)
    side.client.request("nodes")  # after every report (one socket each, but FIFO enough)
    sock.close(linger=-1)


def pass_buckets(side: Side) -> list[tuple[float, float]]:
    """The pass histogram: (upper bound s, passes so far)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{side.metrics}/metrics").read().decode()
    buckets = []
    for line in text.splitlines():
        if line.startswith("tiresias_scheduling_pass_seconds_bucket"):
            le = line.split('le="')[1].split('"')[0]
            buckets.append((float(le), float(line.split()[-1])))
    return buckets


def quantiles(before: list[tuple[float, float]], after: list[tuple[float, float]]) -> dict:
    """p50/p99 (bucket bounds, s) and the count of the passes between two reads."""
    delta = [(le, n - m) for (le, n), (_, m) in zip(after, before, strict=True)]
    total = delta[-1][1]
    out: dict[str, float] = {"passes": total}
    for q in (0.5, 0.99):
        out[f"p{round(q * 100)}_le_s"] = next(le for le, n in delta if n >= q * total)
    return out


def snapshot_ms(state: Path) -> tuple[float, float, int]:
    """(wall ms, CPU ms, bytes) of exporting a state's scheduler as the coordinator does."""
    copy = Path(tempfile.mkdtemp(dir=state.parent)) / "s"
    shutil.copytree(state, copy)
    store = Store(copy)
    opts = Options(state=copy)
    sched = load(store, opts, opts.core_settings()).sched
    cpu, t0 = time.process_time(), time.perf_counter()
    body = msgpack.packb(snapshot(sched), use_bin_type=True)
    out = (time.perf_counter() - t0) * 1e3, (time.process_time() - cpu) * 1e3, len(body)
    store.close()
    shutil.rmtree(copy.parent)
    return out


def summary(samples: dict[str, dict[str, list[tuple[float, float]]]]) -> dict[str, Any]:
    """Per view and side, the median wall and CPU ms of its samples; the ratios B/A, B/F."""
    return {
        name: {
            k: {"wall_ms": round(statistics.median(w for w, _ in v), 2),
                "cpu_ms": round(statistics.median(c for _, c in v), 2)}
            for k, v in by.items()
        }
        | {f"b/{k}": round(statistics.median(w for w, _ in by["b"])
                           / max(statistics.median(w for w, _ in by[k]), 1e-3), 2) for k in "af"}
        for name, by in samples.items() if "b" in by
    }  # fmt: skip


def table(views: dict[str, Any]) -> str:
    """The views as docs/service.md's table (Markdown)."""
    rows = ["| view | A wall ms | A CPU ms | F wall ms | F CPU ms | B wall ms | B CPU ms "
            "| B/A wall | B/F wall |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
    for name, v in views.items():
        cells = [f"{v[k][m]:,.1f}" for k in ("a", "f", "b") for m in ("wall_ms", "cpu_ms")]
        rows.append(f"| {name} | {' | '.join(cells)} | {v['b/a']:g} | {v['b/f']:g} |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--waiting", type=int, default=10000)
    ap.add_argument("--finished", type=int, default=100000)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--dir", default="/dev/shm")
    ap.add_argument("--table", action="store_true", help="the views as Markdown, after the JSON")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # stop the coordinators too
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # a socket per node
    root = Path(tempfile.mkdtemp(prefix="scale-bench-", dir=args.dir))
    out: dict[str, Any] = {"machine": f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}"}
    a = f = b = None
    try:
        beats = args.nodes / HEARTBEAT  # B's nodes' heartbeats, into every side
        a = Side("a", root, args.nodes, beats)
        f = Side("f", root, args.nodes, beats)
        b = Side("b", root, args.nodes, beats)
        rng = random.Random(1)
        t0 = time.perf_counter()
        finish(a, 100)
        a.submit([("long.py", rng.randint(1, GPUS)) for _ in range(100)])
        fill = args.nodes * GPUS // 4  # 1-8 GPUs, mean 4.5: these and more fill the GPUs
        sizes = [("long.py", rng.randint(1, GPUS)) for _ in range(args.waiting + fill)]
        finish(f, 100)
        f.submit(sizes[:fill])
        out["rss_mib"] = {"a": round(a.rss_mib(), 1), "f": round(f.rss_mib(), 1)}
        done = 0
        for target in sorted({min(1000, args.finished), min(10000, args.finished), args.finished}):
            finish(b, target - done)
            done = target
            out["rss_mib"][f"b after {target} finished"] = round(b.rss_mib(), 1)
        first = min(1000, done)  # RSS grown per job beyond the first reading's
        rss = out["rss_mib"]
        grown = rss[f"b after {done} finished"] - rss[f"b after {first} finished"]
        out["rss_kib_per_finished_job"] = round(grown * 1024 / max(done - first, 1), 3)
        b.submit(sizes)
        out["fill_s"] = round(time.perf_counter() - t0, 1)
        out["a"], out["f"], out["b"] = a.settle(), f.settle(), b.settle()
        out["rss_mib"]["b with its active jobs"] = round(b.rss_mib(), 1)
        # the cursor: half-way down B's line; 100 jobs before F's last (its line); in A's
        # middle (it has no line)
        sides = {"a": (a, 100, 100, "j150"), "f": (f, 100, fill, f"j{100 + max(fill - 100, 0)}"),
                 "b": (b, args.finished, args.waiting + fill,
                       f"j{args.finished + (args.waiting + fill) // 2}")}  # fmt: skip
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = str(root / "pycache")  # compiled once, as installed
        asked = {k: views(s, done, cursor, env) for k, (s, done, _, cursor) in sides.items()}
        pages = {k: s.client.request("queue", limit=100, after=c)["jobs"]
                 for k, (s, *_, c) in sides.items()}  # fmt: skip
        out["waiting after the cursor"] = {k: [j["state"] for j in p].count("waiting")
                                           for k, p in pages.items()}  # fmt: skip
        asked["a"]["tiresias queue (command)"]()  # the first compiles
        samples: dict[str, dict[str, list[tuple[float, float]]]] = {}
        passes = {k: pass_buckets(s) for k, (s, *_) in sides.items()}
        for _ in range(args.pairs):
            for name in asked["a"]:
                n = 1 if "command" in name else REPEAT
                for k, (s, *_) in sides.items():
                    sample = timed(s, asked[k][name], n)
                    samples.setdefault(name, {}).setdefault(k, []).append(sample)
            for k, (s, done, *_) in sides.items():
                samples.setdefault("20,000 reports", {}).setdefault(k, []).append(
                    timed(s, lambda s=s, done=done: reports(s, f"j{done + 1}"))
                )
            print(json.dumps(summary(samples)), file=sys.stderr, flush=True)  # so far
        out["views"] = summary(samples)
        listing = out["views"]["tiresias queue --json --all (command)"]
        out["queue --json --all, ms per active job"] = {
            k: round(listing[k]["wall_ms"] / n, 3) for k, (_, _, n, _) in sides.items()
        }
        for k, (s, *_) in sides.items():
            out.setdefault("passes", {})[k] = quantiles(passes[k], pass_buckets(s))
        rep = out["views"]["20,000 reports"]
        out["reports_per_s"] = {k: round(20000 / (rep[k]["wall_ms"] / 1e3)) for k in sides}
    finally:
        for s in (a, f, b):
            if s is not None:
                s.close()
    snaps: dict[str, list[tuple[float, float, int]]] = {"a": [], "f": [], "b": []}
    for _ in range(args.pairs):
        for k in snaps:
            snaps[k].append(snapshot_ms(root / k))
    out["snapshot"] = {
        k: {"wall_ms": round(statistics.median(w for w, _, _ in v), 1),
            "cpu_ms": round(statistics.median(c for _, c, _ in v), 1), "bytes": v[0][2]}
        for k, v in snaps.items()
    }  # fmt: skip
    out["load_after"] = round(os.getloadavg()[0], 1)
    print(json.dumps(out, indent=1))
    if args.table:
        print(table(out["views"]))
    shutil.rmtree(root)


if __name__ == "__main__":
    if sys.argv[1:2] == ["agents"]:
        agents(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), Path(sys.argv[5]))
    else:
        main()
