"""Side by side with the Tiresias authors' simulator: the same slices of the Philly trace
(families in ``reference_slices.py``), the same cluster, under their ``dlas-gpu``
(Tiresias-L), ``dlas-gpu-gittins`` (Tiresias-G) and ``shortest-gpu`` (SRSF) and under
``tiresias-sim``; writes docs/results/reference.md: the authors'-rules reproduction, our
rows against theirs per run, and per row the geo-mean and worst ratio of each goal.

A benchmark, not a test: it needs ``run-reference`` (python 2.7, not part of this project),
whose run time grows quadratically with the number of jobs (their Gittins: minutes on 2,000
jobs), so slices stay small. Its results are cached in docs/results/reference.json (keyed by
slice, cluster and schedule), so the tables can be rebuilt, and our policies re-measured,
without it; a run not cached is made only with ``--reference`` (``dlas-gpu-gittins`` only on
slices of at most ``GITTINS_MAX_JOBS`` jobs; rows of larger ones show "-").

    nice -n 10 python tools/reproduce/compare_reference.py \\
        --reference ../shared/reference/run-reference [--trace PATH] [--workers 2]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import math
import shlex
import statistics
import sys
from pathlib import Path

from reference_slices import DAYS, FAMILIES, Case, cases, run_reference

from coordinator.core import ServiceDistribution
from coordinator.core.queued import LEARNED_FLOOR, LEARNED_MAX_QUEUES, LEARNED_SPACING
from coordinator.sim.cluster import cluster_from_shape
from coordinator.sim.engine import SimOptions, run
from coordinator.sim.report import job_metrics
from coordinator.sim.traces import resolve_trace

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TRACE = resolve_trace("philly")
OUT = ROOT / "docs" / "results" / "reference.md"
# Our policy → the reference's schedule it faces.
THEIRS = {"tiresias-l": "dlas-gpu", "tiresias-g": "dlas-gpu-gittins", "srsf": "shortest-gpu"}
GITTINS_MAX_JOBS = 2000
# The authors'-rules rows (all their rules, or all but one) and what each reproduces.
AUTHORS = ("tiresias-l authors", "tiresias-g authors")
ONE_RULE = (
    "tiresias-l authors, our order",
    "tiresias-l authors, exact demotion",
    "tiresias-g authors, exact demotion",
)
# Our rows: name → (policy, SimOptions fields).
VARIANTS: dict[str, tuple[str, dict[str, object]]] = {
    "tiresias-l": ("tiresias-l", {}),
    "tiresias-l first-start": ("tiresias-l", {"queue_order": "first-start"}),
    "tiresias-l 36000": ("tiresias-l", {"thresholds": (36000.0,)}),
    "tiresias-l 36000 first-start": (
        "tiresias-l",
        {"thresholds": (36000.0,), "queue_order": "first-start"},
    ),
    "tiresias-l 3250,7200": ("tiresias-l", {"thresholds": (3250.0, 7200.0)}),
    "tiresias-l 3250,7200 first-start": (
        "tiresias-l",
        {"thresholds": (3250.0, 7200.0), "queue_order": "first-start"},
    ),
    "srsf": ("srsf", {}),
    # the authors' rules (coordinator.core.authors_rules), all of them and all but one
    "tiresias-l authors": ("tiresias-l", {"rules": "authors", "thresholds": (3250.0, 7200.0)}),
    "tiresias-g authors": (
        "tiresias-g",
        {"rules": "authors", "thresholds": (3250.0, 7200.0), "gittins_samples": "yarn-gput1000"},
    ),
    "tiresias-l authors, our order": (
        "tiresias-l",
        {"rules": "authors-our-order", "thresholds": (3250.0, 7200.0)},
    ),
    "tiresias-l authors, exact demotion": (
        "tiresias-l",
        {"rules": "authors-exact-demotion", "thresholds": (3250.0, 7200.0)},
    ),
    "tiresias-g authors, exact demotion": (
        "tiresias-g",
        {
            "rules": "authors-exact-demotion",
            "thresholds": (3250.0, 7200.0),
            "gittins_samples": "yarn-gput1000",
        },
    ),
    "tiresias-l 3250,7200,36000,360000": (
        "tiresias-l",
        {"thresholds": (3250.0, 7200.0, 36000.0, 360000.0)},
    ),
    "tiresias-l learned": ("tiresias-l", {"learn_thresholds": True}),
    "tiresias-l learned from 3250,7200": (
        "tiresias-l",
        {"learn_thresholds": True, "thresholds": (3250.0, 7200.0)},
    ),
    "tiresias-l learned from history": (
        "tiresias-l",
        {"learn_thresholds": True, "gittins_samples": "history"},
    ),
    "tiresias-l oracle thresholds": ("tiresias-l", {"thresholds": "oracle"}),
    # waiting jobs ranked by their group's learned service (Philly has no user or job name)
    "tiresias-l groups gpus": ("tiresias-l", {"service_groups": ("gpus",)}),
    "tiresias-l groups gpus,batch": ("tiresias-l", {"service_groups": ("gpus", "batch")}),
    "tiresias-g groups gpus,batch": ("tiresias-g", {"service_groups": ("gpus", "batch")}),
    "tiresias-l learned from history groups gpus,batch": (
        "tiresias-l",
        {
            "learn_thresholds": True,
            "gittins_samples": "history",
            "service_groups": ("gpus", "batch"),
        },
    ),
    "tiresias-g": ("tiresias-g", {}),
    "tiresias-g learned": ("tiresias-g", {"learn_thresholds": True}),
    "tiresias-g yarn-gput1000": ("tiresias-g", {"gittins_samples": "yarn-gput1000"}),
    "tiresias-g history": ("tiresias-g", {"gittins_samples": "history"}),
    "tiresias-g interval 600": ("tiresias-g", {"interval": 600.0}),
    "tiresias-g history interval 600": (
        "tiresias-g",
        {"gittins_samples": "history", "interval": 600.0},
    ),
    # the paper's sensitivity settings (Figures 14/15), GPU-hours
    "tiresias-l 1800": ("tiresias-l", {"thresholds": (1800.0,)}),
    "tiresias-l 3600": ("tiresias-l", {"thresholds": (3600.0,)}),
    "tiresias-l 3600,7200": ("tiresias-l", {"thresholds": (3600.0, 7200.0)}),
    "tiresias-l 3600,7200,14400": ("tiresias-l", {"thresholds": (3600.0, 7200.0, 14400.0)}),
    "tiresias-l min-run 60": ("tiresias-l", {"min_run": 60.0}),
    "tiresias-l min-run 300": ("tiresias-l", {"min_run": 300.0}),
    "tiresias-l min-run 900": ("tiresias-l", {"min_run": 900.0}),
    # no thrashing, with the per-model cost table (every Philly job costs ResNet-50's)
    "tiresias-l model-cost": ("tiresias-l", {"preempt_cost": "model"}),
    "tiresias-l model-cost min-run 600": (
        "tiresias-l",
        {"preempt_cost": "model", "min_run": 600.0},
    ),
    "tiresias-l model-cost min-run 3600": (
        "tiresias-l",
        {"preempt_cost": "model", "min_run": 3600.0},
    ),
    "tiresias-l model-cost min-run 100 restores": (
        "tiresias-l",
        {"preempt_cost": "model", "min_run_restores": 100.0},
    ),
    "tiresias-l cost 120 s": ("tiresias-l", {"preempt_cost": 120.0}),
    "tiresias-l cost 120 s min-run 10 restores": (
        "tiresias-l",
        {"preempt_cost": 120.0, "min_run_restores": 10.0},
    ),
}
DEFAULT_VARIANTS = (
    "tiresias-l",
    "tiresias-g",
    "tiresias-g history",
    "tiresias-g yarn-gput1000",
    "srsf",
)


def run_ours(case: Case, variant: str) -> dict[str, float]:
    policy, options = VARIANTS[variant]
    if options.get("thresholds") == "oracle":  # learned from the slice's own jobs, up front
        service = ServiceDistribution(s.gpus * (s.duration or 0.0) for s in case.specs)
        learned = service.thresholds(
            floor=LEARNED_FLOOR, spacing=LEARNED_SPACING, max_queues=LEARNED_MAX_QUEUES
        )
        options = options | {"thresholds": learned}
    if options.get("gittins_samples") == "history":
        options = options | {"gittins_samples": case.history or None}
    elif isinstance(options.get("gittins_samples"), str):  # a shipped sample file
        with resolve_trace(str(options["gittins_samples"])).open() as f:
            options = options | {"gittins_samples": tuple(ServiceDistribution.parse(f).samples)}
    nodes = cluster_from_shape(f"{case.nodes}x{case.gpus_per_node}")
    result = run(list(case.specs), nodes, policy, SimOptions.of(**options))
    m = job_metrics(result.jobs)
    return {k: m[k] for k in ("avg_jct", "median_jct", "p95_jct", "preemptions")} | {
        "jobs": len(result.jobs)
    }


def _cell(x: float, base: float | None = None) -> str:
    text = f"{x:,.0f}"
    return text if base is None or not base else f"{text} ({x / base:.2f})"


def _theirs(ref: dict, case: Case, variant: str) -> dict[str, float] | None:
    """The reference run our ``variant`` faces on ``case`` (None: not run)."""
    return ref.get(f"{case.key} {THEIRS[VARIANTS[variant][0]]}")


def misses(
    o: dict[str, float], d: dict[str, float], srsf: dict[str, float], median: bool = True
) -> list[str]:
    """The goals ``o`` misses against the reference run ``d`` and our SRSF, each with its
    factor (the median goal only where ``median``: tiresias-l against dlas-gpu)."""
    goals = [("avg", o["avg_jct"], d["avg_jct"])]
    if median:
        goals.append(("median", o["median_jct"], d["median_jct"]))
    goals += [
        ("preempt", o["preemptions"], d["preemptions"]),
        ("SRSF", o["avg_jct"], 1.15 * srsf["avg_jct"]),
    ]
    return [
        f"{what} {mine / theirs:.3f}×" if theirs else f"{what} {mine:.0f}"
        for what, mine, theirs in goals
        if mine > theirs + 0.5
    ]


def _geo(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def _amp(m: dict[str, float]) -> str:
    return f"{_cell(m['avg_jct'])} / {_cell(m['median_jct'])} / {m['preemptions']:.0f}"


def _same(a: dict[str, float], b: dict[str, float]) -> str:
    """Whether ours ``a`` equals theirs ``b`` in whole seconds (as theirs prints), else the
    ratio of each metric that differs."""
    names = {"avg_jct": "avg", "median_jct": "median", "preemptions": "preempt"}
    differ = [
        f"{name} {a[k] / b[k]:.4f}×" for k, name in names.items() if f"{a[k]:.0f}" != f"{b[k]:.0f}"
    ]
    return ", ".join(differ) or "equal"


def _table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def reproduction(cs: list[Case], ref: dict, ours: dict) -> str:
    """The authors'-rules rows against the runs they reproduce (avg / median / preemptions)."""
    rows = []
    for c in cs:
        row = [c.name, c.family, f"{len(c.specs):,}", str(c.gpus)]
        for v in AUTHORS:
            theirs, mine = _theirs(ref, c, v), ours[f"{c.key} {v}"]
            row += ["-", _amp(mine), "-"] if theirs is None else [_amp(theirs), _amp(mine)]
            row[-1:] = row[-1:] if theirs is None else [row[-1], _same(mine, theirs)]
        rows.append(row)
    head = ["slice @load", "kind", "jobs", "GPUs", "dlas-gpu", "`tiresias-l authors`", "same?"]
    head += ["dlas-gpu-gittins", "`tiresias-g authors`", "same?"]
    return _table(head, rows)


