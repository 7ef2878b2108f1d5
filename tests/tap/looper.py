"""Traffic for the CLI tests, run under the tap.

looper.py stream PORT [--spawn]  send 1000-byte messages to PORT until killed; prints
                                 "ready PID [CHILD_PID]" once traffic flows (--spawn: a
                                 child process streams too, and is ready first)
looper.py fixed PORT_A PORT_B    send exactly 3000 bytes to A and 1000 to B, print
                                 "ready PID", then wait for stdin to close
looper.py schedule PORT_A PORT_B [--spawn]
                                 run py_client's schedule once on a connection to each port
                                 (a ScheduleServers pair), print "ready PID [CHILD_PID]",
                                 then idle until stdin closes (--spawn: a child process does
                                 the same first, and exits when this one does; it gets
                                 $CHILD_TF_CONFIG as its TF_CONFIG)
looper.py serve                  listen on a loopback port, print "ready PID PORT", answer
                                 py_client's schedule on every connection until stdin closes
"""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys
import threading

import py_client  # the script's directory is on sys.path


def _serve(listener: socket.socket) -> None:
    """Each connection: read every message of the schedule, answer each with ACK bytes."""

    def answer(conn: socket.socket) -> None:
        with conn:
            for _ in range(py_client.REPS):
                for n in py_client.SIZES:
                    conn.recv(n, socket.MSG_WAITALL)
                    conn.sendall(b"a" * py_client.ACK)

    while True:
        conn, _ = listener.accept()
        threading.Thread(target=answer, args=(conn,), daemon=True).start()


def main() -> int:
    mode, *args = sys.argv[1:]
    if mode == "schedule":
        ready = ["ready", str(os.getpid())]
        if "--spawn" in args:
            child_env = dict(os.environ)
            if "CHILD_TF_CONFIG" in child_env:  # a launcher giving its task a TF_CONFIG
                child_env["TF_CONFIG"] = child_env.pop("CHILD_TF_CONFIG")
            child = subprocess.Popen(
                [sys.executable, __file__, "schedule", *args[:2]],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env=child_env,
            )
            ready.append(child.stdout.readline().split()[1])
        conns = [socket.create_connection(("127.0.0.1", int(p))) for p in args[:2]]
        for conn in conns:
            py_client.schedule(conn, "sendall")
        print(*ready, flush=True)
        sys.stdin.read()
        return 0
    if mode == "serve":
        listener = socket.create_server(("127.0.0.1", 0))
        threading.Thread(target=_serve, args=(listener,), daemon=True).start()
        print("ready", os.getpid(), listener.getsockname()[1], flush=True)
        sys.stdin.read()
        return 0
    if mode == "fixed":
        a, b = (socket.create_connection(("127.0.0.1", int(p))) for p in args)
        a.sendall(b"a" * 3000)
        b.sendall(b"b" * 1000)
        print("ready", os.getpid(), flush=True)
        sys.stdin.read()
        return 0
    ready = ["ready", str(os.getpid())]
    child = None
    if "--spawn" in args:
        child = subprocess.Popen(
            [sys.executable, __file__, "stream", args[0]], stdout=subprocess.PIPE, text=True
        )
        ready.append(child.stdout.readline().split()[1])
    sock = socket.create_connection(("127.0.0.1", int(args[0])))
    for i in itertools.count():
        sock.sendall(b"x" * 1000)
        if i == 10:
            print(*ready, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
