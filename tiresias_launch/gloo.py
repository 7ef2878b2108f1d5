"""Horovod Gloo rendezvous hosted by rank 0, so node agents only spawn processes.

``horovod.runner.gloo_run`` runs an HTTP rendezvous server in the launcher and passes its
address to every rank. Tiresias has no launcher process per job, so rank 0's
``tiresias_launch.exec`` starts the same server (Horovod's own ``RendezvousHTTPServer``) on
the port ``gang.plan`` chose, before the user script imports anything; the other ranks wait
until that port accepts connections, because Horovod's Gloo client retries only briefly.
"""

from __future__ import annotations

import os
import socket
import threading
import time

from tiresias_launch.contract import HOROVOD_HOSTS, RENDEZVOUS_WAIT_SECONDS


def host_rendezvous() -> object:
    """Start the rendezvous HTTP server for this gang (rank 0 only); returns the server."""
    from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts
    from horovod.runner.http.http_server import RendezvousHandler, RendezvousHTTPServer

    size = int(os.environ["HOROVOD_SIZE"])
    plan = get_host_assignments(parse_hosts(os.environ[HOROVOD_HOSTS]), size)
    port = int(os.environ["HOROVOD_GLOO_RENDEZVOUS_PORT"])
    server = RendezvousHTTPServer(("", port), RendezvousHandler, 0)
    server.init(plan)
    threading.Thread(target=server.serve_forever, name="gloo-rendezvous", daemon=True).start()
    return server


def wait_for_rendezvous(timeout: float = RENDEZVOUS_WAIT_SECONDS) -> None:
    """Block until rank 0's rendezvous server accepts connections (or ``timeout``)."""
    address = (
        os.environ["HOROVOD_GLOO_RENDEZVOUS_ADDR"],
        int(os.environ["HOROVOD_GLOO_RENDEZVOUS_PORT"]),
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(address, timeout=1.0).close()
            return
        except OSError:
            time.sleep(0.05)


def prepare() -> None:
    """What a Horovod rank needs before the script runs ``hvd.init()``."""
    if os.environ.get("HOROVOD_RANK") == "0":
        host_rendezvous()
    else:
        wait_for_rendezvous()
