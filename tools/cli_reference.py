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
    "tiresias-agent": "coordinator.executors.agents.cli:command",
    "tiresias": "coordinator.cli:cli",
    "tiresias-run": "coordinator.run:command",
    "tiresias-sim": "coordinator.sim.cli:command",
    "ibverbs-tap": "ibverbs_tap.cli:cli",
}
#: Variables some defaults are read from; unset while rendering, so the page shows the
#: built-in defaults whatever the machine it is generated on.
ENVIRONMENT = ("TIRESIAS_COORDINATOR", "TIRESIAS_CURVE_KEYS")

#: One meaning per flag name: each flag that two commands share, and what it means in all of
#: them. ``--check`` fails on a shared flag missing here (decide its meaning, or rename it) and
#: on an entry no two commands share any more.
VOCABULARY = {
    "--all": "the whole listing, not its first screen: every active job (`tiresias queue`), "
    "and every finished one too (`tiresias status`)",
    "--bind": "the address the coordinator listens on",
    "--cheap-victims": "scheduling: preempt a queue's cheapest-to-restart running jobs first",
    "--coordinator": "the coordinator's address: ipc://PATH or tcp://HOST:PORT",
    "--curve-keys": "a CURVE key directory (`tiresias keys`)",
    "--elastic-payback": "scheduling: an elastic job grows after running X times its restart cost",
    "--gittins-fixed": "scheduling: keep tiresias-g's distribution as seeded",
    "--gittins-samples": "scheduling: GPU-time samples seeding tiresias-g (CSV or shipped name)",
    "--gittins-variant": "scheduling: the Gittins index as written or as the authors compute it",
    "--gpus": "the GPUs of the node a program runs: `auto` (NVML) or a number of virtual ones",
    "--grace": "seconds a preempted job gets to checkpoint",
    "--horovod": "the job runs as Horovod ranks",
    "--interval": "a period in seconds: of priority re-evaluation (scheduling), of a rate "
    "window (`ibverbs-tap profile`)",
    "--job": "ibverbs-tap: also the traced processes of the process's Tiresias job",
    "--json": "machine-readable output (JSON) instead of text",
    "--keep-finished": "seconds a finished job's files are kept: checkpoints (coordinator), logs "
    "(agent)",
    "--limit": "at most N jobs: the first N by submission (`tiresias-sim`), N of each line "
    "(`tiresias queue`)",
    "--learn-thresholds": "scheduling: learn the queue thresholds from finished jobs",
    "--min-run": "scheduling: seconds a started job runs before it may be preempted",
    "--min-run-restores": "scheduling: … and times its restore cost",
    "--name": "the name of what the program starts: a job (`submit`, `tiresias-run`) or, for "
    "`tiresias-agent`, its node",
    "--no-cheap-victims": "the opposite of --cheap-victims",
    "--no-learn-thresholds": "the opposite of --learn-thresholds",
    "--out": "where results are written: a directory (`tiresias-sim`), a file (`ibverbs-tap run`)",
    "--packlimit": "scheduling: the skew placement's PACKLIMIT",
    "--placement": "scheduling: the placement scheme",
    "--policy": "scheduling: the policy (repeatable in the simulator, to compare policies)",
    "--promote-knob": "scheduling: PROMOTEKNOB (starvation promotion)",
    "--ps": "a job's parameter servers (a count)",
    "--queue-order": "scheduling: the order inside a queue",
    "--rules": "scheduling: tiresias-l/-g under our queue rules or the authors' simulator's",
    "--service-groups": "scheduling: rank a queue's waiting jobs by their group's finished jobs",
    "--state": "the coordinator's state directory",
    "--thresholds": "scheduling: the queue thresholds in GPU-seconds",
    "--timeout": "seconds to wait for the coordinator's replies",
    "--tree": "ibverbs-tap: also the traced descendants of the process",
    "--user": "only this user's jobs",
    "--version": "the program's name and version",
    "--workers": "a job's workers, one GPU each (W_J)",
}
#: Old names still accepted, and what replaced them (docs/configuration.md lists them).
RENAMED = {
    "tiresias-coordinator --gittins-history": "--gittins-samples (still accepted, deprecated)",
    "tiresias submit --gpus": "--workers (removed: it was the same)",
    "tiresias-sim --workers": "--processes (removed: --workers is a job's)",
    "ibverbs-tap profile --duration": "--total (removed: --duration is a job's run time)",
    "ibverbs-tap skew --ps": "--ps-addresses (removed: --ps is a job's count)",
}

