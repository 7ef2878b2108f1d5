"""``tiresias-sim``: replay a job trace through the scheduling core under one or more
policies and compare them."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import click
from click.core import ParameterSource

from coordinator.core import POLICY_NAMES, ServiceDistribution
from coordinator.core.model import CoreError
from coordinator.core.settings import build_scheduler
from coordinator.scheduling_flags import MEASURED, scheduling_options, scheduling_settings
from coordinator.sim.cluster import cluster_from_file, cluster_from_shape
from coordinator.sim.data import resolve_trace
from coordinator.sim.engine import ELASTIC_ALPHA, SimOptions, core_settings
from coordinator.sim.report import Bins, format_report, json_summary, write_outputs
from coordinator.sim.session import report_refused, run_one, sweep
from coordinator.sim.sweep import SWEEP_NAMES, SweepError
from coordinator.sim.traces import FORMATS, TraceError, load_trace, parse_when
from tiresias_cli.kit import (
    ARGV,
    Command,
    argument,
    json_option,
    option,
    usage_error,
    version_option,
    words,
)
from tiresias_cli.kit import run as run_cli
from tiresias_cli.values import (
    COUNT,
    FRACTION,
    POSITIVE_COUNT,
    POSITIVE_SECONDS,
    Checked,
)

EXAMPLES = """\
\b
examples:
  tiresias-sim examples/traces/figure7.csv --cluster 1x2 --interval 1 --policy srsf --policy las
  tiresias-sim philly --start 2017-10-09 --end 2017-10-16 --cluster 16x8 \\
      --policy tiresias-l --policy yarn-cs --out results/
  tiresias-sim cluster_job_log --vc 6214e9 --limit 5000 --policy tiresias-g \\
      --gittins-samples yarn-gput1000 --json
  tiresias-sim philly --vc 11cb48 --start 2017-10-23 --end 2017-10-30 --cluster 5x4 \\
      --policy tiresias-l --sweep thresholds 3600 3600,7200 --sweep load 0.8 1.1 --out sw/

\b
shipped traces, usable by name: philly, tiresias-60job (traces); yarn-gput1000,
yarn-gput10000 (GPU-time samples for --gittins-samples)
"""


def _writable_dir(path: Path) -> None:
    """Create ``--out`` now, so that a bad one fails before the run, not after it."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ValueError(f"--out {path}: {e.strerror}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(f"--out {path}: not writable")


def _samples(path: Path) -> tuple[float, ...]:
    try:
        with resolve_trace(path).open() as f:
            return tuple(ServiceDistribution.parse(f).samples)
    except OSError as e:
        raise ValueError(f"--gittins-samples {path}: {e.strerror}") from None
    except (CoreError, ValueError) as e:
        raise ValueError(f"--gittins-samples {path}: {e}") from None


def _cost(text: str) -> float | str:
    if text == "model":
        return text
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if value < 0:
        raise ValueError(f"expected seconds ≥ 0 or 'model', got {text!r}")
    return value


TRACE = "trace"
CLUSTER = "cluster"
SCHEDULING = "scheduling"
MODELS = "models the paper's simulator lacked (off by default)"
SWEEPS = "sweeps"
OUTPUT = "output"
PATH = click.Path(path_type=Path)
DESCRIPTION = (
    "Replay a job trace through the Tiresias scheduling core on a virtual clock and compare "
    "policies: average/median/p95/p99 JCT, queueing delay, makespan, preemptions and GPU "
    "utilization, overall and by small/large x short/long bins. Times are seconds; see "
    "docs/simulator.md."
)


