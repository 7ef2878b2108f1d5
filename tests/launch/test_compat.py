"""The framework patches fail open: where a private name they use has moved (fake framework
modules that shadow the real ones), the user's import and ``fit`` work unpatched and the job
says once, in one ``tiresias:`` line, that it cannot be checkpointed and why."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tiresias_launch import compat

#: Lightning whose fit loop no longer has ``_process_dataloader`` (renamed).
LIGHTNING_RENAMED = {
    "lightning/__init__.py": "",
    "lightning/pytorch/__init__.py": "from lightning.pytorch.trainer.trainer import Trainer\n"
    "from lightning.pytorch import loops\n",
    "lightning/pytorch/callbacks/__init__.py": "class Callback:\n    pass\n",
    "lightning/pytorch/loops/__init__.py": "from lightning.pytorch.loops import fit_loop\n",
    "lightning/pytorch/loops/fit_loop.py": "def _build_dataloader(trainer, loader):\n"
    "    return loader\n",
    "lightning/pytorch/trainer/__init__.py": "",
    "lightning/pytorch/trainer/trainer.py": "class Trainer:\n"
    "    def fit(self, model):\n"
    "        print('fit ran on', model)\n",
}
#: Keras 3 whose Model has fit, and whose callbacks module has moved.
KERAS_MOVED = {
    "keras/__init__.py": "",
    "keras/src/__init__.py": "",
    "keras/src/models/__init__.py": "",
    "keras/src/models/model.py": "class Model:\n"
    "    def fit(self, x):\n"
    "        print('fit ran on', x)\n",
}
#: tf_keras whose Model refuses a new fit (a patch failing in a way nobody foresaw).
TF_KERAS_FROZEN = {
    "tf_keras/__init__.py": "",
    "tf_keras/src/__init__.py": "",
    "tf_keras/src/engine/__init__.py": "",
    "tf_keras/src/engine/training.py": "class Frozen(type):\n"
    "    def __setattr__(cls, name, value):\n"
    "        raise TypeError('frozen class')\n"
    "class Model(metaclass=Frozen):\n"
    "    def fit(self, x):\n"
    "        print('fit ran on', x)\n",
}
CASES = {
    "lightning": (
        LIGHTNING_RENAMED,
        "import lightning.pytorch as L\nL.Trainer().fit('model')\nprint('done')\n",
        "has no lightning.pytorch.loops.fit_loop:_process_dataloader, which tiresias uses "
        "(makes the training loaders resumable), so its Lightning fit runs unpatched",
    ),
    "keras": (
        KERAS_MOVED,
        "from keras.src.models.model import Model\nModel().fit('x')\nprint('done')\n",
        "has no keras.src.callbacks:Callback, which tiresias uses",
    ),
    "tf_keras": (
        TF_KERAS_FROZEN,
        "from tf_keras.src.engine.training import Model\nModel().fit('x')\nprint('done')\n",
        "patching tf_keras.src.engine.training failed (TypeError: frozen class), so it runs "
        "unpatched",
    ),
}


@pytest.mark.slow  # a process per case
@pytest.mark.parametrize("framework", CASES)
def test_a_moved_internal_leaves_the_job_running_unpatched_and_says_why(
    framework: str, tmp_path: Path
) -> None:
    files, script, reason = CASES[framework]
    fake = tmp_path / "fake"
    for name, text in files.items():
        (fake / name).parent.mkdir(parents=True, exist_ok=True)
        (fake / name).write_text(text)
    (tmp_path / "train.py").write_text(script)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TIRESIAS_")}
    paths = [str(fake), os.environ.get("PYTHONPATH", "")]
    done = subprocess.run(
        [sys.executable, "-m", "tiresias_launch.exec", "train.py"],
        cwd=tmp_path,
        env={**clean, "PYTHONPATH": os.pathsep.join(paths)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    said = [line for line in lines if line.startswith("tiresias:")]
    assert len(said) == 1, done.stdout
    assert said[0].startswith("tiresias: this job cannot be checkpointed: ")
    assert reason in said[0]
    assert lines[-2:] == [f"fit ran on {'model' if framework == 'lightning' else 'x'}", "done"]
    assert "Traceback" not in done.stderr


@pytest.mark.slow  # imports the frameworks
def test_the_installed_frameworks_have_every_name_the_table_lists() -> None:
    """The pinned set (CI) has every name: a moved one would make the patches a no-op."""
    pytest.importorskip("lightning")
    for feature in ("lightning.pytorch", "torch"):
        assert compat.first_missing(feature) is None, feature


def test_the_docs_show_the_table() -> None:
    docs = Path(__file__).parents[2] / "docs" / "launcher.md"
    assert compat.markdown() in docs.read_text()
