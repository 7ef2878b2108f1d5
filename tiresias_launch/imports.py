"""Patch a framework's module the moment it is imported, so user scripts run unedited.

``patch_on_import({"pkg.module": patch})`` calls ``patch(module)`` right after ``pkg.module``
executes (or now, if it already has); the Keras ``fit`` and Lightning ``Trainer.fit`` hooks
both go through it. Nothing is imported that the script does not import itself, and a patch
that fails never fails the import.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

Patch = Callable[[ModuleType], None]


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader, patch: Patch) -> None:
        self.inner = inner
        self.patch = patch

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        _apply(self.patch, module)


class _PatchingFinder(importlib.abc.MetaPathFinder):
    """Finds the target modules through the other finders and wraps their loader."""

    def __init__(self) -> None:
        self.patches: dict[str, Patch] = {}

    def find_spec(
        self, name: str, path: Any, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        patch = self.patches.get(name)
        if patch is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _PatchingLoader(spec.loader, patch)
                return spec
        return None


def patch_on_import(patches: Mapping[str, Patch]) -> None:
    """Apply each patch to its module now if it is loaded, else as soon as it is imported.
    Patches must be idempotent (a module may be patched now and again on a re-import)."""
    finder = next((f for f in sys.meta_path if isinstance(f, _PatchingFinder)), None)
    if finder is None:
        finder = _PatchingFinder()
        sys.meta_path.insert(0, finder)
    finder.patches.update(patches)
    for name, patch in patches.items():
        if name in sys.modules:
            _apply(patch, sys.modules[name])


def _apply(patch: Patch, module: ModuleType) -> None:
    """A patch never breaks the user's import: one that fails leaves the module as it is,
    and the job is said to be uncheckpointable (patches check the names they use first,
    ``tiresias_launch.compat``; this catches what they did not foresee)."""
    try:
        patch(module)
    except Exception as e:
        from tiresias_launch.runtime import get_runtime

        get_runtime().cannot_checkpoint(
            f"patching {module.__name__} failed ({type(e).__name__}: {e}), so it runs "
            "unpatched: a preemption stops it and it restarts from its last own checkpoint "
            "or step 0"
        )
