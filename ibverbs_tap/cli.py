"""``ibverbs-tap``: run a command under the tap, watch a traced process, compute S_J."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ibverbs_tap import library_path
from ibverbs_tap.profile import (
    DIR_ENV,
    ProcessGoneError,
    ProcessProfile,
    TapError,
    read_directory,
    read_process,
    read_tree,
)
from ibverbs_tap.skew import (
    bytes_per_ps,
    ps_addresses_from_tf_config,
    skew,
    tf_config_of,
)

DUMP_VERSION = 1


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _bucket_range(b: int) -> str:
    low = 0 if b == 0 else 1 << b
    return f"[{_size(low)}, {_size(1 << (b + 1))})"


def _verbs_state(p: ProcessProfile) -> str:
    if not p.verbs_built:
        return "verbs: not built (socket tap only)"
    return "verbs: device opened" if p.verbs_seen else "verbs: built, no device opened"


def _describe(p: ProcessProfile, window: float | None) -> list[str]:
    cmd = " ".join(p.cmdline) or "?"
    head = f"pid {p.pid} (ppid {p.ppid}) `{cmd}` — {_verbs_state(p)}"
    if window is not None:
        head += f"; window {window:.2f} s"
    lines = [head]

    def rate(n: int) -> str:
        return f" ({_size(n / window)}/s)" if window else ""

    for peer in p.peers:
        lines.append(
            f"  {peer.kind} {peer.address}: tx {peer.tx.count} msgs {_size(peer.tx.total_bytes)}"
            f"{rate(peer.tx.total_bytes)}, rx {peer.rx.count} msgs {_size(peer.rx.total_bytes)}"
            f"{rate(peer.rx.total_bytes)}"
            + (f", {peer.recv_posted} recvs posted" if peer.kind == "verbs" else "")
        )
        for direction, hist in (("tx", peer.tx), ("rx", peer.rx)):
            for b, count, nbytes in hist.buckets():
                lines.append(
                    f"    {direction} {_bucket_range(b):>22} {count:>10} msgs {_size(nbytes):>12}"
                )
    if not p.peers:
        lines.append("  no TCP or verbs traffic")
    if p.dropped_calls:
        lines.append(
            f"  {p.dropped_calls} calls ({_size(p.dropped_bytes)}) not attributed: peer table full"
        )
    return lines


def _snapshot(pid: int, tree: bool) -> dict[int, ProcessProfile]:
    profiles = read_tree(pid)[0] if tree else [read_process(pid)]
    return {p.pid: p for p in profiles}


def cmd_profile(args: argparse.Namespace) -> int:
    if args.interval <= 0:
        raise TapError("--interval must be positive")
    duration = args.duration if args.duration is not None else args.interval
    windows = max(1, round(duration / args.interval))
    before = _snapshot(args.pid, args.tree)
    started = time.monotonic()
    for _ in range(windows):
        time.sleep(args.interval)
        try:
            after = _snapshot(args.pid, args.tree)
        except ProcessGoneError as e:
            raise TapError(f"{e} (during the measurement window)") from None
        window = time.monotonic() - started
        deltas = [p.since(before[pid]) if pid in before else p for pid, p in after.items()]
        if args.json:
            print(json.dumps({"window": window, "processes": [d.to_dict() for d in deltas]}))
        else:
            for d in deltas:
                print("\n".join(_describe(d, window)))
        sys.stdout.flush()
        before, started = after, time.monotonic()
    return 0


def _load_dump(path: str) -> list[ProcessProfile]:
    try:
        data = json.loads(Path(path).read_text())
        return [ProcessProfile.from_dict(p) for p in data["processes"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise TapError(f"{path} is not an ibverbs-tap dump: {e}") from None


def cmd_skew(args: argparse.Namespace) -> int:
    if args.dump:
        profiles = _load_dump(args.dump)
    else:
        profiles = read_tree(args.pid)[0] if args.tree else [read_process(args.pid)]
    ps = args.ps
    try:
        if not ps:
            tf_config = args.tf_config or os.environ.get("TF_CONFIG")
            if not tf_config and args.pid is not None:
                tf_config = tf_config_of(args.pid)
            if not tf_config:
                raise TapError(
                    "no parameter servers: give --ps HOST:PORT…, --tf-config, or set TF_CONFIG"
                )
            ps = ps_addresses_from_tf_config(tf_config)
        totals = bytes_per_ps(profiles, ps)
        s_j = skew(totals)
    except (ValueError, OSError) as e:
        raise TapError(str(e)) from None
    if args.json:
        print(json.dumps({"bytes_per_ps": totals, "skew": s_j}))
    else:
        total = sum(totals.values())
        for address, n in totals.items():
            print(f"{address:>24} {_size(n):>12} {n / total:7.1%}")
        print(f"S_J = {s_j:.3f}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
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
        try:
            rc = proc.wait()
        finally:
            signal.signal(signal.SIGINT, old_int)
            for s, handler in forward.items():
                signal.signal(s, handler)
        if args.out:
            _write_dump(args.out, command, rc, list(read_directory(directory)))
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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ibverbs-tap",
        description="Per-peer message-size histograms of TCP and RDMA verbs traffic, and S_J.",
    )
    sub = parser.add_subparsers(dest="action", required=True)

    run = sub.add_parser("run", help="run a command with the tap preloaded")
    run.add_argument("--out", help="write a JSON summary of every traced process at exit")
    run.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD…")
    run.set_defaults(func=cmd_run)

    prof = sub.add_parser("profile", help="watch a traced process")
    prof.add_argument("pid", type=int, help="a process started under `ibverbs-tap run`")
    prof.add_argument(
        "--interval", type=float, default=1.0, help="seconds per window (default %(default)g)"
    )
    prof.add_argument("--duration", type=float, help="total seconds (default: one window)")
    prof.add_argument("--tree", action="store_true", help="include traced descendants")
    prof.add_argument("--json", action="store_true", help="one JSON object per window")
    prof.set_defaults(func=cmd_profile)

    sk = sub.add_parser("skew", help="S_J: share of PS traffic on the busiest PS")
    src = sk.add_mutually_exclusive_group(required=True)
    src.add_argument("--pid", type=int, help="a traced process (e.g. a worker)")
    src.add_argument("--dump", help="a JSON summary written by `run --out`")
    sk.add_argument("--tree", action="store_true", help="with --pid: include descendants")
    sk.add_argument("--ps", nargs="+", metavar="HOST:PORT", help="parameter server addresses")
    sk.add_argument(
        "--tf-config", help="TF_CONFIG JSON or file (default: $TF_CONFIG, then the pid's)"
    )
    sk.add_argument("--json", action="store_true", help="one JSON object: bytes per PS and S_J")
    sk.set_defaults(func=cmd_skew)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly, as cat does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except TapError as e:
        print(f"ibverbs-tap: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
