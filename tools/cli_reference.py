"""Write docs/configuration.md, the reference of every flag of every console script, from the
argparse parsers themselves, so the page cannot drift from the code
(``tests/test_console_scripts.py`` checks that it is current).

    python tools/cli_reference.py            # rewrite docs/configuration.md
    python tools/cli_reference.py --check    # exit 1 if it is out of date
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "configuration.md"

#: Console script → the function building its parser (``[project.scripts]`` names the mains).
PARSERS = {
    "tiresias-coordinator": "coordinator.service.cli:parser",
    "tiresias-agent": "coordinator.service.agent:parser",
    "tiresias": "coordinator.cli:parser",
    "tiresias-run": "coordinator.run:parser",
    "tiresias-sim": "coordinator.sim.cli:build_parser",
    "ibverbs-tap": "ibverbs_tap.cli:_parser",
}
#: Variables some defaults are read from; unset while rendering, so the page shows the
#: built-in defaults whatever the machine it is generated on.
ENVIRONMENT = ("TIRESIAS_COORDINATOR", "TIRESIAS_CURVE_KEYS")

HEADER = """# Configuration reference

Every flag of every console script, with its default. Generated from the programs' own
argument parsers by `python tools/cli_reference.py`; do not edit by hand (a test fails when
this page and the parsers disagree). `--help` on any command prints the same text.

Environment variables: `TIRESIAS_COORDINATOR` is the default coordinator address of
`tiresias`, `tiresias-agent` and jobs' runtimes; `TIRESIAS_CURVE_KEYS` the default CURVE key
directory of clients and agents. Operating a cluster: [operations.md](operations.md).
"""


def build(script: str) -> argparse.ArgumentParser:
    module, function = PARSERS[script].split(":")
    return getattr(importlib.import_module(module), function)()


def parsers(script: str) -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    """``(command line, what it does, parser)`` of a script and of each of its subcommands,
    depth first."""
    top = build(script)
    todo = [(script, top.description or "", top)]
    while todo:
        name, what, ap = todo.pop(0)
        yield name, what, ap
        for action in ap._actions:
            if isinstance(action, argparse._SubParsersAction):
                helps = {a.dest: a.help or "" for a in action._choices_actions}
                todo[:0] = [
                    (f"{name} {sub}", p.description or helps[sub], p)
                    for sub, p in action.choices.items()
                ]


def options(ap: argparse.ArgumentParser) -> list[argparse.Action]:
    """The flags and positionals a user sets (not -h, not the subcommand selector)."""
    return [
        a
        for a in ap._actions
        if not isinstance(a, argparse._HelpAction | argparse._SubParsersAction)
    ]


def default_text(action: argparse.Action) -> str:
    value: Any = action.default
    if isinstance(action, argparse._StoreTrueAction):
        return "off"
    if value is None or value == argparse.SUPPRESS:
        return "–"
    if isinstance(value, list | tuple):
        return ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in value) or "–"
    if isinstance(value, float):
        return "inf" if math.isinf(value) else f"{value:g}"
    return str(value)


def help_text(ap: argparse.ArgumentParser, action: argparse.Action) -> str:
    text = ap._get_formatter()._expand_help(action) if action.help else ""
    return " ".join(text.split())


def cell(text: str) -> str:
    return text.replace("|", "\\|")


def flag(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    names = ", ".join(action.option_strings)
    if action.nargs == 0:
        return f"`{names}`"
    metavar = action.metavar or (
        "{" + ",".join(map(str, action.choices)) + "}" if action.choices else action.dest.upper()
    )
    return f"`{names} {metavar}`"


def render() -> str:
    saved = {k: os.environ.pop(k) for k in ENVIRONMENT if k in os.environ}
    try:
        out = [HEADER]
        for script in PARSERS:
            for depth, (name, what, ap) in enumerate(parsers(script)):
                out.append(f"\n{'##' if depth == 0 else '###'} `{name}`\n")
                if what:
                    out.append("\n" + " ".join(what.replace("``", "`").split()) + "\n")
                rows = options(ap)
                if not rows:
                    continue
                out.append("\n| Flag | Default | Meaning |\n|---|---|---|\n")
                out += [
                    f"| {flag(a)} | {cell(default_text(a))} | {cell(help_text(ap, a))} |\n"
                    for a in rows
                ]
        return "".join(out)
    finally:
        os.environ.update(saved)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the page is out of date")
    args = ap.parse_args(argv)
    text = render()
    if args.check:
        current = DOC.read_text() if DOC.exists() else ""
        if current != text:
            print(f"{DOC} is out of date: run python tools/cli_reference.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text)
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.exit(main())
