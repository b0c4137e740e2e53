"""An alert's text never contradicts its severity: the real live recordings with their four real
causes (tests/data/real/diag: two H200 jobs at the defaults, each cause raised with an automatic
trace window whose steps are left out of the drift) replayed through the collector's own
pipeline, and the alert book read at every evaluation tick, as every poll of /api/alerts would
see it: while a drift episode fires, its summary's step-time figure never stands under the
raise threshold of its severity (0.8 x the ratio; 0.7 x for info)."""

from __future__ import annotations

import os
import re

import pytest

from stepwatch.collector.alerting import Detection
from stepwatch.collector.detect import DetectionConfig
from stepwatch.collector.ingest import Pipeline
from stepwatch.collector.state import CollectorState
from stepwatch.collector.tools.corpus import events, load

DIAG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "data", "real", "diag")
_FIGURE = re.compile(r"^step time \+(\d+(?:\.\d+)?)%")


@pytest.mark.parametrize("name", ["h200zi_1gpu_m_pulses.jsonl.gz", "h200zg_1gpu_m_pulses.jsonl.gz"])
def test_a_firing_drift_never_reads_under_its_severity_at_any_tick(name):
    cfg = DetectionConfig()
    floor = {"info": 70 * cfg.drift.info_ratio, "warning": 80 * cfg.drift.warning_ratio,
             "critical": 80 * cfg.drift.critical_ratio}
    detection = Detection(cfg, log_changes=False)
    pipeline = Pipeline(CollectorState(300.0), [detection])
    keys, now, next_tick, seen, low = {}, None, None, 0, []

    def tick(t: float) -> None:
        nonlocal seen
        pipeline.housekeeping(t)
        for a in detection.book.snapshot():
            if a.alertname != "StepwatchThroughputDrift" or a.state != "firing":
                continue
            seen += 1
            m = _FIGURE.match(a.summary)
            if m is None or float(m.group(1)) < floor[a.severity]:
                low.append((round(t), a.severity, a.summary[:120]))

    for ev in events(load(os.path.join(DIAG, name))):
        now = ev.time if now is None else max(now, ev.time)
        next_tick = now if next_tick is None else next_tick
        while now >= next_tick:
            tick(next_tick)
            next_tick += cfg.eval_interval_s
        rank = (ev.hello.job, ev.hello.rank)
        if ev.kind == "connect":
            keys[rank] = pipeline.connect(ev.hello, now)
        elif ev.kind == "batch":
            pipeline.batch(keys[rank], ev.hello, ev.batch, now)
        else:
            pipeline.disconnect(keys[rank], ev.hello, now)
    assert seen >= 40, seen  # the episodes fired over many ticks (each real cause for ~90 s)
    assert low == [], low[:5]
