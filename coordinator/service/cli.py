"""``tiresias-coordinator``: the command line of the coordinator service.

Turns flags into :class:`Options`, starts a :class:`Coordinator` and serves until SIGTERM
or Ctrl-C. Every mistake in the flags or the environment is one line and exit code 2.
"""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
import zmq

from coordinator.core.model import CoreError
from coordinator.scheduling_flags import MEASURED, scheduling_options, scheduling_settings
from coordinator.service import retention
from coordinator.service.coordinator import Coordinator
from coordinator.service.options import MAX_JOB_SIZE, Options
from coordinator.service.ports import PORT_RANGE
from tiresias_cli.kit import Command, option, run, version_option
from tiresias_cli.values import (
    PORT,
    POSITIVE_COUNT,
    POSITIVE_SECONDS,
    SECONDS,
)

DESCRIPTION = (
    "The coordinator service: a single-threaded ZeroMQ event loop around the scheduler core."
)
PATH = click.Path(path_type=Path)


@click.command("tiresias-coordinator", cls=Command, help=DESCRIPTION)
@version_option()
@option(
    "--bind",
    default=Options.bind,
    metavar="ADDRESS",
    help="ipc://PATH (one machine: users known by uid) or tcp://HOST:PORT (needs --curve-keys)",
)
@option(
    "--state",
    type=PATH,
    default=Options.state,
    metavar="DIR",
    show_default=f"./{Options.state}",
    help="state directory (SQLite journal); reuse it to resume after a crash",
)
@scheduling_options(
    "policy", "placement", "queue_thresholds", "promote_knob", "packlimit", "interval"
)
@option(
    "--gittins-samples",
    "--gittins-history",
    "gittins_history",
    type=PATH,
    default=None,
    metavar="FILE",
    help="tiresias-g: CSV of past jobs' service (header 'duration', GPU-seconds, or a shipped "
    "sample's name, e.g. yarn-gput1000) that seeds the Gittins distribution "
    "(--gittins-history: its old name, deprecated)",
)
@scheduling_options(*MEASURED, "gittins_variant", "gittins_learn", "rules")
@option(
    "--heartbeat-timeout",
    type=POSITIVE_SECONDS,
    default=Options.heartbeat_timeout,
    help="seconds without a heartbeat before a node is down",
)
@option(
    "--grace",
    type=SECONDS,
    default=Options.grace,
    help="seconds a preempted job gets to checkpoint",
)
@option(
    "--preempt-signal",
    type=click.Choice(["SIGTERM", "SIGINT", "SIGUSR1", "SIGUSR2"]),
    default=Options.preempt_signal,
    metavar="SIGNAL",
    help="signal asking a preempted job's processes to checkpoint and exit (SIGTERM, SIGINT, "
    "SIGUSR1 or SIGUSR2); they get --grace seconds before SIGKILL",
)
@option(
    "--keep-finished",
    type=POSITIVE_SECONDS,
    default=Options.keep_finished,
    show_default="604800 = 7 days",
    help="seconds a finished job's checkpoints are kept; then they are removed (swept hourly)",
)
@option(
    "--checkpoint-root",
    type=PATH,
    default=None,
    metavar="DIR",
    show_default="STATE/checkpoints",
    help="checkpoint root shared by all nodes",
)
@option(
    "--metrics-port",
    type=PORT,
    default=None,
    help="Prometheus HTTP port",
)
@option(
    "--metrics-addr",
    default=Options.metrics_addr,
    metavar="ADDRESS",
    help="address the metrics port listens on",
)
@option(
    "--dashboard-port",
    type=PORT,
    default=None,
    show_default="off",
    help="serve a read-only web dashboard (GPUs, running and waiting jobs with the reasons "
    "they wait, job histories) on this HTTP port; it has no login and shows every job's "
    "command line, like tiresias queue",
)
@option(
    "--dashboard-addr",
    default=Options.dashboard_addr,
    metavar="ADDRESS",
    help="address the dashboard listens on; anyone who can reach it sees every job",
)
@option(
    "--curve-keys",
    type=PATH,
    default=None,
    metavar="DIR",
    help="CURVE key directory from `tiresias keys generate` (required for tcp://): "
    "users/NAME.key and agents/NAME.key say who each key is",
)
@option(
    "--admin",
    "admins",
    multiple=True,
    metavar="USER",
    help="a user who may cancel and read every job (root always may); repeatable",
)
@option(
    "--allow-root-jobs",
    is_flag=True,
    help="accept jobs from root, which then run as root (refused by default)",
)
@option(
    "--manual-clock",
    is_flag=True,
    help="core time advances only on `advance` requests (deterministic tests)",
)
@option(
    "--snapshot-every",
    type=POSITIVE_COUNT,
    default=Options.snapshot_every,
    help="journal events between scheduler snapshots",
)
@option(
    "--max-job-size",
    type=POSITIVE_COUNT,
    default=MAX_JOB_SIZE,
    help="most workers (GPUs) and most parameter servers one job may ask for; a submit "
    "asking for more is refused",
)
@option(
    "--port-base",
    type=PORT,
    default=Options.port_base,
    help="first TCP port handed to jobs' TF/Horovod servers on remote nodes; ports cycle "
    f"through the {PORT_RANGE} from here, starting at a random one (jobs on this machine get "
    "ports the OS says are free)",
)
@option(
    "--executor",
    type=click.Choice(["agents", "slurm"]),
    default=Options.executor,
    metavar="agents|slurm",
    help="who runs the jobs: tiresias-agent on each node, or the Slurm partition "
    "--slurm-partition, with the Slurm commands on PATH (docs/slurm.md)",
)
@option(
    "--slurm-partition",
    default=Options.slurm_partition,
    metavar="NAME",
    help="with --executor slurm: the partition whose nodes Tiresias schedules; its jobs are "
    "the coordinator's",
)
def command(**flags: Any) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        opts = options(**flags)
        coord = Coordinator(opts)
    except (CoreError, ValueError, OSError) as e:
        print(f"tiresias-coordinator: {e}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: coord.stop.set())
    retention.start(
        lambda now: retention.sweep_checkpoints(
            coord.store.path, opts.checkpoints, opts.keep_finished, now
        ),
        "tiresias-retention",
    )
    try:
        coord.run()
    except KeyboardInterrupt:
        pass
    except zmq.ZMQError as e:
        print(f"tiresias-coordinator: cannot serve on {opts.bind}: {e}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as e:  # metrics port taken, key files or socket dir wrong
        print(f"tiresias-coordinator: {e}", file=sys.stderr)
        return 2
    return 0


def options(**flags: Any) -> Options:
    """The :class:`Options` of the command line's flags; CoreError for bad scheduling ones."""
    settings = scheduling_settings(flags)
    return Options(**{**flags, "admins": frozenset(flags["admins"])}, settings=settings)


def main(argv: Sequence[str] | None = None) -> int:
    return run(command, argv, "tiresias-coordinator")


if __name__ == "__main__":
    sys.exit(main())
