"""A refused start leaves the state directory as it found it: options are validated before
anything is created, and a state that holds no history yet takes the next start's options."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from coordinator.core.model import CoreError
from coordinator.core.settings import Settings
from coordinator.service.client import Client
from coordinator.service.coordinator import Coordinator, Options
from coordinator.service.curve import generate

from .conftest import in_process_coordinator

pytestmark = pytest.mark.slow  # starts real processes


def test_bad_options_create_nothing_and_a_good_start_follows(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with pytest.raises(CoreError, match="unknown policy 'foo'"):
        Coordinator(Options(state=state, settings=Settings(policy="foo")))
    with pytest.raises(CoreError, match="unknown placement"):
        Coordinator(Options(state=state, settings=Settings(placement="nowhere")))
    with pytest.raises(CoreError, match="queue_thresholds"):
        Coordinator(Options(state=state, settings=Settings(queue_thresholds=(5.0, 1.0))))
    with pytest.raises(OSError):
        Coordinator(
            Options(
                state=state, settings=Settings(policy="tiresias-g"), gittins_history=tmp_path / "no"
            )
        )
    assert not state.exists()
    Coordinator(Options(state=state, settings=Settings(policy="las"))).store.close()


def test_a_state_without_history_takes_the_next_starts_options(tmp_path: Path) -> None:
    """E.g. a start that created the state but then could not bind its port."""
    Coordinator(Options(state=tmp_path, settings=Settings(policy="las"))).store.close()
    coord = Coordinator(Options(state=tmp_path, settings=Settings(policy="tiresias-g")))
    assert coord.sched.policy.name == "tiresias-g"
    coord.store.close()


def test_refused_command_line_then_a_good_start(tmp_path: Path) -> None:
    state = tmp_path / "state"
    base = [sys.executable, "-m", "coordinator.service.cli", "--state", str(state)]
    bad = subprocess.run([*base, "--policy", "foo"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "foo" in bad.stderr and "Traceback" not in bad.stderr
    assert not state.exists()
    # a good start on the same directory gets as far as serving: it fails only on the bind
    keys = ["--curve-keys", str(generate(tmp_path / "keys"))]
    taken = subprocess.run(
        [*base, "--policy", "las", "--bind", "tcp://256.0.0.1:1", *keys],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "was created with" not in taken.stderr
    assert "cannot serve on tcp://256.0.0.1:1" in taken.stderr and taken.returncode == 2


def test_taken_ports_and_missing_keys_are_one_line_errors(tmp_path: Path) -> None:
    base = [sys.executable, "-m", "coordinator.service.cli", "--state", str(tmp_path)]
    keys = generate(tmp_path / "keys")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cases = {
            f"cannot serve on tcp://127.0.0.1:{port}: Address already in use": [
                "--bind",
                f"tcp://127.0.0.1:{port}",
                "--curve-keys",
                str(keys),
            ],
            f"cannot serve metrics on 127.0.0.1:{port}: Address already in use": [
                "--bind",
                f"ipc://{tmp_path}/c.sock",
                "--metrics-port",
                str(port),
            ],
            "CURVE key file": ["--bind", "tcp://127.0.0.1:*", "--curve-keys", str(tmp_path / "no")],
        }
        for message, args in cases.items():
            out = subprocess.run([*base, *args], capture_output=True, text=True, timeout=60)
            assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
            assert f"tiresias-coordinator: {message}" in out.stderr


def test_a_second_coordinator_on_a_live_socket_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "c.sock"
    with socket.socket(socket.AF_UNIX) as gone:  # a socket file left by a dead process
        gone.bind(str(path))
    address = f"ipc://{path}"
    with in_process_coordinator(Options(bind=address, state=tmp_path / "one")) as first:
        second = Coordinator(Options(bind=address, state=tmp_path / "two"))
        refused: list[BaseException] = []
        thread = threading.Thread(target=lambda: _run_into(second, refused), daemon=True)
        thread.start()
        thread.join(60)
        if thread.is_alive():  # it serves: the first lost its socket
            second.stop.set()
            thread.join(10)
            pytest.fail("a second coordinator took the socket of a live one")
        assert "another coordinator is serving there" in str(refused), refused
        second.store.close()
        with Client(first.address, timeout=5) as client:  # the first keeps its socket
            assert client.request("nodes")["nodes"] == []


def _run_into(coord: Coordinator, errors: list[BaseException]) -> None:
    try:
        coord.run()
    except OSError as e:
        errors.append(e)
