"""The simulator's optional dependencies (the ``sim`` extra: ``pip install 'tiresias[sim]'``):
a progress bar (tqdm) and plots (matplotlib). They are not in the base install, so that a
training environment that installs Tiresias for its job runtime does not get them. Without
them the simulator runs the same, with no progress bar and no plots (said once)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

MISSING = "install the sim extra: pip install 'tiresias[sim]'"


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass


@contextlib.contextmanager
def progress_bar(**kwargs: Any) -> Iterator[Any]:
    """A tqdm bar, or one that shows nothing where tqdm is not installed."""
    try:
        from tqdm import tqdm
    except ImportError:
        yield _NoBar()
        return
    with tqdm(**kwargs) as bar:
        yield bar


def pyplot(what: str) -> Any | None:
    """matplotlib's pyplot (Agg), or None after saying that ``what`` is not drawn."""
    try:
        import matplotlib
    except ImportError:
        print(f"tiresias-sim: no {what}: matplotlib is not installed ({MISSING})", file=sys.stderr)
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
