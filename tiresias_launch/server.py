"""``python -m tiresias_launch.server``: a ps or worker task of a parameter-server job.

It serves a ``tf.distribute.Server`` until the chief is gone. The chief alone decides when
the job stops (it drives every step and reads the variables from the parameter servers to
checkpoint them), so servers must outlive the chief's save: on the preemption signal a server
only remembers it, keeps serving, and exits once the chief's port closes, with
EXIT_CHECKPOINTED if it was told to preempt and 0 otherwise (the job finished; a failed
chief reports its own exit code).
"""

from __future__ import annotations

import socket
import sys
import time

from tiresias_launch.contract import EXIT_CHECKPOINTED
from tiresias_launch.env import EnvError
from tiresias_launch.runtime import get_runtime

POLL_SECONDS = 0.2


def _accepting(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=1.0).close()
        return True
    except OSError:
        return False


def main() -> int:
    try:
        rt = get_runtime()
    except EnvError as e:
        print(f"tiresias_launch.server: bad environment: {e}", file=sys.stderr)
        return 2
    config = rt.env.tf_config
    if rt.env.mode != "ps" or config is None or rt.env.role == "chief":
        print("tiresias_launch.server: only ps/worker tasks of a ps-mode job", file=sys.stderr)
        return 2
    rt.claim()  # a server stops when told, at the chief's pace: the signal is only noted
    import tensorflow as tf

    cluster = tf.train.ClusterSpec(config["cluster"])
    tf.distribute.Server(cluster, job_name=rt.env.role, task_index=rt.env.task_index, start=True)
    rt.install_signal_handlers()  # in case the server's start-up took SIGTERM over
    chief = cluster.task_address("chief", 0)
    seen_chief = False
    while True:
        up = _accepting(chief)
        if seen_chief and not up:
            rt.exit(EXIT_CHECKPOINTED if rt.flag else 0)
        seen_chief = seen_chief or up
        rt.reporter.keepalive()
        time.sleep(POLL_SECONDS)


if __name__ == "__main__":
    sys.exit(main())