def per_run(cs: list[Case], ref: dict, ours: dict) -> str:
    """Our default rows against theirs on every run, with SRSF and the goals missed."""
    rows = []
    for c in cs:
        d, g = ref[f"{c.key} dlas-gpu"], ref.get(f"{c.key} dlas-gpu-gittins")
        lo, go, srsf = (ours[f"{c.key} {v}"] for v in ("tiresias-l", "tiresias-g", "srsf"))
        missed = [f"L {m}" for m in misses(lo, d, srsf)]
        if g is not None:
            missed += [f"G {m}" for m in misses(go, g, srsf, median=False)]
        rows.append(
            [
                c.name,
                f"{len(c.specs):,}",
                str(c.gpus),
                f"{c.load:.2f}",
                _amp(d),
                f"{_cell(lo['avg_jct'], d['avg_jct'])} / "
                f"{_cell(lo['median_jct'], d['median_jct'])} / {lo['preemptions']:.0f}",
                "-" if g is None else f"{_cell(g['avg_jct'])} / {g['preemptions']:.0f}",
                f"{_cell(go['avg_jct'], g['avg_jct'] if g else None)} / {go['preemptions']:.0f}",
                f"{go['avg_jct'] / lo['avg_jct']:.3f}",
                _cell(srsf["avg_jct"]),
                f"{lo['avg_jct'] / srsf['avg_jct']:.2f} / {go['avg_jct'] / srsf['avg_jct']:.2f}",
                ", ".join(missed) or "-",
            ]
        )
    head = ["slice @load", "jobs", "GPUs", "load", "dlas-gpu avg / median / preempt"]
    head += ["`tiresias-l` avg / median / preempt", "dlas-gpu-gittins avg / preempt"]
    head += ["`tiresias-g` avg / preempt", "G ÷ L", "SRSF avg", "L / G ÷ SRSF", "missed"]
    return _table(head, rows)


