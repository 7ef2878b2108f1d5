"""Simulator throughput: the whole Philly trace on a 64×8 cluster under each policy.

Each policy runs in a fresh child process so that its peak RSS is its own. Reports CPU and
wall seconds (simulation only, trace parsing excluded; CPU time is what wall time would be
on an idle core of this shared machine), jobs, events (arrivals, completions, checkpoint
ends and policy wakeups) and scheduler passes per CPU second, and peak RSS. Budget:
tiresias-l under 20 CPU-s and 2 GB on the project's 2-core machine.

    python tools/bench/sim_bench.py [--policy tiresias-l ...] [--cluster 64x8] [--limit N]
                                    [--budget SECONDS] [--first 10000 --rounds 3]

It prints a markdown table (the one in docs/simulator.md), naming the machine and its load;
rates are per CPU second. ``--first N`` also runs each policy on the first N jobs, the runs
interleaved (first N, whole, first N, whole …), and gives the ratio of their CPU times: the
whole trace should cost at most 10× its first 10,000 jobs. The ratio of their passes beside
it says how much of that is the trace itself (its later weeks preempt more, so they take
more passes per job), and the ratio of CPU per pass what is left: a pass that costs more
as the trace goes on.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

from coordinator.core import POLICY_NAMES
from coordinator.sim.cluster import cluster_from_shape
from coordinator.sim.engine import SimOptions, run
from coordinator.sim.traces import load_trace, resolve_trace

DEFAULT_TRACE = resolve_trace("philly")


def measure(trace: Path, cluster: str, policy: str, limit: int | None) -> dict[str, object]:
    """One policy in this process: timings and this process's peak RSS."""
    t0 = time.perf_counter()
    specs = load_trace(trace, limit=limit).specs
    t1, c1 = time.perf_counter(), time.process_time()
    result = run(specs, cluster_from_shape(cluster), policy, SimOptions())
    wall, cpu = time.perf_counter() - t1, time.process_time() - c1
    return {
        "policy": policy,
        "jobs": len(result.jobs),
        "parse_s": round(t1 - t0, 2),
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),  # what wall would be on an idle core
        "jobs_per_s": round(len(result.jobs) / wall),
        "passes": result.passes,
        "passes_per_s": round(result.passes / wall),
        "events": result.events,
        "events_per_s": round(result.events / wall),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def _child(args: argparse.Namespace, policy: str, limit: int | None) -> dict | None:
    """``measure`` of ``policy`` on the first ``limit`` jobs in a fresh process (None: it
    ran past the budget)."""
    cmd = [sys.executable, __file__, "--child", "--trace", str(args.trace)]
    cmd += ["--cluster", args.cluster, "--policy", policy]
    cmd += ["--limit", str(limit)] if limit else []
    try:
        done = subprocess.run(
            cmd, check=True, stdout=subprocess.PIPE, text=True, timeout=args.budget
        )
    except subprocess.TimeoutExpired:
        return None
    return {**json.loads(done.stdout), "limit": limit}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    p.add_argument("--cluster", default="64x8")
    p.add_argument("--policy", action="append", choices=POLICY_NAMES, help="default: all")
    p.add_argument("--limit", type=int, help="first N jobs only")
    p.add_argument("--budget", type=float, default=600, help="seconds per run (600)")
    p.add_argument("--first", type=int, help="also the first N jobs, for the ratio of CPU times")
    p.add_argument("--rounds", type=int, default=1, help="runs of each, interleaved (median)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(measure(args.trace, args.cluster, args.policy[0], args.limit)))
        return 0
    load = os.getloadavg()[0]
    print(f"{platform.machine()}, {os.cpu_count()} CPUs, load average {load:.1f} at the start")
    print(
        "| policy | CPU s | wall s | jobs/s (CPU) | events | events/s (CPU) | passes "
        "| passes/s (CPU) | peak RSS MB |"
        + (" first N CPU s | ratio | passes ratio | CPU per pass ratio |" if args.first else "")
    )
    print("| --- |" + " ---: |" * (8 + 4 * bool(args.first)))
    for policy in args.policy or POLICY_NAMES:
        rows = []
        for _ in range(args.rounds):  # interleaved: first N jobs, whole trace, …
            for limit in ([args.first] if args.first else []) + [args.limit]:
                row = _child(args, policy, limit)
                if row is None:
                    print(f"| {policy} | did not finish within {args.budget:.0f} s |", flush=True)
                    break
                rows.append(row)
        whole = [r for r in rows if r["limit"] == args.limit]
        if not whole:
            continue
        row = sorted(whole, key=lambda r: r["cpu_s"])[(len(whole) - 1) // 2]  # median (lower)
        cpu = row["cpu_s"]
        cells = [
            f"{cpu:.1f}",
            f"{row['wall_s']:.1f}",
            f"{row['jobs'] / cpu:,.0f}",
            f"{row['events']:,}",
            f"{row['events'] / cpu:,.0f}",
            f"{row['passes']:,}",
            f"{row['passes'] / cpu:,.0f}",
            f"{row['peak_rss_mb']}",
        ]
        if args.first:
            firsts = sorted((r for r in rows if r["limit"] == args.first), key=lambda r: r["cpu_s"])
            first = firsts[(len(firsts) - 1) // 2]  # median (lower)
            passes = row["passes"] / first["passes"]
            ratio = cpu / first["cpu_s"]
            cells += [
                f"{first['cpu_s']:.2f}",
                f"{ratio:.1f}",
                f"{passes:.2f}",
                f"{ratio / passes:.2f}",
            ]
        print(f"| {policy} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
