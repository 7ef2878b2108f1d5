"""No module of the product grows past about 400 lines: a module that size does more than one
job, and the next reader cannot find what it owns (the coordinator once reached 1,435)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = (
    "tiresias",
    "tiresias_cli",
    "tiresias_launch",
    "coordinator",
    "ibverbs_tap",
    "models",
    "tools",
)
#: "About 400": the core's Scheduler, whose persistence reads its private state, is the
#: largest at under 450.
MAX_LINES = 450


def test_no_module_is_over_about_400_lines() -> None:
    sizes = {
        p.relative_to(REPO): len(p.read_text().splitlines())
        for package in PACKAGES
        for p in (REPO / package).rglob("*.py")
        if ".venv" not in p.parts
    }
    assert len(sizes) > 50  # the walk found the project
    over = {str(p): n for p, n in sizes.items() if n > MAX_LINES}
    assert not over, f"split these modules (over {MAX_LINES} lines): {over}"
