"""Overhead of the ibverbs-tap preload library.

1. ns added per intercepted call: a C loop of N calls timed in thread CPU time, with and
   without LD_PRELOAD, best of ``--repeats`` alternating runs each (the minimum is the least
   disturbed by other load):
   - ``tcp``: recv(MSG_PEEK) of a pending byte on a loopback TCP socket, a cheap and steady
     syscall that returns data: the whole accounting path (fd cache hit, two relaxed atomic
     adds);
   - ``devnull``: write() of 1 B to /dev/null: the cached "not TCP" path.
2. steps/s of the small TF ParameterServerStrategy job (tools/bench/tap_tf_job.py) with and
   without the tap.

    python tools/bench/tap_bench.py [--calls N] [--repeats R] [--tf-steps S] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import ibverbs_tap

LOOP_C = r"""
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* CPU time of this thread: the calls never block, and on a loaded machine wall time mostly
 * measures the other processes. */
static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* tcp: recv(MSG_PEEK) of 1 pending byte on a loopback TCP socket: a cheap, steady syscall
 * that returns data, so the tap takes its whole accounting path every call.
 * devnull: write(1 byte) to /dev/null: the tap's cached "not TCP" path. */
int main(int argc, char **argv)
{
    if (argc != 3)
        return 2;
    long n = atol(argv[2]);
    char buf[1] = {0};
    int tcp = strcmp(argv[1], "tcp") == 0, fd;
    if (tcp) {
        int l = socket(AF_INET, SOCK_STREAM, 0), peer;
        struct sockaddr_in a = {.sin_family = AF_INET};
        socklen_t len = sizeof a;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 1) ||
            getsockname(l, (struct sockaddr *)&a, &len))
            return 1;
        fd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(fd, (struct sockaddr *)&a, sizeof a) || (peer = accept(l, NULL, NULL)) < 0 ||
            send(peer, "x", 1, 0) != 1)
            return 1;
    } else {
        fd = open("/dev/null", O_WRONLY);
    }
    for (long i = -n / 10; i < n; i++) { /* the first tenth warms up */
        static double start;
        if (i == 0)
            start = now();
        if ((tcp ? recv(fd, buf, 1, MSG_PEEK) : write(fd, buf, 1)) != 1)
            return 1;
        if (i == n - 1)
            printf("%.2f\n", (now() - start) / n);
    }
    return 0;
}
"""


def _ns_per_call(exe: Path, mode: str, calls: int, env: dict[str, str]) -> float:
    out = subprocess.run([str(exe), mode, str(calls)], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{exe} {mode} failed: {out.stderr}")
    return float(out.stdout)


def call_overhead(calls: int, repeats: int) -> dict[str, dict[str, float]]:
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "loop"
        src = Path(tmp) / "loop.c"
        src.write_text(LOOP_C)
        subprocess.run(["gcc", "-O2", "-o", str(exe), str(src)], check=True)
        plain = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
        tapped = dict(plain, LD_PRELOAD=ibverbs_tap.library_path(), IBVERBS_TAP_DIR=tmp)
        results = {}
        for mode in ("tcp", "devnull"):
            base, tap = [], []
            for _ in range(repeats):
                base.append(_ns_per_call(exe, mode, calls, plain))
                tap.append(_ns_per_call(exe, mode, calls, tapped))
            results[mode] = {
                "without_ns": min(base),
                "with_ns": min(tap),
                "added_ns": min(tap) - min(base),
            }
        return results


def tf_steps(steps: int) -> dict[str, dict[str, float]]:
    job = Path(__file__).resolve().parent / "tap_tf_job.py"
    cmd = [sys.executable, str(job), "--steps", str(steps)]
    rates: dict[str, dict[str, float]] = {}
    for label, prefix in (
        ("without", []),
        ("with", [sys.executable, "-m", "ibverbs_tap.cli", "run", "--"]),
    ):
        out = subprocess.run(prefix + cmd, capture_output=True, text=True, check=True).stdout
        for model, rate in re.findall(r"^(\w+): ([\d.]+) steps/s", out, re.M):
            rates.setdefault(model, {})[label] = float(rate)
    return rates


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--tf-steps", type=int, default=30, help="0 skips the TF job")
    parser.add_argument("--out", help="write the results as JSON")
    args = parser.parse_args(argv)
    results: dict[str, Any] = {"calls": call_overhead(args.calls, args.repeats)}
    for mode, r in results["calls"].items():
        print(
            f"{mode:8} without {r['without_ns']:8.1f} ns/call  with {r['with_ns']:8.1f}  "
            f"added {r['added_ns']:6.1f} ns"
        )
    if args.tf_steps:
        results["tf_steps_per_s"] = tf_steps(args.tf_steps)
        for model, r in results["tf_steps_per_s"].items():
            print(f"TF PS job {model:7} without {r['without']:7.1f} steps/s  with {r['with']:7.1f}")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
