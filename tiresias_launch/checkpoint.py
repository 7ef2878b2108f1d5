"""Crash-safe checkpoint directories: ``<checkpoint dir>/ckpt-<step>/`` plus a manifest.

Write protocol: files go into ``.tmp-ckpt-<step>-<pid>/``, every file and the directory are
fsynced, ``MANIFEST.json`` (the completeness marker) is written and fsynced last, then the
directory is renamed to its final name and the parent fsynced. A directory without a valid
manifest is never restored, so a process killed mid-write leaves the previous checkpoint as
the newest complete one. The manifest also pins the job's identity (its key, unique across
coordinators and state directories) and the model fingerprint, so a directory from another job
or another model fails with a clear error instead of resuming someone else's training.

Fencing: a store opened with a ``generation`` (the run's restart number) claims the directory
for it when it restores (``GENERATION``), and a save from an older generation is refused just
before its rename: a stale copy of the job (on a node cut off from its cluster) cannot commit
a checkpoint over the run that replaced it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MANIFEST = "MANIFEST.json"
PREFIX = "ckpt-"
TMP_PREFIX = ".tmp-" + PREFIX
#: The newest generation (restart) that has claimed the directory.
GENERATION = "GENERATION"
#: Test hook: a file path. ``save`` creates it once the data files are written (before the
#: manifest and the rename) and waits until it is deleted, so a test can SIGKILL the writer at
#: exactly that point without sleeping.
PAUSE_HOOK = "TIRESIAS_CHECKPOINT_PAUSE_FILE"


class CheckpointError(RuntimeError):
    """No usable checkpoint, or one that belongs to another job or model."""


@dataclass(frozen=True)
class Manifest:
    step: int
    job_id: str
    fingerprint: str
    variables: list[str]  # "name shape dtype", for readable mismatch errors
    files: dict[str, int]  # relative path → size in bytes
    position: dict[str, Any] = field(default_factory=dict)  # framework data position
    created: float = 0.0
    job_key: str = ""  # the job's unique identity ("" in manifests older than it)

    @property
    def owner(self) -> str:
        return self.job_key or self.job_id

    @property
    def bytes(self) -> int:
        return sum(self.files.values())


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    manifest: Manifest


def describe_variables(variables: Iterable[Any]) -> list[str]:
    """Stable "name shape dtype" lines for TF/Keras variables (``path`` when Keras has one)."""
    lines = []
    for v in variables:
        name = getattr(v, "path", None) or v.name
        dtype = getattr(v.dtype, "name", str(v.dtype))
        lines.append(f"{name} {list(v.shape)} {dtype}")
    return lines


def fingerprint(described: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(described).encode()).hexdigest()[:16]


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _wait_for_pause_hook() -> None:
    hook = os.environ.get(PAUSE_HOOK)
    if not hook:
        return
    Path(hook).touch()
    while Path(hook).exists():
        time.sleep(0.01)


class CheckpointStore:
    """The checkpoint directory of one job: atomic saves, newest-complete restores, pruning."""

    def __init__(
        self,
        root: Path,
        job_key: str,
        keep: int = 3,
        job_id: str | None = None,
        generation: int | None = None,
    ) -> None:
        self.root = root
        self.job_key = job_key
        self.job_id = job_id or job_key  # the short display id, recorded beside the key
        self.keep = keep
        self.generation = generation  # this run's restart number (None: no fencing)
        #: Checkpoints the last restore could not read, newest first, each with why.
        self.damaged: list[tuple[Checkpoint, str]] = []

    def _newest_generation(self) -> int:
        try:
            return int((self.root / GENERATION).read_text())
        except (OSError, ValueError):
            return -1

    def claim(self) -> None:
        """Record this run's generation; from now on an older run's saves are refused."""
        if self.generation is None or self._newest_generation() >= self.generation:
            return
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f".{GENERATION}.{os.getpid()}"
        tmp.write_text(str(self.generation))
        os.replace(tmp, self.root / GENERATION)

    def _check_generation(self) -> None:
        newest = self._newest_generation()
        if self.generation is not None and newest > self.generation:
            raise CheckpointError(
                f"restart {newest} of this job runs now: this copy (restart {self.generation}) "
                "is stale and may not write a checkpoint"
            )

    def complete(self) -> list[Checkpoint]:
        """Complete checkpoints, newest first; incomplete or unreadable ones are skipped."""
        found = []
        if not self.root.is_dir():
            return found
        for d in self.root.iterdir():
            if not d.name.startswith(PREFIX):
                continue
            try:
                raw = json.loads((d / MANIFEST).read_text())
                found.append(Checkpoint(d, Manifest(**raw)))
            except (OSError, ValueError, TypeError):
                continue
        return sorted(found, key=lambda c: c.manifest.step, reverse=True)

    def save(
        self,
        step: int,
        described: Sequence[str],
        write: Callable[[Path], None],
        position: dict[str, Any] | None = None,
    ) -> Checkpoint:
        """Write a checkpoint of ``step`` through ``write(tmp_dir)``; returns it once durable."""
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f"{TMP_PREFIX}{step:012d}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        write(tmp)
        files = {}
        for f in sorted(p for p in tmp.rglob("*") if p.is_file()):
            _fsync_path(f)
            files[str(f.relative_to(tmp))] = f.stat().st_size
        _wait_for_pause_hook()
        manifest = Manifest(
            step=step,
            job_id=self.job_id,
            job_key=self.job_key,
            fingerprint=fingerprint(described),
            variables=list(described),
            files=files,
            position=dict(position or {}),
            created=time.time(),
        )
        with open(tmp / MANIFEST, "w") as fh:
            json.dump(asdict(manifest), fh, indent=1)
            fh.flush()
            os.fsync(fh.fileno())
        _fsync_path(tmp)
        final = self.root / f"{PREFIX}{step:012d}"
        try:
            self._check_generation()
        except CheckpointError:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        if final.exists():  # this step is already durable; never swap out a complete one
            shutil.rmtree(tmp)
            return Checkpoint(final, Manifest(**json.loads((final / MANIFEST).read_text())))
        os.rename(tmp, final)
        _fsync_path(self.root)
        self._prune()
        return Checkpoint(final, manifest)

    def _prune(self) -> None:
        for old in self.complete()[self.keep :]:
            shutil.rmtree(old.path, ignore_errors=True)

    def remove_stale_temporaries(self) -> None:
        """Delete half-written directories left by a process killed mid-save."""
        if self.root.is_dir():
            for d in self.root.glob(TMP_PREFIX + "*"):
                shutil.rmtree(d, ignore_errors=True)

    def check_compatible(self, ckpt: Checkpoint, described: Sequence[str]) -> None:
        """Raise CheckpointError naming the difference if ``ckpt`` is not ours to restore."""
        m = ckpt.manifest
        if m.owner != self.job_key:
            raise CheckpointError(
                f"{ckpt.path} belongs to another job ({m.owner!r}), not to this one "
                f"({self.job_key!r}); refusing to resume from it: point "
                "TIRESIAS_CHECKPOINT_DIR at this job's own directory, or remove that one"
            )
        if m.fingerprint != fingerprint(described):
            ours, theirs = list(described), m.variables
            diff = next(
                (
                    f"checkpoint has {a!r}, model has {b!r}"
                    for a, b in zip(theirs, ours, strict=False)
                    if a != b
                ),
                f"checkpoint has {len(theirs)} variables, model has {len(ours)}",
            )
            raise CheckpointError(f"{ckpt.path} was written by a different model: {diff}")

    def restore(
        self, described: Sequence[str], read: Callable[[Checkpoint], None]
    ) -> Checkpoint | None:
        """Restore the newest complete checkpoint through ``read``; on a damaged one fall back
        to the previous (``damaged`` lists those skipped). ``None`` when there is none (first
        start)."""
        self.claim()
        self.damaged = []
        for ckpt in self.complete():
            self.check_compatible(ckpt, described)
            try:
                read(ckpt)
            except CheckpointError:
                raise
            except Exception as e:  # a damaged checkpoint: try the previous one
                self.damaged.append((ckpt, f"{type(e).__name__}: {e}"))
                continue
            return ckpt
        if self.damaged:
            failures = [f"{c.path.name}: {why}" for c, why in self.damaged]
            raise CheckpointError("every complete checkpoint is damaged:\n" + "\n".join(failures))
        return None
