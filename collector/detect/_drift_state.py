"""What of a drift detector survives a collector restart (``_persist.DriftStore``): the settled
level, the noise spreads, the pauses counted, the job's recent waves and when the last episode
ended, the loader's wait and the launch-paced phases' device time beyond their host time while the rank
settled (``ShiftTests.since_settled``'s levels), and an open episode with its evidence (what held it, what could not be compared, the span
it was read against): a restart while a change of the job lasts must not turn it into "nothing
the agent measures ... moved". The rank's evidence itself starts afresh; the saved evidence's own
level before (``Backing.before``) stands in for the span before it, so the episode still ends
when its evidence goes away (``RankEvidence.grown``). The rank's sources' measured spreads are
carried beside the two detectors' states (``RankDrift.state``, ``SourceNoise.saved``)."""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

from ._evidence import _COMPUTE, PHASE_TIMES, PHASES
from ._names import THROUGHPUT_DRIFT
from ._types import SEVERITIES, Backing, Kind

__all__ = ["drift_state", "restore_drift"]

_COMPUTE_COLUMNS = tuple(PHASES.index(p) for p in _COMPUTE)


def drift_state(d) -> Optional[dict]:
    """The state of ``d`` (a DriftDetector); None before it is armed."""
    if d._settled is None:
        return None
    out = {"v": 1, "settled": d._settled, "settled_at": d._settled_at,
           "noise": dict(d._noise.spreads), "noise_rows": d._noise.rows, "pauses": dict(d.pauses),
           "waves": [list(w) for w in d._t.waves], "ended_at": d._t.ended_at}
    if d._t._settled_wait is not None:
        out["settled_wait"] = list(d._t._settled_wait)
    if d._t._settled_beyond is not None and d._t._settled_beyond[1] is not None:
        at, (points, levels) = d._t._settled_beyond
        out["settled_beyond"] = [at, points, [[k, v] for k, v in sorted(levels.items())]]
    ep = d._ep
    c = ep.condition
    if c is not None:
        out["episode"] = {"alertname": c.alertname, "severity": c.severity, "ref": ep.ref,
                          "ref_text": ep.ref_text, "onset": list(ep.onset), "raised": ep.raised,
                          "note": ep.window_note, "window": ep.window_step,
                          "ratio": c.ratio, "change": ep.change,
                          "began": list(ep.began) if ep.began else None,
                          "evidence": dataclasses.asdict(ep.backing) if ep.backing is not None else None,
                          "unknown": list(ep.unknown),
                          "span": list(ep.backing_span) if ep.backing_span is not None else None,
                          "against_before": ep.against_before, "slow": ep.slow is not None}
        if ep.slow is not None and ep.slow[0] is not ep.backing:  # (a further change since the slow raise)
            out["episode"]["slow_held"] = {"evidence": dataclasses.asdict(ep.slow[0]), "span": list(ep.slow[1])}
        if ep.held is not None and ep.held[0] is not ep.backing:  # (a further change that nothing holds)
            out["episode"]["held"] = {"evidence": dataclasses.asdict(ep.held[0]), "span": list(ep.held[1])}
    return out


def restore_drift(d, state: dict) -> None:
    """Take up ``state`` (from :func:`drift_state`): armed at once against the saved settled
    level (no warm-up or settling again), an open episode goes on from its saved onset. The
    bucket history starts empty: the tests judge once their windows hold new buckets. A state
    that does not read is ignored (the rank settles afresh)."""
    try:
        settled, at = float(state["settled"]), float(state["settled_at"])
        noise = {k: float(v) for k, v in state.get("noise", {}).items() if k in d._n}
        rows = int(state.get("noise_rows", d._noise.n_noise))
    except (KeyError, TypeError, ValueError, OverflowError):  # (OverflowError: a row count of Infinity)
        return
    if not (math.isfinite(settled) and math.isfinite(at)):
        return
    d._settled, d._settled_at = settled, at
    d._noise.carry(noise, rows)
    d._steps.level, d.baseline_s = settled, math.exp(settled)
    d._steps.first_time = at - d.cfg.warmup_s - d.cfg.settle_s
    d.pauses.update({str(k): int(v) for k, v in state.get("pauses", {}).items()})
    _restore_waves(d._t, state)
    d._t._settled_wait = _settled_wait(state.get("settled_wait"), at)
    d._t._settled_beyond = _settled_beyond(state.get("settled_beyond"), at)
    e = state.get("episode")
    if isinstance(e, dict) and e.get("severity") in SEVERITIES:
        ep = d._ep
        try:
            ep.ref, ep.raised = float(e["ref"]), float(e["raised"])
            ep.onset = (int(e["onset"][0]), float(e["onset"][1]))
            ep.ref_text, ep.window_note = str(e["ref_text"]), str(e.get("note", ""))
            ep.window_step = int(e["window"]) if e.get("window") is not None else None
            ep.alertname = str(e.get("alertname", THROUGHPUT_DRIFT))
            ep.change = int(e.get("change", 0))
            began = e.get("began")
            ep.began = (int(began[0]), float(began[1])) if began else None
            _restore_evidence(ep, e)
            ep.set(e["severity"], math.log(float(e["ratio"])))
            d._restored_open = True
        except (KeyError, TypeError, ValueError, IndexError):
            ep.condition = None


