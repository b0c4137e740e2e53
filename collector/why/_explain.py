"""Why a rank got slower: what changed between before and after an alert's onset, read from
the evidence (:mod:`._evidence`). :func:`diagnose` compares the data before an onset time with the data after it and ranks the
contributors by their change in milliseconds per step against the step-time change:

    backward +5.1 ms/step (aten::mm +4.8 ms); data-loader wait +0.0 ms; clocks unchanged

With the agents' always-on phase times (data, forward, backward, sync, optimizer of sampled
steps, on the device's timeline) the contributors are those phases, in ms/step before -> after,
with no window needed: a phase whose host time grew as much as its device time (and is as
long) kept the device waiting for the host's launches, and only then is the host named
("host-bound"), never when the device's SM or tensor activity rose across the onset (its
launches then waited on a full queue); the host's CPU time that grew is a note, never ranked as
a cause of its own: the host-bound phases' work, or the host waiting for a busier device. "Before" ends a guard band
ahead of the onset (30 s, at most a quarter of the data): a change that grows in is dated
where it stands out, and the blocks just ahead of that already hold part of it. A window on
each side adds the kernel or operator that grew.
Without phase times the phases come from profiler windows (forward, backward, optimizer,
communication, other), which need one on each side of the onset; until one exists after it the
diagnosis says so and is refreshed when it arrives.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from ..detect import Kind
from ..wire import PHASES
from ._evidence import _HOST_CLOCK, _PHASE_BLOCKS_COMPARED, _Rank
from ._signals import _activity, _busier, _churn, _clocks, _cpu_per_step, _median, _retries
from ._windows import _EXPLAINED, _add_kernel, _discount_gpu_wait, _rank_key, compare_windows
from ._words import fmt

__all__ = ["Diagnosis", "diagnose", "against_others"]


# a phase is host-bound when its host time grew by this share of its device time's growth
# and is at least _HOST_LONG of its device time after the onset
_HOST_GREW, _HOST_LONG = 0.6, 0.8
# the host is the change when at least two phases grew host-bound, by shares of their own time
# within _HOST_EVEN of each other, and hold _HOST_ALL of all the phases' growth (a launch-bound
# H200 job whose host slowed: backward +1.0, forward +0.6, optimizer +0.2 ms, each 13-19% of
# its time, the GPU's clock flat; dated at the first of the host's degrees, the two minutes
# after held forward +7.5%, optimizer +12%, backward +16%: 2.1x apart, as on a 2-GPU job whose
# host slowed by degrees, forward +3.4%, backward +7.2%; a slow data loader on an H100 grew
# data +4.1 ms and forward +0.5: host-bound both, by 8x and 3% of their time: the loader, not
# the host), none of them
# over _HOST_ONE of their sum (GEMMs in an H100 job's forward: forward +7.3 and data +0.2 ms,
# even shares but one phase: the forward)
_HOST_ALL, _HOST_EVEN, _HOST_ONE = 0.8, 2.5, 0.75
# ... the evenness judged on the phases holding at least this share of the phases' time before
# (when two do): a short phase's share is mostly its noise (a launch-bound 2 x H200 job whose
# host slowed: forward, backward and sync +7-10% of their time, the 1.5 ms data phase +19%)
_HOST_EVEN_MIN = 0.1
# The data phase whose growth the loader's wait holds this share of is the loader's, not the
# host's pace: never one of the phases made one "host" contributor (:func:`_host_slower`).
_LOADER_HOLDS = 0.5
# the diagnosis's "before" ends this long ahead of the onset (at most this share of the data)
_GUARD_S, _GUARD_SHARE = 30.0, 0.25
# "before" spans at least this much data time when the rings hold none of the reference level
# (the collector restarted since): restarted just before an onset, they held a second of steps
# before it, which read a live H200 job's +22% (GEMMs in forward) as "no measured contributor
# explains the -0.1 ms/step" (tests/data/real/diag/h200zy)
_MIN_BEFORE_S = 10.0
# "after" is at most this long from the onset: the diagnosis is of the change where it began.
# It is made again as data comes until a window completes it, and a job that recovered while
# its episode was still open diluted it (2 x H200, a host hump of +10% for 90 s: backward and
# forward +2 ms/step each, host-bound, at the raise; +0.2..0.5 ms/step 2.5 minutes later)
_AFTER_S = 120.0
# the host's time before the optimizer step grew this much more than the device's: it waits there
_HOST_WAITED_MS = 2.0
# a loader whose wait the detector found holding the change (its wait grown 4x and 30% of the
# step's growth: detect/_evidence.py) explains it at that share: the device it left idle ran the
# phases after it at the host's pace (a live H200 job's wait +1.8 ms of a +4.6 ms step read
# "no measured contributor explains" first, tests/data/real/diag/h200zr)
_LED_EXPLAINED = 0.3


@dataclasses.dataclass(frozen=True)
class Diagnosis:
    text: str                      # one line for the alert
    contributors: tuple            # ((name, delta ms per step, detail), ...) ranked
    step_delta_ms: float
    complete: bool                 # a window after the onset was compared
    churn: str = ""                # the allocator churn named first ("" when none)
    busier: tuple = ()             # device activities that rose ("tensor activity 16% -> 22%", ...)
    explained: bool = True         # a contributor explains the step's change (else the text says none does)
    phased: bool = False           # read from the phase times (else the loader wait, host CPU and windows)


def _step_median(rows: list, k: int) -> Optional[float]:
    """The median of column ``k`` of step-time block rows, each weighted by the steps it covers.
    Recent rows hold 10 steps and merged old rows 200: an equal-weight median over a span that
    reaches back into the merged rows is the recent rows' median. On a real 10.6 ms H200 job
    whose host slowed for five minutes and recovered in its last minute, that read the episode's
    +0.8 ms/step as -0.1 ("no measured contributor explains")."""
    pts = sorted((row[k], row[1] - row[0] + 1) for row in rows)
    if not pts:
        return None
    total, seen = sum(w for _, w in pts), 0
    for i, (v, w) in enumerate(pts):
        seen += w
        if 2 * seen > total:
            return v
        if 2 * seen == total:  # the halves meet between two values
            return (v + pts[i + 1][0]) / 2
    return pts[-1][0]


def diagnose(r: Optional[_Rank], since: float, reference: Optional[tuple] = None,
             lead: str = "") -> Optional[Diagnosis]:
    """Compare before and after data time ``since``; None without step data on both sides
    (``_MIN_BEFORE_S`` of it before, when ``reference`` lies before all of it).
    ``reference``: (start, end) data times of the level the alert compares against (a drift
    episode's settled level, or the span before its onset it was raised against): "before" is
    those times, up to the guard band ahead of ``since``, when the rings still hold 3 blocks of
    them. ``lead``: the kind of the evidence the detector found holding the change (a drift
    episode's ``Backing.kind``); ``Kind.LOADER`` names the data phase (or the wait) first wherever it
    grew (:func:`_led`)."""
    if r is None:
        return None
    # each ring made into rows once (they are read several times below)
    until = since + _AFTER_S
    blocks = [b for b in (*r.old, *r.leaving, *r.blocks) if b[2] < until]
    host, gpu = [h for h in r.host if h[0] < until], [g for g in r.gpu if g[0] < until]
    alloc, phases = [a for a in r.alloc if a[0] < until], [p for p in r.phases if p[2] < until]
    if not blocks:
        return None
    after = [b for b in blocks if b[2] >= since]
    # "before" ends a guard band ahead of the onset: a change that grows in is dated where it
    # stands out (an H100 job's GEMMs in backward: dated 23 s late, the blocks between holding
    # most of the change)
    edge = since - min(_GUARD_S, _GUARD_SHARE * (since - blocks[0][2]))
    before = [b for b in blocks if b[2] < edge]
    wide = None  # the phases' span when the settled level's times hold under 3 phase blocks
    if reference is not None and reference[0] < edge:  # (its span cut at the guard band)
        end = min(reference[1], edge)
        settled = [b for b in before if reference[0] <= b[2] < end]
        if len(settled) >= 3:
            wide = (before[max(0, len(before) - 60)][2], edge, since)
            before, edge = settled, end
    if len(before) < 3 or len(after) < 3:
        return None
    if reference is not None and reference[1] < blocks[0][2] and edge - before[0][2] < _MIN_BEFORE_S:
        return None  # (a second after a restart is not the level the alert compares with)
    step_delta = (_step_median(after, 3) - _step_median(before, 3)) * 1e3
    wait = (_step_median(after, 4) - _step_median(before, 4)) * 1e3
    lo = before[max(0, len(before) - 60)][2]
    cpu_b = _cpu_per_step(host, blocks, lo, edge)
    cpu_a = _cpu_per_step(host, blocks, since, after[-1][2])
    cpu = (cpu_a - cpu_b) * 1e3 if cpu_b is not None and cpu_a is not None else None
    w_before = [w for w in r.windows if w.start_time_s < since]  # (a window is whole: no guard)
    w_after = [w for w in r.windows if w.start_time_s >= since]
    complete = bool(w_before and w_after)
    busier = _busier(gpu, lo, edge, since)
    found, first, last, phased = _contributors(phases, (lo, edge, since), wait, cpu, w_before, w_after, bool(busier),
                                               wide)
    ranked, led = _led(sorted(found, key=lambda c: -_rank_key(c, step_delta)), lead)
    explained = step_delta > 0 and (ranked[0][1] >= _EXPLAINED * step_delta
                                    or led and max(ranked[0][1], wait) >= _LED_EXPLAINED * step_delta)
    text = "; ".join(fmt(c) for c in ranked[:3])
    if not explained and step_delta > 0.05:
        text = f"no measured contributor explains the {step_delta:+.1f} ms/step; " + text
    elif not explained:  # (a floor detector's raise, or read before the steps after the onset
        # grew: a launch-bound job's p10 +8% read "no measured contributor explains the -0.0
        # ms/step" beside its +8% alert, bench/results/why_step_not_grown.md)
        text = f"the median step not grown since the onset ({step_delta:+.1f} ms/step); " + text
    tail = [*first, _clocks(gpu, since), _activity(gpu, since), _retries(alloc, since), *last]
    churn = _churn(alloc, blocks, lo, edge, since, after[-1][2])
    text = "; ".join(t for t in [churn, text, *tail] if t)
    return Diagnosis(text, tuple(ranked), step_delta, complete, churn.split(" (", 1)[0], busier, explained, phased)


def _led(ranked: list, lead: str) -> tuple[list, bool]:
    """``ranked`` with the loader's contributor first when ``lead`` is ``Kind.LOADER`` and it grew,
    and whether it was so led (its wait then explains the change at ``_LED_EXPLAINED``, the
    share the detector held it at).
    A wait for data leaves the device idle, so the phases after it run at the host's launch
    pace and grow with it: a live H200 job whose loader slowed read "forward +2.6 ms/step
    (host-bound: its host time +4.6 ms)" before "data +1.5 ms/step (data-loader wait +1.2
    ms)" (tests/data/real/diag/h200zq); the detector had found the wait grown tenfold."""
    if lead != Kind.LOADER:
        return ranked, False
    for i, c in enumerate(ranked):
        if (c[0] == "data-loader wait" or "data" in c[0].split("+")) and c[1] > 0:
            return [c, *ranked[:i], *ranked[i + 1:]], True
    return ranked, False


def _contributors(rows: list, span: tuple, wait: float, cpu: Optional[float],
                  w_before: list, w_after: list, busier: bool,
                  wide: Optional[tuple] = None) -> tuple[list, list, list, bool]:
    """The candidate causes (name, ms/step, detail), the notes that go before and after the
    clock, activity and retry notes, and whether the phase times were compared: from the phase
    times when the rank sent enough of them on both sides (a window on each side adds the
    kernel), else the data-loader wait, host CPU and the windows' comparison. ``rows``: the
    rank's phase blocks. ``wide``: a span for the phases when ``span`` (the settled level's
    times) holds under 3 phase blocks: the phase sampler spends a share of wall time since
    attach, so its first samples can come late in a short settle window (the CPU test jobs
    settle in 6 s; beside a CPU burner their first samples came 3.4-3.8 s after their first
    step)."""
    phased = _phase_contributors(rows, span, wait, cpu, busier)
    if phased is None and wide is not None:
        phased = _phase_contributors(rows, wide, wait, cpu, busier)
    if phased is None and rows and rows[0][2] < span[1]:
        # the newest phase blocks of the kind seen after the onset, however far before it: a
        # device phase that grew is named before the host's CPU time (an H200 job whose AdamW
        # turned to its for-loop read "host CPU +8.5 ms/step" without them)
        phased = _phase_contributors(rows, (rows[0][2], span[1], span[2]), wait, cpu, busier)
    if phased is not None:
        found, note = phased
        if w_before and w_after:
            found = _add_kernel(found, w_before[-1], w_after[-1])
        return found, [note], [], True
    found = [("data-loader wait", wait, "")]
    if cpu is not None:
        found.append(("host CPU", cpu, ""))
    if w_before and w_after:
        found.extend(compare_windows(w_before[-1], w_after[-1]))
        found = _discount_gpu_wait(found, w_before[-1], w_after[-1])
        return found, [], [], False
    return found, [], ["phases: no profiler window from before the onset" if not w_before
                       else "phases: no profiler window after the onset yet"], False


def _phase_medians_across(rows: list, span: tuple) -> Optional[tuple[int, list]]:
    """(the points seen, [(before, after) median of each of the 10 columns]) of the phase blocks
    in ``lo..edge`` and from ``since`` on (``span``), of the newest kind of points seen; None
    without 3 blocks on each side."""
    lo, edge, since = span
    after = [p for p in rows if p[2] >= since]
    if len(after) < 3:
        return None
    points = after[-1][3]
    after = [p for p in after if p[3] == points]
    before = [p for p in rows if lo <= p[2] < edge and p[3] == points][-60:]
    if len(before) < 3 or len(after) < 3:
        return None
    return points, [(_median(p[4 + k] for p in before), _median(p[4 + k] for p in after)) for k in range(10)]


def _phase_contributors(rows: list, span: tuple, wait: float, cpu: Optional[float],
                        busier: bool) -> Optional[tuple[list, str]]:
    """The phases' changes (ms/step) from phase-time blocks in ``lo..edge`` to those from
    ``since`` on (``span``), and a note on the host's CPU time; None without 3 blocks on each
    side of one kind of points seen. ``busier``: the device's activity rose across the onset,
    so a phase's longer host time is its launches waiting on a full queue, never host-bound."""
    found = _phase_medians_across(rows, span)
    if found is None:
        return None
    points, med = found
    grew = [((da - db) * 1e3, (ha - hb) * 1e3) for (db, da), (hb, ha) in zip(med[:5], med[5:])]
    waits = _host_waits_before_optimizer(grew, points)
    out, bound, skipped = [], 0.0, []
    shares: dict = {}  # a host-bound phase's growth over its time before
    for k, name in enumerate(PHASES):
        (db, da), (_, ha) = med[k], med[5 + k]
        d, h = grew[k]
        if k < 4 and not points >> k & 1:
            skipped.append(name)  # not seen: its time is in the next phase seen
            continue
        if waits and name == "optimizer":
            continue  # (its launches started late: counted with the wait before it)
        label = "+".join(skipped + [name])
        skipped = []
        parts = []
        if name == "data" and abs(wait) >= 0.1:
            parts.append(f"data-loader wait {wait:+.1f} ms")
        if waits and name == "sync":
            d += grew[4][0]
            out.append((label, d, f"the host now waits for the device before the optimizer step (its host time "
                                  f"here {h:+.1f} ms: a synchronize, .item() or copy to the host), so the optimizer's "
                                  f"launches start late (optimizer {grew[4][0]:+.1f} ms)"))
            continue
        if name == "sync" and d >= 0.1:
            parts.append("after backward, before the optimizer step: all-reduce wait, clipping")
        # (on the host clock, CPU-only jobs, device and host time are one: nothing to tell apart)
        if not points & _HOST_CLOCK and not busier and d >= 0.1 and h >= _HOST_GREW * d and ha >= _HOST_LONG * da:
            parts.append(f"host-bound: its host time {h:+.1f} ms")
            bound += d
            if not (name == "data" and wait >= _LOADER_HOLDS * d):
                # (a slower loader is no slower launching: a live H200 job's loader, +5.3 ms of
                # its +9.5 ms, was lumped with a host wander's backward and forward as "host
                # slower in every phase", tests/data/real/diag/h200zzb)
                shares[label] = (d / max(db * 1e3, 1e-6), db)
        out.append((label, d, ", ".join(parts)))
    out = _host_slower(out, shares, sum(db for db, _ in med[:5]))
    return out, _host_cpu(out, cpu, points, bound)


def _host_cpu(out: list, cpu: Optional[float], points: int, bound: float) -> str:
    """The host's CPU time across the onset: a contributor of its own only on the host clock
    (CPU-only jobs, appended to ``out``); else a note: the host-bound phases' work, or the host
    waiting for the device."""
    if cpu is None or abs(cpu) < 0.5:
        return ""
    if points & _HOST_CLOCK:
        out.append(("host CPU", cpu, ""))
        return ""
    if bound >= 0.5:
        # the host's extra work is the host-bound phases' (named there, with where it went):
        # ranked on its own it led a for-loop optimizer's +1.5 ms/step on an H200 by a hair
        return f"host CPU {cpu:+.1f} ms/step (in the host-bound phases)"
    return f"host CPU {cpu:+.1f} ms/step (the host waiting for the device, not a cause)"


def _host_slower(out: list, shares: dict, before_s: float = 0.0) -> list:
    """``out`` with its host-bound phases made one "host" contributor (their sum, each named in
    its detail) when there are at least two, each grew by a share of its own time within
    ``_HOST_EVEN`` of the others' (among those holding ``_HOST_EVEN_MIN`` of the phases' time
    ``before_s``, when two do), none over ``_HOST_ONE`` of their sum, and together they hold
    ``_HOST_ALL`` of the phases' growth: the host launches more slowly (or does more per launch)
    in every phase alike and the GPU waits for it; no one phase of the job's code is the cause.
    ``shares``: per host-bound phase, (growth / its time before, its time before in seconds)."""
    bound = [c for c in out if c[0] in shares]  # (a phase is host-bound only when it grew)
    grew = sum(c[1] for c in out if c[1] > 0)
    total = sum(c[1] for c in bound)
    even = [share for share, db in shares.values() if db >= _HOST_EVEN_MIN * before_s]
    if len(even) < 2:
        even = [share for share, _ in shares.values()]
    if (len(bound) < 2 or total < _HOST_ALL * grew or max(even) > _HOST_EVEN * min(even)
            or max(c[1] for c in bound) > _HOST_ONE * total):
        return out
    each = ", ".join(f"{name} {d:+.1f}" for name, d, _ in sorted(bound, key=lambda c: -c[1]))
    host = ("host", total, f"slower in every phase that grew ({each} ms/step), each host-bound: the "
                           "GPU waits for the host's launches, not for its own work")
    return [host] + [c for c in out if c[0] not in shares]


def against_others(r: Optional[_Rank], others: list, since: float) -> str:
    """A slow rank's own phases against the other ranks' since ``since`` (the straggler's onset),
    as a clause: the phases where it spends longer than the median of the others' medians,
    largest first (sync left out: the others wait there for it), with the host named where its
    host time is longer by as much ("host-bound", as in :func:`diagnose`). The comparison is in
    the same seconds, so a host that wanders under all ranks cancels out, where before -> after
    on the slow rank alone did not: 2 x H200, GEMMs in rank 1's backward, read "no measured
    contributor" before -> after and "backward +1.4 ms/step (11.8 vs 10.4 ms)" against rank 0.
    "" without 3 phase blocks after ``since`` on the rank and on some other rank."""
    mine = _phase_medians(r, since)
    if mine is None:
        return ""
    theirs = [m for m in (_phase_medians(o, since, mine[0]) for o in others) if m is not None]
    if not theirs:
        return ""
    points, own = mine
    found = []
    for k, name in enumerate(PHASES):
        if name == "sync" or (k < 4 and not points >> k & 1):
            continue
        other_d = _median(t[1][k] for t in theirs)
        other_h = _median(t[1][5 + k] for t in theirs)
        d, h = (own[k] - other_d) * 1e3, (own[5 + k] - other_h) * 1e3
        if d < 0.1:
            continue
        label = f"{name} {d:+.1f} ms/step ({own[k] * 1e3:.1f} vs {other_d * 1e3:.1f} ms"
        if not points & _HOST_CLOCK and h >= _HOST_GREW * d and own[5 + k] >= _HOST_LONG * own[k]:
            label += f", host-bound: its host time {h:+.1f} ms"
        found.append((d, label + ")"))
    if not found:
        return ""
    found.sort(key=lambda f: -f[0])
    return "against the other ranks: " + "; ".join(label for _, label in found[:2])


def _phase_medians(r: Optional[_Rank], since: float, points: Optional[int] = None):
    """(points, medians of the 10 phase columns) of ``r``'s phase blocks from ``since`` on, of one
    kind of points seen (the newest block's, or ``points``); None under 3 such blocks."""
    if r is None:
        return None
    rows = [p for p in r.phases if p[2] >= since]
    if not rows:
        return None
    points = rows[-1][3] if points is None else points
    rows = [p for p in rows if p[3] == points][-_PHASE_BLOCKS_COMPARED:]
    if len(rows) < 3:
        return None
    return points, [_median(p[4 + k] for p in rows) for k in range(10)]


def _host_waits_before_optimizer(grew: list, points: int) -> bool:
    """The host's time between the last gradient and the optimizer step grew by
    ``_HOST_WAITED_MS`` more than the device's, and the optimizer's device time grew while its
    host time did not: the host blocks on the device there (a synchronize, ``.item()``, a copy
    to the host) and then launches the optimizer onto an idle device. Real jobs, a synchronize
    before the optimizer step (H100 and H200): host time in that gap +6.4..8.0 ms, the device's
    +0.2 ms, the optimizer's device time +1.4..1.9 ms with its host time unchanged."""
    if points & _HOST_CLOCK or not points >> 3 & 1:
        return False
    (ds, hs), (do, ho) = grew[3], grew[4]
    return hs - ds >= _HOST_WAITED_MS and do > 0 and ho < _HOST_GREW * do
