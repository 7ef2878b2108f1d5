"""What every Tiresias command line shares, on click.

- Every usage error is ONE line naming the problem, exit code 2 (click's own print a usage
  block and a hint first): :func:`run` is each program's ``main``.
- ``--help`` shows every default (``show_default``); a string ``show_default`` reads as
  written, a float as ``%g``. Options may sit under headings (``section=``) and positional
  arguments have a line of help.
- Shell completion is click's: ``_PROG_COMPLETE=bash_source PROG`` (README, "Shell
  completion").
- A reader that goes away (``| head``) ends the program quietly, as ``cat`` does.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NoReturn

import click

CONTEXT_SETTINGS: dict[str, Any] = {
    "help_option_names": ["-h", "--help"],
    "show_default": True,
    "max_content_width": 100,
}
#: The settings of a command whose first positional (a script, a command) starts its own
#: arguments: everything after it is passed on untouched, options included.
PASSTHROUGH_SETTINGS: dict[str, Any] = {**CONTEXT_SETTINGS, "allow_interspersed_args": False}
#: Joins the words of a greedy option (``--sweep NAME V…``) into one value; no word of a
#: command line can hold it.
WORDS = "\0"
_DASHES = "tiresias.dashes"
#: ``ctx.meta`` key of the words a command was given, as given (for a record of the run).
ARGV = "tiresias.argv"


def quiet_broken_pipe() -> int:
    """The reader of our output went away (``| head``): stop without a traceback, as ``cat``
    does, exiting 128 + SIGPIPE."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit flush is moot
    return 128 + signal.SIGPIPE


def _shown(value: Any) -> str:
    if isinstance(value, float):
        return "inf" if math.isinf(value) else f"{value:g}"
    if isinstance(value, list | tuple):
        return ",".join(map(_shown, value))
    return str(value)


