"""``tiresias``: talk to a running coordinator (submit, status, queue, nodes, cancel, logs) and
make CURVE keys. Tables for people by default, ``--json`` for scripts.

Queues are shown 1-based (Q1 is the highest priority); in ``--json`` output the ``queue`` field
is the 0-based index, so ``"queue": 0`` is Q1."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import urllib.parse
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from coordinator.argtypes import count, positive_count, positive_seconds
from coordinator.core.model import JobState
from coordinator.gang import GangRequest
from coordinator.service import keys as curve
from coordinator.service.client import Client, RequestError, client_keys, default_address
from coordinator.service.views import checkpoint_text, exit_text, lost_text
from coordinator.service.why import history_lines, pending_line, position_text, why_waiting
from tiresias_launch.report import resume_line

#: ``submit``'s and ``tiresias-run``'s script argument.
SCRIPT_HELP = (
    "the training script, a Python file; it must exist here when the path is relative or "
    "the nodes are this machine"
)


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


def _queue(index: int) -> str:
    """Queue names as the paper writes them: Q1 (highest priority) … QK."""
    return f"Q{index + 1}"


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
    ("QUEUE", lambda j: _queue(j["queue"])),
    ("PRIORITY", lambda j: _num(j["priority"], "{:.4g}")),
    # place in line of a waiting job: "Q2 #3" (the reasons follow the table)
    ("LINE", lambda j: position_text(j.get("pending"))),
    ("ATTAINED", lambda j: f"{j['attained']:.1f} GPU·s"),
    ("WAITING", lambda j: _dur(j["waiting"])),
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
        f"shape      {j['workers']} workers, {j['ps']} ps, {j['gpus']} GPUs",
        f"queue      {_queue(j['queue'])}  priority {_num(j['priority'], '{:.4g}')}",
        f"attained   {j['attained']:.1f} GPU·s  (run {_dur(j['executed'])}, "
        f"waiting {_dur(j['waiting'])})",
        f"skew S_J   {_num(j['skew'], '{:.3f}')}"
        + (f"  (PACKLIMIT {j['packlimit']:.3f})" if j.get("packlimit") is not None else ""),
        f"placement  {_placement(j['placement'])}",
        f"restarts   {j['restarts']}  preemptions {j['preemptions']}  promotions {j['promotions']}",
    ]
    if progress.get("step") is not None:
        lines.append(
            f"progress   step {progress['step']} (restart {progress.get('restart')})"
            + (f", {progress['iter_time'] * 1e3:.3g} ms/step" if progress.get("iter_time") else "")
            + (f", {progress['gpu_time']:.1f} GPU·s" if progress.get("gpu_time") else "")
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


def _print(args: argparse.Namespace, data: Any, human: Callable[[Any], str]) -> None:
    print(json.dumps(data, indent=2, sort_keys=True) if args.json else human(data))


def on_this_machine(address: str) -> bool:
    """Whether a coordinator at ``address`` is reachable only from this machine, so its nodes
    (and the paths they see) are this machine's."""
    url = urllib.parse.urlsplit(address)
    if url.scheme in ("ipc", "inproc"):
        return True
    host = url.hostname or ""
    return host == "localhost" or host.startswith("127.") or host == "::1"


def script_argv(script: str, coordinator: str | None) -> str:
    """The job's script as the nodes of ``coordinator`` (None: an embedded one, here) should
    see it: an absolute path when it exists here. Raises ValueError for a script that cannot
    exist on the nodes either: a relative path (jobs start in this directory) or any path
    when the nodes are this machine."""
    nodes_here = coordinator is None or on_this_machine(coordinator)
    path = Path(script)
    if path.is_file():
        return str(path.resolve())
    if path.exists():
        raise ValueError(f"{script} is not a file")
    if path.is_absolute() and not nodes_here:
        return script  # it may exist on the nodes only
    hint = "" if path.is_absolute() else f" (in {os.getcwd()})"
    raise ValueError(f"no such script: {script}{hint}")


#: Times a submit is sent again when no reply comes (its key makes that safe).
SUBMIT_RETRIES = 2


