"""``python -m tiresias_launch.exec`` and ``.server`` start-up paths (no TensorFlow)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def _run(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("TIRESIAS_", "TF_CONFIG"))}
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_runs_script_as_main_with_its_arguments(tmp_path: Path) -> None:
    script = tmp_path / "train_me.py"
    script.write_text(
        "import sys\n"
        "import tiresias\n"
        "assert __name__ == '__main__'\n"
        "print(sys.argv[1:], tiresias.get_runtime().env.checkpoint_dir)\n"
        "sys.exit(int(sys.argv[1]))\n"
    )
    done = _run(["-m", "tiresias_launch.exec", str(script), "3", "x"], tmp_path)
    assert done.returncode == 3, done.stderr
    assert done.stdout.strip() == f"['3', 'x'] {tmp_path / 'tiresias-checkpoints' / 'train_me'}"


@pytest.mark.parametrize(
    ("args", "env", "code", "message"),
    [
        ([], {}, 2, "usage: python -m tiresias_launch.exec script.py"),
        (["missing.py"], {}, 2, "no such script: missing.py"),
        (["ok.py"], {"TIRESIAS_ROLE": "boss"}, 2, "bad environment: TIRESIAS_ROLE='boss'"),
        (["boom.py"], {}, 1, "RuntimeError: boom"),
    ],
)
def test_start_up_errors_are_clear(
    tmp_path: Path, args: list[str], env: dict[str, str], code: int, message: str
) -> None:
    (tmp_path / "ok.py").write_text("")
    (tmp_path / "boom.py").write_text("raise RuntimeError('boom')\n")
    done = _run(["-m", "tiresias_launch.exec", *args], tmp_path, **env)
    assert done.returncode == code
    assert message in done.stderr


def test_server_refuses_a_non_ps_environment(tmp_path: Path) -> None:
    done = _run(["-m", "tiresias_launch.server"], tmp_path)
    assert done.returncode == 2
    assert "only ps/worker tasks of a ps-mode job" in done.stderr
