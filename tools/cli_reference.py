"""Write docs/configuration.md, the reference of every flag of every console script, from the
click commands themselves, so the page cannot drift from the code
(``tests/test_console_scripts.py`` checks that it is current).

    python tools/cli_reference.py            # rewrite docs/configuration.md
    python tools/cli_reference.py --check    # exit 1 if it is out of date
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import click

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "configuration.md"

#: Console script → its click command (``[project.scripts]`` names the mains).
COMMANDS = {
    "tiresias-coordinator": "coordinator.service.cli:command",
    "tiresias-agent": "coordinator.service.agent_cli:command",
    "tiresias": "coordinator.cli:cli",
    "tiresias-run": "coordinator.run:command",
    "tiresias-sim": "coordinator.sim.cli:command",
    "ibverbs-tap": "ibverbs_tap.cli:cli",
}
#: Variables some defaults are read from; unset while rendering, so the page shows the
#: built-in defaults whatever the machine it is generated on.
ENVIRONMENT = ("TIRESIAS_COORDINATOR", "TIRESIAS_CURVE_KEYS")

HEADER = """# Configuration reference

Every flag of every console script, with its default. Generated from the programs' own
click commands by `python tools/cli_reference.py`; do not edit by hand (a test fails when
this page and the commands disagree). `--help` on any command prints the same text.

Environment variables: `TIRESIAS_COORDINATOR` is the default coordinator address of
`tiresias`, `tiresias-agent` and jobs' runtimes; `TIRESIAS_CURVE_KEYS` the default CURVE key
directory of clients and agents. Operating a cluster: [operations.md](operations.md).
Shell completion: [README](../README.md#shell-completion).
"""


def build(script: str) -> click.Command:
    module, name = COMMANDS[script].split(":")
    return getattr(importlib.import_module(module), name)


def commands(script: str) -> Iterator[tuple[str, click.Command, click.Context]]:
    """``(command line, command, its context)`` of a script and of each of its subcommands,
    depth first, in the order they were added."""
    todo = [(script, build(script), None)]
    while todo:
        name, command, parent = todo.pop(0)
        ctx = click.Context(
            command, info_name=name.rpartition(" ")[2], parent=parent, **command.context_settings
        )
        yield name, command, ctx
        if isinstance(command, click.Group):
            todo[:0] = [(f"{name} {sub}", c, ctx) for sub, c in command.commands.items()]


def options(command: click.Command, ctx: click.Context) -> list[click.Parameter]:
    """The flags and positionals a user sets (not --help)."""
    return [p for p in command.get_params(ctx) if "--help" not in p.opts]


def default_value(param: click.Parameter, ctx: click.Context) -> object:
    """``param``'s default; None for none (click 8.3 and later say ``UNSET``)."""
    value = param.get_default(ctx, call=False)
    return None if value is getattr(click.core, "UNSET", None) else value


def default_text(param: click.Parameter, ctx: click.Context) -> str:
    if isinstance(param, click.Option):
        if param.is_flag and not param.secondary_opts:
            return "off"
        return str(param.get_help_extra(ctx).get("default") or "–")
    return "–"


def help_text(param: click.Parameter, ctx: click.Context) -> str:
    """What ``--help`` says of ``param``, defaults and environment variables included."""
    record = param.get_help_record(ctx) if isinstance(param, click.Option) else None
    text = record[1] if record else getattr(param, "help", "") or ""
    return " ".join(text.split())


def meaning(param: click.Parameter) -> str:
    """The help of ``param`` in the reference, whose own column gives the default."""
    text = getattr(param, "help", "") or ""
    if isinstance(param, click.Option) and param.show_envvar and param.envvar:
        text += f" (environment variable {param.envvar})"
    return " ".join(text.split())


def flag(param: click.Parameter, ctx: click.Context) -> str:
    if isinstance(param, click.Option):
        record = param.get_help_record(ctx)
        assert record is not None
        return f"`{record[0]}`"
    return f"`{param.make_metavar(ctx)}`"


def description(command: click.Command) -> str:
    text = (command.help or command.short_help or "").replace("\b\n", "")
    return " ".join(text.replace("``", "`").split())


def cell(text: str) -> str:
    return text.replace("|", "\\|")


def render() -> str:
    saved = {k: os.environ.pop(k) for k in ENVIRONMENT if k in os.environ}
    try:
        out = [HEADER]
        for script in COMMANDS:
            for depth, (name, command, ctx) in enumerate(commands(script)):
                out.append(f"\n{'##' if depth == 0 else '###'} `{name}`\n")
                if description(command):
                    out.append(f"\n{description(command)}\n")
                rows = options(command, ctx)
                if not rows:
                    continue
                out.append("\n| Flag | Default | Meaning |\n|---|---|---|\n")
                out += [
                    f"| {cell(flag(p, ctx))} | {cell(default_text(p, ctx))} "
                    f"| {cell(meaning(p))} |\n"
                    for p in rows
                ]
        return "".join(out)
    finally:
        os.environ.update(saved)


@click.command(help=__doc__.split("\n\n")[0])
@click.option("--check", is_flag=True, help="exit 1 if the page is out of date")
def main(check: bool) -> None:
    text = render()
    if check:
        current = DOC.read_text() if DOC.exists() else ""
        if current != text:
            sys.exit(f"{DOC} is out of date: run python tools/cli_reference.py")
        return
    DOC.write_text(text)
    print(f"wrote {DOC}")


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    main()
