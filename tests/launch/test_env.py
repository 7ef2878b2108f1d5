"""The environment contract: defaults for pass-through runs, clear errors for bad values."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tiresias_launch.env import EnvError, parse


def test_pass_through_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", ["/x/train_me.py"])
    e = parse({})
    assert e.coordinator is None
    assert (e.role, e.mode, e.task_index, e.restart) == ("chief", "single", 0, 0)
    assert e.checkpoint_dir == tmp_path / "tiresias-checkpoints" / "train_me"
    assert e.preempt_signals == (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)


def test_full_environment() -> None:
    e = parse(
        {
            "TIRESIAS_COORDINATOR": "tcp://h:5",
            "TIRESIAS_JOB_ID": "j1",
            "TIRESIAS_ROLE": "worker",
            "TIRESIAS_TASK_INDEX": "1",
            "TIRESIAS_NUM_WORKERS": "2",
            "TIRESIAS_MODE": "horovod",
            "TIRESIAS_CHECKPOINT_DIR": "/ck/j1",
            "TIRESIAS_PREEMPT_SIGNAL": "usr1",
            "TF_CONFIG": '{"cluster": {}}',
        }
    )
    assert e.multi_process and not e.is_chief
    assert e.preempt_signals == (signal.SIGUSR1, signal.SIGUSR2)
    assert e.checkpoint_dir == Path("/ck/j1")


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"TIRESIAS_TASK_INDEX": "one"}, "TIRESIAS_TASK_INDEX='one': expected an integer"),
        ({"TIRESIAS_NUM_WORKERS": "0"}, "must be >= 1"),
        ({"TIRESIAS_ROLE": "boss"}, "expected one of chief, worker, ps"),
        ({"TIRESIAS_PREEMPT_SIGNAL": "SIGNOPE"}, "not a signal name"),
        ({"TIRESIAS_COORDINATOR": "h:5"}, "expected a ZeroMQ address"),
        ({"TIRESIAS_COORDINATOR": "tcp://h:5"}, "TIRESIAS_JOB_ID must be set"),
        ({"TF_CONFIG": "{"}, "TF_CONFIG is not valid JSON"),
        ({"TIRESIAS_MODE": "ps"}, "needs TIRESIAS_NUM_PS >= 1"),
        ({"TIRESIAS_HOLD_AT_STEP": "3,x"}, "TIRESIAS_HOLD_AT_STEP='x': expected an integer"),
        ({"TIRESIAS_HOLD_AT_STEP": "3,0"}, "TIRESIAS_HOLD_AT_STEP=0: must be >= 1"),
        ({"TIRESIAS_ELASTIC_BATCH": "grow"}, "expected one of scale, accumulate"),
    ],
)
def test_bad_values_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(EnvError, match=message.replace("(", r"\(").replace("[", r"\[")):
        parse(env)


def test_hold_at_step_is_one_step_per_run() -> None:
    """``S0,S1,…``: the run after r preemptions holds at the r-th step (a resize test)."""
    assert parse({"TIRESIAS_HOLD_AT_STEP": "3, 6"}).hold_at_steps == (3, 6)
    assert parse({"TIRESIAS_HOLD_AT_STEP": "4"}).hold_at_steps == (4,)
    assert parse({"TIRESIAS_HOLD_AT_STEP": ""}).hold_at_steps == ()
