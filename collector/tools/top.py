"""``stepwatch top --http HOST:PORT``: jobs and ranks live in a terminal, for people on a login
node without Grafana. Reads the collector's /api/jobs and /api/alerts every ``--interval``
seconds and redraws one table, what is wrong first:

    JOB  RANK  STATE  STEPS  STEPS/S  STEP MS  DATA WAIT  GPU UTIL  DETECTOR  ALERT

and under it, per job, its live run against the job's run before it (settled step time).

Rows: jobs with a firing alert first (critical, then warning, then info), then live jobs,
then finished ones; ranks in order within a job. STATE is ``live`` or ``ended`` (every stream
of the rank closed); STEPS/S the change of STEPS between two reads ("-" once ended); STEP MS the
median of the rank's last 100 steps (not a mean since attach, which carries the first step's
start-up); DATA WAIT the data-loader share of the last 100 steps; GPU UTIL the NVML utilisation
("-" without a GPU); DETECTOR whether slowdowns are judged yet: "armed", "in 2m10s" (of
training, from its latest step) or "unarmed" (the rank ended before); ALERT the rank's most severe firing alert: severity, name, its change and
the first part of its why. ``--once`` prints one table (two reads ``--interval`` apart) and
exits: 0, or 1 when the collector cannot be read.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.request
from typing import Optional

__all__ = ["add_parser", "run", "read", "render"]

_CLEAR = "\x1b[H\x1b[2J"


def add_parser(sub) -> None:
    p = sub.add_parser("top", help="jobs and ranks live in the terminal (from a collector's HTTP API)",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("--http", metavar="HOST:PORT", default=os.environ.get("STEPWATCH_HTTP", "127.0.0.1:7471"),
                   help="the collector's HTTP address [env STEPWATCH_HTTP] (default 127.0.0.1:7471)")
    p.add_argument("--http-token", default=os.environ.get("STEPWATCH_HTTP_TOKEN", ""),
                   help="the collector's http_token, when it has one [env STEPWATCH_HTTP_TOKEN]")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between reads (default 2)")
    p.add_argument("--once", action="store_true", help="print one table and exit")
    p.set_defaults(func=run)


def _get(url: str, token: str = "") -> bytes:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as resp:
        return resp.read()


_SEVERITY = {"critical": 0, "warning": 1, "info": 2}
_ALERT_WIDTH = 72


def read(http: str, token: str = "") -> dict:
    """``{"time", "ranks": {(job, rank): {...}}}`` from one read of /api/jobs and /api/alerts."""
    ranks: dict = {}
    for job in json.loads(_get(f"http://{http}/api/jobs", token))["jobs"]:
        for r in job["ranks"]:
            gpu = r.get("gpu_sample") or {}
            ranks[(job["job"], int(r["rank"]))] = {
                "steps": float(r.get("steps_total") or 0), "live": bool(r.get("connected")),
                "median_s": r.get("step_median_s"), "wait": r.get("dataloader_wait_ratio"),
                "gpu": gpu.get("utilization_ratio"), "alerts": [],
                "armed": r.get("drift_armed"), "armed_in": r.get("drift_armed_in_s")}
    runs = {}
    for job in json.loads(_get(f"http://{http}/api/jobs?summary=1", token))["jobs"]:
        if job.get("run"):
            runs[job["job"]] = job["run"]
    for a in json.loads(_get(f"http://{http}/api/alerts", token))["alerts"]:
        key = (a.get("job"), a.get("rank"))
        if a.get("state") == "firing" and key in ranks:
            ranks[key]["alerts"].append(a)
    return {"time": time.monotonic(), "ranks": ranks, "runs": runs}


def _detector(r: dict) -> str:
    """The rank's drift detector: armed, or in how much more training it will be, or that the
    rank ended before it was (slowdowns are judged after a rank's first 3 minutes)."""
    if r.get("armed"):
        return "armed"
    if r.get("armed") is None:
        return "-"  # (detection off, or the collector does not know the rank)
    if not r["live"]:
        return "unarmed"
    if r.get("armed_in") is None:
        return "warming"
    s = int(r["armed_in"])
    return f"in {s // 60}m{s % 60:02d}s" if s >= 60 else f"in {s}s"


def _runs_line(job: str, run: dict) -> str:
    """One job's live run against its run before (``stepwatch history JOB`` lists them all)."""
    level = run.get("settled_step_s")
    text = f"{job[:24]:<24} run from {time.strftime('%m-%d %H:%M', time.gmtime(float(run['started_at'])))} UTC"
    if run.get("first_step") is not None:
        text += f", step {run['first_step']:,}"
    if level is None:
        return text + ": settling"
    text += f": settled {1e3 * level:.1f} ms/step"
    if run.get("ratio") is not None:
        text += (f", {run['ratio'] - 1:+.1%} vs the run of "
                 f"{time.strftime('%m-%d %H:%M', time.gmtime(float(run['previous_started_at'])))} UTC "
                 f"({1e3 * run['previous_step_s']:.1f} ms)" + (" REGRESSION" if run.get("regression") else ""))
    else:
        text += ", no earlier run of this job to compare"
    return text


def _alert_cell(alerts: list) -> str:
    """The most severe firing alert in one line: severity, name, change, why (cut)."""
    if not alerts:
        return "-"
    a = min(alerts, key=lambda x: _SEVERITY.get(x.get("severity"), 3))
    text = f"{a.get('severity', '?')} {str(a.get('alertname', '')).replace('Stepwatch', '')}"
    if a.get("ratio"):
        text += f" {float(a['ratio']) - 1:+.1%}"
    why = str(a.get("diagnosis") or "").split(";")[0].strip()
    if why:
        text += f" ({why})"
    if len(alerts) > 1:
        text += f" +{len(alerts) - 1} more"
    return text if len(text) <= _ALERT_WIDTH else text[:_ALERT_WIDTH - 3] + "..."


def _order(ranks: dict) -> list:
    """(job, rank) keys: alerting jobs first by their worst severity, then live, then ended."""
    worst: dict = {}
    live: dict = {}
    for (job, _), r in ranks.items():
        for a in r["alerts"]:
            worst[job] = min(worst.get(job, 3), _SEVERITY.get(a.get("severity"), 3))
        live[job] = live.get(job, False) or r["live"]
    return sorted(ranks, key=lambda k: (worst.get(k[0], 3), not live[k[0]], k[0], k[1]))


def render(now: dict, before: Optional[dict] = None) -> str:
    head = (f"{'JOB':<24} {'RANK':>4} {'STATE':<5} {'STEPS':>8} {'STEPS/S':>8} {'STEP MS':>8} "
            f"{'DATA WAIT':>9} {'GPU UTIL':>8} {'DETECTOR':>9}  ALERT")
    lines = [head]
    for job, rank in _order(now["ranks"]):
        r = now["ranks"][(job, rank)]
        prev = (before or {}).get("ranks", {}).get((job, rank))
        rate = "-"
        if r["live"] and prev is not None and now["time"] > before["time"]:
            rate = f"{(r['steps'] - prev['steps']) / (now['time'] - before['time']):.1f}"
        step_ms = f"{1e3 * r['median_s']:.1f}" if r["median_s"] is not None else "-"
        wait = f"{r['wait']:.1%}" if r["wait"] is not None else "-"
        gpu = f"{r['gpu']:.0%}" if r["gpu"] is not None else "-"
        lines.append(f"{job[:24]:<24} {rank:>4} {'live' if r['live'] else 'ended':<5} {r['steps']:>8.0f} "
                     f"{rate:>8} {step_ms:>8} {wait:>9} {gpu:>8} {_detector(r):>9}  {_alert_cell(r['alerts'])}")
    if len(lines) == 1:
        lines.append("(no rank has reported yet)")
    if any(_detector(r) == "unarmed" for r in now["ranks"].values()):
        lines.append("unarmed: the rank ended before its first 3 minutes, when slowdowns start to be judged "
                     "(detection.drift.warmup_s + settle_s; lower them for short jobs)")
    runs = now.get("runs") or {}
    if runs:
        lines += ["", "RUNS (stepwatch history JOB lists every run)"]
        lines += [_runs_line(job, run) for job, run in sorted(runs.items())]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    if not (args.interval > 0):
        print(f"stepwatch top: error: --interval must be > 0, got {args.interval}", file=sys.stderr)
        return 2
    before = None
    try:
        while True:
            try:
                now = read(args.http, args.http_token)
            except (OSError, ValueError) as exc:
                print(f"stepwatch top: error: cannot read the collector at {args.http}: {exc}", file=sys.stderr)
                return 1
            if args.once and before is None:
                before = now
                time.sleep(args.interval)
                continue
            table = render(now, before)
            print(table if args.once else _CLEAR + time.strftime("stepwatch top  %H:%M:%S  ") + args.http
                  + "\n\n" + table, flush=True)
            if args.once:
                return 0
            before = now
            time.sleep(args.interval)
    except KeyboardInterrupt:
        return 0
