"""Evaluating the provisioned Grafana panels against a real Prometheus (CPU and GPU tests).

Each panel's description ends with ``[feeds: any|cuda|events]`` (deploy/grafana/build_dashboards.py);
``check_panels`` evaluates every target over a time range and returns a list of problems:
queries Prometheus rejects, and queries of the required feed classes that return no series.
"""

from __future__ import annotations

import json
import pathlib
import re
import urllib.parse
import urllib.request

DEPLOY = pathlib.Path(__file__).resolve().parents[2] / "deploy"
DASHBOARDS = DEPLOY / "grafana" / "dashboards"
_FEEDS = re.compile(r"\[feeds: (any|cuda|events)\]$")
_LEVEL = re.compile(r"\[per-rank: (full|summary)\] \[feeds")
# Which panel levels ("" = per-job only) each collector metrics_per_rank mode feeds.
FED_BY = {"full": {"", "summary", "full"}, "summary": {"", "summary"}, "off": {""}}


def panels():
    """(dashboard file, panel title, feeds, per-rank level, [expr, ...]) for every panel."""
    out = []
    for path in sorted(DASHBOARDS.glob("*.json")):
        for p in json.loads(path.read_text())["panels"]:
            m = _FEEDS.search(p.get("description", ""))
            level = _LEVEL.search(p.get("description", ""))
            out.append((path.name, p["title"], m.group(1) if m else None, level.group(1) if level else "",
                        [t["expr"] for t in p.get("targets", [])]))
    return out


def annotations():
    """(dashboard file, annotation name, expr) of every Prometheus annotation query."""
    return [(path.name, a["name"], a["expr"]) for path in sorted(DASHBOARDS.glob("*.json"))
            for a in json.loads(path.read_text())["annotations"]["list"] if a.get("expr")]


def substitute(expr: str, training_job: str, rank: str = ".*", rate_interval: str = "10s") -> str:
    """Grafana's variable expansion for the variables the dashboards use."""
    for var, value in (("$training_job", training_job), ("$rank", rank),
                       ("$__rate_interval", rate_interval)):
        expr = expr.replace(var, value)
    assert "$" not in expr, f"unsubstituted variable in {expr}"
    return expr


def query_range(prom_url: str, expr: str, start: float, end: float, step: float = 1.0) -> dict:
    q = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    try:
        with urllib.request.urlopen(f"{prom_url}/api/v1/query_range?{q}", timeout=20) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:  # 400 with a JSON error body for a bad query
        return json.loads(exc.read())


def check_panels(prom_url: str, training_job: str, start: float, end: float, required: set,
                 mode: str = "full") -> list:
    """Problems found; empty when every query is valid and every ``required`` feed has data.
    With the collector in ``mode`` (metrics_per_rank), panels that mode does not feed must come
    back empty instead (their tag says what they need)."""
    problems = []
    for dash, title, feeds, level, exprs in panels():
        for expr in exprs:
            concrete = substitute(expr, training_job)
            body = query_range(prom_url, concrete, start, end)
            if body.get("status") != "success":
                problems.append(f"{dash} / {title}: invalid: {body.get('error')}: {concrete}")
            elif feeds in required and level in FED_BY[mode] and not body["data"]["result"]:
                problems.append(f"{dash} / {title}: no data: {concrete}")
            elif level not in FED_BY[mode] and body["data"]["result"]:
                problems.append(f"{dash} / {title}: tagged [per-rank: {level}] but has data in mode {mode}: "
                                f"{concrete}")
    return problems
