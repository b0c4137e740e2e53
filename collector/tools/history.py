"""``stepwatch history JOB --http HOST:PORT``: a job's runs, oldest first, from the collector's
``/api/jobs/<job>/runs``: when each started and ended, the step it started from, its settled
step time and throughput, how it compared with the run before it, and what it ran on.

    STARTED (UTC)     ENDED     FROM STEP  MS/STEP  TOKENS/S  VS BEFORE  HOSTS  TORCH  RUN

Exit status 0; 1 when the collector cannot be read; 2 for a job with no run recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

__all__ = ["add_parser", "run", "render"]


def add_parser(sub) -> None:
    p = sub.add_parser("history", help="a job's runs and their levels (from a collector's HTTP API)",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("job", help="the training job's name")
    p.add_argument("--http", metavar="HOST:PORT", default=os.environ.get("STEPWATCH_HTTP", "127.0.0.1:7471"),
                   help="the collector's HTTP address [env STEPWATCH_HTTP] (default 127.0.0.1:7471)")
    p.add_argument("--http-token", default=os.environ.get("STEPWATCH_HTTP_TOKEN", ""),
                   help="the collector's http_token, when it has one [env STEPWATCH_HTTP_TOKEN]")
    p.add_argument("--json", action="store_true", help="print the collector's JSON document as it is")
    p.set_defaults(func=run)


def _when(t) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(float(t))) if t else "-"


def render(doc: dict) -> str:
    head = (f"{'STARTED (UTC)':<17} {'ENDED':<5} {'FROM STEP':>9} {'MS/STEP':>8} {'TOKENS/S':>9} {'VS BEFORE':>9}  "
            f"{'HOSTS':<20} {'TORCH':<14} RUN")
    lines = [head]
    for r in doc.get("runs", ()):
        ranks = r.get("ranks") or {}  # (a whole record; a brief one has its hosts and torch)
        hosts = r.get("hosts") or sorted({str(x.get("host", "")) for x in ranks.values()})
        torch = r.get("torch") or sorted({str(x.get("torch", "")) for x in ranks.values()})
        level = r.get("settled_step_s")
        comp = r.get("compared") or {}
        vs = f"{comp['ratio'] - 1:+.1%}" if comp.get("ratio") else "-"
        if r.get("regression"):
            vs += "!"
        ended = "live" if r.get("live") else ("yes" if r.get("ended_at") else "?")
        first = r.get("first_step")
        tps = r.get("tokens_per_s")
        host_text = ",".join(hosts)
        lines.append(f"{_when(r.get('started_at')):<17} {ended:<5} {first if first is not None else '-':>9} "
                     f"{(f'{1e3 * level:.1f}' if level else '-'):>8} {(f'{tps:,.0f}' if tps else '-'):>9} {vs:>9}  "
                     f"{(host_text if len(host_text) <= 20 else host_text[:17] + '...'):<20} "
                     f"{','.join(torch)[:14]:<14} {str(r.get('run', ''))[:12]}")
    regressions = [r for r in doc.get("runs", ()) if r.get("regression") and r.get("compared")]
    for r in regressions[-3:]:
        c = r["compared"]
        lines.append(f"run {str(r.get('run'))[:12]}: {(c['ratio'] - 1):+.1%} against run {str(c['against'])[:12]}; "
                     f"changed: {', '.join(c.get('changed') or ()) or 'nothing stepwatch sees'}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    url = f"http://{args.http}/api/jobs/{urllib.parse.quote(args.job, safe='')}/runs" + ("" if args.json else "?ranks=0")
    headers = {"Authorization": f"Bearer {args.http_token}"} if args.http_token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as resp:
            body = resp.read()
    except urllib.error.HTTPError as exc:
        print(f"stepwatch history: error: the collector at {args.http} answered {exc.code} {exc.reason}",
              file=sys.stderr)
        return 1
    except (OSError, ValueError) as exc:
        print(f"stepwatch history: error: cannot read the collector at {args.http}: {exc}", file=sys.stderr)
        return 1
    doc = json.loads(body)
    if not doc.get("runs"):
        print(f"stepwatch history: no run of job {args.job!r} is recorded at {args.http}", file=sys.stderr)
        return 2
    print(body.decode() if args.json else render(doc))
    return 0
