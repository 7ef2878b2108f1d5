"""The slices of the Philly trace that ``compare_reference.py`` runs under both simulators:
families of slices (a virtual cluster's week, several virtual clusters' month, every virtual
cluster's week, the jobs of 8 GPUs or more, heavy loads), the cluster each runs on, and one
run of the authors' simulator (``run-reference``) on a slice."""

from __future__ import annotations

import csv
import dataclasses
import subprocess
import tempfile
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from coordinator.core.model import JobSpec
from coordinator.sim.traces import load_trace, parse_when

GPUS_PER_NODE = 4
LOADS = (0.8, 1.1)
DAYS = 7
# (virtual cluster, first day): busy weeks of three virtual clusters, 1,200-6,100 jobs each.
SLICES: tuple[tuple[str, str], ...] = (
    ("6214e9", "2017-09-25"),
    ("6c71a0", "2017-10-16"),
    ("b436b2", "2017-10-16"),
    ("11cb48", "2017-10-23"),
    ("6c71a0", "2017-10-23"),
    ("11cb48", "2017-11-06"),
    ("6214e9", "2017-11-13"),
    ("6214e9", "2017-11-20"),
    ("6214e9", "2017-12-04"),
)


@dataclass(frozen=True)
class Family:
    """A kind of slice: which jobs (virtual clusters, smallest GPU count), over how many
    days, and the offered loads it runs at on machines of ``gpus_per_node`` GPUs. ``nodes``
    clamps the cluster to a range of machines (the load column then says what it became)."""

    name: str
    slices: tuple[tuple[str, str], ...]  # (virtual clusters, comma-separated or "*"; first day)
    days: int = DAYS
    loads: tuple[float, ...] = LOADS
    gpus_per_node: int = GPUS_PER_NODE
    min_gpus: int = 1
    nodes: tuple[int, int] = (1, 10_000)


# The 18 runs of single-VC weeks on N x 4 GPUs, and the wider kinds on 24-64 x 8 GPUs, each
# of a few hundred to ~1,400 jobs (the reference's Gittins run time grows fast with jobs).
FAMILIES: tuple[Family, ...] = (
    Family("vc-week", SLICES),
    Family("vcs-month", (("103959,ee9e8c,7f04ca", "2017-10-02"),), 28, (0.9,), 8),
    Family("all-week", (("*", "2017-12-09"),), 7, (0.27,), 8, nodes=(24, 64)),
    Family("big-jobs", (("*", "2017-10-02"), ("*", "2017-11-06")), 28, (1.0,), 8, 8),
    Family("heavy", (("103959,ee9e8c,7f04ca", "2017-10-02"),), 28, (1.4,), 8, nodes=(24, 64)),
    Family("heavy", (("*", "2017-10-02"),), 28, (1.4,), 8, 8),
    Family("vc-week-8", (("11cb48", "2017-10-23"),), 7, (0.9,), 8),
)


@dataclass(frozen=True)
class Case:
    """One slice at one load: its jobs (as written for both simulators) and cluster."""

    family: str
    vc: str
    day: str
    days: int
    target: float
    nodes: int
    gpus_per_node: int
    specs: tuple[JobSpec, ...]
    left_out: int  # jobs larger than the cluster
    history: tuple[float, ...]  # GPU service of the virtual clusters' jobs of the 28 days before
    min_gpus: int = 1

    @property
    def name(self) -> str:
        what = "all VCs" if self.vc == "*" else self.vc
        big = f" >={self.min_gpus} GPUs" if self.min_gpus > 1 else ""
        span = f" {self.days}d" if self.days != DAYS else ""
        return f"{what}{big} {self.day}{span} @{self.target:g}"

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def load(self) -> float:
        work = sum(s.gpus * (s.duration or 0.0) for s in self.specs)
        return work / (self.gpus * self.days * 86400)

    @property
    def key(self) -> str:
        """The cache key of the slice and cluster (the 18 first runs keep their older key)."""
        shape = f"{self.nodes}x{self.gpus_per_node} {len(self.specs)}"
        if self.family == "vc-week":
            return f"{self.vc} {self.day} {shape}"
        return f"{self.vc} {self.day} {self.days}d >={self.min_gpus} {shape}"


def _pick(trace: Path, fam: Family, vcs: str, first: datetime, last: datetime) -> list[JobSpec]:
    """The family's jobs submitted in [first, last)."""
    wanted = None if vcs == "*" else set(vcs.split(","))
    specs = load_trace(trace, start=first, end=last).specs
    return [s for s in specs if (wanted is None or s.vc in wanted) and s.gpus >= fam.min_gpus]


def cases(trace: Path, families: tuple[Family, ...]) -> list[Case]:
    """Each family's slices at each of its loads. Jobs are renamed by submission order and
    arrivals start at 0, so both simulators break ties between jobs submitted in the same
    second alike and compute the same whole-second times."""
    out = []
    for fam in families:
        for vcs, day in fam.slices:
            start = parse_when(day)
            chosen = _pick(trace, fam, vcs, start, start + timedelta(days=fam.days))
            t0 = chosen[0].arrival if chosen else 0.0
            specs = [
                JobSpec(f"{i:06d}", s.gpus, s.arrival - t0, float(max(1, int(s.duration or 0))))
                for i, s in enumerate(chosen)
            ]
            specs = [dataclasses.replace(s, vc=c.vc) for s, c in zip(specs, chosen, strict=True)]
            before = _pick(trace, fam, vcs, start - timedelta(days=28), start)
            history = tuple(s.gpus * (s.duration or 0.0) for s in before)
            demand = sum(s.gpus * (s.duration or 0.0) for s in specs) / (fam.days * 86400)
            for target in fam.loads:
                nodes = max(1, round(demand / (target * fam.gpus_per_node)))
                nodes = min(max(nodes, fam.nodes[0]), fam.nodes[1])
                fit = tuple(s for s in specs if s.gpus <= nodes * fam.gpus_per_node)
                out.append(
                    Case(
                        fam.name,
                        vcs,
                        day,
                        fam.days,
                        target,
                        nodes,
                        fam.gpus_per_node,
                        fit,
                        len(specs) - len(fit),
                        history,
                        fam.min_gpus,
                    )
                )
    return out


def write_philly(case: Case, path: Path) -> None:
    """The slice in the Philly CSV format ``run-reference`` reads (submission order kept)."""
    t0 = datetime(2000, 1, 1)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["timestamp", "duration", "num_gpus", "gpu_time", "cluster"])
        for s in case.specs:
            when = t0 + timedelta(seconds=s.arrival)
            d = int(s.duration or 0)
            w.writerow([when.isoformat(sep=" "), d, s.gpus, d * s.gpus, s.vc or "-"])


def run_reference(script: Path, case: Case, schedule: str) -> dict[str, float]:
    """One reference run: its printed metrics (avg/median/p95 JCT, preemptions, wall_s)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "slice.csv"
        write_philly(case, path)
        cmd = [str(script), str(path), str(case.nodes), str(case.gpus_per_node), schedule]
        out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    fields = dict(kv.split("=", 1) for kv in out.stdout.split() if "=" in kv)
    if out.returncode or "avg_jct" not in fields:
        raise RuntimeError(f"{case.name} {schedule}: {out.stdout.strip()} {out.stderr.strip()}")
    return {k: float(v) for k, v in fields.items()}
