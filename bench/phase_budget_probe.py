"""The phase sampler's budget on a busy machine: the test trainer run with PhaseTimer.arm wrapped,
printing (to stderr, one JSON line at exit) its boundaries, samples (before step 400 too), total
and largest single-boundary cost, and how many boundaries the budget check (cost since attach over
0.1% of the wall time since attach) declined. A probe of why a CI run's job had no phase times
before its onset (bench/results/phase_budget_probe.md); nothing of it is product code.

    python bench/phase_budget_probe.py NAME [train args...]   # STEPWATCH_* env as for a test job
"""
import atexit
import json
import runpy
import sys
from stepwatch.agent import _phase_times as P
log = []
orig = P.PhaseTimer.arm
def arm(self, optimizer, step=None):
    before = (self.sampled, self.cost_s)
    t = self._clock()
    orig(self, optimizer, step)
    blocked = self.cost_s > self._budget * (t - self._start) if self._budget > 0 else None
    log.append((step, round(t - self._start, 3), self.sampled, round(self.cost_s * 1e3, 3), self.sampled > before[0], blocked))
P.PhaseTimer.arm = arm
def done():
    samples = [r for r in log if r[4]]
    pre = [r for r in samples if r[0] is not None and r[0] < 400]
    costs = []
    prev = 0.0
    for r in log:
        costs.append(r[3] - prev); prev = r[3]
    blocked = sum(1 for r in log if r[5])
    print(json.dumps({"job": NAME, "boundaries": len(log), "samples": len(samples), "samples_before_400": len(pre),
                      "cost_ms_total": log[-1][3] if log else None, "largest_cost_step_ms": round(max(costs), 3) if costs else None,
                      "boundaries_over_budget": blocked, "first_samples": [r[:4] for r in samples[:10]]}), file=sys.stderr)
atexit.register(done)
NAME = sys.argv[1]
sys.argv = ["train"] + sys.argv[2:]
runpy.run_module("stepwatch.collector.tools.train", run_name="__main__")
