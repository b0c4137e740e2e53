"""A real single-node SLURM cluster for one test: munged, slurmctld and slurmd (Debian
``slurm-wlm`` and ``munge``) in the foreground, on free ports, with every file under a
directory the test owns; ``SLURM_CONF`` in :attr:`env` points srun at it. Needs root (the
daemons run as root, as in CI) and the binaries; callers skip otherwise."""

from __future__ import annotations

import os
import pathlib
import shutil
import socket
import subprocess
import tempfile
import time

DAEMONS = ("munged", "slurmctld", "slurmd", "srun", "sinfo")


def available() -> bool:
    return os.geteuid() == 0 and all(shutil.which(d) for d in DAEMONS)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Slurm:
    def __init__(self, root):
        self.root = root
        self.procs: list = []
        self._sockdir = None
        self.env = dict(os.environ, SLURM_CONF=str(root / "slurm.conf"))

    def start(self) -> "Slurm":
        r = self.root
        r.mkdir(parents=True, exist_ok=True)
        for d in ("state", "spool", "munge"):
            (r / d).mkdir(mode=0o700)
        key = r / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        # munged wants every directory above its socket open to all (pytest's tmp is 0700)
        self._sockdir = pathlib.Path(tempfile.mkdtemp(prefix="stepwatch-munge-"))
        self._sockdir.chmod(0o755)
        sock = self._sockdir / "munge.socket"
        host = socket.gethostname().split(".")[0]
        (r / "slurm.conf").write_text("\n".join([
            "ClusterName=stepwatchtest", f"SlurmctldHost={host}(127.0.0.1)",
            "SlurmUser=root", "SlurmdUser=root", f"SlurmctldPort={_port()}", f"SlurmdPort={_port()}",
            "AuthType=auth/munge", f"AuthInfo=socket={sock}", "CredType=cred/munge",
            f"StateSaveLocation={r}/state", f"SlurmdSpoolDir={r}/spool",
            f"SlurmctldPidFile={r}/slurmctld.pid", f"SlurmdPidFile={r}/slurmd.pid",
            f"SlurmctldLogFile={r}/slurmctld.log", f"SlurmdLogFile={r}/slurmd.log",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "SchedulerType=sched/builtin",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core", "ReturnToService=2",
            "MpiDefault=none", "JobCompType=jobcomp/none", "AccountingStorageType=accounting_storage/none",
            f"NodeName={host} NodeAddr=127.0.0.1 CPUs={os.cpu_count() or 1} State=UNKNOWN",
            "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP", ""]))
        self._spawn(["munged", "-F", f"--key-file={key}", f"--socket={sock}", f"--pid-file={r}/munge/munged.pid",
                     f"--log-file={r}/munge/munged.log", f"--seed-file={r}/munge/seed"], "munged")
        deadline = time.monotonic() + 10
        while not sock.exists():
            assert time.monotonic() < deadline, self.logs()
            time.sleep(0.05)
        self._spawn(["slurmctld", "-D", "-f", str(r / "slurm.conf")], "slurmctld")
        self._spawn(["slurmd", "-D", "-f", str(r / "slurm.conf")], "slurmd")
        deadline = time.monotonic() + 60
        while True:
            run = subprocess.run(["sinfo", "-h", "-o", "%t"], env=self.env, capture_output=True, text=True)
            if run.stdout.strip() == "idle":
                return self
            assert time.monotonic() < deadline, f"slurm did not come up: {run.stdout} {run.stderr}\n{self.logs()}"
            time.sleep(0.3)

    def _spawn(self, cmd, name) -> None:
        log = open(self.root / f"{name}.out", "wb")
        self.procs.append(subprocess.Popen(cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT))

    def logs(self) -> str:
        return "\n".join(f"== {p.name}\n{p.read_text()[-1500:]}" for p in sorted(self.root.glob("*.out")) +
                         sorted(self.root.glob("*.log")))

    def stop(self) -> None:
        for p in reversed(self.procs):
            p.terminate()
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(self._sockdir, ignore_errors=True)
