"""Whether a training script has anything the runtime can checkpoint, decided at start.

``tiresias_launch.exec`` reads the script before running it. A script is checkpointable when
its own code mentions ``State`` or ``preemptible`` (``tiresias.State``,
``@tiresias.preemptible``) or calls a ``.fit(`` (Keras ``fit``, patched by the runtime); a
script that installs its own signal handler (``signal.signal``) preempts itself and is left
alone. A script that saves and restores itself (``tf.train.CheckpointManager``,
``BackupAndRestore``, ``torch.save`` with ``torch.load``) resumes from its own checkpoints;
one that calls ``tiresias.report(step=…)`` tells the coordinator where it resumed. Anything
else cannot be checkpointed: the runtime says so once in the log, reports it to the
coordinator, and leaves the preemption signal's default action alone. The check reads the
script only, not the modules it imports; a script that turns out to create a ``State`` after
all is checkpointable from then on (``Runtime.restore`` claims the signals).
"""

from __future__ import annotations

import ast
from pathlib import Path

from tiresias_launch.contract import OWN_CHECKPOINTS

#: Names whose use makes a script checkpointable by the runtime.
RUNTIME_NAMES = frozenset({"State", "preemptible"})
#: Checkpointing a script may do on its own; a restart resumes from its last save.
OWN_SAVES = ("CheckpointManager", "BackupAndRestore")


def _names(tree: ast.AST) -> set[str]:
    """Every identifier and attribute name used in ``tree``."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
        elif isinstance(node, ast.alias):
            out.add(node.name.rsplit(".", 1)[-1])
    return out


def _calls(tree: ast.AST, name: str) -> bool:
    """Whether ``tree`` calls ``name(…)`` or ``something.name(…)``."""
    for n in ast.walk(tree):
        if isinstance(n, ast.Call):
            f = n.func
            if (isinstance(f, ast.Attribute) and f.attr == name) or (
                isinstance(f, ast.Name) and f.id == name
            ):
                return True
    return False


def why_not(script: Path) -> str | None:
    """Why ``script`` cannot be checkpointed, or None when it can (or handles preemption
    itself, or cannot be read: Python will say why when it runs it)."""
    try:
        tree = ast.parse(script.read_bytes(), str(script))
    except (OSError, SyntaxError, ValueError):
        return None
    names = _names(tree)
    if names & RUNTIME_NAMES or _calls(tree, "fit") or _calls(tree, "signal"):
        return None
    reason = f"{script.name} uses no tiresias.State, @tiresias.preemptible or Keras fit"
    own = [n for n in OWN_SAVES if n in names]
    if _calls(tree, "save") and _calls(tree, "load") and "torch" in names:
        own.append("torch.save/torch.load")
    if own:
        own_saves = f"it keeps its own checkpoints ({own[0]})"
        return f"{reason}; {own_saves}, so a preemption stops it and {OWN_CHECKPOINTS}"
    if _calls(tree, "report") and "tiresias" in names:
        return f"{reason}; a preemption stops it, and the steps it reports say where it resumes"
    return f"{reason}; a preemption stops it and it restarts from step 0"
