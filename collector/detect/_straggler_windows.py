"""WindowSkew: a straggler rank seen in the profiler windows.

A rank whose GPU is slow (throttled, degraded, a noisy neighbour) hides inside the collectives:
every rank's step time and data-loader wait stay the same. The profiler windows, taken at the
same global steps on every rank, show it: the slow rank computes longest and waits least.
Windows are grouped by their first step; a group is judged once every rank seen sent its
window (older groups first, with the ranks they have), or when more than ``_MAX_OPEN_GROUPS``
are open; a group with one rank (an early window asked of that rank) is never judged. A rank's window is skewed when its
compute per step is >= ``compute_ratio`` x the other ranks' median and the others' median
wait exceeds its own by between ``wait_share`` x and 1 / ``wait_share`` x the compute excess
(equal step periods make the two equal); wait is the step outside
compute (collectives, and the idle time before a collective is launched: NCCL kernel time
alone undercounted it on two H200s). Flagged after ``min_compute_windows`` of
the rank's last ``compute_windows`` judged windows were skewed, cleared below half that.
"""

from __future__ import annotations

import collections

from ._config import StragglerConfig
from ._names import STRAGGLER_RANK
from ._types import WARNING, Condition, WindowPoint, medians_without_each

__all__ = ["WindowSkew", "WINDOWS"]

WINDOWS = "windows"  # what a straggler condition found (Condition.found): its compute in windows
_MAX_OPEN_GROUPS = 4


class WindowSkew:
    """``flagged``: {rank: Condition} of the ranks the windows show slow."""

    def __init__(self, cfg: StragglerConfig, job: str):
        self.cfg, self.job = cfg, job
        self._groups: "collections.OrderedDict[int, dict]" = collections.OrderedDict()
        self._hist: dict[int, collections.deque] = {}
        self.flagged: dict[int, Condition] = {}

    def add(self, rank: int, w: WindowPoint, ranks: int) -> list:
        """One usable window of ``rank`` (``ranks``: the job's ranks seen); for each group this
        judged, in order, whether a rank came or went in ``flagged``."""
        group = self._groups.get(w.first_step)
        if group is None:
            group = self._groups[w.first_step] = {}
            self._groups = collections.OrderedDict(sorted(self._groups.items()))
        group[rank] = w
        judged = []
        if len(group) >= max(2, ranks):  # complete: older groups will not complete now
            while self._groups:
                first, vals = self._groups.popitem(last=False)
                if len(vals) >= 2:
                    judged.append(self._judge(vals))
                if first == w.first_step:
                    break
        while len(self._groups) > _MAX_OPEN_GROUPS:
            _, vals = self._groups.popitem(last=False)
            if len(vals) >= 2:
                judged.append(self._judge(vals))
        return judged

    def forget(self, rank: int) -> None:
        self._hist.pop(rank, None)
        self.flagged.pop(rank, None)

    def _judge(self, vals: dict) -> bool:
        cfg = self.cfg
        per_step = {r: w.compute_s / w.steps for r, w in vals.items()}
        # Waiting = the step outside compute. NCCL kernel time alone undercounts it: measured on two
        # H200s, the fast rank spent 11.7 ms/step outside compute but only 1.5-6 ms in NCCL kernels
        # (the rest idle before the collective was launched).
        wait = {r: max(w.step_time_s - per_step[r], 0.0) for r, w in vals.items()}
        comm = {r: w.communication_s / w.steps for r, w in vals.items()}
        comm_seen = any(c > 0 for c in comm.values())
        changed = False
        ranks = list(vals)
        mcs = dict(zip(ranks, medians_without_each([per_step[r] for r in ranks])))
        mws = dict(zip(ranks, medians_without_each([wait[r] for r in ranks])))
        mcomm = dict(zip(ranks, medians_without_each([comm[r] for r in ranks])))
        for rank, w in vals.items():
            mc, mw = mcs[rank], mws[rank]
            excess = per_step[rank] - mc
            # Under a synchronous collective every rank's step period is the same, so the others'
            # extra wait equals the excess; one far larger than the excess is not explained by it
            # (a healthy CPU job on a loaded 2-core machine: 1.32x compute, +0.7 ms, others +3.7 ms).
            extra = mw - wait[rank]
            skewed = (mc > 0 and per_step[rank] >= cfg.compute_ratio * mc
                      and cfg.wait_share * excess <= extra <= excess / cfg.wait_share)
            hist = self._hist.setdefault(rank, collections.deque(maxlen=cfg.compute_windows))
            hist.append((skewed, w.first_step, w.time))
            n = sum(1 for s, _, _ in hist if s)
            old = self.flagged.get(rank)
            if (old is None and n < cfg.min_compute_windows) or (old is not None and n * 2 < cfg.min_compute_windows):
                changed |= self.flagged.pop(rank, None) is not None
                continue
            if not skewed and old is not None:
                continue  # keep the figures of the last skewed window
            step, since = (old.step, old.since) if old is not None else \
                next((st, tm) for s, st, tm in hist if s)
            in_comm = (f"; in collectives {comm[rank] * 1e3:.1f} vs {mcomm[rank] * 1e3:.1f} ms"
                       if comm_seen else "")
            summary = (f"rank {rank} compute {per_step[rank] * 1e3:.1f} ms/step vs median "
                       f"{mc * 1e3:.1f} ms of the other ranks ({per_step[rank] / mc:.2f}x); others wait "
                       f"{(mw - wait[rank]) * 1e3:+.1f} ms/step longer outside compute ({wait[rank] * 1e3:.1f} vs "
                       f"{mw * 1e3:.1f} ms{in_comm}), in {n} of the last {len(hist)} profiler windows since "
                       f"step {step:,}")
            self.flagged[rank] = Condition(STRAGGLER_RANK, self.job, rank, WARNING, summary,
                                               since, step, cfg.for_s, found=(WINDOWS,))
            changed |= old is None
        return changed
