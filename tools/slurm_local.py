"""A real Slurm cluster on one machine, for tests, benchmarks and trying Tiresias on Slurm.

Starts ``munged``, ``slurmctld`` and one ``slurmd -N NAME`` per node from Debian's packages
(Slurm 22.05), everything under one directory: configuration, state, logs, the munge key and
socket, and fake GPU device files (``gres.conf`` needs device files; nothing opens them). The
slurmd daemons share the host, each on its own port (``NodeName=… Port=…``). Needs root.

    python tools/slurm_local.py DIR --nodes 2 --gpus 2   # runs until Ctrl-C
    SLURM_CONF=DIR/slurm.conf sinfo

With ``--accounting`` (``LocalSlurm(accounting=...)``) its jobs are recorded by slurmdbd on a
local MariaDB (``tools/slurm_accounting.py``), as on a site's cluster: plain ``sacct`` works.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import shutil
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

if __name__ == "__main__":  # run as a script: the checkout's tools package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools import slurm_accounting
from tools.local_daemons import Daemons
from tools.slurm_accounting import LocalAccounting, free_port, storage_lines

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "squeue", "sinfo")
#: The exit code Tiresias' runtime uses for "checkpointed, resume me" (tiresias_launch).
EXIT_CHECKPOINTED = 75


def missing(accounting: bool = False) -> str | None:
    """Why a local Slurm (with ``accounting``: and its slurmdbd) cannot run here, or None
    when it can."""
    if os.geteuid() != 0:
        return "a local Slurm needs root (slurmd runs jobs as their users)"
    absent = [d for d in DAEMONS if shutil.which(d) is None]
    if absent:
        return f"Slurm is not installed ({', '.join(absent)} missing; tools/install-test-deps.sh)"
    return slurm_accounting.missing() if accounting else None


def require(prog: str, accounting: bool = False) -> None:
    """Exit 2 with the reason when a local Slurm cannot run here (for command lines)."""
    why = missing(accounting)
    if why:
        print(f"{prog}: {why}", file=sys.stderr)
        raise SystemExit(2)


#: Distinct cluster names for the clusters of one process (one slurmdbd may record them all).
_CLUSTERS = itertools.count()


def slurm_conf(
    root: Path,
    nodes: dict[str, int],
    ports: dict[str, int],
    partitions: dict[str, list[str]],
    slurmd_timeout: int = 300,
    held: bool = False,
    name: str = "tiresias",
    munge_socket: Path | None = None,
    accounting: str = "AccountingStorageType=accounting_storage/none\n",
    prolog: Path | None = None,
) -> str:
    """slurm.conf for a Tiresias-managed partition (docs/slurm.md explains each setting);
    ``accounting``: its accounting lines (``slurm_accounting.storage_lines``); ``prolog``:
    the script every node runs before a job (Slurm drains a node whose prolog fails)."""
    node_lines = "\n".join(
        f"NodeName={n} NodeHostname=localhost NodeAddr=127.0.0.1 Port={ports[n]} CPUs=16 "
        f"RealMemory=4000 Gres=gpu:{g} State=UNKNOWN"
        for n, g in nodes.items()
    )
    parts = "\n".join(
        f"PartitionName={name} Nodes={','.join(members)} MaxTime=INFINITE State=UP"
        + (" Default=YES" if i == 0 else "")
        for i, (name, members) in enumerate(partitions.items())
    )
    return f"""\
