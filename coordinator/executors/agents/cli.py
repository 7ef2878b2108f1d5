"""``tiresias-agent``: the command line of a node agent (:class:`Agent`), one per machine.

Discovers the GPUs, connects to the coordinator and serves until SIGTERM or Ctrl-C; a bad
flag, GPU count, address or key directory is one line and exit code 2."""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

import click

from coordinator.executors.agents.daemon import Agent, AgentRefused
from coordinator.executors.agents.gpu_discovery import discover_gpus
from coordinator.service import retention
from coordinator.service.client import ADDRESS_ENV, DEFAULT_ADDRESS, client_keys
from coordinator.service.curve import KEYS_ENV
from tiresias_cli.kit import Command, option, run, usage_error, version_option
from tiresias_cli.values import POSITIVE_SECONDS

DESCRIPTION = (
    "Node agent: one per machine. Discovers GPUs, registers with the coordinator, spawns the "
    "processes it is given (each in its own process group, logging to a file), signals and "
    "kills them on command, and reports how each job's local processes ended."
)


@click.command("tiresias-agent", cls=Command, help=DESCRIPTION)
@version_option()
@option(
    "--coordinator",
    default=DEFAULT_ADDRESS,
    metavar="ADDRESS",
    envvar=ADDRESS_ENV,
    show_envvar=True,
    help="coordinator address",
)
@option(
    "--gpus",
    default="auto",
    metavar="auto|N",
    help="'auto' (NVML) or a number of virtual GPUs",
)
@option("--name", default=None, metavar="NAME", show_default="host name", help="node name")
@option(
    "--host",
    default=None,
    metavar="HOST",
    show_default="--name",
    help="address peers of a job use to reach this node",
)
@option(
    "--workdir",
    type=click.Path(path_type=Path),
    default=None,
    metavar="DIR",
    show_default="./tiresias-agent/NAME",
    help="where job logs go",
)
@option(
    "--heartbeat",
    type=POSITIVE_SECONDS,
    default=1.0,
    help="seconds between heartbeats",
)
@option(
    "--curve-keys",
    default=None,
    metavar="DIR",
    envvar=KEYS_ENV,
    show_envvar=True,
    help="CURVE key directory",
)
@option(
    "--tap/--no-tap",
    default=True,
    help="run parameter-server jobs under ibverbs-tap (where its library is built) and report "
    "their measured per-PS traffic, from which the coordinator derives S_J when the job's "
    "runtime reports no tensor sizes",
)
@option(
    "--keep-finished",
    type=POSITIVE_SECONDS,
    default=retention.KEEP_FINISHED,
    show_default="604800 = 7 days",
    help="seconds a job's log directory is kept once nothing is written in it (swept hourly)",
)
def command(
    coordinator: str,
    gpus: str,
    name: str | None,
    host: str | None,
    workdir: Path | None,
    heartbeat: float,
    curve_keys: str | None,
    tap: bool,
    keep_finished: float,
) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        found = discover_gpus(gpus)
        keys = client_keys(curve_keys, coordinator)
    except (ValueError, OSError) as e:
        usage_error(str(e))
    agent = Agent(coordinator, found, name, workdir, keys, heartbeat, host, tap)
    signal.signal(signal.SIGTERM, lambda *_: agent.stop.set())
    logs = agent.workdir / "logs"
    retention.start(lambda now: retention.sweep_logs(logs, keep_finished, now), "retention")
    try:
        agent.run()
    except KeyboardInterrupt:
        pass
    except (ValueError, OSError, AgentRefused) as e:
        print(f"tiresias-agent: {e}", file=sys.stderr)
        return 2
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(command, argv, "tiresias-agent")


if __name__ == "__main__":
    sys.exit(main())