def env_pair(text: str) -> tuple[str, str]:
    """``--env NAME=VALUE``."""
    name, eq, value = text.partition("=")
    if not eq or not name or "\0" in text:
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=VALUE")
    return name, value


def cmd_submit(client: Client, args: argparse.Namespace) -> int:
    shape = {
        "argv": [script_argv(args.script, client.address), *args.args],
        "workers": args.workers if args.workers is not None else (args.gpus or 1),
        "ps": args.ps,
        "horovod": args.horovod,
        "gpus": args.gpus,
    }
    GangRequest.from_submit(shape)  # a bad shape is the user's mistake: exit 2, nothing sent
    reply = client.request(
        "submit",
        **shape,
        cwd=os.getcwd(),
        name=args.name or Path(args.script).name,
        duration=args.duration,
        env=dict(args.env),
        key=uuid.uuid4().hex,  # a retry after a lost reply is the same job
        retries=SUBMIT_RETRIES,
    )
    _print(args, {"job_id": reply["job_id"]}, lambda d: d["job_id"])
    return 0


def list_jobs(client: Client, kind: str, **filters: Any) -> list[dict[str, Any]]:
    """Every job of a ``status``/``queue`` listing, fetched page by page."""
    jobs: list[dict[str, Any]] = []
    after = None
    while True:
        reply = client.request(kind, after=after, **filters)
        jobs += reply["jobs"]
        after = reply.get("next")
        if after is None:
            return jobs


