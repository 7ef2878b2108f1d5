"""``tiresias``: talk to a running coordinator (submit, status, queue, nodes, cancel, logs) and
make CURVE keys. Tables for people by default, ``--json`` for scripts."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from coordinator.service import keys as curve
from coordinator.service.client import Client, RequestError, client_keys, default_address


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


def _num(x: float | None, fmt: str = "{:.2f}") -> str:
    return "-" if x is None else fmt.format(x)


def table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, Callable]]) -> str:
    """Left-aligned plain-text table; ``columns`` are (header, row → cell) pairs."""
    cells = [[h for h, _ in columns]] + [[str(f(r)) for _, f in columns] for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(columns))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )


JOB_COLUMNS: list[tuple[str, Callable]] = [
    ("JOB", lambda j: j["job_id"]),
    ("STATE", lambda j: j["state"]),
    ("GPUS", lambda j: j["gpus"]),
    ("QUEUE", lambda j: j["queue"] + 1),
    ("PRIORITY", lambda j: _num(j["priority"], "{:.4g}")),
    ("ATTAINED", lambda j: f"{j['attained']:.1f} GPU·s"),
    ("WAITING", lambda j: _dur(j["waiting"])),
    ("SKEW", lambda j: _num(j["skew"])),
    ("PLACEMENT", lambda j: _placement(j["placement"])),
    ("RESTARTS", lambda j: j["restarts"]),
    ("NAME", lambda j: j["name"]),
]


def format_job(j: dict[str, Any]) -> str:
    """Everything about one job, one field a line."""
    progress = j.get("progress") or {}
    lines = [
        f"job        {j['job_id']}  ({j['name']})",
        f"command    {' '.join(j['argv'])}",
        f"state      {j['state']}"
        + (f"  exit code {j['exit_code']}" if j.get("exit_code") is not None else ""),
        f"shape      {j['workers']} workers, {j['ps']} ps, {j['gpus']} GPUs",
        f"queue      Q{j['queue'] + 1}  priority {_num(j['priority'], '{:.4g}')}",
        f"attained   {j['attained']:.1f} GPU·s  (run {_dur(j['executed'])}, "
        f"waiting {_dur(j['waiting'])})",
        f"skew S_J   {_num(j['skew'], '{:.3f}')}"
        + (f"  (PACKLIMIT {j['packlimit']:.3f})" if j.get("packlimit") is not None else ""),
        f"placement  {_placement(j['placement'])}",
        f"restarts   {j['restarts']}  preemptions {j['preemptions']}  promotions {j['promotions']}",
    ]
    if progress:
        lines.append(
            "progress   "
            + "  ".join(
                f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}"
                for k, v in sorted(progress.items())
                if v is not None
            )
        )
    if j.get("log_tail"):
        lines.append("log tail of the failing process:")
        lines += ["  " + line for line in j["log_tail"].rstrip().splitlines()[-10:]]
    return "\n".join(lines)


def _print(args: argparse.Namespace, data: Any, human: Callable[[Any], str]) -> None:
    print(json.dumps(data, indent=2, sort_keys=True) if args.json else human(data))


def cmd_submit(client: Client, args: argparse.Namespace) -> int:
    workers = args.workers if args.workers is not None else (args.gpus or 1)
    reply = client.request(
        "submit",
        argv=[
            str(Path(args.script).resolve()) if Path(args.script).exists() else args.script,
            *args.args,
        ],
        workers=workers,
        ps=args.ps,
        horovod=args.horovod,
        gpus=args.gpus,
        cwd=os.getcwd(),
        name=args.name or Path(args.script).name,
        duration=args.duration,
        env=dict(kv.split("=", 1) for kv in args.env),
    )
    _print(args, {"job_id": reply["job_id"]}, lambda d: d["job_id"])
    return 0


def cmd_status(client: Client, args: argparse.Namespace) -> int:
    if args.job:
        job = client.request("status", job_id=args.job)["job"]
        _print(args, job, format_job)
    else:
        jobs = client.request("status")["jobs"]
        _print(args, jobs, lambda js: table(js, JOB_COLUMNS))
    return 0


def cmd_queue(client: Client, args: argparse.Namespace) -> int:
    jobs = client.request("queue")["jobs"]
    jobs.sort(key=lambda j: (j["state"] != "running", j["queue"], j["priority"] or 0))
    _print(args, jobs, lambda js: table(js, JOB_COLUMNS))
    return 0


def cmd_nodes(client: Client, args: argparse.Namespace) -> int:
    nodes = client.request("nodes")["nodes"]
    cols: list[tuple[str, Callable]] = [
        ("NODE", lambda n: n["name"]),
        ("HOST", lambda n: n["host"] or "-"),
        ("STATE", lambda n: "up" if n["connected"] else "lost"),
        ("GPUS", lambda n: f"{n['used']}/{n['total']}"),
        ("JOBS", lambda n: " ".join(sorted({g["job"] for g in n["gpus"] if g["job"]})) or "-"),
        (
            "LAST SEEN",
            lambda n: _dur(n["silent_for"]) + " ago" if n["silent_for"] is not None else "-",
        ),
    ]
    _print(args, nodes, lambda ns: table(ns, cols))
    return 0


def cmd_cancel(client: Client, args: argparse.Namespace) -> int:
    reply = client.request("cancel", job_id=args.job)
    _print(
        args,
        {"job_id": args.job, "state": reply["state"]},
        lambda d: f"{d['job_id']}: {d['state']}",
    )
    return 0


def follow_logs(
    client: Client,
    job_id: str,
    write: Callable[[str, str], None],
    until: Callable[[], bool] | None = None,
    interval: float = 0.5,
) -> list[str]:
    """Write every log byte of ``job_id``'s processes, page by page, as it appears
    (``logs``, ``logs -f``, ``tiresias-run``). Returns when ``until()`` was true before a
    fetch that drained everything; never without ``until``. Returns nodes that did not answer.
    """
    offsets: dict[str, int] = {}
    while True:
        done = until is not None and until()
        while True:
            reply = client.request("logs", job_id=job_id, offsets=offsets)
            fresh = False
            for name in sorted(reply["files"]):
                f = reply["files"][name]
                if f["data"]:
                    write(name, f["data"])
                    fresh = True
                offsets[name] = f["offset"]
            if not fresh:
                break
        if done:
            return list(reply["missing"])
        time.sleep(interval)


def log_writer(multi: bool) -> Callable[[str, str], None]:
    def write(name: str, data: str) -> None:
        if multi:
            data = "".join(f"[{name}] {line}" for line in data.splitlines(keepends=True))
        sys.stdout.write(data)
        sys.stdout.flush()

    return write


def _sections() -> Callable[[str, str], None]:
    """Writer printing a ``==> node/file <==`` header whenever the file changes."""
    current: list[str] = []

    def write(name: str, data: str) -> None:
        if current != [name]:
            current[:] = [name]
            print(f"==> {name} <==", flush=True)
        sys.stdout.write(data)
        sys.stdout.flush()

    return write


def cmd_logs(client: Client, args: argparse.Namespace) -> int:
    job = args.job

    def finished() -> bool:
        state = client.request("status", job_id=job)["job"]["state"]
        return state in ("completed", "failed", "cancelled")

    if args.json:
        files: dict[str, str] = {}
        missing = follow_logs(
            client, job, lambda n, d: files.__setitem__(n, files.get(n, "") + d), until=lambda: True
        )
        print(json.dumps(files, indent=2, sort_keys=True))
    elif args.follow:
        missing = follow_logs(client, job, log_writer(True), until=finished)
    else:
        missing = follow_logs(client, job, _sections(), until=lambda: True)
    for node in missing:
        print(f"tiresias: node {node} did not answer; its logs are missing", file=sys.stderr)
    return 0


def cmd_keys(args: argparse.Namespace) -> int:
    directory = curve.generate(Path(args.dir))
    print(
        f"wrote CURVE keys to {directory}: start the coordinator with --curve-keys "
        f"{directory}, and give clients and agents --curve-keys (or ${curve.KEYS_ENV}); "
        f"authorize more client keys by copying their .key files into "
        f"{curve.authorized_dir(directory)}"
    )
    return 0


def parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--coordinator",
        default=None,
        help=f"coordinator address (default $TIRESIAS_COORDINATOR or {default_address()})",
    )
    common.add_argument(
        "--curve-keys", default=None, help=f"CURVE key directory (default ${curve.KEYS_ENV})"
    )
    common.add_argument("--json", action="store_true", help="machine-readable output")
    common.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for replies")
    ap = argparse.ArgumentParser(prog="tiresias", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("submit", parents=[common], help="queue a job")
    p.add_argument("--workers", type=int, default=None, help="workers (one GPU each; W_J)")
    p.add_argument("--gpus", type=int, default=None, help="same as --workers")
    p.add_argument("--ps", type=int, default=0, help="parameter servers")
    p.add_argument("--horovod", action="store_true", help="run as Horovod ranks")
    p.add_argument("--name", default=None, help="job name (default: the script's)")
    p.add_argument(
        "--duration",
        type=float,
        default=None,
        help="true run time in seconds, for the oracle baselines (srtf, srsf) only",
    )
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="K=V",
        help="extra environment for the job's processes",
    )
    p.add_argument("script")
    p.add_argument("args", nargs=argparse.REMAINDER)
    p.set_defaults(func=cmd_submit)
    p = sub.add_parser("status", parents=[common], help="all jobs, or one job in detail")
    p.add_argument("job", nargs="?")
    p.set_defaults(func=cmd_status)
    sub.add_parser("queue", parents=[common], help="active jobs by queue").set_defaults(
        func=cmd_queue
    )
    sub.add_parser("nodes", parents=[common], help="nodes and their GPUs").set_defaults(
        func=cmd_nodes
    )
    p = sub.add_parser("cancel", parents=[common], help="cancel a job")
    p.add_argument("job")
    p.set_defaults(func=cmd_cancel)
    p = sub.add_parser("logs", parents=[common], help="a job's logs from every node")
    p.add_argument("job")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing until it ends")
    p.set_defaults(func=cmd_logs)
    p = sub.add_parser("keys", help="CURVE keys")
    ksub = p.add_subparsers(dest="keys_command", required=True)
    g = ksub.add_parser("generate", help="write server/client keypairs into DIR")
    g.add_argument("dir")
    g.set_defaults(func=None)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "keys":
        return cmd_keys(args)
    if args.command == "submit" and args.gpus is not None and args.workers not in (None, args.gpus):
        print(
            "tiresias submit: --gpus and --workers must agree (one GPU per worker)", file=sys.stderr
        )
        return 2
    try:
        with Client(args.coordinator, client_keys(args.curve_keys), args.timeout) as client:
            return args.func(client, args)
    except RequestError as e:
        print(f"tiresias: {e}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as e:
        print(f"tiresias {args.command}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
