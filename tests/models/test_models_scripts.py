"""Smoke runs of train_keras.py (Keras 3 and tf_keras), and train.py's preempt → checkpoint →
resume cycle under the launcher's exec wrapper (Keras 3; the custom loop runs under tf_keras in
the Horovod gang test)."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest
from model_scripts import first_logged_step, launched, python, run, script_env, wait_for_line

pytestmark = pytest.mark.tf

KERAS = {"keras3": {"TF_USE_LEGACY_KERAS": "0"}, "tf_keras": {"TF_USE_LEGACY_KERAS": "1"}}


@pytest.mark.parametrize("keras", sorted(KERAS))
def test_keras_fit_trains(keras: str, tmp_path: Path) -> None:
    out = run(
        python("train_keras.py", "--model", "cnn", "--steps", "2", "--epochs", "1"),
        tmp_path,
        KERAS[keras],
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "2/2" in out.stdout


def test_custom_loop_resumes_where_it_was_preempted(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    extra = {"TIRESIAS_CHECKPOINT_DIR": str(ckpt), "TIRESIAS_JOB_ID": "train-py"}
    log = tmp_path / "first.log"
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            launched("train.py", "--steps", "1000000", "--log-every", "1"),
            cwd=tmp_path,
            env=script_env(extra),
            stdout=fh,
            stderr=subprocess.STDOUT,
        )
        wait_for_line(log, "step 3 loss", proc, timeout=60)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 75, log.read_text()[-3000:]
    (manifest,) = ckpt.glob("ckpt-*/MANIFEST.json")
    saved = json.loads(manifest.read_text())["step"]
    assert saved > 3

    second = tmp_path / "second.log"
    out = run(launched("train.py", "--steps", str(saved + 2), "--log-every", "1"), tmp_path, extra)
    assert out.returncode == 0, out.stderr[-3000:]
    second.write_text(out.stdout)
    assert first_logged_step(second) == saved
    assert f"step {saved + 1} loss" in out.stdout
