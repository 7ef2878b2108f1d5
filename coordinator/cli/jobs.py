"""The ``tiresias`` commands that talk to a running coordinator: submit, status, queue,
nodes, cancel, logs. Each takes the connection options (``--coordinator``, ``--curve-keys``,
``--timeout``) and ``--json``."""

from __future__ import annotations

import functools
import json
import os
import sys
import time
import urllib.parse
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import click

from coordinator.cli.tables import NODE_COLUMNS, first_screen_text, format_job, jobs_text, table
from coordinator.core.model import JobState
from coordinator.gang import GangRequest
from coordinator.protocol import REQUESTS
from coordinator.service import curve
from coordinator.service.client import (
    ADDRESS_ENV,
    DEFAULT_ADDRESS,
    Client,
    RequestError,
    client_keys,
)
from tiresias_cli.kit import (
    PASSTHROUGH_SETTINGS,
    Command,
    argument,
    emit,
    json_option,
    option,
)
from tiresias_cli.kit import passthrough as passthrough_args
from tiresias_cli.values import (
    POSITIVE_COUNT,
    POSITIVE_SECONDS,
    PS_COUNT,
    WORKERS,
    Checked,
    Workers,
)

#: ``submit``'s and ``tiresias-run``'s script argument.
SCRIPT_HELP = (
    "the training script, a Python file; it must exist here when the path is relative or "
    "the nodes are this machine"
)
#: Times a submit is sent again when no reply comes (its key makes that safe).
SUBMIT_RETRIES = 2


def shape_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--workers N|MIN:MAX``, ``--ps N`` and ``--horovod``: a job's shape, as ``tiresias
    submit`` and ``tiresias-run`` take it."""
    options = (
        option(
            "--workers",
            type=WORKERS,
            default=Workers(1),
            help="workers, one GPU each (W_J); MIN:MAX for an elastic gang, run on as many as "
            "the scheduler gives it",
        ),
        option("--ps", type=PS_COUNT, default=0, help="parameter servers (a fixed count)"),
        option("--horovod", is_flag=True, help="run as Horovod ranks"),
    )
    for decorate in reversed(options):
        command = decorate(command)
    return command


def on_this_machine(address: str) -> bool:
    """Whether a coordinator at ``address`` is reachable only from this machine, so its nodes
    (and the paths they see) are this machine's."""
    url = urllib.parse.urlsplit(address)
    if url.scheme in ("ipc", "inproc"):
        return True
    host = url.hostname or ""
    return host == "localhost" or host.startswith("127.") or host == "::1"


def is_python(path: Path) -> bool:
    """Whether ``path`` is a Python script: jobs run it with ``python``."""
    if path.suffix in (".py", ".pyw"):
        return True
    try:
        with path.open("rb") as f:
            first = f.readline(200)
    except OSError:
        return False
    return first.startswith(b"#!") and b"python" in first


def script_argv(script: str, coordinator: str | None) -> str:
    """The job's script as the nodes of ``coordinator`` (None: an embedded one, here) should
    see it: an absolute path when it exists here. Raises ValueError for a script that cannot
    exist on the nodes either: a relative path (jobs start in this directory) or any path
    when the nodes are this machine."""
    nodes_here = coordinator is None or on_this_machine(coordinator)
    path = Path(script)
    if path.is_file():
        if not is_python(path):
            raise ValueError(f"{script} is not a Python file (a .py file, or a python #! line)")
        return str(path.resolve())
    if path.exists():
        raise ValueError(f"{script} is not a file")
    if path.is_absolute() and not nodes_here:
        return script  # it may exist on the nodes only
    hint = "" if path.is_absolute() else f" (in {os.getcwd()})"
    raise ValueError(f"no such script: {script}{hint}")


def env_pair(text: str) -> tuple[str, str]:
    """``--env NAME=VALUE``."""
    name, eq, value = text.partition("=")
    if not eq or not name or "\0" in text:
        raise ValueError(f"{text!r}: expected NAME=VALUE")
    return name, value


