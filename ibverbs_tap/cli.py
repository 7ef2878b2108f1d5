"""``ibverbs-tap``: run a command under the tap, watch a traced process, compute S_J."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click

from ibverbs_tap import library_path
from ibverbs_tap.profile import DIR_ENV, ProcessGoneError, ProcessProfile, TapError
from ibverbs_tap.reading import environ_of, read_directory, read_group, read_process, read_tree
from ibverbs_tap.report import describe, profile_report, size
from ibverbs_tap.roles import (
    Cluster,
    RoleLog,
    dump_ps,
    gang_addresses,
    gang_ps,
    job_pids,
    labelled,
    ps_tasks,
    roles,
    socket_owners,
)
from ibverbs_tap.skew import bytes_per_ps, skew
from tiresias_cli.kit import (
    PASSTHROUGH_SETTINGS,
    Group,
    argument,
    json_option,
    option,
    passthrough,
    run,
    usage_error,
    version_option,
    words,
)
from tiresias_cli.values import Checked

DUMP_VERSION = 1
#: How often ``run`` looks for new traced processes to note their roles (a process that
#: lives shorter may stay unlabelled in the dump).
ROLE_POLL_S = 0.1
DESCRIPTION = "Per-peer message-size histograms of TCP and RDMA verbs traffic, and S_J."


def _read(pid: int, gang: str | None) -> tuple[list[ProcessProfile], list[int]]:
    """Snapshots of ``pid`` and, with ``--tree``/``--job`` (``gang``), of the traced
    processes of its gang, and the gang's processes that are not traced."""
    if gang == "job":
        try:
            return read_group(pid, job_pids(pid)[1:])
        except ValueError as e:
            raise TapError(f"{e} (use --tree)") from None
    return read_tree(pid) if gang == "tree" else ([read_process(pid)], [])


def cmd_profile(
    pid: int, interval: float, duration: float | None, gang: str | None, as_json: bool
) -> int:
    if not (math.isfinite(interval) and interval >= 0):
        usage_error("--interval must be 0 (no rates) or positive")
    if duration is not None and not (math.isfinite(duration) and duration > 0):
        usage_error("--total must be positive")
    if interval == 0 and duration is not None:
        usage_error("--total needs a positive --interval")
    duration = duration if duration is not None else interval
    windows = max(1, round(duration / interval)) if interval else 1
    before = {p.pid: p for p in _read(pid, gang)[0]}
    started = time.monotonic()
    for _ in range(windows):
        time.sleep(interval)
        try:
            profiles, untraced = _read(pid, gang)
        except ProcessGoneError as e:
            raise TapError(f"{e} (during the measurement window)") from None
        window = (time.monotonic() - started) if interval else None
        addresses = (
            {r: a for p in profiles for r, a in gang_addresses(environ_of(p.pid)).items()}
            if gang
            else None
        )
        unnamed = (q.endpoint for p in profiles for q in p.peers if q.role is None)
        owners = socket_owners(e for e in unnamed if e)
        after = {p.pid: labelled(p, owners, addresses) for p in profiles}
        report = profile_report(before, after, untraced, window, addresses)
        if as_json:
            print(json.dumps(report))
        else:
            print("\n".join(describe(report, time.time())))
        sys.stdout.flush()
        before, started = after, time.monotonic()
    return 0


