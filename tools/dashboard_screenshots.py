"""Screenshots of the dashboard of a small live cluster, for docs/operations.md.

    python tools/dashboard_screenshots.py docs/images   # about 90 s; needs chromium

Starts a coordinator (thresholds 20,60 GPU-s, so jobs are demoted and preempted) with its
dashboard and two agents of 4 virtual GPUs in a temporary directory, submits a mix of
``examples/fake_job.py`` jobs for a minute, then has headless Chromium save the page
(``dashboard.png``) and one job's page (``dashboard-job.png``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click

REPO = Path(__file__).resolve().parents[1]
FAKE_JOB = REPO / "examples" / "fake_job.py"
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
#: (GPUs, steps, seconds per step): a mix of short and long, small and large jobs.
JOBS = [
    (2, 400, 0.2),
    (1, 40, 0.2),
    (4, 300, 0.2),
    (1, 600, 0.1),
    (2, 60, 0.2),
    (3, 90, 0.2),
    (1, 30, 0.1),
    (2, 500, 0.2),
    (1, 50, 0.2),
    (4, 80, 0.2),
]


def tiresias(address: str, *args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "coordinator.cli", *args[:1], "--coordinator", address, *args[1:]],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env=ENV,
    )
    return out.stdout


def shoot(chromium: str, url: str, out: Path, height: int) -> None:
    subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--hide-scrollbars",
            "--virtual-time-budget=4000",
            f"--window-size=1500,{height}",
            f"--screenshot={out}",
            url,
        ],
        capture_output=True,
        check=True,
        timeout=120,
    )


@click.command(help=__doc__.split("\n\n")[0])
@click.argument("out", type=click.Path(path_type=Path))
@click.option("--seconds", type=float, default=60.0, help="how long the jobs run first")
def main(out: Path, seconds: float) -> None:
    chromium = shutil.which("chromium")
    if chromium is None:
        sys.exit("needs chromium (tools/install-test-deps.sh installs it)")
    out.mkdir(parents=True, exist_ok=True)
    from coordinator.gang import free_local_port  # the checkout's, once on sys.path

    port = free_local_port()
    with tempfile.TemporaryDirectory(prefix="tiresias-shots-") as tmp:
        address = f"ipc://{tmp}/coordinator.sock"
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "coordinator.service.cli",
                    "--bind",
                    address,
                    "--state",
                    f"{tmp}/state",
                    "--allow-root-jobs",
                    "--thresholds",
                    "20,60",
                    "--dashboard-port",
                    str(port),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=ENV,
            )
        ]
        try:
            for node in ("gpu01", "gpu02"):
                procs.append(
                    subprocess.Popen(
                        [
                            sys.executable,
                            "-m",
                            "coordinator.executors.agents.cli",
                            "--coordinator",
                            address,
                            "--gpus",
                            "4",
                            "--name",
                            node,
                            "--workdir",
                            f"{tmp}/{node}",
                            "--heartbeat",
                            "0.5",
                        ],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                        env=ENV,
                    )
                )
            while len(json.loads(tiresias(address, "nodes", "--json"))) < 2:
                time.sleep(0.2)
            start = time.monotonic()
            for i, (gpus, steps, step_time) in enumerate(JOBS):
                tiresias(
                    address,
                    "submit",
                    "--workers",
                    str(gpus),
                    "--name",
                    f"train-{i}",
                    str(FAKE_JOB),
                    "--steps",
                    str(steps),
                    "--step-time",
                    str(step_time),
                )
                time.sleep(seconds / len(JOBS))  # arrivals spread over the first minute
            time.sleep(max(0.0, seconds - (time.monotonic() - start)))
            page = f"http://127.0.0.1:{port}/?window=300"
            shoot(chromium, page, out / "dashboard.png", 2300)
            shoot(chromium, page + "&job=j1", out / "dashboard-job.png", 700)
        finally:
            for p in procs:
                p.terminate()
                p.wait(30)
    print(f"wrote {out / 'dashboard.png'} and {out / 'dashboard-job.png'}")


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    main()