def since_time(text: str) -> float:
    """``--since``: a duration back from now (90s, 30m, 12h, 7d) or an ISO date/time."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    try:
        if text[-1:] in units:
            return time.time() - float(text[:-1]) * units[text[-1]]
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(
        f"{text!r}: expected a duration (90s, 30m, 12h, 7d) or a date (2026-12-01 08:00)"
    )


def cmd_status(client: Client, args: argparse.Namespace) -> int:
    if args.job:
        job = client.request("status", job_id=args.job)["job"]
        _print(args, job, format_job)
    else:
        jobs = list_jobs(client, "status", all=args.all, since=args.since, user=args.user)
        _print(args, jobs, jobs_text)
    return 0


def jobs_text(jobs: list[dict[str, Any]]) -> str:
    """A table of jobs, then why each waiting one waits."""
    return "\n".join([table(jobs, JOB_COLUMNS), *why_waiting(jobs)])


def cmd_queue(client: Client, args: argparse.Namespace) -> int:
    jobs = list_jobs(client, "queue", user=args.user)
    jobs.sort(key=lambda j: (j["state"] != "running", j["queue"], j["priority"] or 0))
    _print(args, jobs, jobs_text)
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
        lambda d: (
            f"{d['job_id']}: "
            + ("cancelled" if d["state"] == "cancelled" else "cancelling: stopping its processes")
        ),
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
    view = client.request("status", job_id=job)["job"]
    if view["first_start"] is None and not args.json:
        never = JobState(view["state"]).finished
        print(
            f"tiresias: {job} has no logs"
            + (f": it never started ({view['state']})" if never else " yet: it has not started"),
            file=sys.stderr,
        )
        if never or not args.follow:
            return 0

    def finished() -> bool:
        state = client.request("status", job_id=job)["job"]["state"]
        return JobState(state).finished

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
    if args.keys_command == "generate":
        directory = curve.generate(Path(args.dir))
        print(
            f"wrote the server keypair to {directory}: start the coordinator with "
            f"--curve-keys {directory}; give users and agents {directory / 'server.key'} "
            f"(public), and let their keys in with `tiresias keys add-user/add-agent`"
        )
    elif args.keys_command == "init":
        public = curve.init_client(
            Path(args.dir) if args.dir else curve.user_dir(),
            Path(args.server_key) if args.server_key else None,
        )
        print(f"your public key is {public}: send it to the operator to add")
    else:
        kind = curve.USERS if args.keys_command == "add-user" else curve.AGENTS
        target = curve.add(Path(args.dir), kind, args.name, Path(args.public_key))
        print(f"{args.name} may connect with the key in {target}")
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
    common.add_argument(
        "--timeout",
        type=positive_seconds,
        default=10.0,
        help="seconds to wait for replies (default %(default)g)",
    )
    ap = argparse.ArgumentParser(prog="tiresias", description=__doc__.replace("``", ""))
    ap.formatter_class = argparse.RawDescriptionHelpFormatter
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("submit", parents=[common], help="queue a job")
    p.add_argument(
        "--workers",
        type=positive_count,
        default=None,
        help="workers, one GPU each (W_J; default: --gpus, else 1)",
    )
    p.add_argument("--gpus", type=positive_count, default=None, help="same as --workers")
    p.add_argument("--ps", type=count, default=0, help="parameter servers")
    p.add_argument("--horovod", action="store_true", help="run as Horovod ranks")
    p.add_argument("--name", default=None, help="job name (default: the script's)")
    p.add_argument(
        "--duration",
        type=positive_seconds,
        default=None,
        help="true run time in seconds, for the oracle baselines (srtf, srsf) only",
    )
    p.add_argument(
        "--env",
        action="append",
        type=env_pair,
        default=[],
        metavar="K=V",
        help="extra environment for the job's processes",
    )
    p.add_argument(
        "script",
        help=SCRIPT_HELP,
    )
    p.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")
    p.set_defaults(func=cmd_submit)
    p = sub.add_parser(
        "status", parents=[common], help="active jobs (or history), or one job in detail"
    )
    p.add_argument("job", nargs="?", help="a job id (default: every active job, one line each)")
    p.add_argument("--all", action="store_true", help="also every finished job")
    p.add_argument(
        "--since",
        type=since_time,
        default=None,
        metavar="WHEN",
        help="also jobs that finished since WHEN: a duration back (30m, 12h, 7d) or a date",
    )
    p.add_argument("--user", default=None, help="only this user's jobs (default: everyone's)")
    p.set_defaults(func=cmd_status)
    p = sub.add_parser("queue", parents=[common], help="active jobs by queue")
    p.add_argument("--user", default=None, help="only this user's jobs (default: everyone's)")
    p.set_defaults(func=cmd_queue)
    sub.add_parser("nodes", parents=[common], help="nodes and their GPUs").set_defaults(
        func=cmd_nodes
    )
    p = sub.add_parser("cancel", parents=[common], help="cancel a job")
    p.add_argument("job", help="a job id, e.g. j1")
    p.set_defaults(func=cmd_cancel)
    p = sub.add_parser("logs", parents=[common], help="a job's logs from every node")
    p.add_argument("job", help="a job id, e.g. j1")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing until it ends")
    p.set_defaults(func=cmd_logs)
    p = sub.add_parser("keys", help="CURVE keys for tcp:// (docs/security.md)")
    ksub = p.add_subparsers(dest="keys_command", required=True)
    g = ksub.add_parser("generate", help="operator: the server keypair in DIR")
    g.add_argument("dir", help="directory to create (its users/ and agents/ list who may connect)")
    g = ksub.add_parser("init", help="user or agent: your own keypair (made on first use anyway)")
    g.add_argument("dir", nargs="?", help=f"default {curve.user_dir()}")
    g.add_argument("--server-key", default=None, help="the coordinator's server.key to copy in")
    for command, who in (("add-user", "user"), ("add-agent", "node")):
        g = ksub.add_parser(command, help=f"operator: let a {who}'s public key in")
        g.add_argument("dir", help="the directory of `keys generate`")
        g.add_argument("name", help=f"the {who} name the key speaks for")
        g.add_argument("public_key", help="its client.key file")
    return ap


def quiet_broken_pipe() -> int:
    """The reader of our output went away (``| head``): stop without a traceback, as ``cat``
    does, exiting 128 + SIGPIPE."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit flush is moot
    return 128 + signal.SIGPIPE


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "keys":
        try:
            return cmd_keys(args)
        except (OSError, ValueError) as e:
            print(f"tiresias keys {args.keys_command}: {e}", file=sys.stderr)
            return 2
    try:
        keys = client_keys(args.curve_keys, args.coordinator)
        with Client(args.coordinator, keys, args.timeout) as client:
            return args.func(client, args)
    except BrokenPipeError:
        return quiet_broken_pipe()
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
