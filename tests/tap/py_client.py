"""Loopback TCP client for the socket-tap test, in Python: the same schedule as
csrc/sock_client.c, one socket API per thread, then a fork whose child runs the schedule once
on an inherited connection. Prints the child's pid. Usage: py_client.py PORT_A PORT_B"""

from __future__ import annotations

import os
import socket
import sys
import threading

SIZES = (1, 100, 1000, 5000, 70000)
REPS = 2
ACK = 8
PAYLOAD = b"x" * max(SIZES)


def xfer(sock: socket.socket, api: str, n: int) -> None:
    data = PAYLOAD[:n]
    fd = sock.fileno()
    if api == "sendall":
        sock.sendall(data)
        got = len(sock.recv(ACK, socket.MSG_WAITALL))
    elif api == "sendto":
        sent = sock.sendto(data, sock.getpeername())
        assert sent == n
        got = len(sock.recvfrom(ACK, socket.MSG_WAITALL)[0])
    elif api == "sendmsg":
        assert sock.sendmsg([data[: n // 2], data[n // 2 :]]) == n
        got = len(sock.recvmsg(ACK, 0, socket.MSG_WAITALL)[0])
    elif api == "os.write":
        assert os.write(fd, data) == n
        got = len(os.read(fd, ACK))
    else:
        assert os.writev(fd, [data[: n // 2], data[n // 2 :]]) == n
        a, b = bytearray(ACK // 2), bytearray(ACK // 2)
        got = os.readv(fd, [a, b])
    assert got == ACK, (api, n, got)


def schedule(sock: socket.socket, api: str) -> None:
    for _ in range(REPS):
        for n in SIZES:
            xfer(sock, api, n)


def run(port: int, api: str) -> None:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        schedule(sock, api)


def main() -> int:
    ports = [int(p) for p in sys.argv[1:3]]
    apis = ["sendall", "sendto", "sendmsg", "os.write", "os.writev"]
    threads = [threading.Thread(target=run, args=(ports[i % 2], a)) for i, a in enumerate(apis)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sock = socket.create_connection(("127.0.0.1", ports[1]))
    child = os.fork()
    if child == 0:
        schedule(sock, "sendall")
        os._exit(0)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    schedule(sock, "os.writev")
    sock.close()
    print(child)
    return 0


if __name__ == "__main__":
    sys.exit(main())
