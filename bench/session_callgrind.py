"""Does a profiler session leave each later CPU operator doing more work? Exact instruction
counts (valgrind's callgrind), not timings: the development machine's timings wander by 10-20%
between blocks, the counts do not.

    python bench/session_callgrind.py [ARM ...]     # needs valgrind (Debian package)

Each arm is one fresh process under callgrind (``OMP_NUM_THREADS=1``): 500 warm-up
``x.add_(1)`` on a one-element CPU tensor, then a block of 2,000 (counted), then the arm's
action, then another block of 2,000 (counted). The counters are dumped between the parts from
outside (``callgrind_control -d``) while the process waits on a marker file. Arms: ``none`` (no
action), ``session`` (one torch.profiler session as the agent's windows run one: CPU activity,
4 steps, the trace exported), ``thread`` (a Python thread started and joined, no profiler) and
``thread_first_session`` (such a thread before the first block, then the session). Prints per
arm the instructions of the block before and after the action (all, and those in glibc's
allocator and its locks) and the functions whose own instructions changed most. (The block's
total also moves with Python's own object allocator by +-40 per operator between blocks, in
every arm: the allocator's share is the signal.)
"""

from __future__ import annotations

import collections
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

ARMS = ("none", "session", "thread", "thread_first_session")
# glibc's allocator: what a tensor's storage (posix_memalign) and its free cost per operator
MALLOC = re.compile(r"^(_int_free|_int_malloc|_int_memalign|_mid_memalign.*|malloc|free|cfree.*|__libc_.*alloc.*|"
                    r"__libc_free|tcache.*|malloc_consolidate|pthread_mutex_lock.*|__pthread_mutex_unlock.*|"
                    r"__lll_lock.*|arena_get.*)$")
PARTS = ("warm", "before", "action", "after")


def child(arm: str, marks: str) -> None:
    import torch

    x = torch.zeros(1)

    def mark(name: str) -> None:
        open(os.path.join(marks, f"mark_{name}"), "w").close()
        while not os.path.exists(os.path.join(marks, f"go_{name}")):
            time.sleep(0.05)

    def block(n: int = 2000) -> None:
        for _ in range(n):
            x.add_(1)

    def thread() -> None:
        t = threading.Thread(target=lambda: None)
        t.start()
        t.join()

    if arm == "thread_first_session":
        thread()
    block(500)
    mark("warm")
    block()
    mark("before")
    if arm.endswith("session"):
        prof_ = torch.profiler
        path = os.path.join(marks, "trace.json")
        with prof_.profile(activities=[prof_.ProfilerActivity.CPU],
                           schedule=prof_.schedule(wait=0, warmup=1, active=3),
                           on_trace_ready=lambda p: p.export_chrome_trace(path)) as prof:
            for _ in range(4):
                for _ in range(50):
                    x.add_(1)
                prof.step()
    elif arm == "thread":
        thread()
    mark("action")
    block()
    mark("after")


def self_cost(path: str) -> collections.Counter:
    """Instructions per function, its own (a call's inclusive cost line is left out)."""
    names, cost, fn, skip = {}, collections.Counter(), None, False
    with open(path) as fh:
        for line in fh:
            m = re.match(r"c?fn=\((\d+)\)(?: (.*))?", line)
            if m:
                if m.group(2):
                    names[m.group(1)] = m.group(2).strip()
                if line.startswith("fn="):
                    fn = names.get(m.group(1), m.group(1))
                continue
            if line.startswith("calls="):
                skip = True
                continue
            if line[:1].isdigit() or line[:1] in "+-*":
                if skip:
                    skip = False
                    continue
                parts = line.split()
                if len(parts) >= 2 and fn is not None and parts[1].isdigit():
                    cost[fn] += int(parts[1])
    return cost


def run(arm: str, work: str) -> tuple:
    marks = os.path.join(work, arm)
    os.makedirs(marks)
    out = os.path.join(work, f"cg.{arm}.out")
    proc = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable,
                             __file__, "--child", arm, marks], env=dict(os.environ, OMP_NUM_THREADS="1"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for part in PARTS:
        while not os.path.exists(os.path.join(marks, f"mark_{part}")):
            if proc.poll() is not None:
                raise RuntimeError(f"arm {arm}: the process ended before {part}")
            time.sleep(0.5)
        subprocess.run(["callgrind_control", "-d", part, str(proc.pid)], check=True, capture_output=True)
        open(os.path.join(marks, f"go_{part}"), "w").close()
    proc.wait(timeout=600)
    return self_cost(f"{out}.2"), self_cost(f"{out}.4")


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], sys.argv[3])
        return
    import torch
    print(f"torch {torch.__version__}, Python {sys.version.split()[0]}, 2,000 x.add_(1) per block")
    with tempfile.TemporaryDirectory() as work:
        for arm in sys.argv[1:] or ARMS:
            before, after = run(arm, work)
            b, a = sum(before.values()), sum(after.values())
            mb = sum(v for k, v in before.items() if MALLOC.match(k))
            ma = sum(v for k, v in after.items() if MALLOC.match(k))
            print(f"\n{arm}: {b:,} -> {a:,} instructions ({100 * (a / b - 1):+.2f}%, {(a - b) / 2000:+.0f} per operator); "
                  f"in glibc's malloc, free, memalign and their locks {mb / 2000:.0f} -> {ma / 2000:.0f} per operator")
            for d, name in sorted(((after[k] - before[k], k) for k in set(before) | set(after)),
                                  key=lambda x: -abs(x[0]))[:5]:
                print(f"  {d / 2000:+7.1f} per operator  {name[:100]}")


if __name__ == "__main__":
    main()
