"""Coordinator service benchmarks (numbers recorded in docs/service.md).

``messages``: report messages/s one coordinator absorbs from many concurrent senders on
loopback (target ≥ 20,000/s). The coordinator runs in its own process; each sender process
fires pre-encoded ``report`` messages as fast as its DEALER allows; the rate is what the
coordinator counted (``tiresias_messages_total{type="report"}``) over the wall time.

``pass``: scheduling-pass latency, wall and CPU, of clusters of N nodes × 8 GPUs with W
waiting jobs (default 100×10,000 as the baseline, then 1,000 × 1,000 / 10,000 / 50,000;
target at 1,000 × 10,000: p99 < 5 ms, first pass < 100 ms). Jobs of 1–8 GPUs fill the
cluster in the first (cold) pass; each following pass sees a few completions (retired) and
as many arrivals, so W jobs keep waiting. Each pass is measured as the service runs it, the
core pass plus its journal commit (``--core``: the core's pass alone). Each configuration
runs in its own child process, interleaved round by round; the table gives medians and
ratios of CPU time to the baseline.

    python tools/bench/service_bench.py messages [--senders 8] [--messages 40000]
``handler``: CPU time the coordinator spends per ``report`` (decode, validation, access
check, bookkeeping), in this process with the socket left out, so that it does not depend on
the machine's load as ``messages`` does: a change to the service core shows here.

    python tools/bench/service_bench.py messages [--senders 8] [--messages 40000]
    python tools/bench/service_bench.py pass [--config 100x10000 …] [--core] [--rounds 5]
    python tools/bench/service_bench.py handler [--messages 100000]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
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
from coordinator.core.events import Exited, NodeUp, Retire, Schedule, Submit, to_wire
from coordinator.core.model import ExitOutcome, JobSpec, Node, Start
from coordinator.core.settings import Settings, build_scheduler
from coordinator.gang import free_local_port
from coordinator.service.client import Client
from coordinator.service.coordinator import Coordinator, Options
from coordinator.service.identity import ANY_NODE, Peer
from coordinator.service.store import Store


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
    metrics_port = free_local_port()
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


def bench_pass(
    nodes: int, jobs: int, passes: int, journal: bool, seed: int = 1
) -> dict[str, float]:
    """One configuration in this process: the first (cold) pass and ``passes`` steady ones,
    wall and CPU milliseconds; ``journal``: each pass in its journal commit, as the service
    runs it (else the core's pass alone)."""
    rng = random.Random(1)
    with tempfile.TemporaryDirectory() as state:
        sched = build_scheduler(Settings(queue_thresholds=(3600.0,)))
        store = Store(Path(state)) if journal else None
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

        def one_pass() -> tuple[float, float, list[str]]:
            w0, c0 = time.perf_counter(), time.process_time()
            with store.tx() if store is not None else contextlib.nullcontext():
                event = Schedule(now)
                decisions = sched.apply(event)
                if store is not None:
                    store.append(*to_wire(event))
            wall, cpu = time.perf_counter() - w0, time.process_time() - c0
            return wall, cpu, [d.job_id for d in decisions if isinstance(d, Start)]

        first, first_cpu, running = one_pass()
        for _ in range(len(running)):
            submit()  # keep ``jobs`` waiting behind a full cluster
        walls, cpus = [], []
        for _ in range(passes):
            now += 1.0
            for _ in range(3):  # a few completions (retired, as the service does) and arrivals
                done = running.pop(rng.randrange(len(running)))
                sched.apply(Exited(done, now, ExitOutcome.COMPLETED))
                sched.apply(Retire(done))
                submit()
            wall, cpu, started = one_pass()
            walls.append(wall)
            cpus.append(cpu)
            running += started
        if store is not None:
            store.close()
    walls.sort()
    cpus.sort()
    p99 = int(0.99 * (passes - 1))
    return {
        "first_ms": first * 1e3,
        "first_cpu_ms": first_cpu * 1e3,
        "p50_ms": statistics.median(walls) * 1e3,
        "p99_ms": walls[p99] * 1e3,
        "p99_cpu_ms": cpus[p99] * 1e3,
    }


def compare_passes(configs: list[str], passes: int, rounds: int, journal: bool) -> None:
    """``bench_pass`` of each ``NODESxJOBS`` configuration in its own child process,
    interleaved round by round (A B A B …); a table of medians, ratios to the first."""
    runs: dict[str, list[dict[str, float]]] = {c: [] for c in configs}
    for _ in range(rounds):
        for config in configs:
            nodes, jobs = config.split("x")
            args = ["pass", "--child", "--nodes", nodes, "--jobs", jobs, "--passes", str(passes)]
            out = subprocess.run(
                [sys.executable, __file__, *args, *(["--core"] if not journal else [])],
                capture_output=True,
                text=True,
                check=True,
            )
            runs[config].append(json.loads(out.stdout))
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; medians of {rounds}")
    fields = ("first_ms", "first_cpu_ms", "p50_ms", "p99_ms", "p99_cpu_ms")
    print("| nodes × waiting | " + " | ".join(fields) + " | first CPU ratio | p99 CPU ratio |")
    print("| --- |" + " ---: |" * (len(fields) + 2))
    medians = {
        c: {f: statistics.median(r[f] for r in rs) for f in fields} for c, rs in runs.items()
    }
    base = medians[configs[0]]
    for config, med in medians.items():
        cells = " | ".join(f"{med[f]:.2f}" for f in fields)
        ratios = f"{med['first_cpu_ms'] / base['first_cpu_ms']:.2f} | "
        ratios += f"{med['p99_cpu_ms'] / base['p99_cpu_ms']:.2f}"
        print(f"| {config.replace('x', ' × ')} | {cells} | {ratios} |")


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
    p.add_argument("--config", action="append", help="NODESxJOBS, the first the baseline")
    p.add_argument("--passes", type=int, default=300)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--core", action="store_true", help="the core's pass alone, no journal")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--nodes", type=int, help=argparse.SUPPRESS)
    p.add_argument("--jobs", type=int, help=argparse.SUPPRESS)
    h = sub.add_parser("handler")
    h.add_argument("--messages", type=int, default=100_000)
    args = ap.parse_args(argv)
    if args.what == "messages":
        result = bench_messages(args.senders, args.messages)
    elif args.what == "handler":
        result = bench_handler(args.messages)
    elif args.child:
        result = bench_pass(args.nodes, args.jobs, args.passes, journal=not args.core)
    else:
        configs = args.config or ["100x10000", "1000x1000", "1000x10000", "1000x50000"]
        compare_passes(configs, args.passes, args.rounds, journal=not args.core)
        return 0
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
