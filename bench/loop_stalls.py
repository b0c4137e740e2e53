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

Lags that no one callback explains (the loop waiting between callbacks) are caught by a watch
thread: a marker posted to the loop every 20 ms; while one has waited over 80 ms, every
thread's innermost frames are sampled every 20 ms (``while_lagging``: thread, stack, samples)
and each such lag's length is kept (``lags_ms``).
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
import threading
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


def _stack(frame, depth: int = 5) -> str:
    """The innermost ``depth`` frames of a thread, innermost first: 'file:function:line'."""
    out = []
    while frame is not None and len(out) < depth:
        code = frame.f_code
        out.append(f"{code.co_filename.rsplit('/', 1)[-1]}:{code.co_name}:{frame.f_lineno}")
        frame = frame.f_back
    return " < ".join(out)


def _watch(state: dict, over_s: float, every_s: float = 0.02) -> None:
    """Every ``every_s`` a marker is posted to the loop (call_soon_threadsafe); while one has
    waited more than ``over_s``, every thread's innermost frames are sampled: what each thread
    was doing while the loop lagged (the loop thread itself shown in select() means it was
    waiting for the core or the GIL, the others show who had them)."""
    me = threading.get_ident()
    pending = [None]

    def ran(t):
        lag = time.perf_counter() - t
        if lag > over_s:
            state["lags"].append(round(lag * 1e3, 1))
        if pending[0] == t:
            pending[0] = None

    while True:
        time.sleep(every_s)
        loop = state.get("loop")
        if loop is None or loop.is_closed():
            continue
        now = time.perf_counter()
        if pending[0] is None:
            pending[0] = now
            try:
                loop.call_soon_threadsafe(ran, now)
            except RuntimeError:
                return
        elif now - pending[0] > over_s:
            names = {t.ident: t.name for t in threading.enumerate()}
            for ident, frame in sys._current_frames().items():
                if ident != me:
                    state["samples"][(names.get(ident, str(ident)), _stack(frame))] += 1


def install(out: str, over_s: float, lag_s: float = 0.08) -> None:
    stalls: list = []
    original = asyncio.events.Handle._run
    wall, cpu = time.perf_counter, time.thread_time
    t0 = time.time()
    watched = {"loop": None, "lags": [], "samples": collections.Counter()}
    threading.Thread(target=_watch, args=(watched, lag_s), name="loop-stall-watch", daemon=True).start()

    def _run(self):
        if watched["loop"] is None:
            watched["loop"] = self._loop
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
            top = [{"thread": name, "stack": stack, "samples": n}
                   for (name, stack), n in watched["samples"].most_common(40)]
            json.dump({"over_ms": over_s * 1e3, "summary": summary,
                       "lag_over_ms": lag_s * 1e3, "lags_ms": watched["lags"], "while_lagging": top,
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
