"""Elastic jobs without a framework: the environment, the batch factor, what the runtime
declares (once, elastic jobs only)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiresias_launch import elastic
from tiresias_launch.env import EnvError, parse
from tiresias_launch.runtime import Runtime


def _runtime(tmp_path: Path, **env: str) -> Runtime:
    return Runtime(parse({"TIRESIAS_CHECKPOINT_DIR": str(tmp_path), **env}))


def test_the_largest_world_sets_the_factor_or_why_not(tmp_path: Path) -> None:
    def env(world: int, top: int | None) -> dict[str, str]:
        shape = {"TIRESIAS_NUM_WORKERS": str(world), "TIRESIAS_MODE": "allreduce"}
        return shape | ({"TIRESIAS_MAX_WORKERS": str(top)} if top else {})

    assert elastic.factor(parse(env(2, 8))) == 4
    assert elastic.factor(parse(env(8, 8))) == 1
    assert elastic.factor(parse(env(3, None))) == 1  # rigid: its own world
    assert not parse(env(3, None)).elastic and parse(env(3, 8)).elastic
    assert elastic.factor(parse(env(3, 8))) == (
        "its world of 3 does not divide its largest world, 8 workers"
    )
    with pytest.raises(EnvError, match="TIRESIAS_MAX_WORKERS=0: must be >= 1"):
        parse(env(2, 0) | {"TIRESIAS_MAX_WORKERS": "0"})


def test_a_rigid_fallback_is_said_once_and_reported(tmp_path: Path, capsys) -> None:
    rt = _runtime(tmp_path, TIRESIAS_NUM_WORKERS="2", TIRESIAS_MAX_WORKERS="4")
    elastic.declare(rt, "no loader")
    elastic.declare(rt, "no loader")  # a second framework object: said already
    line = "this job runs rigid, at 2 workers: no loader"
    assert capsys.readouterr().out == f"tiresias: {line}\n"
    msg = rt.reporter.message()
    assert msg is not None and msg["resizable"] is False and msg["notice"] == line


def test_only_elastic_jobs_declare(tmp_path: Path, capsys) -> None:
    rigid = _runtime(tmp_path)
    elastic.declare(rigid, "no loader")  # a rigid job: nothing to say, nothing to pin
    assert rigid.reporter.message() is None and capsys.readouterr().out == ""
    kept = _runtime(tmp_path, TIRESIAS_MAX_WORKERS="1")
    elastic.declare(kept, None)
    msg = kept.reporter.message()
    assert msg is not None and msg["resizable"] is True and msg["notice"] is None
