"""Coordinator service benchmarks (numbers recorded in docs/service.md).

``messages``: report messages/s one coordinator absorbs from many concurrent senders on
loopback (target ≥ 20,000/s). The coordinator runs in its own process; each sender process
fires pre-encoded ``report`` messages as fast as its DEALER allows; the rate is what the
coordinator counted (``tiresias_messages_total{type="report"}``) over the wall time.

``pass``: scheduling-pass latency with 1,000 nodes × 8 GPUs and 10,000 waiting jobs (target
p99 < 20 ms). Jobs of 1–8 GPUs fill the cluster in the first pass (reported apart); each
following pass sees a few completions and as many arrivals, so 10,000 jobs keep waiting.
Each pass is measured as the service runs it: the core pass plus its journal commit.

    python tools/bench/service_bench.py messages [--senders 8] [--messages 40000]
``handler``: CPU time the coordinator spends per ``report`` (decode, validation, access
check, bookkeeping), in this process with the socket left out, so that it does not depend on
the machine's load as ``messages`` does: a change to the service core shows here.

    python tools/bench/service_bench.py messages [--senders 8] [--messages 40000]
    python tools/bench/service_bench.py pass [--nodes 1000] [--jobs 10000] [--passes 300]
    python tools/bench/service_bench.py handler [--messages 100000]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import zmq

from coordinator import protocol
from coordinator.core.events import Exited, NodeUp, Schedule, Submit, to_wire
from coordinator.core.model import ExitOutcome, JobSpec, Node
from coordinator.core.settings import Settings, build_scheduler
from coordinator.service.client import Client
from coordinator.service.coordinator import Coordinator, Options
from coordinator.service.identity import ANY_NODE, Peer
from coordinator.service.store import Store


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _reports(job_ids: list[str]) -> list[bytes]:
    return [
        protocol.encode(
            "report",
            job_id=j,
            role="chief",
            task_index=0,
            restart=0,
            step=i,
            iterations=10,
            iter_time=0.1,
            gpu_time=1.0 * i,
        )
        for i, j in enumerate(job_ids)
    ]


def _sender(address: str, job_ids: list[str], count: int, go: Any) -> None:
    frames = _reports(job_ids)
    ctx = zmq.Context()  # never the parent's: contexts do not survive fork
    sock = ctx.socket(zmq.DEALER)
    sock.sndhwm = 100_000
    sock.linger = -1  # deliver everything before the sender exits
    sock.connect(address)
    go.wait()
    for i in range(count):
        sock.send(frames[i % len(frames)])
    sock.close()
    ctx.term()


def _reports_seen(metrics_port: int) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics").read().decode()
    for line in text.splitlines():
        if line.startswith('tiresias_messages_total{type="report"}'):
            return float(line.split()[-1])
    return 0.0


def bench_messages(senders: int, messages: int) -> dict[str, float]:
    metrics_port = _free_port()
    with tempfile.TemporaryDirectory() as state:
        address = f"ipc://{state}/coordinator.sock"
        coord = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "coordinator.service.cli",
                "--bind",
                address,
                "--state",
                state,
                "--metrics-port",
                str(metrics_port),
                "--allow-root-jobs",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            with Client(address, timeout=20) as c:  # reports need known jobs: make some
                c.request("register", node="bench", gpus=[{"index": 0}], running=[])
                jobs = [c.request("submit", argv=["x.py"], workers=1)["job_id"] for _ in range(50)]
            per = messages // senders
            go = multiprocessing.Event()
            procs = [
                multiprocessing.Process(target=_sender, args=(address, jobs, per, go))
                for _ in range(senders)
            ]
            for p in procs:
                p.start()
            time.sleep(1.0)  # let every sender connect before the clock starts
            base = _reports_seen(metrics_port)
            t0 = time.perf_counter()
            go.set()
            total = per * senders
            while _reports_seen(metrics_port) - base < total:
                if time.perf_counter() - t0 > 120:
                    raise RuntimeError(
                        f"only {_reports_seen(metrics_port) - base:.0f} of {total} "
                        "reports absorbed in 120 s"
                    )
                time.sleep(0.02)
            elapsed = time.perf_counter() - t0
            for p in procs:
                p.join()
            return {
                "senders": senders,
                "messages": total,
                "seconds": round(elapsed, 3),
                "messages_per_s": round(total / elapsed),
            }
        finally:
            coord.terminate()
            coord.wait()


def bench_pass(nodes: int, jobs: int, passes: int, seed: int = 1) -> dict[str, float]:
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as state:
        opts = Options(state=Path(state), settings=Settings(queue_thresholds=(3600.0,)))
        sched = build_scheduler(opts.settings)
        store = Store(Path(state))
        now = 0.0
        for n in range(nodes):
            sched.apply(NodeUp(Node(f"n{n:04d}", tuple(range(8))), now))
        serial = 0

        def submit() -> None:
            nonlocal serial
            serial += 1
            spec = JobSpec(f"j{serial}", rng.choice((1, 1, 1, 2, 2, 4, 8)), arrival=now)
            sched.apply(Submit(spec, now))

        for _ in range(jobs):
            submit()

        def one_pass() -> tuple[float, list]:
            t0 = time.perf_counter()
            with store.tx():
                event = Schedule(now)
                decisions = sched.apply(event)
                store.append(*to_wire(event))
            return time.perf_counter() - t0, decisions

        first, started = one_pass()
        running = [d.job_id for d in started]
        for _ in range(len(running)):
            submit()  # keep ``jobs`` waiting behind a full cluster
        lat = []
        for _ in range(passes):
            now += 1.0
            for _ in range(3):  # a few completions and arrivals between passes
                done = running.pop(rng.randrange(len(running)))
                sched.apply(Exited(done, now, ExitOutcome.COMPLETED))
                submit()
            seconds, decisions = one_pass()
            lat.append(seconds)
            running += [d.job_id for d in decisions if hasattr(d, "allocation")]
        store.close()
    lat.sort()
    return {
        "nodes": nodes,
        "gpus": nodes * 8,
        "waiting_jobs": jobs,
        "passes": passes,
        "first_pass_ms": round(first * 1e3, 2),
        "p50_ms": round(statistics.median(lat) * 1e3, 3),
        "p99_ms": round(lat[int(0.99 * (len(lat) - 1))] * 1e3, 3),
        "max_ms": round(lat[-1] * 1e3, 3),
    }


class _Discard:
    """Stands in for the ROUTER socket: replies go nowhere."""

    def send_multipart(self, frames: list[bytes]) -> None:
        pass


def bench_handler(messages: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as state:
        coord = Coordinator(Options(state=Path(state), allow_root_jobs=True))
        coord.sock = _Discard()  # type: ignore[assignment]
        coord.peer = Peer(user="bench", node=ANY_NODE, admin=True)
        register = protocol.encode("register", id=1, node="bench", gpus=[{"index": 0}], running=[])
        coord.handle_frame(b"agent", register)
        for _ in range(50):  # reports need known jobs
            coord.handle_frame(b"client", protocol.encode("submit", id=2, argv=["x.py"], workers=1))
        frames = _reports([f"j{i}" for i in range(1, 51)])
        t0 = time.process_time()
        for i in range(messages):
            coord.handle_frame(b"client", frames[i % len(frames)])
        cpu = time.process_time() - t0
        coord.store.close()
    return {
        "messages": messages,
        "cpu_seconds": round(cpu, 3),
        "reports_per_cpu_second": round(messages / cpu),
        "cpu_us_per_report": round(cpu / messages * 1e6, 2),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    m = sub.add_parser("messages")
    m.add_argument("--senders", type=int, default=8)
    m.add_argument("--messages", type=int, default=40_000)
    p = sub.add_parser("pass")
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--jobs", type=int, default=10_000)
    p.add_argument("--passes", type=int, default=300)
    h = sub.add_parser("handler")
    h.add_argument("--messages", type=int, default=100_000)
    args = ap.parse_args(argv)
    if args.what == "messages":
        result = bench_messages(args.senders, args.messages)
    elif args.what == "handler":
        result = bench_handler(args.messages)
    else:
        result = bench_pass(args.nodes, args.jobs, args.passes)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
