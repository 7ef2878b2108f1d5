"""Elastic against rigid Tiresias-L on the single-VC Philly weeks of ``compare_reference``
(``reference_slices.SLICES``), at offered loads 0.8, 1.1 and 1.4: prints the table of
docs/simulator.md "Elastic jobs".

Every job that asks for 2 or more GPUs is elastic on [max(1, gpus // 4), gpus] (or the
share ``--fraction`` of them, seeded), with the simulator's Amdahl-style scaling
(``coordinator.sim.engine.amdahl``) and the per-model checkpoint/restore costs for both
sides (``--preempt-cost model``), so each resize pays what a preemption pays.

The bound column is what no elastic policy can beat: every multi-GPU job at its ask with
no wait (its JCT its duration) and the cluster left to the one-GPU jobs alone.

    python tools/reproduce/elastic_gain.py [--fraction 1.0] [--seed 0] [--alpha 0.05]
"""

from __future__ import annotations

import argparse
import statistics

from reference_slices import SLICES, Case, Family, cases

from coordinator.sim.cluster import cluster_from_shape
from coordinator.sim.engine import ELASTIC_ALPHA, SimOptions, run
from coordinator.sim.traces import resolve_trace

LOADS = (0.8, 1.1, 1.4)


def compare(case: Case, fraction: float, seed: int, alpha: float) -> list[str]:
    """One row: JCT of rigid and elastic, the gain, the per-job ratio's distribution and
    the resizes per elastic job."""
    nodes = cluster_from_shape(f"{case.nodes}x{case.gpus_per_node}")
    rigid = run(list(case.specs), nodes, "tiresias-l", SimOptions.of(preempt_cost="model"))
    options = SimOptions.of(
        preempt_cost="model", elastic_fraction=fraction, elastic_seed=seed, elastic_alpha=alpha
    )
    elastic = run(list(case.specs), nodes, "tiresias-l", options)
    base = {j.job_id: j.jct for j in rigid.jobs}
    ratios = sorted(j.jct / base[j.job_id] for j in elastic.jobs)
    p50, p99 = ratios[len(ratios) // 2], ratios[int(len(ratios) * 0.99)]
    multi = [j for j in elastic.jobs if j.gpus > 1]
    avg = [statistics.mean(j.jct for j in r.jobs) for r in (rigid, elastic)]
    alone = run([s for s in case.specs if s.gpus == 1], nodes, "tiresias-l", rigid.options)
    bound = sum(j.jct for j in alone.jobs) + sum(j.duration for j in multi)
    med = [statistics.median(j.jct for j in r.jobs) for r in (rigid, elastic)]
    worse = sum(r > 1.5 for r in ratios)
    return [
        case.name,
        f"{len(case.specs):,}",
        str(case.gpus),
        f"{avg[0]:,.0f} → {avg[1]:,.0f} ({1 - avg[1] / avg[0]:+.1%})",
        f"{1 - bound / len(elastic.jobs) / avg[0]:+.1%}",
        f"{med[0]:,.0f} → {med[1]:,.0f} ({1 - med[1] / med[0]:+.1%})",
        " / ".join(f"{x:.2f}" for x in (p50, p99, ratios[-1])),
        str(worse),
        f"{sum(j.resizes for j in multi) / max(1, len(multi)):.2f}",
    ]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--fraction", type=float, default=1.0, help="share of multi-GPU jobs elastic")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--alpha", type=float, default=ELASTIC_ALPHA, help="serial share of a step")
    a = p.parse_args()
    head = [
        "slice @load",
        "jobs",
        "GPUs",
        "avg JCT s: rigid → elastic (gain)",
        "bound",
        "median JCT s (gain)",
        "JCT ratio p50 / p99 / worst",
        "jobs > 1.5×",
        "resizes / multi-GPU job",
    ]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for case in cases(resolve_trace("philly"), (Family("vc-week", SLICES, loads=LOADS),)):
        print("| " + " | ".join(compare(case, a.fraction, a.seed, a.alpha)) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
