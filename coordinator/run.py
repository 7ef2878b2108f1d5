"""``tiresias-run``: run one job under Tiresias and behave like the job itself.

It submits the job, streams its logs, and exits with the job's exit code; Ctrl-C cancels the
job. With ``--coordinator`` it uses a running cluster; without, it starts an embedded
coordinator and a local agent in this process, so the first command on a fresh machine works.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import tempfile
import threading
import uuid
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import click
import zmq

from coordinator.cli.jobs import (
    SCRIPT_HELP,
    SUBMIT_RETRIES,
    follow_logs,
    log_writer,
    script_argv,
    shape_options,
)
from coordinator.core.model import CoreError, JobState
from coordinator.executors.agents.daemon import Agent
from coordinator.executors.agents.gpu_discovery import MAX_VIRTUAL_GPUS, discover_gpus, nvml_gpus
from coordinator.gang import GangRequest
from coordinator.scheduling_flags import MEASURED, scheduling_options, scheduling_settings
from coordinator.service.client import Client, RequestError, client_keys
from coordinator.service.coordinator import Coordinator
from coordinator.service.options import Options
from coordinator.service.views import run_events, size_text
from tiresias_cli.kit import (
    PASSTHROUGH_SETTINGS,
    Command,
    argument,
    option,
    passthrough,
    quiet_broken_pipe,
    run,
    version_option,
)
from tiresias_cli.values import POSITIVE_COUNT, SECONDS

DESCRIPTION = __doc__.replace("``", "")


class Embedded:
    """A coordinator and one agent on loopback, each on its own thread."""

    def __init__(self, opts: Options, gpus: list[dict[str, Any]]) -> None:
        self.coordinator = Coordinator(opts)
        failed: list[Exception] = []

        def serve() -> None:
            try:
                self.coordinator.run()
            except Exception as e:  # reported by the starting thread, below
                failed.append(e)
                self.coordinator.ready.set()

        self._threads = [threading.Thread(target=serve, daemon=True, name="coordinator")]
        self._threads[0].start()
        if not self.coordinator.ready.wait(10):
            raise RuntimeError("the embedded coordinator did not start")
        if failed:
            raise RuntimeError(f"the embedded coordinator cannot serve on {opts.bind}: {failed[0]}")
        self.address = self.coordinator.address
        # peers of a gang (TF_CONFIG, Horovod rendezvous) reach the node on loopback
        self.agent = Agent(
            self.address, gpus, name="local", workdir=opts.state / "agent", host="127.0.0.1"
        )
        self._threads.append(threading.Thread(target=self.agent.run, daemon=True, name="agent"))
        self._threads[1].start()
        if not self.agent.registered.wait(10):
            raise RuntimeError("the embedded agent did not register")

    def close(self) -> None:
        self.agent.stop.set()
        self.coordinator.stop.set()
        for t in self._threads:
            t.join(5)


def embedded_address(state: Path, cleanup: contextlib.ExitStack) -> str:
    """``ipc://STATE/coordinator.sock``, or, where that path is too long for a Unix socket, a
    socket in a private temporary directory that ``cleanup`` removes."""
    path = state / "coordinator.sock"
    if len(str(path)) >= zmq.IPC_PATH_MAX_LEN:
        short = cleanup.enter_context(tempfile.TemporaryDirectory(prefix="tiresias-run-"))
        path = Path(short) / "coordinator.sock"
    return f"ipc://{path}"


def local_gpus(requested: int | None, needed: int) -> list[dict[str, Any]]:
    """NVML's GPUs, else ``--gpus`` virtual ones, else just enough for the job."""
    if requested is not None:
        return discover_gpus(str(requested))
    if needed > MAX_VIRTUAL_GPUS:
        raise ValueError(
            f"--workers {needed}: one machine offers at most {MAX_VIRTUAL_GPUS} GPUs; "
            f"run it on a cluster (--coordinator)"
        )
    return nvml_gpus() or discover_gpus(str(needed))


