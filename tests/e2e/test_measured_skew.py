"""A parameter-server job whose runtime reports no tensor sizes gets its S_J from the traffic
the node agent measured with ibverbs-tap (``tiresias-run``'s embedded agent runs PS jobs
under the tap), and the placement sees it."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import wait_until

from .test_tiresias_run import RUN_TIMEOUT, launch, stop

SCRIPT = Path(__file__).resolve().parent / "scripts" / "plain_ps_loop.py"


@pytest.mark.tf
def test_a_ps_job_without_tensor_sizes_is_placed_by_its_measured_traffic(tmp_path: Path) -> None:
    run = launch(tmp_path, (), "--ps", "2", "--workers", "1", str(SCRIPT))
    try:
        # 3 MB of weights and gradients a step on ps0 for every 1 MB on ps1, plus TF's small
        # control messages; the first measurements, of the start-up traffic alone, differ
        def measured() -> bool:
            skew = run.job()["skew"]
            return skew is not None and 0.7 < skew < 0.8

        wait_until(measured, RUN_TIMEOUT, "S_J measured from the training traffic")
        assert run.job()["state"] == "running"
    except BaseException:
        print(run.diagnostics())
        raise
    finally:
        stop(run)
