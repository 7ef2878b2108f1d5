"""Simulator throughput: the whole Philly trace on a 64×8 cluster under each policy.

Each policy runs in a fresh child process so that its peak RSS is its own. Reports wall and
CPU seconds (simulation only, trace parsing excluded and shown apart; CPU time is what wall
time would be on an idle core of this shared machine), jobs/s, events/s (arrivals,
completions, checkpoint ends and policy wakeups), scheduler passes/s (wall) and peak RSS.
Budget: tiresias-l under 60 s and 2 GB on the project's 2-core machine.

    python tools/bench/sim_bench.py [--policy tiresias-l ...] [--cluster 64x8] [--limit N]
                                    [--budget SECONDS]
"""

from __future__ import annotations

import argparse
import json
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


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    p.add_argument("--cluster", default="64x8")
    p.add_argument("--policy", action="append", choices=POLICY_NAMES, help="default: all")
    p.add_argument("--limit", type=int, help="first N jobs only")
    p.add_argument("--budget", type=float, default=600, help="seconds per policy (600)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(measure(args.trace, args.cluster, args.policy[0], args.limit)))
        return 0
    header = f"{'policy':<14}{'jobs':>8}{'parse s':>9}{'wall s':>9}{'CPU s':>9}{'jobs/s':>9}"
    print(
        f"{header}{'events':>10}{'events/s':>10}{'passes':>10}{'passes/s':>10}{'peak RSS MB':>13}"
    )
    for policy in args.policy or POLICY_NAMES:
        cmd = [sys.executable, __file__, "--child", "--trace", str(args.trace)]
        cmd += ["--cluster", args.cluster, "--policy", policy]
        cmd += ["--limit", str(args.limit)] if args.limit else []
        try:
            done = subprocess.run(
                cmd, check=True, stdout=subprocess.PIPE, text=True, timeout=args.budget
            )
        except subprocess.TimeoutExpired:
            print(f"{policy:<14}did not finish within {args.budget:.0f} s", flush=True)
            continue
        row = json.loads(done.stdout)
        print(
            f"{policy:<14}{row['jobs']:>8}{row['parse_s']:>9}{row['wall_s']:>9}{row['cpu_s']:>9}"
            f"{row['jobs_per_s']:>9}{row['events']:>10}{row['events_per_s']:>10}"
            f"{row['passes']:>10}{row['passes_per_s']:>10}"
            f"{row['peak_rss_mb']:>13}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
