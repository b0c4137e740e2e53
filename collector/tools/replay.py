"""``stepwatch replay FILE``: the alerts a record file raises when driven through the
collector's own pipeline on its own clock (:mod:`stepwatch.collector._replay`)."""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
from typing import IO, TYPE_CHECKING, Optional

from .._config import load_settings

if TYPE_CHECKING:  # (the pipeline loads with the command: the collector extra's packages)
    from ..alerting import Alert

__all__ = ["add_parser"]


def _text(a: Alert) -> str:
    from ..alerting import iso

    history = " -> ".join(sev for _, sev in a.history) or a.severity
    end = f", resolved at step {_step(a.resolved_step)} ({iso(a.ends_at)})" if a.ends_at else ", firing at the end"
    return (f"{iso(a.fired_at)}  {a.alertname} job={a.job} rank={a.rank}  {history}  "
            f"onset step {_step(a.step)}, raised at step {_step(a.raised_step)}{end}: {a.fired_summary}"
            + (f"\n    why: {a.diagnosis}" if a.diagnosis else ""))


def _step(step: Optional[int]) -> str:
    return "-" if step is None else f"{step:,}"


def _json(a: Alert) -> str:
    return json.dumps({"kind": "episode", "alertname": a.alertname, "severity": a.severity, "job": a.job,
                       "rank": a.rank, "step": a.step, "raised_step": a.raised_step,
                       "resolved_step": a.resolved_step, "time": a.fired_at, "starts_at": a.starts_at,
                       "resolved_at": a.ends_at, "ratio": a.ratio,
                       "severity_history": [[t, sev] for t, sev in a.history],
                       "summary_at_raise": a.fired_summary, "summary": a.summary,
                       "diagnosis": a.diagnosis})


def _open(path: str) -> IO[str]:
    """A record file, plain or gzip (told by its first two bytes, not its name)."""
    with open(path, "rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
    return gzip.open(path, "rt", encoding="utf-8") if gz else open(path, encoding="utf-8")


def _reach(job: str, rank: int, reach: dict, fmt: str) -> str:
    if fmt == "json":
        return json.dumps({"kind": "reach", "job": job, "rank": rank, "reach": reach})
    return (f"drift reach at the end  job={job} rank={rank}  " +
            " / ".join(f"{sev} +{100 * reach[sev]:.1f}%" for sev in ("info", "warning", "critical")))


def _run(args: argparse.Namespace, out: Optional[IO[str]] = None) -> int:
    from .._replay import replay
    from ..alerting import Detection
    from ..ingest import read_record  # (with the command: the collector extra's gRPC health)

    out = out or sys.stdout  # looked up per call: the default is not bound at import
    try:
        settings = load_settings({"detection": args.detection}, environ={}, config_file=args.config)
        detection = Detection(settings.detection, log_changes=False)
        with _open(args.file) as fh:
            alerts = replay(read_record(fh), settings.detection, settings.agent_grace_s, detection=detection)
    except (OSError, ValueError) as exc:
        print(f"stepwatch replay: error: {exc}", file=sys.stderr)
        return 2
    try:
        for a in alerts:
            print(_json(a) if args.format == "json" else _text(a), file=out)
        if args.reach:
            for (job, rank), reach in sorted(detection.engine.reach().items()):
                print(_reach(job, rank, reach, args.format), file=out)
        count = len(alerts)
        print(json.dumps({"kind": "count", "episodes": count}) if args.format == "json"
              else f"{count} alert episode{'' if count == 1 else 's'}", file=out)
        out.flush()
    except BrokenPipeError:  # `stepwatch replay ... | head`: the reader has all it wants
        os.dup2(os.open(os.devnull, os.O_WRONLY), out.fileno())
        return 1
    return 0


def add_parser(sub) -> None:
    """Register ``stepwatch replay`` on an argparse subparsers object."""
    p = sub.add_parser("replay", help="run recorded telemetry (JSONL) through the detectors",
                       description="Feed FILE (the collector's --record format) through the collector's "
                                   "detectors and print the alerts they would have raised.")
    p.add_argument("file", metavar="FILE.jsonl")
    p.add_argument("--config", metavar="FILE", help="collector YAML config; its 'detection:' mapping is used")
    p.add_argument("--detection", metavar="YAML", help="detector settings as YAML/JSON text (overrides --config)")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="text (default) or json: one JSON object per alert episode, then "
                        "{\"kind\": \"count\", \"episodes\": N}")
    p.add_argument("--reach", action="store_true",
                   help="also print each armed rank's drift reach at the end of the recording: the "
                        "smallest sustained step-time shift each severity would raise at the job's "
                        "own noise (json: {\"kind\": \"reach\", ...} lines before the count)")
    p.set_defaults(func=_run)
