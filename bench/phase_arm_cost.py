"""The phase timer's cost at a boundary where it does not sample: ``PhaseTimer.arm`` declining
by the ranks' shared choice of steps (the budget allows, the step is not chosen) against
declining by the budget check alone (the only way it declined before the shared choice),
alternated in rounds, on a simulated clock so no hook is installed.

    python bench/phase_arm_cost.py [--rounds 5] [--calls 200000]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

from stepwatch.agent._phase_times import PhaseTimer


class _Loader:
    notify = None


def per_call_us(by_choice: bool, calls: int) -> float:
    """``by_choice``: 1,000 s since attach, 90 ms spent, so the budget allows; the clock then
    stands still, so the mean step reads 0 and no step is chosen. Else 1e9 s spent: the budget
    check declines first."""
    now = [0.0]
    t = PhaseTimer(_Loader(), 1e-3, clock=lambda: now[0])
    now[0] = 1000.0
    t.sampled, t.cost_s = 100, (0.09 if by_choice else 1e9)
    t.arm(None, 1)  # the first boundary (a mean step needs two): sampled, by the budget alone
    t.close()
    sampled, arm = t.sampled, t.arm
    start = time.perf_counter()
    for k in range(2, calls + 2):
        arm(None, k)
    us = (time.perf_counter() - start) / calls * 1e6
    assert t.sampled == sampled, (t.sampled, sampled)  # every call declined
    return us


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=200000)
    a = p.parse_args()
    runs = {True: [], False: []}
    for r in range(a.rounds):
        for by_choice in ((True, False) if r % 2 else (False, True)):
            runs[by_choice].append(per_call_us(by_choice, a.calls))
    print(f"Python {platform.python_version()}, {a.rounds} rounds of {a.calls} calls, alternated")
    for by_choice, name in ((False, "declined by the budget check"), (True, "declined by the shared choice")):
        v = runs[by_choice]
        print(f"{name}: median {statistics.median(v):.3f} us/call (runs {', '.join(f'{x:.3f}' for x in v)})")


if __name__ == "__main__":
    main()
