"""Metrics of simulation runs and how they are shown: the comparison table (each metric also
as a ratio to the first policy), the same split into the paper's small/large × short/long
bins, per-job CSV, summary JSON and a JCT CDF plot."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from coordinator.sim.engine import JobResult, SimResult
from coordinator.sim.optional import pyplot

# Metric name → column title; the JSON keys are the names.
METRICS: dict[str, str] = {
    "avg_jct": "avg JCT",
    "median_jct": "median JCT",
    "p95_jct": "p95 JCT",
    "p99_jct": "p99 JCT",
    "avg_queueing": "avg queue",
    "median_queueing": "median queue",
    "makespan": "makespan",
    "preemptions": "preempt",
    "utilization": "GPU util",
}
# Per-bin metrics: makespan and utilization describe the whole cluster, not a bin.
BIN_METRICS = ("jobs", *(m for m in METRICS if m not in ("makespan", "utilization")))


@dataclass(frozen=True)
class Bins:
    """The paper's job classes: large if ≥ ``gpus`` GPUs, long if ≥ ``duration`` seconds."""

    gpus: int = 8
    duration: float = 3600.0

    def name(self, job: JobResult) -> str:
        size = "large" if job.gpus >= self.gpus else "small"
        length = "long" if job.duration >= self.duration else "short"
        return f"{size}-{length}"

    def names(self) -> tuple[str, ...]:
        return tuple(f"{s}-{d}" for s in ("small", "large") for d in ("short", "long"))

    def describe(self) -> str:
        return f"large: ≥ {self.gpus} GPUs; long: ≥ {self.duration:g} s"


def job_metrics(jobs: Sequence[JobResult]) -> dict[str, float]:
    """JCT and queueing statistics of ``jobs`` (NaN when there are none)."""
    jct = np.array([j.jct for j in jobs], dtype=float)
    queue = np.array([j.queueing for j in jobs], dtype=float)

    def stat(values: np.ndarray[Any, Any], fn: str, q: float = 50.0) -> float:
        if not len(values):
            return float("nan")
        return float(values.mean() if fn == "mean" else np.percentile(values, q))

    return {
        "jobs": len(jobs),
        "avg_jct": stat(jct, "mean"),
        "median_jct": stat(jct, "pct"),
        "p95_jct": stat(jct, "pct", 95.0),
        "p99_jct": stat(jct, "pct", 99.0),
        "avg_queueing": stat(queue, "mean"),
        "median_queueing": stat(queue, "pct"),
        "preemptions": sum(j.preemptions for j in jobs),
    }


def summary(result: SimResult) -> dict[str, float]:
    """The ``--json`` metrics of one run."""
    m = job_metrics(result.jobs)
    m["makespan"] = result.makespan
    m["utilization"] = result.utilization
    return {k: m[k] for k in METRICS}


def by_bin(result: SimResult, bins: Bins) -> dict[str, dict[str, float]]:
    groups: dict[str, list[JobResult]] = {name: [] for name in bins.names()}
    for job in result.jobs:
        groups[bins.name(job)].append(job)
    return {name: {k: job_metrics(jobs)[k] for k in BIN_METRICS} for name, jobs in groups.items()}


COUNTS = ("jobs", "preemptions")


def _fmt(x: float) -> str:
    """Seconds: two decimals while they matter (the Figure 7 example), none beyond."""
    if x != x:  # NaN
        return "-"
    return f"{x:,.2f}" if abs(x) < 10_000 else f"{x:,.0f}"


def _cell(name: str, value: float, base: float) -> str:
    if name == "utilization":
        text = f"{value:.1%}"
    else:
        text = f"{int(value):,}" if name in COUNTS else _fmt(value)
    if name == "jobs":
        return text
    ratio = "-" if not base or base != base or value != value else f"{value / base:.2f}"
    return f"{text} ({ratio})"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], markdown: bool) -> str:
    if markdown:
        lines = [header, ["---"] + ["---:"] * (len(header) - 1), *rows]
        return "\n".join("| " + " | ".join(cells) + " |" for cells in lines)
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])


def format_report(results: Sequence[SimResult], bins: Bins, *, markdown: bool = False) -> str:
    """Both tables, as plain text or Markdown; times in seconds, (ratio) to the first policy."""
    sums = [summary(r) for r in results]
    rows = [
        [r.policy, *(_cell(k, s[k], sums[0][k]) for k in METRICS)]
        for r, s in zip(results, sums, strict=True)
    ]
    out = [
        f"Times in seconds; (x) = ratio to {results[0].policy}.",
        _table(["policy", *METRICS.values()], rows, markdown),
        "",
        f"By bin ({bins.describe()}):",
        "",
    ]
    split = [by_bin(r, bins) for r in results]
    header = ["bin", "policy", "jobs", *(METRICS[k] for k in BIN_METRICS[1:])]
    bin_rows = []
    for name in bins.names():
        base = split[0][name]
        for r, b in zip(results, split, strict=True):
            m = b[name]
            bin_rows.append([name, r.policy, *(_cell(k, m[k], base[k]) for k in BIN_METRICS)])
    out.append(_table(header, bin_rows, markdown))
    return "\n".join(out)