def summary(cs: list[Case], ref: dict, ours: dict, variants: list[str]) -> str:
    """Per row of ours: against the reference run it faces, the geo-mean and worst ratio of
    each goal over the runs that reference has."""
    rows = []
    for v in variants:
        policy = VARIANTS[v][0]
        runs = [
            (ours[f"{c.key} {v}"], t, ours[f"{c.key} srsf"])
            for c in cs
            if (t := _theirs(ref, c, v)) is not None
        ]
        if not runs:
            continue
        avg = [o["avg_jct"] / t["avg_jct"] for o, t, _ in runs]
        med = [o["median_jct"] / t["median_jct"] for o, t, _ in runs]
        srsf = [o["avg_jct"] / s["avg_jct"] for o, _, s in runs]
        pre = sum(o["preemptions"] for o, _, _ in runs)
        pre_ref = sum(t["preemptions"] for _, t, _ in runs)
        ok = sum(not misses(o, t, s, median=policy == "tiresias-l") for o, t, s in runs)
        rows.append(
            [
                f"`{v}`",
                THEIRS[policy],
                str(len(runs)),
                f"{_geo(avg):.3f} / {max(avg):.3f}",
                f"{_geo(med):.3f} / {max(med):.3f}",
                f"{_geo(srsf):.3f} / {max(srsf):.2f}",
                f"{sum(r <= 1.15 for r in srsf)} of {len(runs)}",
                f"{pre:,.0f} ({pre_ref:,.0f})",
                f"{ok} of {len(runs)}",
            ]
        )
    head = ["ours", "against", "runs", "avg ÷ theirs: geo-mean / worst", "median ÷ theirs"]
    head += ["avg ÷ SRSF", "within 1.15× SRSF", "preemptions (theirs)", "runs meeting every goal"]
    return _table(head, rows)


