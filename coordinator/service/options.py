"""Everything ``tiresias-coordinator`` can be told (``coordinator.service.cli`` builds it
from flags; tests and ``tiresias-run`` build it directly)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from coordinator.core.config import DEFAULT_QUEUE_ORDER, DEFAULT_QUEUE_THRESHOLDS
from coordinator.core.gittins import ServiceDistribution
from coordinator.core.settings import Settings
from coordinator.service.client import DEFAULT_ADDRESS
from coordinator.sim.data import resolve_trace

#: Default cap on workers (GPUs) and on parameter servers per job.
MAX_JOB_SIZE = 1024


@dataclass
class Options:
    """Everything ``tiresias-coordinator`` can be told; tests build it directly."""

    bind: str = DEFAULT_ADDRESS
    state: Path = Path("tiresias-state")
    policy: str = "tiresias-l"
    placement: str | None = None  # None: the policy's default placement
    thresholds: list[float] = field(default_factory=lambda: list(DEFAULT_QUEUE_THRESHOLDS))
    promote_knob: float = float("inf")
    packlimit: float | None = None
    interval: float = 0.0
    gittins_history: Path | None = None
    queue_order: str = DEFAULT_QUEUE_ORDER
    min_run: float = 0.0
    min_run_restores: float = 0.0
    cheap_victims: bool = False
    learn_thresholds: bool = False
    service_groups: tuple[str, ...] = ()
    gittins_variant: str | None = None
    gittins_learn: bool = True
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

    @property
    def checkpoints(self) -> Path:
        return (self.checkpoint_root or self.state / "checkpoints").resolve()

    def settings(self) -> Settings:
        """The core's settings (reads ``gittins_history``; OSError/CoreError when bad)."""
        samples = None
        if self.gittins_history is not None:
            with resolve_trace(self.gittins_history).open() as f:
                samples = tuple(ServiceDistribution.parse(f).samples)
        return Settings(
            **{f: getattr(self, f) for f in _SETTINGS if f != "thresholds"},
            thresholds=tuple(self.thresholds),
            gittins_samples=samples,
        )


#: Options that are core Settings of the same name.
_SETTINGS = tuple(
    f.name for f in dataclasses.fields(Settings) if f.name in Options.__dataclass_fields__
)
