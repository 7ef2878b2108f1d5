"""Plain ``sbatch`` jobs in the managed partition, scheduled by Tiresias too.

A job a user submitted with ``sbatch`` (not named ``tiresias:<key>``) that is pending in the
partition is held at once (``scontrol hold``) and offered to the coordinator as a submitted
job (``JobFound``): its owner is the Slurm job's user, its GPUs its GRES request. When
the core starts it, the executor releases it onto the node the core chose; preempting it
requeues it held (``scontrol requeuehold``): Slurm cannot checkpoint a batch script, so its
work since the start is lost and counted so. Only jobs that ask for one node and at least
one GPU are adopted (a GPU count one node can hold); others are left to Slurm.

With the ``job_submit/lua`` plugin (``tools/job_submit.lua``) Slurm holds such a job at
submission already, marked so in its admin comment: nothing starts before the coordinator's
release, even while GPUs are free.

A mark per adopted job (``SPOOL/adopted/<Slurm id>.json``) tells a job we hold from one its
user held, across coordinator restarts, and keeps the job's latest start.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from coordinator.executors.slurm.ctl import PREFIX, WAITING, Slurm, SlurmError, Start, gpu_count
from coordinator.executors.slurm.task import launch_file
from coordinator.protocol import Stopping
from coordinator.service.executor import JobFound

#: The admin comment of a job ``tools/job_submit.lua`` held at submission (its ``MARK``).
HELD_AT_SUBMISSION = "tiresias: held at submission"


def adoptable(job: Mapping[str, Any], largest_node: int) -> int:
    """The GPUs of a foreign pending job Tiresias can schedule exactly (0: leave it)."""
    if str(job.get("name", "")).startswith(PREFIX) or str(job["job_state"]) != "PENDING":
        return 0
    gpus = gpu_count(str(job.get("tres_per_node", "")).removeprefix("gres:"))
    return gpus if int(job.get("node_count") or 1) == 1 and 0 < gpus <= largest_node else 0


class Adopter:
    """The foreign jobs this coordinator holds and schedules."""

    def __init__(self, spool: Path, slurm: Slurm) -> None:
        self.dir = spool / "adopted"
        self.slurm = slurm
        self._offered: set[str] = set()  # offered since this process started

    def mark(self, slurm_id: str) -> Path:
        return self.dir / f"{slurm_id}.json"

    def marked(self, slurm_id: str) -> dict[str, Any] | None:
        with contextlib.suppress(OSError, ValueError):
            return dict(json.loads(self.mark(slurm_id).read_text()))
        return None

    def note(self, slurm_id: str, **facts: Any) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.mark(slurm_id).write_text(json.dumps({**(self.marked(slurm_id) or {}), **facts}))

    def look(self, jobs: Mapping[str, Mapping[str, Any]], largest_node: int) -> list[JobFound]:
        """Hold the new foreign jobs; offer each held one once per coordinator process (the
        coordinator knows an offered job again by its Slurm id)."""
        found: list[JobFound] = []
        for slurm_id, job in sorted(jobs.items(), key=lambda item: int(item[0])):  # FIFO
            gpus = adoptable(job, largest_node)
            ours = self.marked(slurm_id) is not None
            if not gpus or slurm_id in self._offered:
                continue
            held = "held" in str(job.get("state_reason", "")).lower()
            if not ours:
                if held and job.get("admin_comment") != HELD_AT_SUBMISSION:
                    continue  # its user holds it: not ours to release
                try:
                    if not held:
                        self.slurm.hold(slurm_id)
                except SlurmError:  # it started meanwhile: Slurm's own
                    continue
                self.note(slurm_id, gpus=gpus)
            self._offered.add(slurm_id)
            found.append(JobFound(slurm_id, str(job.get("user_name") or ""), gpus,
                                       str(job.get("name") or "sbatch"),
                                       str(job.get("command") or "")))  # fmt: skip
        return found


def exit_of(job: Mapping[str, Any], stopping: Stopping | None) -> list[dict[str, Any]]:
    """The batch script's exit as one process: its code (or 128 + its signal); cancelled by
    its user in Slurm (not stopped by us), it failed with 130."""
    if str(job["job_state"]) in WAITING:
        return []
    status = int(job.get("exit_code") or 0)
    code: int | None = status >> 8 if status & 0x7F == 0 else 128 + (status & 0x7F)
    if str(job["job_state"]) == "CANCELLED":
        code = None if stopping else 130
    return [{"role": "chief", "task_index": 0, "code": code}]


def found_again(
    jobs: Mapping[str, Mapping[str, Any]], spool: Path, adopter: Adopter
) -> dict[str, Start]:
    """After a coordinator restart: job id → the latest start of every Tiresias job (and
    adopted sbatch job) Slurm still knows, read from its plan (or its adoption mark)."""
    found: dict[str, Start] = {}
    for slurm_id, job in sorted(jobs.items(), key=lambda item: int(item[0])):
        key = str(job["name"])[len(PREFIX) :]
        try:
            adopted = adopter.marked(slurm_id)
            if adopted is not None and "job_id" in adopted:
                gang = {**adopted, "slurm_restarts": adopted["restarts"], "parts": adopted["nodes"]}
            elif str(job["name"]).startswith(PREFIX):
                gang = json.loads(launch_file(spool / key).read_text())
            else:
                continue
        except (OSError, ValueError):
            continue
        found[gang["job_id"]] = Start(
            gang["job_id"], key, gang["restart"], slurm_id, tuple(sorted(gang["parts"])),
            tuple(map(tuple, gang["shape"])), gang["slurm_restarts"], adopted=adopted is not None,
        )  # fmt: skip
    return found
