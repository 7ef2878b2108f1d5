"""``tiresias``: talk to a running coordinator (submit, status, queue, nodes, cancel, logs) and
make CURVE keys. Tables for people by default, ``--json`` for scripts.

Queues are shown 1-based (Q1 is the highest priority); in ``--json`` output the ``queue`` field
is the 0-based index, so ``"queue": 0`` is Q1."""

from __future__ import annotations

from collections.abc import Sequence

import click

from coordinator.cli.jobs import COMMANDS
from coordinator.cli.keys import keys
from tiresias_cli.kit import Group, run, version_option


@click.group("tiresias", cls=Group, help="\b\n" + __doc__.replace("``", ""))
@version_option()
def cli() -> None:
    pass


for command in (*COMMANDS, keys):
    cli.add_command(command)


def main(argv: Sequence[str] | None = None) -> int:
    return run(cli, argv, "tiresias")