HEADER = """# Configuration reference

Every flag of every console script, with its default. Generated from the programs' own
click commands by `python tools/cli_reference.py`; do not edit by hand (a test fails when
this page and the commands disagree). `--help` on any command prints the same text.

Environment variables: `TIRESIAS_COORDINATOR` is the default coordinator address of
`tiresias`, `tiresias-agent` and jobs' runtimes; `TIRESIAS_CURVE_KEYS` the default CURVE key
directory of clients and agents. Operating a cluster: [operations.md](operations.md).
Shell completion: [README](../README.md#shell-completion).

## The rules every command line follows

- One meaning per flag name across the six programs: a flag two commands share means the
  same in both (the table below; `python tools/cli_reference.py --check` fails on a shared
  flag it does not list).
- Every program answers `--version` and `--help`; `--help` shows every flag with its default
  and every subcommand's whole summary, never cut.
- A mistake on a command line is one line, `PROGRAM [COMMAND]: problem`, and exit code 2; a
  request the coordinator refuses is one line naming the command typed (`tiresias logs:
  unknown job id 'j9'`) and exit code 1.
- `tiresias` commands and `tiresias-sim` take `--json` for scripts.
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


def shared_flags() -> dict[str, list[str]]:
    """Every flag name, long form, used by two or more commands: the commands using it."""
    uses: dict[str, list[str]] = {}
    for script in COMMANDS:
        for name, command, ctx in commands(script):
            for param in options(command, ctx):
                if isinstance(param, click.Option):
                    for opt in (*param.opts, *param.secondary_opts):
                        if opt.startswith("--"):
                            uses.setdefault(opt, []).append(name)
    return {opt: names for opt, names in uses.items() if len(names) > 1}


def vocabulary_problems() -> list[str]:
    """Where the command lines break the rules above: a shared flag with no one meaning, a
    program without --version, a help text cut short."""
    shared = shared_flags()
    problems = [
        f"{opt} is shared by {', '.join(names)}: give it one meaning in VOCABULARY, or rename it"
        for opt, names in sorted(shared.items())
        if opt not in VOCABULARY
    ]
    problems += [
        f"VOCABULARY lists {opt}, which no two commands share"
        for opt in VOCABULARY
        if opt not in shared
    ]
    for script in COMMANDS:
        for name, command, ctx in commands(script):
            if " " not in name and not any("--version" in p.opts for p in command.params):
                problems.append(f"{name} has no --version")
            cut = [ln for ln in command.get_help(ctx).splitlines()[1:] if ln.endswith("...")]
            if cut:
                problems.append(f"{name} --help cuts a text short with '...'")
    return problems


def vocabulary() -> str:
    rows = [f"| `{opt}` | {cell(text)} |\n" for opt, text in sorted(VOCABULARY.items())]
    renamed = [f"| `{old}` | {cell(new)} |\n" for old, new in RENAMED.items()]
    return (
        "\n## Shared flags\n\n| Flag | Meaning wherever it appears |\n|---|---|\n"
        + "".join(rows)
        + "\n### Renamed flags\n\n| Was | Now |\n|---|---|\n"
        + "".join(renamed)
    )


def render() -> str:
    saved = {k: os.environ.pop(k) for k in ENVIRONMENT if k in os.environ}
    try:
        out = [HEADER, vocabulary()]
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
    problems = vocabulary_problems()
    if problems:
        sys.exit("the command lines break the rules:\n" + "\n".join(problems))
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
