"""Run the collector with every slow event-loop callback recorded: what holds the loop.

    python bench/loop_stalls.py --out stalls.json --over-ms 50 -- collector --grpc-listen ...

(``bench/collector_scale.py --loop-stalls FILE`` starts its collector this way.) Each asyncio
callback (``Handle._run``: a task step, a timer, a transport's read) is timed with the wall
clock and with the loop thread's own CPU clock; one that took ``--over-ms`` or longer is kept
with what it was (the task's coroutine, or the callback). Wall time well above CPU time means
the loop thread was runnable but not running: another thread of the collector held the GIL
(the HTTP worker's rendering, a garbage collection there) or the core was busy with gRPC's own
threads. Written at exit (SIGTERM included): the stalls, and per kind their count, total and
largest wall and CPU milliseconds. Costs two clock reads per callback.
"""

from __future__ import annotations

import argparse
import asyncio.events
import atexit
import collections
import json
import re
import signal
import sys
import time


def _what(handle) -> str:
    cb = getattr(handle, "_callback", None)
    owner = getattr(cb, "__self__", None)
    coro = getattr(owner, "get_coro", None)
    if coro is not None:  # a task's step: name the coroutine
        c = coro()
        return f"task {getattr(c, '__qualname__', repr(c))}"
    text = getattr(cb, "__qualname__", None) or repr(cb)
    return re.sub(r" at 0x[0-9a-f]+", "", str(text))[:160]


def install(out: str, over_s: float) -> None:
    stalls: list = []
    original = asyncio.events.Handle._run
    wall, cpu = time.perf_counter, time.thread_time
    t0 = time.time()

    def _run(self):
        w, c = wall(), cpu()
        try:
            return original(self)
        finally:
            dw = wall() - w
            if dw >= over_s:
                stalls.append((round(time.time() - t0, 3), round(dw * 1e3, 1), round((cpu() - c) * 1e3, 1), _what(self)))

    asyncio.events.Handle._run = _run

    def dump(*_):
        kinds = collections.defaultdict(lambda: [0, 0.0, 0.0, 0.0])
        for _, w, c, what in stalls:
            k = kinds[what]
            k[0] += 1
            k[1] += w
            k[2] = max(k[2], w)
            k[3] += c
        summary = sorted(({"what": what, "count": k[0], "wall_ms_total": round(k[1], 1), "wall_ms_max": k[2],
                           "cpu_ms_total": round(k[3], 1)} for what, k in kinds.items()),
                         key=lambda r: -r["wall_ms_total"])
        with open(out, "w") as fh:
            json.dump({"over_ms": over_s * 1e3, "summary": summary,
                       "stalls": [{"t_s": t, "wall_ms": w, "cpu_ms": c, "what": what} for t, w, c, what in stalls]},
                      fh, indent=1)

    atexit.register(dump)
    previous = signal.getsignal(signal.SIGTERM)

    def on_term(signum, frame):
        dump()
        if callable(previous):
            previous(signum, frame)
        else:
            raise SystemExit(0)

    signal.signal(signal.SIGTERM, on_term)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--over-ms", type=float, default=50.0)
    p.add_argument("rest", nargs=argparse.REMAINDER, help="-- then the stepwatch.collector.tools arguments")
    a = p.parse_args()
    rest = a.rest[1:] if a.rest[:1] == ["--"] else a.rest
    install(a.out, a.over_ms / 1e3)
    from stepwatch.collector.tools import main as tools_main
    return tools_main(rest)


if __name__ == "__main__":
    sys.exit(main())
