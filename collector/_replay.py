"""``stepwatch replay FILE.jsonl``: feed recorded telemetry through the live detectors and print
the alerts they would have raised.

Input: one JSON object per line, ``kind`` "step" (job, rank, step, time, step_time_s; optional
samples, tokens, dataloader_wait_s) or "allocator" (job, rank, time, allocated_bytes,
reserved_bytes, inactive_split_bytes, alloc_retries, ooms, device_total_bytes); blank lines are
skipped; a line that is not a JSON object, has another kind, lacks a field or has a field of the
wrong type is an error naming the line number. Records are processed in file order; the data's own ``time`` is the clock, and
time-based rules are evaluated whenever data time passes an ``eval_interval_s`` tick.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import IO, Iterable, Optional

from ._alerts import Alert, AlertBook, iso
from .detect import AllocatorPoint, DetectionConfig, DetectionEngine, parse_detection

__all__ = ["replay", "add_parser"]


class ReplayError(ValueError):
    """A bad input line; the message names the line number."""


_FIELDS = {"step": ("job", "rank", "step", "time", "step_time_s"),
           "allocator": ("job", "rank", "time", "allocated_bytes", "reserved_bytes", "inactive_split_bytes",
                         "alloc_retries", "ooms", "device_total_bytes")}


def _feed(engine: DetectionEngine, rec: object) -> float:
    """Feed one parsed line; ValueError with a message meant for the user on a bad record."""
    if not isinstance(rec, dict):
        raise ValueError(f"expected a JSON object, got {type(rec).__name__}")
    kind = rec.get("kind")
    if kind not in _FIELDS:
        raise ValueError(f"unknown kind {kind!r}; expected one of {', '.join(map(repr, _FIELDS))}")
    missing = [f for f in _FIELDS[kind] if f not in rec]
    if missing:
        raise ValueError(f"{kind} record lacks field(s) {', '.join(missing)}")
    job, rank, t = str(rec["job"]), _num(rec, "rank", int), _num(rec, "time", float)
    if kind == "step":
        tokens = _num(rec, "tokens", int) if rec.get("tokens") is not None else None
        wait = _num(rec, "dataloader_wait_s", float) if rec.get("dataloader_wait_s") is not None else 0.0
        engine.step(job, rank, _num(rec, "step", int), t, _num(rec, "step_time_s", float), tokens, wait)
    else:
        engine.allocator(job, rank, AllocatorPoint(t, *(_num(rec, f, int) for f in _FIELDS[kind][3:])))
    return t


def _num(rec: dict, field: str, kind: type):
    value = rec[field]
    try:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise TypeError
        return kind(value)
    except (TypeError, ValueError):
        raise ValueError(f"field {field}: expected {'an integer' if kind is int else 'a number'}, "
                         f"got {value!r}") from None


def replay(lines: Iterable[str], cfg: DetectionConfig) -> list[Alert]:
    """Every alert that fired, in firing order, with ``ends_at`` set when it resolved."""
    engine, book = DetectionEngine(cfg), AlertBook(float("inf"))
    fired: dict[tuple, Alert] = {}
    now, next_tick = None, None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError as exc:
            raise ReplayError(f"line {n}: not valid JSON: {exc}") from None
        try:
            t = _feed(engine, rec)
        except (ValueError, TypeError) as exc:
            raise ReplayError(f"line {n}: {exc}") from None
        now = t if now is None else max(now, t)
        next_tick = next_tick or now
        if now >= next_tick:
            engine.tick(now)
            next_tick = now + cfg.eval_interval_s
        if engine.changed or now >= next_tick:
            engine.changed = False
            for a in book.update(now, engine.conditions()):
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
        cfg = DetectionConfig()
        if args.config:
            from ._config import read_config_file

            cfg = parse_detection(read_config_file(args.config).get("detection"))
        if args.detection:
            cfg = parse_detection(args.detection)
        with open(args.file, encoding="utf-8") as fh:
            alerts = replay(fh, cfg)
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