ClusterName={name}
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ports["ctld"]}
SlurmdPort={ports["slurmd"]}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={munge_socket or root / "munge" / "socket"},cred_expire=10
CredType=cred/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd-%n.log
PlugStackConfig={root}/plugstack.conf
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
{accounting.rstrip()}
JobCompType=jobcomp/filetxt
JobCompLoc={root}/jobcomp.txt
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_interval=1,bf_interval=1
PriorityType=priority/basic
GresTypes=gpu
ReturnToService=2
SlurmdParameters=config_overrides
MpiDefault=none
SwitchType=switch/none
JobRequeue=1
RequeueExitHold={EXIT_CHECKPOINTED}
MinJobAge=86400
KillWait=5
SlurmdTimeout={slurmd_timeout}
{"JobSubmitPlugins=lua" if held else ""}
{f"Prolog={prolog}" if prolog else ""}
{node_lines}
{parts}
"""


def job_submit_lua(managed: Sequence[str], default: str) -> str:
    """``tools/job_submit.lua`` for these managed partitions and this default partition."""
    script = (Path(__file__).parent / "job_submit.lua").read_text()
    names = ", ".join(f'["{m}"] = true' for m in managed)
    script = script.replace("local MANAGED = { tiresias = true }", f"local MANAGED = {{ {names} }}")
    return script.replace('local DEFAULT = "tiresias"', f'local DEFAULT = "{default}"')


class LocalSlurm(Daemons):
    """``with LocalSlurm(dir, {"n1": 2, "n2": 2}) as slurm:`` — every node idle inside.
    ``partitions``: name → its nodes (default: ``tiresias`` with every node)."""

    def __init__(
        self,
        root: Path,
        nodes: dict[str, int],
        partitions: dict[str, list[str]] | None = None,
        slurmd_timeout: int = 300,
        held: Sequence[str] = (),
        accounting: LocalAccounting | bool = False,
        prolog: Path | None = None,
    ) -> None:
        """``slurmd_timeout``: seconds before a silent node is declared down (Slurm's
        default; short only where a test fails a node: a loaded machine's slurmd may be slow
        to answer). ``held``: partitions Tiresias manages, whose plain jobs the
        ``job_submit/lua`` plugin (``tools/job_submit.lua``) holds at submission.
        ``accounting``: a running slurmdbd to record this cluster's jobs in (this cluster
        then signs with its munge key), or True for one of its own under ``DIR/accounting``.
        ``prolog``: Slurm's ``Prolog`` script."""
        super().__init__()
        self.own_accounting = accounting is True
        self.accounting = LocalAccounting(root / "accounting") if accounting is True else (
            accounting or None)  # fmt: skip
        self.name = f"tiresias{os.getpid()}x{next(_CLUSTERS)}"
        self.held = tuple(held)
        self.prolog = prolog
        self.root = root.resolve()
        self.slurmd_timeout = slurmd_timeout
        self.nodes = nodes
        self.partitions = partitions or {"tiresias": list(nodes)}
        self.conf = self.root / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *cmd: str, check: bool = True) -> str:
        """A Slurm command against this cluster; its stdout."""
        done = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=60)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)}: {done.stderr.strip() or done.returncode}")
        return done.stdout

    def start(self, timeout: float = 60.0) -> None:
        r = self.root
        acct = self.accounting
        if acct is not None and self.own_accounting:
            acct.start()
        for sub in ("munge", "state", "log", "dev", *(f"spool/{n}" for n in self.nodes)):
            (r / sub).mkdir(parents=True, exist_ok=True)
        (r / "plugstack.conf").write_text("")
        gpus = max(self.nodes.values())
        for i in range(gpus):  # what gres.conf's File= names; /dev/null's numbers
            dev = r / "dev" / f"gpu{i}"
            if not dev.exists():
                os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        (r / "gres.conf").write_text(
            "AutoDetect=off\n"
            + "".join(
                f"NodeName={n} Name=gpu File={r}/dev/gpu[0-{g - 1}]\n"
                if g > 1
                else f"NodeName={n} Name=gpu File={r}/dev/gpu0\n"
                for n, g in self.nodes.items()
            )
        )
        for attempt in range(3):  # a port found free may be taken before a daemon binds it
            ports = {name: free_port() for name in ("ctld", "slurmd", *self.nodes)}
            shared = (
                {
                    "munge_socket": acct.munge_socket,
                    "accounting": storage_lines(acct.munge_socket, acct.dbd_port),
                }
                if acct
                else {}
            )
            self.conf.write_text(
                slurm_conf(r, self.nodes, ports, self.partitions, self.slurmd_timeout,
                           bool(self.held), self.name, prolog=self.prolog,
                           **shared)  # type: ignore[arg-type]
            )  # fmt: skip
            if self.held:
                (r / "job_submit.lua").write_text(
                    job_submit_lua(self.held, next(iter(self.partitions)))
                )
            try:
                self._start_daemons(timeout)
                return
            except RuntimeError:
                logs = "".join(p.read_text(errors="replace") for p in (r / "log").glob("*.out"))
                if attempt == 2 or "Address already in use" not in logs:
                    raise
                self._terminate()
                for out in (r / "log").glob("*.out"):
                    out.unlink()

    def _start_daemons(self, timeout: float) -> None:
        r = self.root
        if self.accounting is not None:  # its munged signs for this cluster too
            self.accounting.add_cluster(self.name)
        else:
            self._start_munged(r / "munge", timeout)
        self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.conf)])
        self._wait(lambda: self._answers(), timeout, "slurmctld to answer")
        for node in self.nodes:
            self._spawn(f"slurmd-{node}", ["slurmd", "-D", "-N", node, "-f", str(self.conf)])
        self._wait(self._all_idle, timeout, "every node idle")

    def _answers(self) -> bool:
        return (
            subprocess.run(
                ["scontrol", "ping"], env=self.env, capture_output=True, timeout=30
            ).returncode
            == 0
        )

    def procs(self) -> dict[str, subprocess.Popen[bytes]]:
        """The daemons running now, by name (``slurmd-n1``, …)."""
        return dict(self._procs)

    def states(self) -> dict[str, str]:
        """Node → its state as ``sinfo`` says it (idle, mixed, allocated, down*, …)."""
        out = self.run("sinfo", "-h", "-N", "-o", "%N %T", check=False)
        return dict(line.split() for line in out.splitlines() if line.strip())

    def _all_idle(self) -> bool:
        states = self.states()
        return all(states.get(n) == "idle" for n in self.nodes)

    def fail_node(self, node: str, freeze: bool = True) -> list[int]:
        """The machine ``node`` stops: its slurmd is killed, and its job steps and their
        processes are frozen (SIGSTOP), as if it had lost power; the frozen pids. With
        ``freeze=False`` only slurmd stops: the node is cut off from Slurm while its jobs'
        processes keep running (a partitioned node)."""
        self._procs[f"slurmd-{node}"].kill()
        self._procs.pop(f"slurmd-{node}").wait()
        frozen: list[int] = []
        for pid in _pids_of_node(node) if freeze else ():
            for target in (pid, _parent(pid)):  # a task, and its slurmstepd
                with contextlib.suppress(ProcessLookupError):
                    os.kill(target, signal.SIGSTOP)
                    frozen.append(target)
        return frozen

    def revive_node(self, node: str, frozen: list[int], timeout: float = 60.0) -> None:
        """Put a failed node back: what it ran is gone; a fresh slurmd registers it idle."""
        for pid in frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self._spawn(f"slurmd-{node}", ["slurmd", "-D", "-N", node, "-f", str(self.conf)])
        self._wait(lambda: self.states().get(node) == "idle", timeout, f"{node} idle again")

    def jobs(self) -> list[str]:
        """Ids of the jobs Slurm still holds (pending, running, completing)."""
        out = self.run("squeue", "-h", "-t", "PD,R,CG,S,SE,RQ,RH,RS,RF,CF", "-o", "%i", check=False)
        return out.split()

    def cancel_all(self, timeout: float = 60.0) -> None:
        """Cancel every job and wait until Slurm has finished them all, nodes idle again."""
        if "slurmctld" not in self._procs:
            return
        for partition in self.partitions:
            self.run("scancel", "--full", "-p", partition, check=False)
            self.run("scancel", "-p", partition, "--state=PENDING", check=False)
        self._wait(lambda: not self.jobs() and self._all_idle(), timeout, "all jobs gone")

    def stop(self) -> None:
        with contextlib.suppress(RuntimeError):
            self.cancel_all()
        self._terminate()
        if self.accounting is not None and self.own_accounting:
            self.accounting.stop()


