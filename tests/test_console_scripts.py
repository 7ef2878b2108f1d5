"""Every console script answers ``--help`` cleanly, every flag says what it does and what its
default is, docs/configuration.md is the reference its parsers generate, and the systemd
examples start their programs with flags those accept."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.slow  # starts real processes

REPO = Path(__file__).resolve().parents[1]
SCRIPTS: dict[str, str] = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]


def _reference() -> ModuleType:
    spec = importlib.util.spec_from_file_location("cli_reference", REPO / "tools/cli_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_console_script_answers_help(script: str) -> None:
    module, function = SCRIPTS[script].split(":")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIRESIAS_")}
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys; from {module} import {function}; sys.exit({function}())",
            "--help",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(env, PYTHONPATH=str(REPO)),
    )
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert out.stdout.startswith(f"Usage: {script} ")


def test_every_flag_has_help_stating_its_default() -> None:
    ref = _reference()
    assert set(ref.COMMANDS) == set(SCRIPTS), "tools/cli_reference.py must list every script"
    missing = []
    for script in ref.COMMANDS:
        for name, command, ctx in ref.commands(script):
            for param in ref.options(command, ctx):
                text = ref.help_text(param, ctx)
                plain = ref.default_value(param, ctx) in (None, False, 0, (), [])
                if not text or (not plain and "default" not in text):
                    missing.append(f"{name} {ref.flag(param, ctx)}: {text!r}")
    assert not missing, "flags without help, or whose help hides the default:\n" + "\n".join(
        missing
    )


def test_every_subcommand_formats_its_help() -> None:
    ref = _reference()
    for script in ref.COMMANDS:
        for name, command, ctx in ref.commands(script):
            assert command.get_help(ctx).startswith(f"Usage: {name} "), name


def test_configuration_reference_matches_the_parsers() -> None:
    ref = _reference()
    assert (REPO / "docs/configuration.md").read_text() == ref.render(), (
        "docs/configuration.md is out of date: run python tools/cli_reference.py"
    )


def test_tiresias_help_is_whole_and_policies_come_from_the_core() -> None:
    from coordinator.core.policies import POLICY_NAMES

    ref = _reference()
    [(_, tiresias, ctx), *_] = ref.commands("tiresias")
    assert "and make CURVE keys." in " ".join(tiresias.get_help(ctx).split())
    [(_, coordinator, ctx)] = ref.commands("tiresias-coordinator")
    text = " ".join(coordinator.get_help(ctx).split())
    assert all(name in text for name in POLICY_NAMES) and "fifo" not in text


@pytest.mark.parametrize(
    "unit", sorted((REPO / "examples/systemd").glob("*.service")), ids=lambda p: p.name
)
def test_systemd_example_runs_a_console_script_with_valid_flags(unit: Path) -> None:
    text = unit.read_text().replace("\\\n", " ")
    [exec_start] = [line for line in text.splitlines() if line.startswith("ExecStart=")]
    [env_file] = [line for line in text.splitlines() if line.startswith("EnvironmentFile=")]
    env_lines = (unit.parent / Path(env_file.split("=", 1)[1]).name).read_text().splitlines()
    env = dict(line.split("=", 1) for line in env_lines if line and not line.startswith("#"))
    argv = [
        re.sub(r"\$\{(\w+)\}", lambda m: env[m[1]], word)
        for word in shlex.split(exec_start.removeprefix("ExecStart="))
    ]
    script = Path(argv[0]).name
    assert script in SCRIPTS
    _reference().build(script).make_context(script, argv[1:])  # raises on a bad flag


@pytest.mark.parametrize(
    ("argv", "workers", "script", "args"),
    [
        (["--workers", "8", "my_model.py", "--lr", "0.1"], "8", "my_model.py", ["--lr", "0.1"]),
        (["s.py", "x", "--workers", "3", "-v"], "1", "s.py", ["x", "--workers", "3", "-v"]),
        (["--", "s.py", "a"], "1", "s.py", ["a"]),
        (["s.py", "--", "a"], "1", "s.py", ["a"]),
        (["s.py", "a", "--", "b"], "1", "s.py", ["a", "--", "b"]),
        (["s.py", "--", "--", "a"], "1", "s.py", ["--", "a"]),
        (["--workers", "2", "--", "s.py", "--", "a"], "2", "s.py", ["--", "a"]),
        (["--workers", "2:8", "s.py", "--workers", "4"], "2:8", "s.py", ["--workers", "4"]),
    ],
)
def test_script_arguments_pass_through(
    argv: list[str], workers: str, script: str, args: list[str]
) -> None:
    """``tiresias-run`` and ``tiresias submit`` take their own options up to the script and
    hand every word after it to the script, options included; a ``--`` ends their options
    (once: a second one is the script's)."""
    from tiresias_cli.kit import passthrough

    ref = _reference()
    [(_, tiresias, parent), *_] = ref.commands("tiresias")
    for ctx in (
        ref.build("tiresias-run").make_context("tiresias-run", list(argv)),
        tiresias.commands["submit"].make_context("submit", list(argv), parent=parent),
    ):
        assert str(ctx.params["workers"]) == workers
        assert (ctx.params["script"], passthrough(ctx, ctx.params["args"])) == (script, args)


@pytest.mark.parametrize(
    ("script", "words", "expected"),
    [
        ("tiresias", "tiresias su", "plain,submit"),
        ("tiresias", "tiresias keys add-", "plain,add-agent\nplain,add-user"),
        ("tiresias-coordinator", "tiresias-coordinator --policy tiresias-", "plain,tiresias-l"),
        ("tiresias-run", "tiresias-run --verb", "plain,--verbose"),
        ("tiresias-agent", "tiresias-agent --heart", "plain,--heartbeat"),
        ("tiresias-sim", "tiresias-sim --cheap", "plain,--cheap-victims"),
        ("ibverbs-tap", "ibverbs-tap pro", "plain,profile"),
    ],
)
def test_shell_completion(script: str, words: str, expected: str) -> None:
    """What bash gets back from the line the README's ``eval`` installs, mid-word."""
    module, function = SCRIPTS[script].split(":")
    variable = "_" + script.upper().replace("-", "_") + "_COMPLETE"
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys; from {module} import {function}; sys.exit({function}())",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(
            os.environ,
            PYTHONPATH=str(REPO),
            COMP_WORDS=words,
            COMP_CWORD=str(len(words.split()) - 1),
            **{variable: "bash_complete"},
        ),
    )
    assert out.returncode == 0, out.stderr
    assert expected in out.stdout, out.stdout


def test_one_meaning_per_flag_name_and_a_version_everywhere() -> None:
    """The rules of docs/configuration.md: every shared flag has one meaning (listed), every
    program has --version, no help text is cut."""
    assert _reference().vocabulary_problems() == []