def _load_dump(path: str) -> list[ProcessProfile]:
    try:
        data = json.loads(Path(path).read_text())
        return [ProcessProfile.from_dict(p) for p in data["processes"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise TapError(f"{path} is not an ibverbs-tap dump: {e}") from None


def _ps_cluster(
    ps: Sequence[str], tf_config: str | None, traced: bool, profiles: Sequence[ProcessProfile]
) -> Cluster:
    """The parameter servers, by role: ``--ps-addresses``, else ``--tf-config``, else the TF_CONFIG
    the ``traced`` processes started with (or the roles a dump's peers are named by), else
    ``$TF_CONFIG``."""
    if ps:
        return {"ps": dict(enumerate(ps))}
    if tf_config:
        return {"ps": ps_tasks(tf_config)}
    found = gang_ps(p.pid for p in profiles) if traced else dump_ps(profiles)
    if found:
        return {"ps": found}
    if os.environ.get("TF_CONFIG"):
        return {"ps": ps_tasks(os.environ["TF_CONFIG"])}
    raise TapError(
        "no parameter servers: give --ps-addresses HOST:PORT…, --tf-config, or set TF_CONFIG"
    )


def cmd_skew(
    pid: int | None,
    dump: str | None,
    gang: str | None,
    ps: tuple[str, ...],
    tf_config: str | None,
    as_json: bool,
) -> int:
    if (pid is None) == (dump is None):
        usage_error("give a PID or --dump, not both" if dump else "give a PID or --dump")
    profiles = _load_dump(dump) if dump else _read(pid, gang)[0]  # type: ignore[arg-type]
    try:
        addresses = roles(_ps_cluster(ps, tf_config, dump is None, profiles))
        per_address = bytes_per_ps(profiles, list(addresses.values()))
        totals = {role: per_address[address] for role, address in addresses.items()}
        s_j = skew(totals)
    except (ValueError, OSError) as e:
        raise TapError(str(e)) from None
    if as_json:
        print(json.dumps({"bytes_per_ps": totals, "addresses": addresses, "skew": s_j}))
    else:
        total = sum(totals.values())
        for role, n in totals.items():
            print(f"{role:>6} {addresses[role]:>24} {size(n):>12} {n / total:7.1%}")
        print(f"S_J = {s_j:.3f}")
    return 0


def cmd_run(out: str | None, command: list[str]) -> int:
    if not command:
        raise TapError("run needs a command: ibverbs-tap run [--out FILE] -- CMD…")
    lib = library_path()
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    directory = tempfile.mkdtemp(prefix="ibverbs-tap-run.", dir=shm)
    env = dict(os.environ)
    env[DIR_ENV] = directory
    env["IBVERBS_TAP_KEEP"] = "1"  # every process's file stays for the summary
    env["LD_PRELOAD"] = " ".join(p for p in (lib, env.get("LD_PRELOAD", "")) if p)
    try:
        try:
            proc = subprocess.Popen(command, env=env)
        except OSError as e:
            print(f"ibverbs-tap: cannot run {command[0]}: {e.strerror}", file=sys.stderr)
            return 127
        forward = {
            s: signal.signal(s, lambda sig, _: proc.send_signal(sig))
            for s in (signal.SIGTERM, signal.SIGHUP)
        }
        old_int = signal.signal(signal.SIGINT, signal.SIG_IGN)  # the terminal signals the child
        log = RoleLog(directory, proc.pid, env)
        try:
            while True:  # note each process's roles while it lives, for the dump
                log.poll()
                try:
                    rc = proc.wait(ROLE_POLL_S)
                    break
                except subprocess.TimeoutExpired:
                    continue
        finally:
            signal.signal(signal.SIGINT, old_int)
            for s, handler in forward.items():
                signal.signal(s, handler)
        if out:
            _write_dump(out, command, rc, log.label(read_directory(directory)))
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return rc if rc >= 0 else 128 - rc


def _write_dump(out: str, command: Sequence[str], rc: int, profiles: list[ProcessProfile]) -> None:
    data: dict[str, Any] = {
        "version": DUMP_VERSION,
        "command": list(command),
        "exit_code": rc,
        "processes": [p.to_dict() for p in profiles],
    }
    Path(out).write_text(json.dumps(data, indent=1) + "\n")


def _gang_options(summed: str) -> Callable:
    """``--tree`` or ``--job``: which of the traced processes beside PID to read too."""

    def decorate(f: Callable) -> Callable:
        f = option(
            "--job",
            is_flag=True,
            help=f"also every traced process on this machine of PID's Tiresias job (the same "
            f"TIRESIAS_JOB_ID and TIRESIAS_COORDINATOR){summed}",
        )(f)
        return option(
            "--tree",
            is_flag=True,
            help=f"also the traced descendants{summed} (a gang started under one "
            "`ibverbs-tap run`)",
        )(f)

    return decorate


def _gang(tree: bool, job: bool) -> str | None:
    if tree and job:
        usage_error("--job: not allowed with --tree")
    return "tree" if tree else "job" if job else None


@click.group("ibverbs-tap", cls=Group, help=DESCRIPTION)
@version_option()
def cli() -> None:
    pass


@cli.command(
    "run", help="run a command with the tap preloaded", context_settings=PASSTHROUGH_SETTINGS
)
@option(
    "--out",
    metavar="FILE",
    help="write a JSON summary of every traced process at exit, processes and peers named by "
    "role (ps0, worker1) from their TF_CONFIG or TIRESIAS_ROLE",
)
@argument("command", nargs=-1, type=click.UNPROCESSED, help="-- CMD…")
def run_command(out: str | None, command: tuple[str, ...]) -> int:
    words = passthrough(click.get_current_context(), command)
    return cmd_run(out, words[1:] if words[:1] == ["--"] else words)


@cli.command(
    "profile",
    short_help="per-peer histograms of a traced process since it started, and its rates",
    help="Per-peer message-size histograms of a traced process since it started, with the "
    "rates over a window beside them; peers are named by TF role (ps0, worker1) when the "
    "process has TF_CONFIG.",
)
@argument("pid", type=int, help="a process started under `ibverbs-tap run`")
@option(
    "--interval",
    type=float,
    default=1.0,
    metavar="SECONDS",
    help="seconds per rate window; 0: print the histograms at once, without rates",
)
@option(
    "--total",
    "duration",
    type=float,
    metavar="SECONDS",
    show_default="one window",
    help="seconds to profile for, in windows of --interval",
)
@_gang_options(", summed per role and peer")
@json_option("one JSON object per window")
def profile(
    pid: int, interval: float, duration: float | None, tree: bool, job: bool, as_json: bool
) -> int:
    return cmd_profile(pid, interval, duration, _gang(tree, job), as_json)


@cli.command("skew", help="S_J: share of PS traffic on the busiest PS", greedy=["--ps-addresses"])
@argument("pid", type=int, required=False, help="a traced process (e.g. a worker); or --dump")
@option("--dump", metavar="FILE", help="a JSON summary written by `run --out` (instead of PID)")
@_gang_options("")
@option(
    "--ps-addresses",
    "ps",
    type=Checked(words, "HOST:PORT…"),
    default=None,
    show_default="from TF_CONFIG",
    help="parameter server addresses, ps0 first",
)
@option(
    "--tf-config",
    metavar="JSON|FILE",
    show_default="the traced processes' own, then $TF_CONFIG",
    help="TF_CONFIG JSON or file",
)
@json_option("one JSON object: bytes per PS and S_J")
def skew_command(
    pid: int | None,
    dump: str | None,
    tree: bool,
    job: bool,
    ps: tuple[str, ...] | None,
    tf_config: str | None,
    as_json: bool,
) -> int:
    return cmd_skew(pid, dump, _gang(tree, job), ps or (), tf_config, as_json)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return run(cli, argv, "ibverbs-tap")
    except TapError as e:
        print(f"ibverbs-tap: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
