"""TCP ports for jobs' servers (TF, Horovod rendezvous), chosen when a gang is planned."""

from __future__ import annotations

import itertools
import random

from coordinator.gang import free_local_port

#: Ports handed to jobs' servers on remote nodes: ``--port-base`` and the PORT_RANGE after it.
PORT_RANGE = 10000
#: Hosts that mean "this machine": a job's ports there are checked free with the OS.
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


class JobPorts:
    """A port on ``host``: one the OS says is free when the host is this machine, since
    other programs and other users' coordinators listen here too; else the next port of the
    ``--port-base`` range, entered at a random point so that two coordinators of one cluster
    rarely collide."""

    def __init__(self, base: int) -> None:
        offset = random.randrange(PORT_RANGE)
        self._next = (base + (offset + i) % PORT_RANGE for i in itertools.count())

    def __call__(self, host: str) -> int:
        if host in LOOPBACK_HOSTS:
            return free_local_port(host)
        return next(self._next)
