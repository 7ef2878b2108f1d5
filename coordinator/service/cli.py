"""``tiresias-coordinator``: the command line of the coordinator service.

Turns flags into :class:`Options`, starts a :class:`Coordinator` and serves until SIGTERM
or Ctrl-C. Every mistake in the flags or the environment is one line and exit code 2.
"""

from __future__ import annotations

import argparse
import logging
import math
import signal
import sys
from pathlib import Path
from typing import Any

import zmq

from coordinator.argtypes import fraction, port, positive_count, positive_seconds, seconds
from coordinator.core.config import DEFAULT_QUEUE_THRESHOLDS, QUEUE_ORDERS, thresholds_text
from coordinator.core.gittins import GITTINS_VARIANTS
from coordinator.core.model import CoreError
from coordinator.core.placement import DEFAULT_PACKLIMIT, PLACEMENT_NAMES
from coordinator.core.policies import POLICY_NAMES
from coordinator.service.coordinator import MAX_JOB_SIZE, PORT_RANGE, Coordinator, Options

DESCRIPTION = (
    "The coordinator service: a single-threaded ZeroMQ event loop around the scheduler core."
)


def comma_floats(text: str) -> list[float]:
    """``--thresholds`` values: comma-separated numbers."""
    try:
        return [float(x) for x in text.split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated numbers") from None


def multiple(text: str) -> float:
    """A factor: finite, >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (value >= 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text!r}")
    return value


def add_scheduling_options(ap: argparse.ArgumentParser, mode: str = "") -> None:
    """The scheduling options the simulator measured (docs/simulator.md), under
    ``tiresias-sim``'s names; ``tiresias-run`` adds them with ``mode`` "embedded mode: "."""
    ap.add_argument(
        "--queue-order",
        default=Options.queue_order,
        choices=QUEUE_ORDERS,
        help=f"{mode}order inside a tiresias queue: running jobs ahead of waiting ones, or "
        "FIFO by first start (a preempted job may evict a later-started one) "
        "(default %(default)s)",
    )
    ap.add_argument(
        "--min-run",
        type=seconds,
        default=Options.min_run,
        metavar="S",
        help=f"{mode}a started job runs at least S seconds before it may be preempted "
        "(default %(default)g: off)",
    )
    ap.add_argument(
        "--min-run-restores",
        type=multiple,
        default=Options.min_run_restores,
        metavar="X",
        help=f"{mode}… and at least X times its restore cost, as its runtime measured it "
        "(start-up, restore and first step) (default %(default)g: off)",
    )
    ap.add_argument(
        "--cheap-victims",
        action=argparse.BooleanOptionalAction,
        default=Options.cheap_victims,
        help=f"{mode}preempt the running jobs of a queue that are cheapest to stop and "
        "restart first (checkpoint + restore seconds, as measured) (default: off)",
    )
    ap.add_argument(
        "--learn-thresholds",
        action=argparse.BooleanOptionalAction,
        default=Options.learn_thresholds,
        help=f"{mode}tiresias-l/-g: learn the queue thresholds from completed jobs' GPU "
        "service (re-learned online; --thresholds is where they start) (default: off)",
    )


def scheduling_options(args: argparse.Namespace) -> dict[str, Any]:
    """``Options`` fields from the flags ``add_scheduling_options`` added."""
    return {
        "queue_order": args.queue_order,
        "min_run": args.min_run,
        "min_run_restores": args.min_run_restores,
        "cheap_victims": args.cheap_victims,
        "learn_thresholds": args.learn_thresholds,
    }


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="tiresias-coordinator", description=DESCRIPTION)
    ap.add_argument(
        "--bind",
        default=Options.bind,
        help="ipc://PATH (one machine: users known by uid) or tcp://HOST:PORT (needs "
        "--curve-keys) (default %(default)s)",
    )
    ap.add_argument(
        "--state",
        type=Path,
        default=Options.state,
        help="state directory (SQLite journal); reuse it to resume after a crash "
        "(default ./%(default)s)",
    )
    ap.add_argument(
        "--policy",
        default=Options.policy,
        choices=POLICY_NAMES,
        metavar="NAME",
        help="scheduling policy: %(choices)s; tiresias-l is 2D-LAS, tiresias-g 2D-Gittins, "
        "yarn-cs FIFO (default %(default)s)",
    )
    ap.add_argument(
        "--placement",
        default=Options.placement,
        choices=PLACEMENT_NAMES,
        metavar="NAME",
        help="placement: %(choices)s (default: the policy's own, skew for tiresias-l/-g, "
        "yarn for yarn-cs/best-effort, else consolidate)",
    )
    ap.add_argument(
        "--thresholds",
        type=comma_floats,
        default=list(DEFAULT_QUEUE_THRESHOLDS),
        help="queue thresholds on attained GPU-seconds, comma-separated "
        f"(K-1 values for K queues; default {thresholds_text(DEFAULT_QUEUE_THRESHOLDS)})",
    )
    ap.add_argument(
        "--promote-knob",
        type=float,
        default=float("inf"),
        help="PROMOTEKNOB for starvation (default inf = off)",
    )
    ap.add_argument(
        "--packlimit",
        type=fraction,
        default=None,
        help=f"initial PACKLIMIT of the skew placement (default {DEFAULT_PACKLIMIT:g}); "
        "learned from finished jobs after that",
    )
    ap.add_argument(
        "--interval",
        type=seconds,
        default=0.0,
        help="also re-evaluate priorities every N seconds (default: only on events "
        "and policy wakeups); las and tiresias-g then rank running jobs by their service "
        "at the last tick, so jobs of close priority swap at most once per tick",
    )
    ap.add_argument(
        "--gittins-history",
        type=Path,
        default=None,
        help="tiresias-g: CSV of past jobs' service (header 'duration', GPU-seconds) that "
        "seeds the Gittins distribution",
    )
    add_scheduling_options(ap)
    ap.add_argument(
        "--gittins-variant",
        default=None,
        choices=GITTINS_VARIANTS,
        help="tiresias-g: Gittins index as the paper writes it or as the authors' "
        "simulator computes it (default as-written)",
    )
    ap.add_argument(
        "--gittins-fixed",
        action="store_true",
        help="tiresias-g: keep the distribution as seeded by --gittins-history, not "
        "learning from completed jobs (default: it learns)",
    )
    ap.add_argument(
        "--heartbeat-timeout",
        type=positive_seconds,
        default=Options.heartbeat_timeout,
        help="seconds without a heartbeat before a node is down (default %(default)s)",
    )
    ap.add_argument(
        "--grace",
        type=seconds,
        default=Options.grace,
        help="seconds a preempted job gets to checkpoint (default %(default)s)",
    )
    ap.add_argument(
        "--preempt-signal",
        default=Options.preempt_signal,
        choices=["SIGTERM", "SIGINT", "SIGUSR1", "SIGUSR2"],
        help="signal asking a preempted job's processes to checkpoint and exit; they get "
        "--grace seconds before SIGKILL (default %(default)s)",
    )
    ap.add_argument(
        "--checkpoint-root",
        type=Path,
        default=None,
        help="checkpoint root shared by all nodes (default STATE/checkpoints)",
    )
    ap.add_argument("--metrics-port", type=port, default=None, help="Prometheus HTTP port")
    ap.add_argument(
        "--metrics-addr",
        default=Options.metrics_addr,
        help="address the metrics port listens on (default %(default)s)",
    )
    ap.add_argument(
        "--dashboard-port",
        type=port,
        default=None,
        help="serve a read-only web dashboard (GPUs, running and waiting jobs with the reasons "
        "they wait, job histories) on this HTTP port; it has no login and shows every job's "
        "command line, like tiresias queue (default: off)",
    )
    ap.add_argument(
        "--dashboard-addr",
        default=Options.dashboard_addr,
        help="address the dashboard listens on; anyone who can reach it sees every job "
        "(default %(default)s)",
    )
    ap.add_argument(
        "--curve-keys",
        type=Path,
        default=None,
        help="CURVE key directory from `tiresias keys generate` (required for tcp://): "
        "users/NAME.key and agents/NAME.key say who each key is",
    )
    ap.add_argument(
        "--admin",
        action="append",
        default=[],
        metavar="USER",
        help="a user who may cancel and read every job (root always may); repeatable",
    )
    ap.add_argument(
        "--allow-root-jobs",
        action="store_true",
        help="accept jobs from root, which then run as root (refused by default)",
    )
    ap.add_argument(
        "--manual-clock",
        action="store_true",
        help="core time advances only on `advance` requests (deterministic tests)",
    )
    ap.add_argument(
        "--snapshot-every",
        type=positive_count,
        default=Options.snapshot_every,
        help="journal events between scheduler snapshots (default %(default)s)",
    )
    ap.add_argument(
        "--max-job-size",
        type=positive_count,
        default=MAX_JOB_SIZE,
        help="most workers (GPUs) and most parameter servers one job may ask for; a submit "
        "asking for more is refused (default %(default)s)",
    )
    ap.add_argument(
        "--port-base",
        type=port,
        default=Options.port_base,
        help="first TCP port handed to jobs' TF/Horovod servers on remote nodes; ports cycle "
        f"through the {PORT_RANGE} from here, starting at a random one (jobs on this "
        "machine get ports the OS says are free) (default %(default)s)",
    )
    return ap


