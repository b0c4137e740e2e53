"""``stepwatch top --http HOST:PORT``: jobs and ranks live in a terminal, for people on a login
node without Grafana. Reads the collector's /metrics and /api/alerts (the same data Prometheus
scrapes) every ``--interval`` seconds and redraws one table:

    JOB  RANK  STEPS  STEPS/S  STEP MS  DATA WAIT  GPU UTIL  ALERTS

STEPS/S and STEP MS come from the change between two reads (STEP MS is the mean since the
start when no step came in between); DATA WAIT is the data-loader share of the last 100 steps; GPU UTIL the NVML
utilisation ("-" without a GPU); ALERTS the firing alert names of that rank. ``--once`` prints
one table (two reads ``--interval`` apart) and exits: 0, or 1 when the collector cannot be read.
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


def read(http: str, token: str = "") -> dict:
    """``{(job, rank): {...}}`` from one scrape, plus firing alerts per rank."""
    from prometheus_client.parser import text_string_to_metric_families

    ranks: dict = {}

    def row(labels) -> dict:
        key = (labels.get("training_job", ""), int(labels.get("rank", "-1")))
        return ranks.setdefault(key, {"steps": 0.0, "dur_sum": 0.0, "dur_count": 0.0, "wait": None,
                                      "gpu": None, "alerts": []})

    for fam in text_string_to_metric_families(_get(f"http://{http}/metrics", token).decode()):
        for s in fam.samples:
            if "training_job" not in s.labels or "rank" not in s.labels:
                continue
            if s.name == "stepwatch_steps_total":
                row(s.labels)["steps"] = s.value
            elif s.name == "stepwatch_step_duration_seconds_sum":
                row(s.labels)["dur_sum"] = s.value
            elif s.name == "stepwatch_step_duration_seconds_count":
                row(s.labels)["dur_count"] = s.value
            elif s.name == "stepwatch_dataloader_wait_ratio":
                row(s.labels)["wait"] = s.value
            elif s.name == "stepwatch_gpu_utilization_ratio":
                row(s.labels)["gpu"] = s.value
    for a in json.loads(_get(f"http://{http}/api/alerts", token))["alerts"]:
        if a.get("state") == "firing" and (a["job"], a["rank"]) in ranks:
            ranks[(a["job"], a["rank"])]["alerts"].append(a["alertname"].replace("Stepwatch", ""))
    return {"time": time.monotonic(), "ranks": ranks}


def render(now: dict, before: Optional[dict] = None) -> str:
    head = f"{'JOB':<24} {'RANK':>4} {'STEPS':>8} {'STEPS/S':>8} {'STEP MS':>8} {'DATA WAIT':>9} {'GPU UTIL':>8}  ALERTS"
    lines = [head]
    for (job, rank), r in sorted(now["ranks"].items()):
        prev = (before or {}).get("ranks", {}).get((job, rank))
        count, total = r["dur_count"], r["dur_sum"]
        rate = "-"
        if prev is not None and now["time"] > before["time"]:
            rate = f"{(r['steps'] - prev['steps']) / (now['time'] - before['time']):.1f}"
            if r["dur_count"] > prev["dur_count"]:  # else (no new step) the mean since the start
                count, total = count - prev["dur_count"], total - prev["dur_sum"]
        step_ms = f"{1e3 * total / count:.1f}" if count > 0 else "-"
        wait = f"{r['wait']:.1%}" if r["wait"] is not None else "-"
        gpu = f"{r['gpu']:.0%}" if r["gpu"] is not None else "-"
        lines.append(f"{job[:24]:<24} {rank:>4} {r['steps']:>8.0f} {rate:>8} {step_ms:>8} {wait:>9} {gpu:>8}  "
                     f"{','.join(sorted(r['alerts'])) or '-'}")
    if len(lines) == 1:
        lines.append("(no rank has reported yet)")
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
