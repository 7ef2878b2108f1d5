"""Trace-driven simulator: replays job traces through the scheduling core on a virtual clock
(``tiresias-sim``; see docs/simulator.md)."""

from coordinator.sim.engine import JobResult, SimOptions, SimResult, run, simulate
from coordinator.sim.traces import FORMATS, Trace, TraceError, load_trace

__all__ = [
    "FORMATS",
    "JobResult",
    "SimOptions",
    "SimResult",
    "Trace",
    "TraceError",
    "load_trace",
    "run",
    "simulate",
]
