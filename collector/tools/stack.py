"""``stepwatch stack``: the collector with the Debian ``prometheus`` and
``prometheus-alertmanager`` binaries, on the deploy/ configs, for machines without docker.

Prometheus runs on a copy of deploy/prometheus/prometheus.yml whose collector and
Alertmanager addresses are replaced by the local ones and whose rule files are made absolute;
Alertmanager runs on deploy/alertmanager/alertmanager.yml as it is. Every process is a child
of the caller; :meth:`LocalStack.stop` ends them in reverse order and is idempotent.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Optional, Sequence

import yaml

__all__ = ["LocalStack", "StackError", "binaries", "find_deploy_dir", "prometheus_config", "add_parser"]

COLLECTOR_JOB = "stepwatch-collector"  # scrape job name in prometheus.yml; the rules use it
_BINARIES = ("prometheus", "prometheus-alertmanager")


class StackError(RuntimeError):
    """A part of the stack is missing or did not start; the message says which."""


def binaries() -> Optional[dict]:
    """Paths of the Debian prometheus and prometheus-alertmanager binaries, or None if one lacks."""
    found = {name: shutil.which(name) for name in _BINARIES}
    return found if all(found.values()) else None


def find_deploy_dir(explicit: Optional[str] = None) -> pathlib.Path:
    """``explicit``, else $STEPWATCH_DEPLOY_DIR, else deploy/ of the source checkout."""
    candidates = [explicit, os.environ.get("STEPWATCH_DEPLOY_DIR"),
                  pathlib.Path(__file__).resolve().parents[2] / "deploy"]
    for cand in candidates:
        if cand and (pathlib.Path(cand) / "prometheus" / "prometheus.yml").is_file():
            return pathlib.Path(cand).resolve()
    raise StackError("deploy/ directory not found: pass --deploy-dir or set STEPWATCH_DEPLOY_DIR "
                     "(it ships with the source tree, not with the wheel)")


def prometheus_config(deploy_dir: pathlib.Path, collector_http: str, alertmanager: str,
                      scrape_interval: Optional[str] = None) -> dict:
    """deploy/prometheus/prometheus.yml with local addresses and absolute rule file paths."""
    prom_dir = deploy_dir / "prometheus"
    cfg = yaml.safe_load((prom_dir / "prometheus.yml").read_text())
    cfg["rule_files"] = [str(prom_dir / pattern) for pattern in cfg.get("rule_files", [])]
    for am in cfg["alerting"]["alertmanagers"]:
        am["static_configs"] = [{"targets": [alertmanager]}]
    jobs = [job for job in cfg["scrape_configs"] if job["job_name"] == COLLECTOR_JOB]
    if not jobs:
        raise StackError(f"{prom_dir / 'prometheus.yml'} has no scrape job {COLLECTOR_JOB!r}")
    jobs[0]["static_configs"] = [{"targets": [collector_http]}]
    jobs[0].pop("authorization", None)  # the stack's collector serves loopback without http_token
    if scrape_interval:
        cfg["global"]["scrape_interval"] = cfg["global"]["evaluation_interval"] = scrape_interval
    return cfg


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _wait_http_ok(url: str, proc: subprocess.Popen, log: pathlib.Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise StackError(f"{proc.args[0]} exited with code {proc.returncode}; "
                             f"log {log}:\n{log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise StackError(f"{url} not ready within {timeout_s:.0f} s; log {log}")


class LocalStack:
    """Collector, Alertmanager and Prometheus as child processes of the caller.

    Ports given as 0 are chosen free at start. After :meth:`start`, ``collector_grpc``,
    ``collector_http``, ``prometheus_url`` and ``alertmanager_url`` hold the addresses.
    """

    def __init__(self, workdir: str, deploy_dir: Optional[str] = None, host: str = "127.0.0.1",
                 grpc_port: int = 0, http_port: int = 0, prometheus_port: int = 0,
                 alertmanager_port: int = 0, scrape_interval: Optional[str] = None,
                 collector_args: Sequence[str] = (), timeout_s: float = 30.0):
        self.workdir = pathlib.Path(workdir)
        self.deploy_dir = find_deploy_dir(deploy_dir)
        self.bins = binaries()
        if self.bins is None:
            raise StackError("needs the prometheus and prometheus-alertmanager binaries "
                             "(Debian: apt-get install prometheus prometheus-alertmanager)")
        self.host, self.scrape_interval, self.timeout_s = host, scrape_interval, timeout_s
        self.ports = dict(grpc=grpc_port, http=http_port, prometheus=prometheus_port,
                          alertmanager=alertmanager_port)
        self.collector_args = list(collector_args)
        self.procs: list[tuple[str, subprocess.Popen]] = []
        self.collector_grpc = self.collector_http = self.prometheus_url = self.alertmanager_url = ""
        self.alertmanager_ui = False

    def _spawn(self, name: str, cmd: list) -> tuple[subprocess.Popen, pathlib.Path]:
        log = self.workdir / f"{name}.log"
        with open(log, "wb") as fh:
            proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.procs.append((name, proc))
        return proc, log

    def start(self) -> "LocalStack":
        """Start Alertmanager, the collector, then Prometheus; on any failure stop what started."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            self._start_alertmanager()
            self._start_collector()
            self._start_prometheus()
        except BaseException:
            self.stop()
            raise
        return self

    def _port(self, key: str) -> int:
        return self.ports[key] or _free_port(self.host)

    def _start_alertmanager(self) -> None:
        addr = f"{self.host}:{self._port('alertmanager')}"
        proc, log = self._spawn("alertmanager", [
            self.bins["prometheus-alertmanager"],
            f"--config.file={self.deploy_dir / 'alertmanager' / 'alertmanager.yml'}",
            f"--storage.path={self.workdir / 'alertmanager-data'}",
            f"--web.listen-address={addr}", "--cluster.listen-address="])  # no HA gossip port
        self.alertmanager_url = f"http://{addr}"
        _wait_http_ok(self.alertmanager_url + "/-/ready", proc, log, self.timeout_s)
        self.alertmanager_ui = _has_web_ui(self.alertmanager_url)

    @property
    def alertmanager_hint(self) -> str:
        """Where a person reads the Alertmanager's alerts: its web page, or (Debian's package
        ships none: its page says "use amtool") the ``amtool`` command that lists them."""
        if self.alertmanager_ui:
            return self.alertmanager_url
        return f"amtool alert query --alertmanager.url={self.alertmanager_url}  (this Alertmanager has no web UI)"

    def _start_collector(self) -> None:
        ready = self.workdir / "collector-ready.json"
        ready.unlink(missing_ok=True)
        proc, log = self._spawn("collector", [
            sys.executable, "-m", "stepwatch.collector.tools", "collector",
            "--grpc-listen", f"{self.host}:{self.ports['grpc']}",
            "--http-listen", f"{self.host}:{self.ports['http']}",
            "--ready-file", str(ready), *self._alertmanager_args(), *self.collector_args])
        deadline = time.monotonic() + self.timeout_s
        while not ready.exists():
            if proc.poll() is not None:
                raise StackError(f"collector exited with code {proc.returncode}; log {log}:\n"
                                 f"{log.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise StackError(f"collector not ready within {self.timeout_s:.0f} s; log {log}")
            time.sleep(0.05)
        addrs = json.loads(ready.read_text())
        self.collector_grpc, self.collector_http = addrs["grpc"], addrs["http"]

    def _alertmanager_args(self) -> list:
        """The collector sends its own alerts (drift, stragglers, memory: with their why and
        trace) to the stack's Alertmanager, unless the caller's arguments name one."""
        if any(a.startswith("--alertmanager-url") for a in self.collector_args):
            return []
        return ["--alertmanager-url", self.alertmanager_url]

    def _start_prometheus(self) -> None:
        addr = f"{self.host}:{self._port('prometheus')}"
        cfg = prometheus_config(self.deploy_dir, self.collector_http,
                                self.alertmanager_url.removeprefix("http://"), self.scrape_interval)
        path = self.workdir / "prometheus.yml"
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        proc, log = self._spawn("prometheus", [
            self.bins["prometheus"], f"--config.file={path}",
            f"--storage.tsdb.path={self.workdir / 'prometheus-data'}",
            f"--web.listen-address={addr}", "--web.enable-lifecycle"])
        self.prometheus_url = f"http://{addr}"
        _wait_http_ok(self.prometheus_url + "/-/ready", proc, log, self.timeout_s)

    @property
    def collector_proc(self) -> Optional[subprocess.Popen]:
        return next((proc for name, proc in self.procs if name == "collector"), None)

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM each process, newest first, then SIGKILL after ``timeout_s``; idempotent."""
        while self.procs:
            _, proc = self.procs.pop()
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout_s)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()

    def describe(self) -> str:
        return (f"  collector     gRPC {self.collector_grpc} (STEPWATCH_COLLECTOR), "
                f"metrics http://{self.collector_http}/metrics\n"
                f"  live page     http://{self.collector_http}/  (jobs, alerts with their why, windows, traces)\n"
                f"  Prometheus    {self.prometheus_url}  (alerts: {self.prometheus_url}/alerts)\n"
                f"  Alertmanager  {self.alertmanager_hint}\n"
                f"  logs, data    {self.workdir}")


def _has_web_ui(url: str) -> bool:
    """Whether the Alertmanager at ``url`` serves its web application (Debian's package serves a
    page saying it has none and to use amtool)."""
    try:
        with urllib.request.urlopen(url + "/", timeout=2) as resp:
            return b"does not include a web" not in resp.read(64 << 10)
    except OSError:
        return False


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt  # SIGTERM stops the stack like Ctrl-C


def add_parser(sub) -> None:
    """Adds the ``stack`` subcommand to the ``stepwatch`` argument parser."""
    p = sub.add_parser("stack", help="run collector + Prometheus + Alertmanager locally (no docker)",
                       description="Run the collector with the Debian prometheus and prometheus-alertmanager "
                                   "binaries on the deploy/ configs until Ctrl-C. Port 0 picks a free port.")
    p.add_argument("--host", default="127.0.0.1", help="address every part listens on (default 127.0.0.1)")
    p.add_argument("--grpc-port", type=int, default=7470, help="collector gRPC port (default 7470)")
    p.add_argument("--http-port", type=int, default=7471, help="collector /metrics port (default 7471)")
    p.add_argument("--prometheus-port", type=int, default=9090, help="default 9090")
    p.add_argument("--alertmanager-port", type=int, default=9093, help="default 9093")
    p.add_argument("--scrape-interval", default=None, help="override the global scrape_interval (e.g. 5s)")
    p.add_argument("--deploy-dir", default=None, help="deploy/ directory (default: the source checkout's)")
    p.add_argument("--workdir", default=None, help="logs and data (default: a new temporary directory)")
    p.set_defaults(func=run_cli)


def run_cli(args: argparse.Namespace) -> int:
    workdir = args.workdir or tempfile.mkdtemp(prefix="stepwatch-stack-")
    try:
        stack = LocalStack(workdir, args.deploy_dir, args.host, args.grpc_port, args.http_port,
                           args.prometheus_port, args.alertmanager_port, args.scrape_interval)
        stack.start()
    except StackError as exc:
        print(f"stepwatch stack: error: {exc}", file=sys.stderr)
        return 1
    signal.signal(signal.SIGTERM, _interrupt)
    print("stepwatch stack: up (Ctrl-C stops it)\n" + stack.describe(), flush=True)
    try:
        while all(proc.poll() is None for _, proc in stack.procs):
            time.sleep(0.5)
        dead = [name for name, proc in stack.procs if proc.poll() is not None]
        print(f"stepwatch stack: {', '.join(dead)} exited; stopping (logs in {workdir})", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        stack.stop()
