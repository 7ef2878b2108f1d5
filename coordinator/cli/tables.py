"""What ``tiresias`` prints for people: job and node tables, one job in detail.

Queues are shown 1-based (Q1 is the highest priority); ``--json`` output carries the 0-based
index instead."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from coordinator.core.explain import queue_name
from coordinator.service.profiler import SOURCE_WORDS
from coordinator.service.views import checkpoint_text, exit_text, gpus_text, lost_text
from coordinator.service.why import history_lines, pending_line, position_text, why_waiting
from tiresias_launch.report import resume_line


def _dur(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 60:
        return f"{seconds:.1f}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def _placement(p: dict[str, list[int]] | None) -> str:
    if not p:
        return "-"
    return " ".join(f"{n}:{','.join(map(str, g))}" for n, g in sorted(p.items()))


def _workers(j: dict[str, Any]) -> str:
    low = j.get("min_workers")
    return str(j["workers"]) if low is None else f"{low} to {j['workers']}"


def _num(x: float | None, fmt: str = "{:.2f}") -> str:
    return "-" if x is None else fmt.format(x)


def table(
    rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, Callable[[Any], Any]]]
) -> str:
    """Left-aligned plain-text table; ``columns`` are (header, row → cell) pairs."""
    cells = [[h for h, _ in columns]] + [[str(f(r)) for _, f in columns] for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(columns))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )


JOB_COLUMNS: list[tuple[str, Callable[[Any], Any]]] = [
    ("JOB", lambda j: j["job_id"]),
    ("STATE", lambda j: j["state"]),
    ("GPUS", gpus_text),
    ("QUEUE", lambda j: queue_name(j["queue"])),
    ("PRIORITY", lambda j: _num(j["priority"], "{:.4g}")),
    # place in line of a waiting job: "Q2 #3" (the reasons follow the table)
    ("LINE", lambda j: position_text(j.get("pending"))),
    ("ATTAINED", lambda j: f"{j['attained']:.1f} GPU·s"),
    # seconds not running since submitted, in every state (the current wait: status JOB)
    ("WAITED", lambda j: _dur(j.get("waited", j["waiting"]))),
    ("SKEW", lambda j: _num(j["skew"])),
    ("PLACEMENT", lambda j: _placement(j["placement"])),
    ("RESTARTS", lambda j: j["restarts"]),
    # can a preemption checkpoint it: no = it restarts from step 0 (status JOB says why)
    ("CKPT", lambda j: {True: "yes", False: "no"}.get(j.get("checkpointable"), "-")),
    ("USER", lambda j: j.get("owner") or "-"),
    ("NAME", lambda j: j["name"]),
]


def format_job(j: dict[str, Any]) -> str:
    """Everything about one job, one field a line."""
    progress = j.get("progress") or {}
    lines = [
        f"job        {j['job_id']}  ({j['name']}; checkpoints and logs under {j.get('key')})",
        f"owner      {j.get('owner') or '-'}",
        f"command    {' '.join(j['argv'])}",
        f"state      {j['state']}"
        + (f"  exit code {j['exit_code']}" if j.get("exit_code") is not None else ""),
        f"shape      {_workers(j)} workers, {j['ps']} ps, {gpus_text(j)} GPUs"
        + (" (held at its size until its runtime confirms it can resize)" if j.get("held") else ""),
        f"queue      {queue_name(j['queue'])}  priority {_num(j['priority'], '{:.4g}')}",
        f"attained   {j['attained']:.1f} GPU·s  ({j['gpus']} GPUs × its runs, as the scheduler "
        f"counts: run {_dur(j['executed'])}, waited {_dur(j.get('waited', j['waiting']))}"
        + (f", waiting {_dur(j['waiting'])}" if j["waiting"] else "")
        + ")",
        f"skew S_J   {_num(j['skew'], '{:.3f}')}"
        + (f" {SOURCE_WORDS[j['skew_source']]}" if j.get("skew_source") in SOURCE_WORDS else "")
        + (f"  (PACKLIMIT {j['packlimit']:.3f})" if j.get("packlimit") is not None else ""),
        f"placement  {_placement(j['placement'])}",
        f"restarts   {j['restarts']}  preemptions {j['preemptions']}  promotions {j['promotions']}",
    ]
    if progress.get("step") is not None:
        lines.append(
            f"progress   step {progress['step']} (restart {progress.get('restart')})"
            + (f", {progress['iter_time'] * 1e3:.3g} ms/step" if progress.get("iter_time") else "")
            + (
                f", {progress['gpu_time']:.1f} GPU·s of the reporting process in this run"
                if progress.get("gpu_time")
                else ""
            )
        )
    lines.append(f"checkpoint {checkpoint_text(j)}")
    warmup = progress.get("warmup") or {}
    if warmup.get("step") and "first_step" in warmup:
        lines.append(f"resumed    {resume_line(warmup).removeprefix('resumed ')}")
    if lost_text(j.get("lost")):
        lines.append(f"lost       {lost_text(j.get('lost'))}")
    if j.get("last_exit"):
        lines.append(f"last exit  {exit_text(j['last_exit'])}")
    if j.get("pending"):
        lines.append(f"waiting    {pending_line(j).split('  ', 1)[1]}")
    if j.get("log_tail"):
        lines.append("log tail of the failing process:")
        lines += ["  " + line for line in j["log_tail"].rstrip().splitlines()[-10:]]
    if j.get("history"):
        lines += ["history:", *history_lines(j["history"])]
    return "\n".join(lines)


def jobs_text(jobs: list[dict[str, Any]]) -> str:
    """A table of jobs, then why each waiting one waits."""
    return "\n".join([table(jobs, JOB_COLUMNS), *why_waiting(jobs)])


def first_screen_text(screen: dict[str, Any]) -> str:
    """``tiresias queue``: a line per queue (jobs running and waiting, and their GPUs), the
    head of each line with why each waits, and how to see the rest."""
    queues, jobs = screen["queues"], screen["jobs"]
    if not queues:
        return "no active jobs"
    counts = table(
        queues,
        [
            ("QUEUE", lambda q: queue_name(q["queue"])),
            ("RUNNING", lambda q: q["running"]),
            ("GPUS", lambda q: q["running_gpus"]),
            ("WAITING", lambda q: q["waiting"]),
            ("GPUS WANTED", lambda q: q["waiting_gpus"]),
        ],
    )
    hidden = sum(q["running"] + q["waiting"] for q in queues) - len(jobs)
    more = (
        [f"\n{hidden} more active jobs: tiresias queue --all, or --limit N for N of each line"]
        if hidden > 0
        else []
    )
    return "\n".join([counts, "", jobs_text(jobs), *more])


NODE_COLUMNS: list[tuple[str, Callable[[Any], Any]]] = [
    ("NODE", lambda n: n["name"]),
    ("HOST", lambda n: n["host"] or "-"),
    ("STATE", lambda n: "lost" if not n["connected"] else "drained" if n["drained"] else "up"),
    ("GPUS", lambda n: f"{n['used']}/{n['total']}"),
    ("JOBS", lambda n: " ".join(sorted({g["job"] for g in n["gpus"] if g["job"]})) or "-"),
    ("LAST SEEN", lambda n: _dur(n["silent_for"]) + " ago" if n["silent_for"] is not None else "-"),
]
