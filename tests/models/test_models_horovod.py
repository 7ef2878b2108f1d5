"""Two-rank Horovod (Gloo) jobs on one machine: through ``horovodrun``, and the way Tiresias
starts them (``gang.plan`` env, rank 0 hosting the rendezvous), preempted together."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from helpers import needs
from model_scripts import python, run, script_env, wait_for_line

from coordinator.gang import GangRequest, free_local_port, plan


def _horovod_import_error() -> str | None:
    try:
        import horovod.tensorflow  # noqa: F401
    except Exception as e:  # ImportError, or a build missing symbols (OSError)
        return f"horovod.tensorflow does not import: {type(e).__name__}: {e}"
    return None


pytestmark = [pytest.mark.tf, pytest.mark.horovod, needs("horovod", "needs Horovod")]


@pytest.fixture(autouse=True, scope="module")
def _horovod_tensorflow_imports() -> None:
    """Checked when the tests run, not at collection (importing it takes seconds)."""
    error = _horovod_import_error()
    if error is not None:
        pytest.skip(error)


def test_two_ranks_with_horovodrun(tmp_path: Path) -> None:
    horovodrun = shutil.which("horovodrun")
    assert horovodrun, "horovod imports but horovodrun is not on PATH"
    train = python("train_horovod.py", "--steps", "3", "--log-every", "1", "--save", "final")
    out = run([horovodrun, "--gloo", "-np", "2", "-H", "localhost:2", *train], tmp_path)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    assert "[0]<stdout>:step 2 loss" in out.stdout and "ranks 2" in out.stdout
    assert "[1]<stdout>:step" not in out.stdout  # rank 0 alone logs
    assert (tmp_path / "final.index").exists()  # ... and saves


def _start_gang(tmp_path: Path, name: str, *args: str) -> list[subprocess.Popen]:
    specs = plan(
        GangRequest(argv=("models/train_horovod.py", *args), workers=2, horovod=True),
        job_id="hvd",
        placement={"localhost": [0, 1]},
        coordinator=None,
        checkpoint_root=tmp_path,
        restart=0,
        ports=free_local_port,
    )
    procs = []
    for spec in specs:
        with (tmp_path / f"{name}-{spec.task_index}.log").open("wb") as fh:
            procs.append(
                subprocess.Popen(
                    spec.argv,
                    cwd=Path(__file__).resolve().parents[2],
                    env=script_env({**spec.env, "TF_USE_LEGACY_KERAS": "1"}),
                    stdout=fh,
                    stderr=subprocess.STDOUT,
                )
            )
    return procs


def test_two_ranks_without_horovodrun_stop_together_on_preemption(tmp_path: Path) -> None:
    """Under tf_keras (horovodrun above runs Keras 3). Resuming goes through the same
    ``tiresias.State`` restore that the train.py preemption test covers; the point here is
    the rendezvous and the agreed stop."""
    procs = _start_gang(tmp_path, "first", "--steps", "1000000", "--log-every", "1")
    wait_for_line(tmp_path / "first-0.log", "step 3 loss", procs[0], timeout=90)
    for p in procs:
        p.send_signal(signal.SIGTERM)
    codes = [p.wait(timeout=60) for p in procs]
    assert codes == [75, 75], (tmp_path / "first-1.log").read_text()[-3000:]
    (manifest,) = (tmp_path / "hvd").glob("ckpt-*/MANIFEST.json")
    saved = json.loads(manifest.read_text())["step"]
    assert f"step {saved - 1} loss" in (tmp_path / "first-0.log").read_text()
