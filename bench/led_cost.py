"""What ShiftTests.led (and the other tests of a drift detector) cost in a replay of real
recordings, under cProfile: calls and cumulative seconds per test, against the whole replay.

    python bench/led_cost.py tests/data/real/diag/h200zz_1gpu_m_restarts.jsonl.gz \
        tests/data/real/h200zb_2gpu_m.jsonl.gz tests/data/real/h200zw_1gpu_s.jsonl.gz
"""

import cProfile
import pstats
import sys

from stepwatch.collector._replay import replay
from stepwatch.collector.detect import parse_detection
from stepwatch.collector.tools.corpus import events, load


def main() -> None:
    pr = cProfile.Profile()
    for path in sys.argv[1:]:
        evs = list(events(load(path)))
        pr.enable()
        list(replay(evs, parse_detection(None)))
        pr.disable()
    st = pstats.Stats(pr)
    print("replay, profiled: %.2f s" % st.total_tt)
    for fn in ("test", "early", "led", "further"):
        got = [(nc, ct) for (f, _, name), (_, nc, _, ct, _) in st.stats.items() if name == fn and "_drift_tests" in f]
        nc, ct = got[0] if got else (0, 0.0)
        print(f"ShiftTests.{fn}: {nc} calls, {ct * 1e3:.1f} ms ({100 * ct / st.total_tt:.2f}% of the replay), "
              f"{1e6 * ct / max(nc, 1):.1f} us a call")


if __name__ == "__main__":
    main()