def run_job(client: Client, request: GangRequest, name: str | None) -> int:
    """Submit ``request``, stream logs until the job ends, return its exit code; SIGINT
    cancels it."""
    job_id = client.request(
        "submit",
        argv=list(request.argv),
        workers=request.workers,
        min_workers=request.min_workers,
        ps=request.ps,
        horovod=request.horovod,
        cwd=os.getcwd(),
        name=name or Path(request.argv[0]).name,
        key=uuid.uuid4().hex,  # a retry after a lost reply is the same job
        retries=SUBMIT_RETRIES,
    )["job_id"]
    print(f"tiresias-run: job {job_id} submitted to {client.address}", file=sys.stderr)
    cancelled = threading.Event()

    def on_sigint(*_: object) -> None:
        if not cancelled.is_set():
            cancelled.set()
            print(f"\ntiresias-run: cancelling {job_id}", file=sys.stderr)

    previous = signal.signal(signal.SIGINT, on_sigint)
    state: dict[str, Any] = {}  # the job's latest status view
    cancel_sent = False

    def finished() -> bool:
        nonlocal state, cancel_sent
        if cancelled.is_set() and not cancel_sent:
            client.request("cancel", job_id=job_id)
            cancel_sent = True
        before, state = state, client.request("status", job_id=job_id)["job"]
        for line in run_events(before, state):
            print(f"tiresias-run: {line}", file=sys.stderr)
        if JobState(state["state"]).finished:
            return True  # said once, with the counts, below
        if state["state"] != before.get("state"):
            why = f": {state['pending']['text']}" if state.get("pending") else ""
            size = size_text(state) if state["state"] == "running" else ""
            print(f"tiresias-run: {job_id} {state['state']}{size}{why}", file=sys.stderr)
        return False

    try:
        follow_logs(
            client,
            job_id,
            log_writer(request.workers + request.ps > 1),
            until=finished,
            interval=0.3,
        )
    finally:
        signal.signal(signal.SIGINT, previous)
    print(
        f"tiresias-run: {job_id} {state['state']} (restarts {state['restarts']}, "
        f"preemptions {state['preemptions']})",
        file=sys.stderr,
    )
    if state["state"] == "completed":
        return 0
    if state["state"] == "cancelled":
        return 130
    print(f"tiresias-run: {job_id} failed with exit code {state.get('exit_code')}", file=sys.stderr)
    code = state.get("exit_code")
    return code if isinstance(code, int) and 0 < code < 256 else 1


@click.command("tiresias-run", cls=Command, help=DESCRIPTION, context_settings=PASSTHROUGH_SETTINGS)
@version_option()
@option(
    "--coordinator",
    default=None,
    metavar="ADDRESS",
    show_default="none: an embedded one, run locally",
    help="use this coordinator",
)
@shape_options
@option(
    "--gpus",
    type=POSITIVE_COUNT,
    default=None,
    show_default="NVML's, else as many as the job needs",
    help="embedded mode: virtual GPUs of the local node when NVML is absent",
)
@option(
    "--state",
    type=click.Path(path_type=Path),
    default=None,
    metavar="DIR",
    show_default="a temporary one",
    help="embedded mode: state directory",
)
@option(
    "--grace",
    type=SECONDS,
    default=Options.grace,
    help="embedded mode: seconds a preempted job gets to checkpoint",
)
@option(
    "--bind",
    default=None,
    metavar="ADDRESS",
    show_default="ipc://STATE/coordinator.sock",
    help="embedded mode: the coordinator's ipc:// address, for `tiresias COMMAND --coordinator`",
)
@scheduling_options("policy", "queue_thresholds", *MEASURED, mode="embedded mode: ")
@option("--curve-keys", default=None, metavar="DIR", help="CURVE key directory")
@option("--name", default=None, metavar="NAME", show_default="the script's", help="job name")
@option("-v", "--verbose", is_flag=True, help="show service logs")
@argument("script", help=SCRIPT_HELP)
@argument("args", nargs=-1, type=click.UNPROCESSED, help="the script's own arguments")
def command(**params: Any) -> int:
    args = SimpleNamespace(**params)
    args.args = passthrough(click.get_current_context(), args.args)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(message)s",
    )
    embedded = None
    tmp = None
    cleanup = contextlib.ExitStack()
    try:
        request = GangRequest(
            (script_argv(args.script, args.coordinator), *args.args),
            args.workers.most,
            args.ps,
            args.horovod,
            args.workers.least,
        )
        if args.coordinator is None:
            if args.state is None:
                tmp = tempfile.TemporaryDirectory(prefix="tiresias-run-")
                args.state = Path(tmp.name)
            gpus = local_gpus(args.gpus, request.gpus)
            needed = request.min_workers or request.gpus  # an elastic gang runs on fewer
            if len(gpus) < needed:
                print(
                    f"tiresias-run: the job needs {needed} GPUs but this machine has "
                    f"{len(gpus)} (pass --gpus N for virtual GPUs)",
                    file=sys.stderr,
                )
                return 2
            state = args.state.resolve()
            opts = Options(
                bind=args.bind or embedded_address(state, cleanup),
                state=state,
                grace=args.grace,
                settings=scheduling_settings(params),
                allow_root_jobs=True,  # your own coordinator runs your job as you, root or not
            )
            embedded = Embedded(opts, gpus)
            address = embedded.address
        else:
            address = args.coordinator
        with Client(address, client_keys(args.curve_keys, address)) as client:
            return run_job(client, request, args.name)
    except BrokenPipeError:
        return quiet_broken_pipe()
    except RequestError as e:
        print(f"tiresias-run: {e}", file=sys.stderr)
        return 1
    except (OSError, ValueError, RuntimeError, CoreError) as e:
        print(f"tiresias-run: {e}", file=sys.stderr)
        return 2
    finally:
        if embedded is not None:
            embedded.close()
        cleanup.close()
        if tmp is not None:
            tmp.cleanup()


def main(argv: Sequence[str] | None = None) -> int:
    return run(command, argv, "tiresias-run")


if __name__ == "__main__":
    sys.exit(main())
