"""Parameter sweeps: one trace under every combination of a grid of options, in parallel
worker processes, with one progress bar; results go to ``sweep.csv`` row by row (a sweep
that was interrupted resumes from it), then to a table (``sweep.md``) and a plot
(``sweep.png``: lines for one swept option, a heat-map per policy for two)."""

from __future__ import annotations

import concurrent.futures
import csv
import itertools
import multiprocessing
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from coordinator.core.gittins import service_features
from coordinator.core.model import JobSpec, Node
from coordinator.core.settings import build_scheduler
from coordinator.sim.engine import SimOptions, core_settings, run
from coordinator.sim.optional import progress_bar, pyplot
from coordinator.sim.report import METRICS, _fmt, _table, summary


def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(",") if x.strip())


def _flag(text: str) -> bool:
    if text.lower() in ("on", "true", "yes", "1"):
        return True
    if text.lower() in ("off", "false", "no", "0"):
        return False
    raise ValueError(f"expected on or off, got {text!r}")


# Swept name → how one value is read. "cluster" (MACHINESxGPUS) and "load" (offered load:
# the cluster is resized, in machines of --cluster's size, so that GPU demand / GPUs ≈ load)
# choose the nodes; the others are options SimOptions.replace takes.
OPTION_PARSERS: dict[str, Callable[[str], object]] = {
    "thresholds": _floats,
    "promote_knob": float,
    "interval": float,
    "queue_order": str,
    "min_run": float,
    "min_run_restores": float,
    "elastic_payback": float,
    "cheap_victims": _flag,
    "learn_thresholds": _flag,
    "service_groups": service_features,
    "preempt_cost": lambda t: t if t == "model" else float(t),
}
SWEEP_NAMES: tuple[str, ...] = (*OPTION_PARSERS, "cluster", "load")
RESULT_COLUMNS: tuple[str, ...] = tuple(METRICS)


class SweepError(Exception):
    """A grid that cannot run (bad name or value, or a results file from another grid)."""


@dataclass(frozen=True)
class Config:
    """One point of the grid: the policy and one raw value per swept name."""

    policy: str
    values: tuple[tuple[str, str], ...]

    @property
    def row_key(self) -> tuple[str, ...]:
        return (self.policy, *(v for _, v in self.values))


def parse_grid(items: Sequence[Sequence[str]]) -> list[tuple[str, list[str]]]:
    """``--sweep NAME V1 V2 …`` arguments → [(name, values)], names validated."""
    grid: list[tuple[str, list[str]]] = []
    for item in items:
        name, *values = item
        name = name.replace("-", "_")
        if name not in SWEEP_NAMES:
            raise SweepError(f"--sweep {name}: unknown; valid: {', '.join(SWEEP_NAMES)}")
        if not values:
            raise SweepError(f"--sweep {name}: give at least one value")
        if name in (n for n, _ in grid):
            raise SweepError(f"--sweep {name}: given twice")
        grid.append((name, list(values)))
    return grid


def configs(policies: Sequence[str], grid: Sequence[tuple[str, list[str]]]) -> list[Config]:
    names = [n for n, _ in grid]
    return [
        Config(p, tuple(zip(names, combo, strict=True)))
        for p in policies
        for combo in itertools.product(*(vals for _, vals in grid))
    ]


def resolve(
    config: Config,
    specs: Sequence[JobSpec],
    nodes: Sequence[Node],
    base: SimOptions,
    make_cluster: Callable[[str], list[Node]],
) -> tuple[list[Node], SimOptions]:
    """The cluster and options of ``config``; SweepError naming a bad value."""
    fields: dict[str, object] = {}
    for name, raw in config.values:
        try:
            if name == "cluster":
                nodes = make_cluster(raw)
            elif name == "load":
                nodes = _sized(specs, nodes, float(raw))
            else:
                fields[name] = OPTION_PARSERS[name](raw)
        except ValueError as e:
            raise SweepError(f"--sweep {name} {raw}: {e}") from None
    return list(nodes), base.replace(**fields)


def _sized(specs: Sequence[JobSpec], nodes: Sequence[Node], load: float) -> list[Node]:
    """Machines like ``nodes[0]``, as many as make GPU demand / GPUs ≈ ``load``."""
    if not load > 0:
        raise ValueError("a load must be > 0")
    span = max(s.arrival for s in specs) - min(s.arrival for s in specs)
    demand = sum(s.gpus * (s.duration or 0.0) for s in specs) / max(span, 1.0)
    per = len(nodes[0].gpus)
    count = max(1, round(demand / (load * per)))
    return [Node(f"n{i:03d}", tuple(range(per))) for i in range(count)]


_SPECS: list[JobSpec] = []  # the trace, inherited by forked workers


def _one(nodes: list[Node], policy: str, options: SimOptions) -> dict[str, float]:
    result = run(_SPECS, nodes, policy, options)
    return summary(result) | {"gpus": float(sum(len(n.gpus) for n in nodes))}