def environments() -> Iterator[tuple[int, list[bytes]]]:
    """Every process of this machine with its environment (``VAR=value`` entries)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            yield int(entry.name), (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue


def _pids_of_node(node: str) -> list[int]:
    """Processes Slurm started on ``node`` (their environment names it)."""
    return [pid for pid, env in environments() if f"SLURMD_NODENAME={node}".encode() in env]


def _parent(pid: int) -> int:
    """``pid``'s parent when that is a slurmstepd, else ``pid`` itself."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        ppid = int((Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])
        if (Path("/proc") / str(ppid) / "cmdline").read_bytes().startswith(b"slurmstepd"):
            return ppid
    return pid


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", type=Path, help="where configuration, state and logs go")
    ap.add_argument("--nodes", type=int, default=2, help="slurmd daemons (default 2)")
    ap.add_argument("--gpus", type=int, default=2, help="fake GPUs per node (default 2)")
    ap.add_argument(
        "--slurmd-timeout",
        type=int,
        default=300,
        metavar="SECONDS",
        help="SlurmdTimeout: a silent node is DOWN after it (default 300)",
    )
    ap.add_argument("--hold-sbatch", action="store_true",
                    help="the job_submit/lua plugin holds plain jobs of the partition "
                         "at submission (tools/job_submit.lua)")  # fmt: skip
    ap.add_argument("--accounting", action="store_true",
                    help="record jobs in slurmdbd on a local MariaDB (DIR/accounting): "
                         "plain sacct works")  # fmt: skip
    args = ap.parse_args()
    require("slurm_local", accounting=args.accounting)
    nodes = {f"n{i + 1}": args.gpus for i in range(args.nodes)}
    held = ["tiresias"] if args.hold_sbatch else []
    with LocalSlurm(args.dir, nodes, slurmd_timeout=args.slurmd_timeout, held=held,
                    accounting=args.accounting) as slurm:  # fmt: skip
        print(f"export SLURM_CONF={slurm.conf}", flush=True)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    return 0


if __name__ == "__main__":
    sys.exit(main())
