"""``python -m tiresias_launch.exec`` and ``.server`` start-up paths (no TensorFlow)."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import wait_until

from tiresias_launch.checkpointable import why_not

pytestmark = pytest.mark.slow  # starts real processes


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
    assert done.stdout.splitlines()[-1] == (
        f"['3', 'x'] {tmp_path / 'tiresias-checkpoints' / 'train_me'}"
    )


#: A custom loop with nothing checkpointable (no State, no fit), as users write them.
PLAIN_LOOP = """
import pathlib, sys, time
step = 0
while True:
    step += 1
    if step == 3:
        pathlib.Path(sys.argv[1]).touch()
    time.sleep(0.01)
"""


def killed_by_sigterm_once_ready(script: Path, ready: Path, cwd: Path) -> str:
    """Run ``script ready`` through exec outside any job, SIGTERM it once it has touched
    ``ready``, check that the signal's default action ended it, and return its output."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tiresias_launch.exec", str(script), str(ready)],
        cwd=cwd,
        stdout=subprocess.PIPE,
        text=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("TIRESIAS_")},
    )
    try:
        wait_until(ready.exists, 30, "the script to run")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == -signal.SIGTERM
    finally:
        proc.kill()
    return proc.stdout.read() if proc.stdout else ""


def test_nothing_checkpointable_is_said_and_sigterm_keeps_its_default(tmp_path: Path) -> None:
    """SIGTERM stops it as it stops a plain run (it used to be swallowed until SIGKILL)."""
    script, ready = tmp_path / "loop.py", tmp_path / "ready"
    script.write_text(PLAIN_LOOP)
    out = killed_by_sigterm_once_ready(script, ready, tmp_path)
    assert out.count("tiresias: this job cannot be checkpointed: loop.py uses no") == 1, out


@pytest.mark.parametrize(
    ("source", "verdict"),
    [
        ("import tiresias\nstate = tiresias.State(model=m)\n", None),
        ("from tiresias import preemptible\n@preemptible\ndef step(): ...\n", None),
        ("model.fit(x, y, epochs=2)\n", None),
        ("import signal\nsignal.signal(signal.SIGTERM, on_term)\n", None),
        ("for step in range(10):\n    train_step()\n", "restarts from step 0"),
        (
            "m = tf.train.CheckpointManager(ckpt, d, 3)\nfor s in range(9): step()\n",
            "keeps its own checkpoints (CheckpointManager), so a preemption stops it and it "
            "resumes from its own checkpoints",
        ),
        (  # the torchrun tutorial's snapshot
            "import torch\nif os.path.exists(p):\n    snap = torch.load(p)\n"
            "for e in range(9):\n    train()\n    torch.save(snap, p)\n",
            "keeps its own checkpoints (torch.save/torch.load), so a preemption stops it and it "
            "resumes from its own checkpoints",
        ),
        ("import torch\ntorch.save(model.state_dict(), 'final.pt')\n", "restarts from step 0"),
        (  # a loop that saves itself another way, and says where it is
            "import tiresias\nfor s in range(start, 9):\n    tiresias.report(step=s)\n",
            "a preemption stops it, and the steps it reports say where it resumes",
        ),
    ],
)
def test_what_counts_as_checkpointable(tmp_path: Path, source: str, verdict: str | None) -> None:
    script = tmp_path / "train.py"
    script.write_text(source)
    why = why_not(script)
    assert why == verdict if verdict is None else verdict in (why or "")


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


def test_a_signal_before_anything_checkpointable_started_has_its_default_effect(
    tmp_path: Path,
) -> None:
    """The script will make a State (so nothing is said at start), but SIGTERM comes first:
    the process dies of it at once, having trained nothing since its last checkpoint."""
    script, ready = tmp_path / "later.py", tmp_path / "ready"
    script.write_text(
        "import pathlib, sys, time\n"
        "pathlib.Path(sys.argv[1]).touch()\n"
        "while True:\n"
        "    time.sleep(0.01)\n"
        "state = tiresias.State(model=model)  # never reached\n"
    )
    out = killed_by_sigterm_once_ready(script, ready, tmp_path)
    assert "cannot be checkpointed" not in out
    assert "tiresias: SIGTERM before anything checkpointable started" in out, out


def test_the_wrapper_imports_no_framework_before_the_script_does(tmp_path: Path) -> None:
    """Every job starts through exec: a PyTorch job or a fake one must not pay for a
    TensorFlow import (seconds, more on a loaded node) before its first line runs."""
    script = tmp_path / "plain.py"
    script.write_text(
        "import sys\nprint(sorted({'tensorflow', 'keras', 'torch'} & set(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "tiresias_launch.exec", str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "TIRESIAS_CHECKPOINT_DIR": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]"


def test_a_job_process_imports_only_the_runtime_and_its_transport(tmp_path: Path) -> None:
    """Nothing of the coordinator, the simulator (matplotlib, tqdm) or NVML is loaded into a
    training process: they are not even in the base install (pyproject extras)."""
    script = tmp_path / "train.py"
    script.write_text(
        "import sys\nimport tiresias\n"
        "state = None  # a State would load its framework: not part of the runtime's cost\n"
        "print(sorted({m.split('.')[0] for m in sys.modules}))\n"
    )
    done = _run(["-m", "tiresias_launch.exec", str(script)], tmp_path)
    assert done.returncode == 0, done.stderr
    loaded = set(ast.literal_eval(done.stdout.splitlines()[-1]))
    assert {"tiresias", "tiresias_launch", "zmq", "msgpack"} <= loaded
    unwanted = {"coordinator", "matplotlib", "tqdm", "pynvml", "prometheus_client", "click"}
    assert not loaded & unwanted


def test_the_wheel_has_no_top_level_models_or_tools_package() -> None:
    """A user's own ``models`` or ``tools`` package is common in ML repositories."""
    import tomllib

    from setuptools import find_packages

    repo = Path(__file__).parents[2]
    found = tomllib.loads((repo / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = find_packages(str(repo), include=found["packages"]["find"]["include"])
    assert {p.split(".")[0] for p in packages} == {
        "coordinator",
        "ibverbs_tap",
        "tiresias",
        "tiresias_cli",
        "tiresias_launch",
    }
