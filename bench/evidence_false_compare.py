"""The drift episodes of the recordings that evidence_pulses.py played long (at matching levels,
as many times as four pulses need) and found false episodes on, as they are: with the evidence
(the defaults) and with the step times alone (drift.evidence false). Output: per recording, the
plays and each episode (rank, severity, onset seconds after the first step, how decided).

    python bench/evidence_false_compare.py NAME.jsonl.gz ...
"""

from __future__ import annotations

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from evidence_pulses import DRIFT, REAL, events, first_step_time, load, parse_detection, replay, repeat  # noqa: E402

names = sys.argv[1:]
out = {}
for n in names:
    base = load(os.path.join(REAL, n))
    span=max(float(o["time"]) for o in base)-first_step_time(base)
    need=240+4*230+60
    times=max(1,int(need//max(span-180,1))+1) if span<need else 1
    lines=repeat(base,times,match=times>1)
    t0=first_step_time(lines)
    row={}
    for label,cfg in (("evidence",None),("steps",'{"drift": {"evidence": false}}')):
        al=[a for a in replay(events(lines),parse_detection(cfg)) if a.alertname==DRIFT]
        row[label]=[(a.rank,a.severity,round(a.starts_at-t0),a.decided) for a in al]
    out[n]=row; print(n, times, row, flush=True)
print(json.dumps(out))