def since_time(text: str) -> float:
    """``--since``: a duration back from now (90s, 30m, 12h, 7d) or an ISO date/time."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    try:
        if text[-1:] in units:
            return time.time() - float(text[:-1]) * units[text[-1]]
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        pass
    raise ValueError(
        f"{text!r}: expected a duration (90s, 30m, 12h, 7d) or a date (2026-12-01 08:00)"
    )


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


def refusal(error: RequestError) -> str:
    """The coordinator's answer without the name of the request it refused (``status:
    unknown job id``): the command line names the command the user typed instead."""
    kind, sep, rest = str(error).partition(": ")
    return rest if sep and kind in REQUESTS else str(error)


def client_command(
    name: str, help: str, **settings: Any
) -> Callable[[Callable[..., int]], click.Command]:
    """A command talking to the coordinator: the connection options and ``--json`` added,
    the client opened, and its failures turned into one line and an exit code (1: the
    coordinator refused; 2: a bad address, keys or argument)."""

    def decorate(f: Callable[..., int]) -> click.Command:
        @functools.wraps(f)
        def run(coordinator: str | None, curve_keys: str | None, timeout: float, **kw: Any) -> int:
            try:
                with Client(coordinator, client_keys(curve_keys, coordinator), timeout) as c:
                    return f(c, **kw)
            except BrokenPipeError:
                raise
            except RequestError as e:
                print(f"tiresias {name}: {refusal(e)}", file=sys.stderr)
                return 1
            except (OSError, ValueError) as e:
                print(f"tiresias {name}: {e}", file=sys.stderr)
                return 2
            except KeyboardInterrupt:
                return 130

        command: Any = run  # each decorator wraps it; the last makes the click.Command
        for decorator in reversed(
            [
                click.command(name, cls=Command, help=help, **settings),
                option(
                    "--coordinator",
                    default=None,
                    metavar="ADDRESS",
                    envvar=ADDRESS_ENV,
                    show_envvar=True,
                    show_default=DEFAULT_ADDRESS,
                    help="coordinator address",
                ),
                option(
                    "--curve-keys",
                    default=None,
                    metavar="DIR",
                    envvar=curve.KEYS_ENV,
                    show_envvar=True,
                    help="CURVE key directory",
                ),
                json_option(),
                option(
                    "--timeout",
                    type=POSITIVE_SECONDS,
                    default=10.0,
                    help="seconds to wait for replies",
                ),
            ]
        ):
            command = decorator(command)
        assert isinstance(command, click.Command)
        return command

    return decorate


@client_command("submit", "queue a job", context_settings=PASSTHROUGH_SETTINGS)
@shape_options
@option("--name", default=None, metavar="NAME", show_default="the script's", help="job name")
@option(
    "--duration",
    type=POSITIVE_SECONDS,
    default=None,
    help="true run time in seconds, for the oracle baselines (srtf, srsf) only",
)
@option(
    "--env",
    type=Checked(env_pair, "K=V"),
    multiple=True,
    help="extra environment for the job's processes; repeatable",
)
@argument("script", help=SCRIPT_HELP)
@argument("args", nargs=-1, type=click.UNPROCESSED, help="the script's own arguments")
def submit(
    client: Client,
    as_json: bool,
    workers: Workers,
    ps: int,
    horovod: bool,
    name: str | None,
    duration: float | None,
    env: tuple[tuple[str, str], ...],
    script: str,
    args: tuple[str, ...],
) -> int:
    shape: dict[str, Any] = {
        "argv": [
            script_argv(script, client.address),
            *passthrough_args(click.get_current_context(), args),
        ],
        "workers": workers.most,
        "min_workers": workers.least,
        "ps": ps,
        "horovod": horovod,
    }
    GangRequest.from_submit(shape)  # a bad shape is the user's mistake: exit 2, nothing sent
    reply = client.request(
        "submit",
        **shape,
        cwd=os.getcwd(),
        name=name or Path(script).name,
        duration=duration,
        env=dict(env),
        key=uuid.uuid4().hex,  # a retry after a lost reply is the same job
        retries=SUBMIT_RETRIES,
    )
    emit(as_json, {"job_id": reply["job_id"]}, lambda d: d["job_id"])
    return 0


USER_HELP = "only this user's jobs"


@client_command(
    "status",
    "active jobs (or history), or one job in detail: why it waits, its place in line and its "
    "history in words",
)
@argument("job", required=False, help="a job id (default: every active job, one line each)")
@option("--all", "everything", is_flag=True, help="also every finished job")
@option(
    "--since",
    type=Checked(since_time, "WHEN"),
    default=None,
    help="also jobs that finished since WHEN: a duration back (30m, 12h, 7d) or a date",
)
@option("--user", default=None, metavar="USER", show_default="everyone's", help=USER_HELP)
def status(
    client: Client,
    as_json: bool,
    job: str | None,
    everything: bool,
    since: float | None,
    user: str | None,
) -> int:
    if job:
        emit(as_json, client.request("status", job_id=job)["job"], format_job)
    else:
        jobs = list_jobs(client, "status", all=everything, since=since, user=user)
        emit(as_json, jobs, jobs_text)
    return 0


@client_command(
    "queue",
    "how many jobs run and wait in each queue, the head of each line, and why each of those "
    "waits; --all for every active job",
)
@option("--user", default=None, metavar="USER", show_default="everyone's", help=USER_HELP)
@option(
    "--all", "everything", is_flag=True, help="every active job, not only the head of each line"
)
@option("--limit", type=POSITIVE_COUNT, default=10, help="jobs shown of each line")
def queue(client: Client, as_json: bool, user: str | None, everything: bool, limit: int) -> int:
    if not everything:  # the first screen costs the same however many jobs wait
        reply = client.request("queue", heads=limit, user=user)
        emit(as_json, {k: reply[k] for k in ("queues", "jobs")}, first_screen_text)
        return 0
    jobs = list_jobs(client, "queue", user=user)
    jobs.sort(key=lambda j: (j["state"] != "running", j["queue"], j["priority"] or 0))
    emit(as_json, jobs, jobs_text)
    return 0


@client_command(
    "nodes",
    "every node (up, drained: taking no new jobs, or lost) and its GPUs, one line a node, as "
    "sinfo -N lists them: a full listing, whose cost follows the nodes (a few microseconds "
    "each in the coordinator), never the jobs",
)
def nodes(client: Client, as_json: bool) -> int:
    emit(as_json, client.request("nodes")["nodes"], lambda ns: table(ns, NODE_COLUMNS))
    return 0


@client_command("cancel", "cancel a job")
@argument("job", help="a job id, e.g. j1")
def cancel(client: Client, as_json: bool, job: str) -> int:
    reply = client.request("cancel", job_id=job)
    emit(
        as_json,
        {"job_id": job, "state": reply["state"]},
        lambda d: (
            f"{d['job_id']}: "
            + ("cancelled" if d["state"] == "cancelled" else "cancelling: stopping its processes")
        ),
    )
    return 0


@client_command("logs", "a job's logs from every node")
@argument("job", help="a job id, e.g. j1")
@option("-f", "--follow", is_flag=True, help="keep printing until it ends")
def logs(client: Client, as_json: bool, job: str, follow: bool) -> int:
    view = client.request("status", job_id=job)["job"]
    if view["first_start"] is None:
        client.request("logs", job_id=job)  # refused for a non-owner, even with none yet
    if view["first_start"] is None and not as_json:
        never = JobState(view["state"]).finished
        print(
            f"tiresias: {job} has no logs"
            + (f": it never started ({view['state']})" if never else " yet: it has not started"),
            file=sys.stderr,
        )
        if never or not follow:
            return 0

    def finished() -> bool:
        return JobState(client.request("status", job_id=job)["job"]["state"]).finished

    if as_json:
        files: dict[str, str] = {}
        missing = follow_logs(
            client, job, lambda n, d: files.__setitem__(n, files.get(n, "") + d), until=lambda: True
        )
        print(json.dumps(files, indent=2, sort_keys=True))
    elif follow:
        missing = follow_logs(client, job, log_writer(True), until=finished)
    else:
        missing = follow_logs(client, job, _sections(), until=lambda: True)
    for node in missing:
        print(f"tiresias: node {node} did not answer; its logs are missing", file=sys.stderr)
    return 0


COMMANDS = (submit, status, queue, nodes, cancel, logs)