@click.command("tiresias-sim", cls=Command, help=DESCRIPTION, epilog=EXAMPLES, greedy=["--sweep"])
@version_option()
@argument(
    "trace",
    type=PATH,
    help="trace file (Tiresias CSV, Philly CSV or JSON), or a shipped trace's name",
)
@option(
    "--format",
    "trace_format",
    type=click.Choice(FORMATS),
    metavar="|".join(FORMATS),
    default=None,
    show_default="detected",
    section=TRACE,
    help="trace format",
)
@option(
    "--start",
    metavar="WHEN",
    section=TRACE,
    help="keep jobs submitted at or after this date (Philly)",
)
@option(
    "--end", metavar="WHEN", section=TRACE, help="keep jobs submitted before this date (Philly)"
)
@option("--vc", metavar="VC", section=TRACE, help="keep one virtual cluster (Philly)")
@option("--limit", type=POSITIVE_COUNT, section=TRACE, help="keep the first N jobs by submission")
@option("--cluster", default="16x4", metavar="MxG", section=CLUSTER, help="MACHINESxGPUS")
@option(
    "--cluster-file",
    type=PATH,
    metavar="FILE",
    section=CLUSTER,
    help='JSON: {"nodes": [{"name", "gpus"}]} (instead of --cluster)',
)
@option(
    "--policy",
    "policies",
    multiple=True,
    required=True,
    metavar="P",
    section=SCHEDULING,
    help="policy, repeatable; the first is the baseline of the ratios: " + ", ".join(POLICY_NAMES),
)
@option(
    "--queues",
    type=POSITIVE_COUNT,
    metavar="K",
    section=SCHEDULING,
    help="number of priority queues",
)
@scheduling_options("queue_thresholds", "promote_knob", *MEASURED, "interval", section=SCHEDULING)
@option(
    "--gittins-samples",
    type=PATH,
    metavar="FILE",
    section=SCHEDULING,
    help="initial service distribution of tiresias-g and of learned thresholds: CSV with "
    "header 'duration', GPU-s (or a shipped sample's name, e.g. yarn-gput1000)",
)
@scheduling_options("gittins_variant", "gittins_learn", "rules", section=SCHEDULING)
@option(
    "--placement",
    metavar="NAME",
    show_default="core's",
    section=SCHEDULING,
    help="placement scheme",
)
@option("--packlimit", type=FRACTION, section=SCHEDULING, help="skew above which to pack")
@option(
    "--preempt-cost",
    type=Checked(_cost, "SECONDS|model"),
    section=MODELS,
    help="checkpoint time (GPUs stay held) and restore time (added to the resumed run); "
    "'model': per-model table",
)
@option(
    "--packing-slowdown",
    type=float,
    metavar="F",
    section=MODELS,
    help="run-time factor for a job with skew > PACKLIMIT spread over machines",
)
@option(
    "--elastic",
    "elastic_fraction",
    type=FRACTION,
    section=MODELS,
    help="share of the multi-GPU jobs made elastic, on [max(1, GPUs // 4), GPUs]: below "
    "their ask they run only on GPUs no other selected job needs, shrink instead of being "
    "preempted and grow back while nobody waits (Amdahl-style speed, resizes cost a "
    "preemption's checkpoint and restore)",
)
@option("--elastic-seed", type=COUNT, default=0, section=MODELS, help="seed of the --elastic draw")
@option(
    "--elastic-alpha",
    type=FRACTION,
    default=ELASTIC_ALPHA,
    section=MODELS,
    help="serial share of a training step: w GPUs train at w / (1 + alpha (w - 1)) one-GPU speeds",
)
@option(
    "--sweep",
    "sweeps",
    type=Checked(words, "NAME VALUE…"),
    multiple=True,
    section=SWEEPS,
    help="run every combination of the swept values (repeatable, with --out DIR): NAME is one "
    "of " + ", ".join(SWEEP_NAMES) + "; e.g. --sweep thresholds 3600 3600,7200 --sweep load "
    "0.8 1.1. Writes DIR/sweep.csv (a rerun resumes it), sweep.md, sweep.png",
)
@option(
    "--processes",
    type=POSITIVE_COUNT,
    default=os.cpu_count() or 1,
    show_default="one per CPU",
    section=SWEEPS,
    help="parallel simulations of a sweep",
)
@option(
    "--out", type=PATH, metavar="DIR", section=OUTPUT, help="write per-job CSVs, JSON, CDF plot"
)
@option(
    "--reasons",
    is_flag=True,
    section=OUTPUT,
    help="with --out: also write each job's pending reasons and history in words, as tiresias "
    "queue and status tell them live (reasons-POLICY.jsonl, and main_reason in the per-job "
    "CSV); costs O(active jobs) per event, so large traces take much longer",
)
@json_option("print only JSON metrics to stdout", section=OUTPUT)
@option(
    "--bins-gpus", type=POSITIVE_COUNT, default=8, section=OUTPUT, help="large: ≥ this many GPUs"
)
@option(
    "--bins-duration", type=POSITIVE_SECONDS, default=3600.0, section=OUTPUT, help="long: ≥ seconds"
)
@option("--no-progress", is_flag=True, section=OUTPUT, help="no progress bar on stderr")
def command(**a: Any) -> int:
    args = SimpleNamespace(**a)
    ctx = click.get_current_context()
    unknown = [name for name in args.policies if name not in POLICY_NAMES]
    if unknown:
        usage_error(f"unknown policy {unknown[0]!r}; valid: {', '.join(POLICY_NAMES)}")
    if len(set(args.policies)) != len(args.policies):
        usage_error("each --policy may appear once")
    if args.cluster_file and ctx.get_parameter_source("cluster") is ParameterSource.COMMANDLINE:
        usage_error("--cluster-file: not allowed with --cluster")
    if args.packing_slowdown is not None and args.packing_slowdown < 1:
        usage_error("--packing-slowdown is a run-time factor ≥ 1")
    try:
        nodes = (
            cluster_from_file(args.cluster_file)
            if args.cluster_file
            else cluster_from_shape(args.cluster)
        )
        samples = _samples(args.gittins_samples) if args.gittins_samples else None
        options = SimOptions(
            scheduling_settings({**a, "gittins_samples": samples}),
            queues=args.queues,
            preempt_cost=args.preempt_cost,
            packing_slowdown=args.packing_slowdown,
            elastic_fraction=args.elastic_fraction,
            elastic_seed=args.elastic_seed,
            elastic_alpha=args.elastic_alpha,
        )
        for name in args.policies:  # reject bad knobs before minutes of simulation
            build_scheduler(core_settings(name, options), nodes)
        if args.reasons and not args.out:
            raise ValueError("--reasons needs --out DIR (they are written there)")
        if args.out:  # and a place the results cannot be written to
            _writable_dir(args.out)
        trace = load_trace(
            args.trace,
            args.trace_format,
            start=parse_when(args.start) if args.start else None,
            end=parse_when(args.end, end=True) if args.end else None,
            vc=args.vc,
            limit=args.limit,
        )
    except (TraceError, CoreError, ValueError) as e:
        return _error(e)
    for reason, count in sorted(trace.skipped.items()):
        print(f"tiresias-sim: skipped {count} job(s): {reason}", file=sys.stderr)
    if not trace.specs:
        return _error("no jobs in the trace (or in the slice)")
    argv = ["tiresias-sim", *ctx.meta[ARGV]]
    if args.sweeps:
        if not args.out:
            usage_error("--sweep needs --out DIR (its results file makes a sweep resumable)")
        try:
            sweep(
                str(args.trace),
                trace.specs,
                nodes,
                args.policies,
                options,
                args.sweeps,
                args.out,
                argv,
                args.processes,
                args.no_progress,
            )
        except (SweepError, CoreError) as e:
            return _error(e)
        return 0
    if args.reasons:  # each job's reasons and history go into the per-job outputs
        options = options.replace(explain=True)
    results = [
        run_one(trace.specs, nodes, name, options, args.no_progress) for name in args.policies
    ]
    report_refused(results)
    bins = Bins(args.bins_gpus, args.bins_duration)
    if args.as_json:
        print(json.dumps(json_summary(results)))
    else:
        print(
            f"{args.trace}: {len(trace.specs)} jobs ({trace.format}); cluster: {len(nodes)} "
            f"machines, {sum(len(n.gpus) for n in nodes)} GPUs"
        )
        print(format_report(results, bins))
    if args.out:
        meta = {"trace": str(args.trace), "argv": argv}
        for path in write_outputs(args.out, results, bins, meta):
            print(f"wrote {path}", file=sys.stderr)
    return 0


def _error(problem: object) -> int:
    """A run that cannot go on: one line, exit code 2."""
    print(f"tiresias-sim: error: {problem}", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli(command, argv, "tiresias-sim")


if __name__ == "__main__":
    sys.exit(main())
