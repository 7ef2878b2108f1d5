"""The composition root: the one place that picks the executor the options name. The rest
of the service knows only the interface (``executor.Executor``)."""

from __future__ import annotations

from collections.abc import Callable

from coordinator.executors.agents.fleet import AgentFleet
from coordinator.executors.slurm.executor import executor_for as slurm_executor
from coordinator.service.executor import Executor
from coordinator.service.options import Options

#: Writes one frame to a route of the coordinator's ROUTER socket.
Send = Callable[[bytes, bytes], None]


def executor_for(opts: Options, send: Send) -> Executor:
    """``--executor``: the Slurm partition (checked now, before the state directory
    exists), or the agent fleet on the coordinator's own socket."""
    if opts.executor == "slurm":
        return slurm_executor(opts)
    return AgentFleet(send, opts.heartbeat_timeout)
