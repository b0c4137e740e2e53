"""``stepwatch replay FILE``: drive a record file through the collector's own pipeline
(state -> detection -> alert book) on the recording's clock and print the alerts it raised.

Input: the collector's ``--record`` file (:mod:`._record`; the earlier per-record JSONL is read
too). Events are applied in file order; housekeeping (expiry, time-based rules) runs whenever
the data clock passes an ``eval_interval_s`` tick, as the live collector's timer does.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import IO, Iterable, Optional

from .alerting import Alert, Detection, iso
from .detect import DetectionConfig
from ._config import load_settings
from ._pipeline import Pipeline
from ._record import RecordError, RecordEvent, read_record
from ._state import CollectorState

__all__ = ["replay", "add_parser", "ReplayError"]

ReplayError = RecordError


def replay(events: Iterable[RecordEvent], cfg: DetectionConfig,
           agent_grace_s: float = 300.0) -> list[Alert]:
    """Every alert that fired, in firing order, with ``ends_at`` set when it resolved."""
    detection = Detection(cfg)
    detection.keep_changes = True
    pipeline = Pipeline(CollectorState(agent_grace_s), [detection])
    keys: dict[tuple, tuple] = {}
    now = next_tick = None
    for ev in events:
        now = ev.time if now is None else max(now, ev.time)
        next_tick = now if next_tick is None else next_tick
        while now >= next_tick:
            pipeline.housekeeping(next_tick)
            next_tick += cfg.eval_interval_s
        rank = (ev.hello.job, ev.hello.rank)
        if ev.kind == "connect":
            keys[rank] = pipeline.connect(ev.hello, now)
        elif rank not in keys:
            raise RecordError(f"{ev.kind} of job={ev.hello.job} rank={ev.hello.rank} before its connect")
        elif ev.kind == "batch":
            pipeline.batch(keys[rank], ev.hello, ev.batch, now)
        else:
            pipeline.disconnect(keys[rank], ev.hello, now)
    if now is not None:
        pipeline.housekeeping(now)
    return _fired(detection.changes)


def _fired(changes: list[Alert]) -> list[Alert]:
    fired: dict[tuple, Alert] = {}
    for a in changes:
        key = (*a.key, a.starts_at, a.severity)
        if a.state == "firing":
            fired[key] = a
        elif key in fired:
            fired[key].ends_at = a.ends_at
    return sorted(fired.values(), key=lambda a: a.fired_at)


def _text(a: Alert) -> str:
    end = f", resolved {iso(a.ends_at)}" if a.ends_at else ""
    return (f"{iso(a.fired_at)}  step {a.step if a.step is not None else '-':>8}  {a.severity:<8} {a.alertname} "
            f"job={a.job} rank={a.rank}: {a.summary}{end}")


def _json(a: Alert) -> str:
    return json.dumps({"alertname": a.alertname, "severity": a.severity, "job": a.job, "rank": a.rank,
                       "step": a.step, "time": a.fired_at, "starts_at": a.starts_at, "resolved_at": a.ends_at,
                       "summary": a.summary})


def _run(args: argparse.Namespace, out: Optional[IO[str]] = None) -> int:
    out = out or sys.stdout  # looked up per call: the default is not bound at import
    try:
        settings = load_settings({"detection": args.detection}, environ={}, config_file=args.config)
        with open(args.file, encoding="utf-8") as fh:
            alerts = replay(read_record(fh), settings.detection, settings.agent_grace_s)
    except (OSError, ValueError) as exc:
        print(f"stepwatch replay: error: {exc}", file=sys.stderr)
        return 2
    for a in alerts:
        print(_json(a) if args.format == "json" else _text(a), file=out)
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
                   help="text (default) or json: one JSON object per alert")
    p.set_defaults(func=_run)