def one_rule(cs: list[Case], ours: dict) -> str:
    """Average JCT with one of the authors' rules switched back to ours, ÷ all theirs."""
    rows, ratios = [], {v: [] for v in ONE_RULE}
    for c in cs:
        row = [c.name]
        for v in ONE_RULE:
            base = ours[f"{c.key} {v.split(',')[0]}"]["avg_jct"]
            r = ours[f"{c.key} {v}"]["avg_jct"] / base
            ratios[v].append(r)
            row.append(f"{r:.3f}")
        rows.append(row)
    rows.append(["geo-mean", *(f"{_geo(ratios[v]):.3f}" for v in ONE_RULE)])
    return _table(["slice @load", *(f"`{v}`" for v in ONE_RULE)], rows)


def _cached(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def _needed(cs: list[Case], ref: dict) -> list[tuple[Case, str]]:
    """Reference runs the tables need that are not cached."""
    out = []
    for c in cs:
        schedules = ["dlas-gpu", "shortest-gpu"]
        if len(c.specs) <= GITTINS_MAX_JOBS:
            schedules.append("dlas-gpu-gittins")
        out += [(c, s) for s in schedules if f"{c.key} {s}" not in ref]
    return out


HEADER = """# tiresias-sim against the authors' simulator

Generated by `{command}` (reference runs cached in `{cache}`); see `docs/simulator.md` for how
to read it.

Slices (`tools/reproduce/reference_slices.py`): `vc-week`, one virtual cluster's jobs
submitted in {days} days from the date shown, on N × 4 GPUs chosen for an offered load near
0.8 and 1.1; `vcs-month`, three virtual clusters over 28 days; `all-week`, every virtual
cluster over a week; `big-jobs`, every job of 8 GPUs or more over 28 days; `heavy`, loads near
1.4; `vc-week-8`, a virtual cluster's week on × 8 GPUs. Column `load`: GPU-time / (GPUs ×
days). No preemption cost (the reference has none); each simulator's own placement ('count'
for the reference). `dlas-gpu` and `dlas-gpu-gittins` are the authors' Tiresias-L and
Tiresias-G (3 queues at 3,250 and 7,200 GPU-s; their Gittins ranks with `yarn-gput1000`);
ours run with the core's defaults unless the row's name says otherwise. Times in seconds;
(x) = ratio to the reference run. Goals: average JCT (and for `tiresias-l` the median) and
preemptions no worse than the reference's, average JCT within 1.15× of SRSF's; `missed` gives
the factor by which each missed goal is missed (L: `tiresias-l` against `dlas-gpu`, G:
`tiresias-g` against `dlas-gpu-gittins`).
"""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    p.add_argument("--reference", type=Path, help="run-reference script (default: cache only)")
    p.add_argument("--variant", action="append", choices=VARIANTS, help="our summary rows")
    p.add_argument("--family", action="append", choices=sorted({f.name for f in FAMILIES}))
    p.add_argument("--workers", type=int, default=2, help="parallel simulations (2)")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--cache", type=Path, default=OUT.with_suffix(".json"), help="reference runs")
    args = p.parse_args()
    variants = args.variant or list(DEFAULT_VARIANTS)
    rows = list(dict.fromkeys([*variants, "tiresias-l", "tiresias-g", "srsf", *AUTHORS, *ONE_RULE]))
    ref = _cached(args.cache)
    families = tuple(f for f in FAMILIES if args.family is None or f.name in args.family)
    cs = cases(args.trace, families)
    todo = _needed(cs, ref)
    if todo and args.reference is None:
        raise SystemExit(f"{len(todo)} reference runs are not cached: pass --reference")
    ours: dict[str, dict[str, float]] = {}
    with concurrent.futures.ProcessPoolExecutor(args.workers) as pool:
        refs = {pool.submit(run_reference, args.reference, c, s): f"{c.key} {s}" for c, s in todo}
        mine = {pool.submit(run_ours, c, v): f"{c.key} {v}" for c in cs for v in rows}
        for fut in concurrent.futures.as_completed([*refs, *mine]):
            if fut in refs:
                ref[refs[fut]] = fut.result()
                args.cache.write_text(json.dumps(ref, indent=1, sort_keys=True) + "\n")
            else:
                ours[mine[fut]] = fut.result()
            print(f"{refs.get(fut) or mine[fut]}: {fut.result()['avg_jct']:,.0f}", file=sys.stderr)
    command = shlex.join(
        ["nice", "-n", "10", "python", "tools/reproduce/compare_reference.py", *sys.argv[1:]]
    )
    text = HEADER.format(command=command, cache=args.cache.name, days=DAYS) + "\n".join(
        [
            "\n## The authors' rules reproduce their runs\n",
            "`--rules authors` (`coordinator.core.authors_rules`) against their runs: average / "
            "median JCT / preemptions.\n",
            reproduction(cs, ref, ours),
            "\n## Every run\n",
            per_run(cs, ref, ours),
            "\n## Per row: the goals over all runs\n",
            summary(cs, ref, ours, variants),
            "\n## One rule at a time\n",
            "Average JCT of the authors' rules with one rule switched back to ours, ÷ that of "
            "all their rules (below 1: our rule gains).\n",
            one_rule(cs, ours),
        ]
    )
    print(text)
    args.out.write_text(text + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