def _restore_evidence(ep, e: dict) -> None:
    """The saved episode's evidence onto Episode ``ep``. Evidence that does not read, or a state
    saved without it, leaves the episode's evidence unknown (decided "", never "steps": that
    would say nothing moved with the step time). The evidence it holds through a further change
    that nothing holds (``held``) is taken up when it reads, else it is the latest onset's; so is
    the evidence a slow change was raised on, kept through further changes (``slow_held``)."""
    try:
        backing = _backing(e["evidence"])
        unknown = tuple(str(x) for x in e["unknown"])
        span = _span(e["span"])
    except (KeyError, TypeError, ValueError, IndexError, AttributeError):
        backing, unknown, span = None, (PHASE_TIMES,), None
    ep.backing, ep.unknown, ep.backing_span = backing, unknown, span
    ep.against_before = bool(e.get("against_before", False)) and span is not None
    ep.slow = (backing, span) if e.get("slow", False) is True and backing is not None and span is not None else None
    slow = e.get("slow_held")
    if e.get("slow", False) is True and isinstance(slow, dict):
        try:
            b, sp = _backing(slow["evidence"]), _span(slow["span"])
        except (KeyError, TypeError, ValueError, IndexError, AttributeError):
            b = sp = None
        if b is not None and sp is not None:
            ep.slow = (b, sp)
    ep.held = (backing, span) if backing is not None and span is not None else None
    held = e.get("held")
    if isinstance(held, dict):
        try:
            b, sp = _backing(held["evidence"]), _span(held["span"])
        except (KeyError, TypeError, ValueError, IndexError, AttributeError):
            return
        if b is not None and sp is not None:
            ep.held = (b, sp)


def _backing(b) -> Optional[Backing]:
    """A saved Backing (None stays None); raises on one that does not read or is not finite."""
    if b is None:
        return None
    backing = Backing(str(b["kind"]), str(b["name"]), float(b["before"]), float(b["after"]), str(b["unit"]),
                      float(b["share"]), None if b.get("spreads") is None else float(b["spreads"]),
                      bool(b.get("host_paced", False)))
    if not all(math.isfinite(x) for x in (backing.before, backing.after, backing.share)):
        raise ValueError("not finite")
    if backing.kind == Kind.BEYOND and backing.name not in PHASES:
        raise ValueError(f"no phase {backing.name!r}")
    return backing


def _span(span) -> Optional[tuple]:
    """A saved (lo, edge, step s) span (None stays None); raises on one that does not read."""
    if span is None:
        return None
    out = (float(span[0]), float(span[1]), float(span[2]))
    if not all(math.isfinite(x) for x in out):
        raise ValueError("not finite")
    return out


def _settled_wait(w, settled_at: float) -> Optional[tuple[float, float]]:
    """The saved (settled at, the loader's wait then, s) when it reads, is finite and belongs to
    the saved settling (``settled_at``), else None (the rank then reads no slow change until it
    settles again: its settling span is not in the restarted blocks)."""
    try:
        at, level = (float(x) for x in w)
    except (TypeError, ValueError):
        return None
    if not (math.isfinite(level) and level >= 0 and at == settled_at):
        return None
    return at, level


def _settled_beyond(w, settled_at: float) -> Optional[tuple[float, tuple]]:
    """The saved (settled at, (points, {phase column: device time beyond host time, s})) when it
    reads (compute phases' columns, finite levels) and belongs to the saved settling, else None:
    then no phase's slow change is read until the rank settles again."""
    try:
        at, points = float(w[0]), int(w[1])
        levels = {int(k): float(v) for k, v in w[2]}
    except (TypeError, ValueError, IndexError, KeyError, OverflowError):
        return None
    if (at != settled_at or points < 0 or not levels
            or any(k not in _COMPUTE_COLUMNS or not math.isfinite(v) for k, v in levels.items())):
        return None
    return at, (points, levels)


def _restore_waves(t, state: dict) -> None:
    """The saved waves (end time, peak log shift, seconds lasted) and the last episode's end onto
    ShiftTests ``t``: a shift without evidence must still outlast the job's waves after a
    restart. Entries that do not read are left out."""
    for w in state.get("waves") or ():
        try:
            end, peak, lasted = (float(x) for x in w)
        except (TypeError, ValueError):
            continue
        if all(math.isfinite(x) for x in (end, peak, lasted)):
            t.add_wave(end, peak, lasted)
    try:
        ended = float(state["ended_at"]) if state.get("ended_at") is not None else None
    except (TypeError, ValueError):
        ended = None
    t.ended_at = ended if ended is not None and math.isfinite(ended) else None