def run_sweep(
    specs: list[JobSpec],
    nodes: Sequence[Node],
    policies: Sequence[str],
    base: SimOptions,
    grid: Sequence[tuple[str, list[str]]],
    out: Path,
    *,
    workers: int,
    make_cluster: Callable[[str], list[Node]],
    quiet: bool = False,
) -> tuple[list[dict[str, str]], float, int]:
    """Run every config of the grid not yet in ``out/sweep.csv``; returns all rows (grid
    order), the wall seconds spent and how many configs ran now."""
    todo = configs(policies, grid)
    resolved = {c: resolve(c, specs, nodes, base, make_cluster) for c in todo}
    for c, (n, o) in resolved.items():  # bad knobs fail before any simulation
        build_scheduler(core_settings(c.policy, o), n)
    header = ["policy", *(name for name, _ in grid), "gpus", *RESULT_COLUMNS]
    out.mkdir(parents=True, exist_ok=True)
    path = out / "sweep.csv"
    done = _read(path, header)
    pending = [c for c in todo if c.row_key not in done]
    global _SPECS
    _SPECS = specs
    start = time.perf_counter()
    new_file = not path.exists()
    with (
        path.open("a", newline="") as f,
        progress_bar(
            total=len(todo),
            initial=len(todo) - len(pending),
            desc="sweep",
            unit="config",
            disable=True if quiet else None,
        ) as bar,
        concurrent.futures.ProcessPoolExecutor(
            workers, mp_context=multiprocessing.get_context("fork")
        ) as pool,
    ):
        writer = csv.writer(f)
        if new_file:
            writer.writerow(header)
        futures = {
            pool.submit(_one, *resolved[c][:1], c.policy, resolved[c][1]): c for c in pending
        }
        for fut in concurrent.futures.as_completed(futures):
            c = futures[fut]
            m = fut.result()
            row = [*c.row_key, f"{m['gpus']:g}", *(repr(m[k]) for k in RESULT_COLUMNS)]
            writer.writerow(row)
            f.flush()  # a killed sweep keeps every finished config
            done[c.row_key] = dict(zip(header, row, strict=True))
            bar.update()
    wall = time.perf_counter() - start
    return [done[c.row_key] for c in todo], wall, len(pending)


def _read(path: Path, header: list[str]) -> dict[tuple[str, ...], dict[str, str]]:
    if not path.exists():
        return {}
    with path.open(newline="") as f:
        rows = list(csv.reader(f))
    if not rows or rows[0] != header:
        raise SweepError(
            f"{path} holds another grid ({', '.join(rows[0]) if rows else 'empty'}); "
            "remove it or use another --out"
        )
    n = len(header) - len(RESULT_COLUMNS) - 1  # the key columns
    return {
        tuple(r[:n]): dict(zip(header, r, strict=True)) for r in rows[1:] if len(r) == len(header)
    }


def format_table(rows: Sequence[dict[str, str]], names: Sequence[str], markdown: bool) -> str:
    head = ["policy", *names, "GPUs", *(METRICS[k] for k in RESULT_COLUMNS)]
    body = []
    for r in rows:
        cells = [r["policy"], *(r[n] for n in names), r["gpus"]]
        for k in RESULT_COLUMNS:
            v = float(r[k])
            cells.append(
                f"{v:.1%}"
                if k == "utilization"
                else f"{int(v):,}"
                if k == "preemptions"
                else _fmt(v)
            )
        body.append(cells)
    return _table(head, body, markdown)


def plot(
    rows: Sequence[dict[str, str]], grid: Sequence[tuple[str, list[str]]], path: Path
) -> Path | None:
    """Average JCT against one swept option (a line per policy) or two (a heat-map per
    policy); None for more."""
    if not 1 <= len(grid) <= 2:
        return None
    plt = pyplot("sweep plot")
    if plt is None:
        return None

    policies = list(dict.fromkeys(r["policy"] for r in rows))
    value = {(r["policy"], *(r[n] for n, _ in grid)): float(r["avg_jct"]) for r in rows}
    if len(grid) == 1:
        ((name, xs),) = grid
        fig, ax = plt.subplots(figsize=(6, 4))
        for p in policies:
            ax.plot(range(len(xs)), [value[(p, x)] for x in xs], marker="o", label=p)
        ax.set_xticks(range(len(xs)), xs, rotation=30, ha="right")
        ax.set_xlabel(name)
        ax.set_ylabel("average JCT (s)")
        ax.grid(True, alpha=0.3)
        ax.legend()
    else:
        (yname, ys), (xname, xs) = grid
        fig, axes = plt.subplots(1, len(policies), figsize=(5 * len(policies), 4), squeeze=False)
        for ax, p in zip(axes[0], policies, strict=True):
            z = np.array([[value[(p, y, x)] for x in xs] for y in ys])
            im = ax.imshow(z, cmap="viridis_r", aspect="auto")
            ax.set_xticks(range(len(xs)), xs, rotation=30, ha="right")
            ax.set_yticks(range(len(ys)), ys)
            ax.set_xlabel(xname)
            ax.set_ylabel(yname)
            ax.set_title(f"{p}: average JCT (s)")
            for (i, j), v in np.ndenumerate(z):
                ax.text(j, i, _fmt(v), ha="center", va="center", color="w", fontsize=7)
            fig.colorbar(im, ax=ax)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