def json_summary(results: Sequence[SimResult]) -> dict[str, object]:
    """The ``--json`` document: metrics per policy, NaN (no jobs) as null."""
    doc: dict[str, object] = {"policies": {r.policy: summary(r) for r in results}}
    return {k: jsonable(v) for k, v in doc.items()}


def jsonable(doc: object) -> object:
    """``doc`` with NaN replaced by None: strict JSON has no NaN."""
    if isinstance(doc, dict):
        return {k: jsonable(v) for k, v in doc.items()}
    if isinstance(doc, list | tuple):
        return [jsonable(v) for v in doc]
    return None if isinstance(doc, float) and doc != doc else doc


def write_outputs(
    out: Path, results: Sequence[SimResult], bins: Bins, meta: dict[str, Any]
) -> list[Path]:
    """Per-job CSV per policy, ``summary.json`` (metrics, bins, ``meta``) and ``jct_cdf.png``."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for r in results:
        path = out / f"jobs-{r.policy}.csv"
        with path.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(
                [
                    "job_id",
                    "gpus",
                    "arrival",
                    "duration",
                    "first_start",
                    "finish",
                    "jct",
                    "queueing",
                    "preemptions",
                    "main_reason",
                ]
            )
            for j in r.jobs:
                w.writerow(
                    [
                        j.job_id,
                        j.gpus,
                        j.arrival,
                        j.duration,
                        j.first_start,
                        j.finish,
                        j.jct,
                        j.queueing,
                        j.preemptions,
                        main_reason(j),
                    ]
                )
        written.append(path)
        if any(j.reasons or j.history for j in r.jobs):
            path = out / f"reasons-{r.policy}.jsonl"
            with path.open("w") as f:
                for j in r.jobs:
                    f.write(json.dumps(reasons_doc(j), allow_nan=False) + "\n")
            written.append(path)
    doc = {
        "policies": {r.policy: summary(r) for r in results},
        "bins": {"gpus": bins.gpus, "duration": bins.duration}
        | {r.policy: by_bin(r, bins) for r in results},
        "skipped": {r.policy: len(r.skipped) for r in results},
        **meta,
    }
    path = out / "summary.json"
    path.write_text(json.dumps(jsonable(doc), indent=2, allow_nan=False) + "\n")
    written.append(path)
    cdf = _plot_cdf(out / "jct_cdf.png", results)
    return [*written, cdf] if cdf else written


def reasons_doc(job: JobResult) -> dict[str, object]:
    """One job's pending reasons and history, as ``reasons-POLICY.jsonl`` has them."""
    return {
        "job_id": job.job_id,
        "main_reason": main_reason(job),
        "reasons": [
            {"time": t, "queue": q, "reason": reason, "text": text}
            for t, q, reason, text in job.reasons
        ],
        "history": [{"time": t, "text": text} for t, text in job.history],
    }


def main_reason(job: JobResult) -> str | None:
    """The reason the job waited under longest (None: it never waited after a pass). A wait
    under a reason lasts until the next reason or the job's next start."""
    starts = [t for t, text in job.history if text.startswith(("started", "restarted"))]
    waited: dict[str, float] = {}
    for i, (t, _, reason, _) in enumerate(job.reasons):
        end = job.reasons[i + 1][0] if i + 1 < len(job.reasons) else math.inf
        end = min([end, *(s for s in starts if s > t)])
        if math.isfinite(end):
            waited[reason] = waited.get(reason, 0.0) + end - t
    return max(waited, key=lambda k: waited[k]) if waited else None


def _plot_cdf(path: Path, results: Sequence[SimResult]) -> Path | None:
    plt = pyplot("JCT CDF plot")
    if plt is None:
        return None

    fig, ax = plt.subplots(figsize=(6, 4))
    for r in results:
        jct = np.sort([j.jct for j in r.jobs])
        if len(jct):
            ax.step(jct, np.arange(1, len(jct) + 1) / len(jct), where="post", label=r.policy)
    ax.set_xscale("log")
    ax.set_xlabel("JCT (s)")
    ax.set_ylabel("fraction of jobs")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
