"""Every console script answers ``--help`` cleanly, every flag says what it does and what its
default is, docs/configuration.md is the reference its parsers generate, and the systemd
examples start their programs with flags those accept."""

from __future__ import annotations

import argparse
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
    assert out.stdout.startswith(f"usage: {script} ")


def test_every_flag_has_help_stating_its_default() -> None:
    ref = _reference()
    assert set(ref.PARSERS) == set(SCRIPTS), "tools/cli_reference.py must list every script"
    missing = []
    for script in ref.PARSERS:
        for name, _, ap in ref.parsers(script):
            for action in ref.options(ap):
                text = ref.help_text(ap, action)
                plain = action.default in (None, False, 0, [], argparse.SUPPRESS)
                if not text or (not plain and "default" not in text):
                    missing.append(f"{name} {ref.flag(action)}: {text!r}")
    assert not missing, "flags without help, or whose help hides the default:\n" + "\n".join(
        missing
    )


def test_every_subcommand_formats_its_help() -> None:
    ref = _reference()
    for script in ref.PARSERS:
        for name, _, ap in ref.parsers(script):
            assert ap.format_help().startswith(f"usage: {name} "), name


def test_configuration_reference_matches_the_parsers() -> None:
    ref = _reference()
    assert (REPO / "docs/configuration.md").read_text() == ref.render(), (
        "docs/configuration.md is out of date: run python tools/cli_reference.py"
    )


def test_tiresias_help_is_whole_and_policies_come_from_the_core() -> None:
    from coordinator.cli import parser as cli_parser
    from coordinator.core.policies import POLICY_NAMES
    from coordinator.service.cli import parser as coordinator_parser

    assert "and make CURVE keys." in " ".join(cli_parser().format_help().split())
    text = " ".join(coordinator_parser().format_help().split())
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
    _reference().build(script).parse_args(argv[1:])  # exits (fails the test) on a bad flag
