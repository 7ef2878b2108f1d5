"""The service builds its scheduler as the simulator does, from one ``Settings``: a live
cluster and ``tiresias-sim`` given the same options decide alike."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import FAKE_JOB

from coordinator.core.settings import Settings, build_scheduler
from coordinator.service import cli
from coordinator.service.coordinator import Options
from coordinator.service.store import Store
from coordinator.sim.engine import SimOptions, core_settings


@pytest.mark.parametrize(
    ("policy", "placement"),
    [
        ("tiresias-l", "skew"),
        ("tiresias-g", "skew"),
        ("yarn-cs", "yarn"),
        ("best-effort", "yarn"),
        ("srtf", "consolidate"),
        ("las", "consolidate"),
    ],
)
def test_default_placement_follows_the_policy_as_in_the_simulator(
    policy: str, placement: str
) -> None:
    live = build_scheduler(Options(settings=Settings(policy=policy)).core_settings())
    assert live.placement.name == placement
    simulated = build_scheduler(core_settings(policy, SimOptions()))
    assert type(live.placement) is type(simulated.placement)


def test_configured_placement_wins() -> None:
    ctx = cli.command.make_context(
        "tiresias-coordinator", ["--policy", "yarn-cs", "--placement", "spread"]
    )
    assert build_scheduler(cli.options(**ctx.params).core_settings()).placement.name == "spread"


def test_live_and_simulated_options_give_the_same_settings() -> None:
    """Every scheduling option the simulator takes, the service takes too, to the same core
    settings (only the simulator's seed samples come from a file the service names)."""
    thresholds = (100.0, 1000.0)
    knobs: dict[str, Any] = {
        "promote_knob": 4.0,
        "interval": 60.0,
        "queue_order": "running-first",
        "min_run": 30.0,
        "min_run_restores": 2.0,
        "cheap_victims": True,
        "learn_thresholds": True,
        "service_groups": ("user", "gpus"),
        "packlimit": 0.4,
        "placement": "spread",
        "gittins_variant": "authors",
        "gittins_learn": False,
        "rules": "authors-exact-demotion",
        "elastic_payback": 3.0,
    }
    live = Settings(policy="tiresias-g", queue_thresholds=thresholds, **knobs)
    simulated = core_settings("tiresias-g", SimOptions.of(thresholds=thresholds, **knobs))
    assert live == simulated
    assert simulated != core_settings("tiresias-g", SimOptions())
    shared = {f.name for f in dataclasses.fields(Settings)} - {
        "policy",
        "queue_thresholds",
        "reject_oversized",
        "gittins_samples",
        "await_begin",  # the executor's, not an option: a simulated start is its begin
    }
    assert shared == set(knobs)  # a new setting must reach the simulator too


def test_coordinator_flags_reach_the_core_settings() -> None:
    flags = "--min-run 30 --min-run-restores 2 --cheap-victims"
    flags += " --learn-thresholds --gittins-variant authors --gittins-fixed --policy tiresias-g"
    flags += " --service-groups user,batch"
    ctx = cli.command.make_context("tiresias-coordinator", flags.split())
    simulated = SimOptions.of(
        min_run=30.0,
        min_run_restores=2.0,
        cheap_victims=True,
        learn_thresholds=True,
        service_groups=("user", "batch"),
        gittins_variant="authors",
        gittins_learn=False,
    )
    assert cli.options(**ctx.params).core_settings() == core_settings("tiresias-g", simulated)


@pytest.mark.parametrize(
    "bad",
    ["--min-run-restores=-1", "--min-run=inf", "--queue-order=lifo", "--service-groups=user,x"],
)
def test_a_bad_scheduling_flag_is_one_line_and_exit_2(
    bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main([bad]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"tiresias-coordinator: Invalid value for '{bad.split('=')[0]}'")


@pytest.mark.slow  # starts a process
def test_tiresias_run_gives_its_embedded_coordinator_the_scheduling_options(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    flags = "--min-run 5 --min-run-restores 3 --queue-order first-start --cheap-victims"
    job = [str(FAKE_JOB), "--steps", "1", "--step-time", "0"]
    done = subprocess.run(
        [sys.executable, "-m", "coordinator.run", "--state", str(state), *flags.split(), *job],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    store = Store(state)
    recorded = store.get_meta("core_options")
    store.close()
    expected = {"min_run": 5.0, "min_run_restores": 3.0, "queue_order": "first-start"}
    assert {k: recorded[k] for k in expected} == expected and recorded["cheap_victims"] is True
