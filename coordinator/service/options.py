"""Everything ``tiresias-coordinator`` can be told (``coordinator.service.cli`` builds it
from flags; tests and ``tiresias-run`` build it directly)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from coordinator.core.gittins import ServiceDistribution
from coordinator.core.settings import Settings
from coordinator.service.client import DEFAULT_ADDRESS
from coordinator.service.retention import KEEP_FINISHED
from coordinator.sim.data import resolve_trace

#: Default cap on workers (GPUs) and on parameter servers per job.
MAX_JOB_SIZE = 1024


@dataclass
class Options:
    """Everything ``tiresias-coordinator`` can be told; tests build it directly."""

    bind: str = DEFAULT_ADDRESS
    state: Path = Path("tiresias-state")
    #: The scheduling options (the history's samples are read by :meth:`core_settings`).
    settings: Settings = field(default_factory=Settings)
    gittins_history: Path | None = None
    heartbeat_timeout: float = 10.0
    grace: float = 30.0
    preempt_signal: str = "SIGTERM"
    checkpoint_root: Path | None = None
    metrics_port: int | None = None
    metrics_addr: str = "127.0.0.1"
    dashboard_port: int | None = None
    dashboard_addr: str = "127.0.0.1"
    curve_keys: Path | None = None
    #: Users who may act on every job (root always may).
    admins: frozenset[str] = frozenset()
    #: Whether jobs of root (uid 0) are accepted; off, they are refused at submit.
    allow_root_jobs: bool = False
    manual_clock: bool = False
    port_base: int = 30000
    snapshot_every: int = 500
    max_job_size: int = MAX_JOB_SIZE
    #: Who runs the jobs: our node agents, or a Slurm partition (docs/slurm.md).
    executor: str = "agents"
    slurm_partition: str = "tiresias"
    #: Seconds a finished job's checkpoints are kept (coordinator/service/retention.py).
    keep_finished: float = KEEP_FINISHED

    @property
    def checkpoints(self) -> Path:
        return (self.checkpoint_root or self.state / "checkpoints").resolve()

    def core_settings(self) -> Settings:
        """``settings`` seeded from ``gittins_history`` (OSError/CoreError when bad); under
        Slurm a start awaits its real begin (``RunBegan``: wall times, which a manual clock
        does not follow)."""
        awaits = self.executor == "slurm" and not self.manual_clock
        settings = dataclasses.replace(self.settings, await_begin=awaits)
        if self.gittins_history is None:
            return settings
        with resolve_trace(self.gittins_history).open() as f:
            samples = tuple(ServiceDistribution.parse(f).samples)
        return dataclasses.replace(settings, gittins_samples=samples)
