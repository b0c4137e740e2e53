"""What the drift detector reads around a ramp's +5% on one recording: per minute, its warning
window's shift against the level it judges by, the step time's own reach (`z` x its spread),
and the evidence that held the shift with its own spreads (bench/results/detection_real_ramps_longer_plays.md).

    python bench/ramp_probe.py RECORDING REPEAT SPAN_S START

RECORDING one of tests/data/real, played REPEAT times (matched cut), a ramp to +5% over SPAN_S
seconds injected as bench/detection_real.py does (``--where cycle``: START 0 into backward, 1 into
the loader's wait; 240 s + 30 s x START after the first step). Read-only: ``ShiftTests.shift`` is
wrapped to record the warning window's reads from 10 minutes before +5% to 11 minutes after.
"""

from __future__ import annotations

import collections
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from stepwatch.collector._replay import replay  # noqa: E402
from stepwatch.collector.detect import _drift_tests, parse_detection  # noqa: E402
from stepwatch.collector.detect._types import WARNING  # noqa: E402
from stepwatch.collector.tools.corpus import events, first_step_time, inject, load, repeat  # noqa: E402

from detection_real import REAL, _where  # noqa: E402


def main() -> None:
    name, times, span, start = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
    lines = repeat(load(os.path.join(REAL, name)), times, match=True)
    at = first_step_time(lines) + 240 + 30 * start
    changed = inject(lines, "ramp", 0.05, at, span, where=_where("cycle", start))
    reads = collections.defaultdict(list)  # minutes from +5% -> [(shift, z x spread, raised, backing)]
    shift = _drift_tests.ShiftTests.shift

    def recorded(self, sev, ref, n=0, backed=False):
        got = shift(self, sev, ref, n, backed)
        t = self.history[len(self.history) - 1][1]
        if sev == WARNING and not n and at + span - 600 <= t <= at + span + 700:
            k = self.n[sev]
            raw = _drift_tests.median(self.history.tail(2, k)) - ref
            b = self.backed(ref, raw, k) if raw > 0 else None
            reads[round((t - at - span) / 60)].append(
                (raw, self.cfg.z * self.noise.get(sev), got is not None,
                 None if b is None else f"{b.name} {b.share:.2f} of the step's growth, {b.spreads} spreads"))
        return got

    _drift_tests.ShiftTests.shift = recorded
    try:
        alerts = replay(events(changed), parse_detection(None))
    finally:
        _drift_tests.ShiftTests.shift = shift
    for a in alerts:
        if a.alertname == "StepwatchThroughputDrift" and a.fired_at and a.fired_at >= at:
            print(f"raised {a.fired_at - at - span:+.0f} s from +5% (onset {a.onset - at - span:+.0f} s): {a.fired_summary[:120]}")
    for m in sorted(reads):
        rs = reads[m]
        raw = sorted(x[0] for x in rs)
        reach = sorted(x[1] for x in rs)
        held = collections.Counter(x[3] for x in rs if x[3]).most_common(2)
        print(f"{m:+3d} min from +5%: {len(rs)} reads, shift {math.expm1(raw[len(raw) // 2]):+.3f} median, "
              f"{math.expm1(raw[-1]):+.3f} max; z x spread {math.expm1(reach[len(reach) // 2]):.3f}; "
              f"raised {sum(x[2] for x in rs)}; held by {held or 'nothing'}")


if __name__ == "__main__":
    main()