def options(args: argparse.Namespace) -> Options:
    return Options(
        bind=args.bind,
        state=args.state,
        policy=args.policy,
        placement=args.placement,
        thresholds=args.thresholds,
        promote_knob=args.promote_knob,
        packlimit=args.packlimit,
        interval=args.interval,
        gittins_history=args.gittins_history,
        **scheduling_options(args),
        gittins_variant=args.gittins_variant,
        gittins_learn=not args.gittins_fixed,
        heartbeat_timeout=args.heartbeat_timeout,
        grace=args.grace,
        preempt_signal=args.preempt_signal,
        checkpoint_root=args.checkpoint_root,
        metrics_port=args.metrics_port,
        metrics_addr=args.metrics_addr,
        dashboard_port=args.dashboard_port,
        dashboard_addr=args.dashboard_addr,
        curve_keys=args.curve_keys,
        admins=frozenset(args.admin),
        allow_root_jobs=args.allow_root_jobs,
        manual_clock=args.manual_clock,
        port_base=args.port_base,
        snapshot_every=args.snapshot_every,
        max_job_size=args.max_job_size,
    )


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        coord = Coordinator(options(args))
    except (CoreError, ValueError, OSError) as e:
        print(f"tiresias-coordinator: {e}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: coord.stop.set())
    try:
        coord.run()
    except KeyboardInterrupt:
        pass
    except zmq.ZMQError as e:
        print(f"tiresias-coordinator: cannot serve on {args.bind}: {e}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as e:  # metrics port taken, key files or socket dir wrong
        print(f"tiresias-coordinator: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
