"""What ``tiresias-sim`` does around the engine: a progress bar per policy, the jobs the core
refused, and sweeps with their table and files."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from coordinator.core.model import JobSpec, Node
from coordinator.sim.cluster import cluster_from_shape
from coordinator.sim.engine import SimOptions, SimResult, run
from coordinator.sim.optional import progress_bar
from coordinator.sim.sweep import format_table, parse_grid, plot, run_sweep


def run_one(
    specs: list[JobSpec], nodes: list[Node], policy: str, options: SimOptions, quiet: bool
) -> SimResult:
    # disable=None: no bar when stderr is not a terminal; delay: none for short runs.
    with progress_bar(
        total=len(specs),
        desc=policy,
        unit="job",
        file=sys.stderr,
        disable=True if quiet else None,
        delay=2.0,
        leave=False,
    ) as bar:
        return run(specs, nodes, policy, options, bar.update)


def report_refused(results: Sequence[SimResult]) -> None:
    """Jobs the core refused at submission (larger than the cluster), once per distinct set."""
    seen: set[tuple[tuple[str, str], ...]] = set()
    for r in results:
        key = tuple(r.skipped)
        if key and key not in seen:
            seen.add(key)
            job_id, reason = r.skipped[0]
            who = (
                "all policies"
                if len(results) == 1 or all(tuple(x.skipped) == key for x in results)
                else r.policy
            )
            print(
                f"tiresias-sim: skipped {len(r.skipped)} job(s) the core refused ({who}), "
                f"e.g. job {job_id}: {reason}",
                file=sys.stderr,
            )


def sweep(
    name: str,
    specs: list[JobSpec],
    nodes: list[Node],
    policies: Sequence[str],
    options: SimOptions,
    sweeps: Sequence[Sequence[str]],
    out: Path,
    argv: list[str],
    workers: int,
    quiet: bool,
) -> None:
    """Run every combination of ``sweeps`` (``--sweep NAME VALUE…``) into ``out``, resuming
    what it holds; print the table and write sweep.md and sweep.png beside sweep.csv.
    Raises SweepError or CoreError for a grid that cannot run."""
    grid = parse_grid([list(s) for s in sweeps])
    rows, wall, ran = run_sweep(
        specs,
        nodes,
        policies,
        options,
        grid,
        out,
        workers=workers,
        make_cluster=cluster_from_shape,
        quiet=quiet,
    )
    names = [n for n, _ in grid]
    table = format_table(rows, names, markdown=False)
    print(f"{name}: {len(specs)} jobs; {len(rows)} configs ({ran} run now)")
    print(table)
    rate = f"{ran / wall * 60:.1f} configs/minute with {workers} workers" if ran else ""
    (out / "sweep.md").write_text(
        f"# Sweep of {', '.join(names)}\n\n`{shlex.join(argv)}`\n\n"
        f"{format_table(rows, names, markdown=True)}\n"
    )
    written = [out / "sweep.csv", out / "sweep.md"]
    picture = plot(rows, grid, out / "sweep.png")
    written += [picture] if picture else []
    for path in written:
        print(f"wrote {path}", file=sys.stderr)
    if rate:
        print(f"tiresias-sim: {ran} configs in {wall:.0f} s: {rate}", file=sys.stderr)
