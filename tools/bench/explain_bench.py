"""What pending reasons and histories cost the coordinator, with N active jobs on a 64×8
cluster (512 running, the rest waiting): ``explain`` wording every waiting job (the
simulator's ``--reasons``) and ``explain_jobs`` wording one listing page of 500 (what a
``queue`` page and the dashboard's snapshot ask: the page only, from the last pass's
decision), and ``Timeline.observe`` after a pass that changed nothing (the coordinator looks
after every pass).

    python tools/bench/explain_bench.py [--jobs 1000 10000] [--repeat 20]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from coordinator.core import JobSpec, Node, Scheduler, SchedulerConfig, make_placement, make_policy
from coordinator.core.explain import explain, explain_jobs
from coordinator.core.history import Timeline


def busy_cluster(jobs: int) -> Scheduler:
    """64 nodes × 8 GPUs: 512 one-GPU jobs run, the rest (1 to 8 GPUs) wait."""
    nodes = [Node(f"n{i:02d}", tuple(range(8))) for i in range(64)]
    sched = Scheduler(nodes, make_policy("tiresias-l"), make_placement("skew"), SchedulerConfig())
    for i in range(jobs):
        gpus = 1 if i < 512 else 1 + i % 8
        sched.submit(JobSpec(f"j{i}", gpus, float(i)), float(i))
    sched.schedule(float(jobs))
    return sched


def best(repeat: int, f: Callable[[], object]) -> float:
    """Fastest of ``repeat`` runs, in milliseconds."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return min(times) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    print("| active jobs | explain, all (ms) | explain, a page of 500 (ms) | observe (ms) |")
    print("| ---: | ---: | ---: | ---: |")
    for n in args.jobs:
        sched = busy_cluster(n)
        now = float(n)
        timeline = Timeline()
        timeline.observe(sched, now)
        page = {f"j{i}" for i in range(512, 1012)}
        reasons = best(args.repeat, lambda s=sched, t=now: explain(s, t))
        paged = best(args.repeat, lambda s=sched, t=now, p=page: explain_jobs(s, t, p))
        observe = best(args.repeat, lambda s=sched, t=now, tl=timeline: tl.observe(s, t))
        print(f"| {n:,} | {reasons:.1f} | {paged:.1f} | {observe:.1f} |")


if __name__ == "__main__":
    main()