class Option(click.Option):
    """An option under a help heading, whose default reads as a person writes it."""

    def __init__(self, *args: Any, section: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.section = section

    def get_help_extra(self, ctx: click.Context) -> Any:
        extra = super().get_help_extra(ctx)
        if isinstance(self.show_default, str):
            extra["default"] = self.show_default
        elif "default" in extra and not self.is_flag:
            extra["default"] = _shown(self.get_default(ctx, call=False))
        return extra


class Argument(click.Argument):
    """A positional argument with a line of help."""

    def __init__(self, *args: Any, help: str = "", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.help = help


def option(*names: str, **kwargs: Any) -> Callable[..., Any]:
    return click.option(*names, cls=Option, **kwargs)


def argument(name: str, **kwargs: Any) -> Callable[..., Any]:
    return click.argument(name, cls=Argument, **kwargs)


def version_option() -> Callable[..., Any]:
    """``--version`` of a program: its name and the installed Tiresias version."""
    return click.version_option(
        package_name="tiresias",
        message="%(prog)s %(version)s",
        help="print the version and exit",
    )


def json_option(text: str = "machine-readable output (JSON)", **kwargs: Any) -> Callable[..., Any]:
    return option("--json", "as_json", is_flag=True, help=text, **kwargs)


#: One item of a listing on one line (one encoder: ``json.dumps`` makes one per call).
_ONE_LINE = json.JSONEncoder(sort_keys=True)


def emit(as_json: bool, data: Any, human: Callable[[Any], str]) -> None:
    """``data`` for people, or as JSON: indented, but a list one item a line (each item by
    the C encoder; indenting 10,000 jobs took seconds in Python's)."""
    if not as_json:
        print(human(data))
    elif isinstance(data, list) and data:
        print("[\n" + ",\n".join(map(_ONE_LINE.encode, data)) + "\n]")
    else:
        print(json.dumps(data, indent=2, sort_keys=True))


def usage_error(message: str) -> NoReturn:
    """Stop the running command with a usage error (one line, exit code 2)."""
    raise click.UsageError(message, ctx=click.get_current_context())


def _is_option(word: str) -> bool:
    if not word.startswith("-") or word == "-":
        return False
    try:
        float(word)  # a negative number is a value
    except ValueError:
        return True
    return False


def gather(args: Sequence[str], greedy: Iterable[str]) -> list[str]:
    """``args`` with the words after each greedy option, up to the next option, joined into
    that option's one value (``--ps A B``); nothing after ``--`` is touched."""
    names = set(greedy)
    out: list[str] = []
    i = 0
    while i < len(args):
        word = args[i]
        out.append(word)
        i += 1
        if word == "--":
            return out + list(args[i:])
        if word in names:
            end = i
            while end < len(args) and not _is_option(args[end]):
                end += 1
            out.append(WORDS.join(args[i:end]))
            i = end
    return out


def words(text: str) -> tuple[str, ...]:
    """The words a greedy option gathered (see :func:`gather`)."""
    return tuple(w for w in text.split(WORDS) if w)


def passthrough(ctx: click.Context, args: Sequence[str]) -> list[str]:
    """The words after a passthrough command's script: a ``--`` right after the script ends
    the options, and is dropped, unless one before the script already did."""
    if args[:1] == ("--",) and ctx.meta.get(_DASHES) == list(args).count("--"):
        return list(args[1:])
    return list(args)


class Command(click.Command):
    """A click command with headings, argument help, greedy options, a quiet broken pipe."""

    def __init__(self, *args: Any, greedy: Iterable[str] = (), **kwargs: Any) -> None:
        kwargs.setdefault("context_settings", CONTEXT_SETTINGS)
        super().__init__(*args, **kwargs)
        self.greedy = tuple(greedy)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta[ARGV] = list(args)
        ctx.meta[_DASHES] = args.count("--")
        try:
            return super().parse_args(ctx, gather(args, self.greedy) if self.greedy else args)
        except click.UsageError as e:
            e.ctx = e.ctx or ctx  # click leaves some without one: they name the command too
            raise

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            return quiet_broken_pipe()

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self.format_usage(ctx, formatter)
        self.format_help_text(ctx, formatter)
        arguments = [p for p in self.get_params(ctx) if isinstance(p, Argument)]
        if arguments:
            with formatter.section("Arguments"):
                formatter.write_dl([(p.human_readable_name, p.help or "") for p in arguments])
        self.format_options(ctx, formatter)
        self.format_epilog(ctx, formatter)

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        sections: dict[str, list[tuple[str, str]]] = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None and not isinstance(param, click.Argument):
                sections.setdefault(getattr(param, "section", None) or "Options", []).append(record)
        for title, records in sections.items():
            with formatter.section(title):
                formatter.write_dl(records)


class Group(click.Group):
    """A click group whose commands are :class:`Command` and whose own usage errors are one
    line too (a missing command is an error, not the help)."""

    command_class = Command

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("context_settings", CONTEXT_SETTINGS)
        kwargs.setdefault("no_args_is_help", False)
        super().__init__(*args, **kwargs)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Each command with its whole first sentence, wrapped, never cut with "..."."""
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=1 << 16)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


Group.group_class = Group


def _one_line(text: str) -> str:
    return "; ".join(line.strip() for line in text.strip().splitlines() if line.strip())


def run(command: click.Command, argv: Sequence[str] | None, prog: str) -> int:
    """Run ``command`` as the program ``prog``: its exit code; a usage error is one line on
    stderr, ``PROG [SUBCOMMAND]: PROBLEM``, and exit code 2."""
    try:
        rv = command.main(
            args=list(argv) if argv is not None else None, prog_name=prog, standalone_mode=False
        )
    except click.UsageError as e:
        where = e.ctx.command_path if e.ctx is not None else prog
        print(f"{where}: {_one_line(e.format_message())}", file=sys.stderr)
        return 2
    except click.ClickException as e:
        print(f"{prog}: {_one_line(e.format_message())}", file=sys.stderr)
        return e.exit_code
    except click.Abort:  # Ctrl-C outside a command's own handling
        return 130
    return rv if isinstance(rv, int) else 0
