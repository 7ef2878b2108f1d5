"""Traces shipped with Tiresias, usable by name wherever a trace or sample file is expected.

``philly`` (82,247 Philly jobs), ``tiresias-60job`` (the authors' 60-job trace) and
``yarn-gput1000``/``yarn-gput10000`` (GPU-time samples for 2D-Gittins); sources and licences
in ``README.md`` beside this file.
"""

from __future__ import annotations

from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent


def bundled_traces() -> dict[str, Path]:
    """Name (file stem) → path of every shipped trace."""
    return {p.stem: p for p in sorted(DATA_DIR.glob("*.csv"))}


def resolve_trace(name_or_path: str | Path) -> Path:
    """An existing file as given; else the shipped trace of that name (``philly`` or
    ``philly.csv``); else the path as given, so that opening it reports the missing file."""
    path = Path(name_or_path)
    if path.exists() or path.parent != Path("."):
        return path
    return bundled_traces().get(path.name.removesuffix(".csv"), path)
