"""A scrape rendered by a forked child process, beside ingest instead of inside its GIL.

Rendering 10,000 ranks is about half a second of Python. On the HTTP worker thread it shares
the GIL with the event loop: the two get about half a core each, so acks ran late after every
scrape unless the render slept (``_yield``), and a yielding render took 2-4 s
(bench/results/collector_scale_h100host_spread.md).

``fork()`` gives the render its own process over the same memory (copy on write): on a second
core it runs in parallel with ingest (10,000 ranks at the agents' 1 Hz samples: 1.2-1.6 s
scrapes instead of 7.8 s on the thread of one core; bench/results/collector_scale_h100host_seventh.md).
The child runs at a lower priority (``NICE``), sends the finished body (gzip when asked) back
through a pipe and exits. On one core it is worse than the thread (8.8 s scrapes, acks
later): the child only gets what ingest leaves, and the parent pays for the fork and for the
pages it writes meanwhile (bench/results/collector_scale_h100host_render.md); ``metrics_render: auto``
uses it only with two or more cores.

Why forking this process is safe although it has threads (gRPC's, the HTTP worker):
- The state lock is held across ``fork()``, so no rank is half-updated in the child (each
  process then leaves the ``with`` and releases its own copy).
- The child runs only the render: no gRPC, no asyncio, no logging, no locks another thread
  may have held. gRPC's fork handlers are off unless GRPC_ENABLE_FORK_SUPPORT is set.
- It disables garbage collection, resets SIGINT/SIGTERM and the loop's signal wake-up
  descriptor, writes, and leaves with ``os._exit`` (no atexit, no finalizers, no flushes).
- The parent waits at most ``timeout_s``: a child that is late, dies or sends a short body
  is killed and reaped, and the scrape renders on the thread as before. Nothing is lost.
- No child is forked where the cgroup memory limit would not hold twice what the last one
  took (the OOM killer would pick the collector, the largest process).

Memory: pages either process writes while the child lives are copied (Python writes reference
counts when it reads objects), and the child's own body and lines are new. The child measures
its private memory at the end (``private_bytes``, on /metrics as
stepwatch_collector_scrape_child_private_bytes): the headroom a scrape needs. It reads the
state's objects in place (``frozen``): nothing writes them in the child, so copies would only
cost memory.
"""

from __future__ import annotations

import gc
import logging
import os
import select
import signal
import struct
import threading
import time
import warnings
from typing import Callable, ContextManager, Optional

from ..state import SELF_BOUNDS_S, Histogram

__all__ = ["ForkRender", "FAILURE_REASONS", "available", "cores", "memory_room"]

log = logging.getLogger("stepwatch.collector")

NICE = 10  # the child's niceness above the collector's: ingest gets the core first
_HEADER = struct.Struct("<QQ")  # body length, the child's private bytes
_LOG_EVERY_S = 60.0  # a failure reason is logged at most this often
# Why a scrape rendered on the thread: no room under the memory limit, fork() failed, the child
# exited non-zero, was late (killed), or sent a short body.
FAILURE_REASONS = ("memory", "fork", "exit", "timeout", "short")

# CPython 3.12+ warns on fork() in a process with threads; the child here only renders.
warnings.filterwarnings("ignore", message=r".*multi-threaded, use of fork\(\)", category=DeprecationWarning,
                        module=__name__)


def available() -> bool:
    return hasattr(os, "fork")


def _levels(root: str, controller: str, proc: str) -> tuple[bool, list]:
    """(cgroup v2?, this process's cgroup directories for ``controller``, its own first, then
    each parent up to the mount's root). ``root`` is a v2 mount when it has cgroup.controllers
    (the ``0::/path`` line of ``proc`` names the cgroup), else the v1 hierarchy is
    ``root/controller`` (its line names the cgroup). Directories missing under the mount are
    skipped: a container that sees its own cgroup as the mount's root keeps only the root."""
    v2 = os.path.exists(os.path.join(root, "cgroup.controllers"))
    mount, path = (root if v2 else os.path.join(root, controller)), ""
    try:
        with open(proc) as f:
            lines = f.read().splitlines()
    except OSError:
        lines = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3 and ((v2 and parts[0] == "0" and not parts[1])
                                or (not v2 and controller in parts[1].split(","))):
            path = parts[2].strip("/")
            if ".." in path.split("/"):  # a cgroup outside this namespace's view: only the root
                path = ""
            break
    dirs = []
    while True:
        here = os.path.join(mount, path) if path else mount
        if os.path.isdir(here):
            dirs.append(here)
        if not path:
            return v2, dirs
        path = os.path.dirname(path)


def _read_all(dirs: list, *names: str) -> list:
    """The files ``names`` read in each of ``dirs`` that has them all: [(text, ...)]."""
    out = []
    for d in dirs:
        try:
            texts = []
            for name in names:
                with open(os.path.join(d, name)) as f:
                    texts.append(f.read().strip())
        except OSError:
            continue
        out.append(tuple(texts))
    return out


def cores(root: str = "/sys/fs/cgroup", proc: str = "/proc/self/cgroup") -> float:
    """CPU cores this process may use: its CPU affinity, capped by the CPU quota of its cgroup or
    any parent (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``; a container's
    CPU limit, a systemd unit's CPUQuota)."""
    n = float(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))
    v2, dirs = _levels(root, "cpu", proc)
    if v2:  # "quota period" in one file
        pairs = [tuple(text.split()) for (text,) in _read_all(dirs, "cpu.max")]
    else:
        pairs = _read_all(dirs, "cpu.cfs_quota_us", "cpu.cfs_period_us")
    for pair in pairs:  # "max" / -1: no quota at that level
        try:
            quota, period = pair
            if quota not in ("max", "-1") and float(period) > 0:
                n = min(n, float(quota) / float(period))
        except ValueError:
            pass
    return n


def memory_room(root: str = "/sys/fs/cgroup", proc: str = "/proc/self/cgroup") -> Optional[int]:
    """Bytes left under the tightest memory limit of this process's cgroup and its parents (v2
    ``memory.max`` minus ``memory.current``, v1 ``memory.limit_in_bytes`` minus
    ``memory.usage_in_bytes``, at each level), or None without a limit."""
    v2, dirs = _levels(root, "memory", proc)
    names = ("memory.max", "memory.current") if v2 else ("memory.limit_in_bytes", "memory.usage_in_bytes")
    rooms = [int(limit) - int(used) for limit, used in _read_all(dirs, *names)
             if limit.isdigit() and used.isdigit() and int(limit) < 1 << 60]  # ("max", v1's "no limit")
    return min(rooms) if rooms else None


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _private_bytes() -> int:
    """Private dirty bytes of this process (Linux): in a fresh child, the pages it copied or
    wrote new."""
    try:
        with open("/proc/self/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Private_Dirty:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class ForkRender:
    """``run(lock, produce)``: the bytes ``produce()`` returns in a forked child, or None when
    no child delivered them (the caller renders itself). One child at a time."""

    def __init__(self, timeout_s: float = 20.0, room: Callable[[], Optional[int]] = memory_room):
        self.timeout_s = timeout_s
        self._room = room  # bytes left under the memory limit, or None (no limit)
        self.fork_seconds = Histogram(SELF_BOUNDS_S)  # how long each fork() took (the loop waits meanwhile)
        self.private_bytes = 0  # the last child's private memory
        self.failures: dict[str, int] = {}  # reason (FAILURE_REASONS) -> count
        self._logged: dict[str, float] = {}  # reason -> when it was last logged
        self._one = threading.Lock()

    def families(self) -> list[tuple]:
        """Its metric families in the collector's declared form ``(name, help, kind, [(label
        names, label values, value)])``, a histogram's value ``(cumulative, sum)``."""
        return [
            ("stepwatch_collector_scrape_child_private_bytes", "Private memory the last scrape's render process "
             "wrote: pages it copied from the collector (copy on write) and its own (the body); the headroom a "
             "scrape needs.", "gauge", [((), (), self.private_bytes)]),
            ("stepwatch_collector_scrape_child_failures", "Scrapes whose render process failed or was not started "
             "(memory: too little room under the memory limit; fork, exit, timeout, short) and that rendered on "
             "the thread instead.", "counter",
             [(("reason",), (reason,), self.failures.get(reason, 0)) for reason in FAILURE_REASONS]),
            ("stepwatch_collector_scrape_fork_seconds", "How long each scrape's fork() of the render process took "
             "(ingest and acks wait meanwhile).", "histogram",
             [((), (), (self.fork_seconds.cumulative(), self.fork_seconds.sum))])]

    def run(self, lock: ContextManager, produce: Callable[[], bytes]) -> Optional[bytes]:
        """``lock`` (what every writer of the rendered state holds) is held across fork()."""
        with self._one:
            # A child copies pages into the same cgroup: where a memory limit would not hold
            # another child's worth (the last one's, or a quarter of the heap before the first),
            # render on the thread rather than risk the collector being killed for memory.
            room = self._room()
            need = 2 * (self.private_bytes or _rss_bytes() // 4)
            if room is not None and room < need:
                return self._failed("memory", f"{room >> 20} MiB left under the memory limit, a render "
                                    f"process may need {need >> 20} MiB")
            r, w = os.pipe()
            try:
                with lock:
                    started = time.perf_counter()
                    pid = os.fork()
            except OSError as exc:
                os.close(r)
                os.close(w)
                return self._failed("fork", f"fork failed: {exc}")
            if pid == 0:  # the child: never returns
                os.close(r)
                self._child(w, produce)
            os.close(w)
            self.fork_seconds.observe(time.perf_counter() - started)
            try:
                data = self._read(r, time.monotonic() + self.timeout_s)
            finally:
                os.close(r)
            status = self._reap(pid, kill=data is None)
            if data is None:
                return self._failed("timeout", f"no body within {self.timeout_s:g} s; child killed")
            if status != 0:
                return self._failed("exit", f"child exited with status {status}")
            if len(data) < _HEADER.size:
                return self._failed("short", "child sent no body")
            size, private = _HEADER.unpack_from(data)
            if len(data) - _HEADER.size != size:
                return self._failed("short", f"child sent {len(data) - _HEADER.size} of {size} bytes")
            self.private_bytes = private
            return data[_HEADER.size:]

    @staticmethod
    def _child(w: int, produce: Callable[[], bytes]) -> None:
        code = 1
        try:
            gc.disable()
            signal.set_wakeup_fd(-1)
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, signal.SIG_DFL)
            os.nice(NICE)
            body = produce()
            _write_all(w, _HEADER.pack(len(body), _private_bytes()) + body)
            code = 0
        except BaseException:  # noqa: BLE001 - the parent sees the status and renders itself
            pass
        finally:
            os._exit(code)

    @staticmethod
    def _read(fd: int, deadline: float) -> Optional[bytes]:
        """Everything until end of file, or None at the deadline."""
        chunks, poll = [], select.poll()
        poll.register(fd, select.POLLIN | select.POLLHUP)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if not poll.poll(left * 1000):
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)

    @staticmethod
    def _reap(pid: int, kill: bool) -> int:
        if kill:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status)

    def _failed(self, reason: str, detail: str) -> None:
        """Count the failure; log it at most once a minute per reason (a scrape every 15 s)."""
        self.failures[reason] = self.failures.get(reason, 0) + 1
        now = time.monotonic()
        if now - self._logged.get(reason, -_LOG_EVERY_S) >= _LOG_EVERY_S:
            self._logged[reason] = now
            log.warning("stepwatch collector: /metrics render in a child process: %s; rendered on the "
                        "thread instead (%d such scrapes so far)", detail, self.failures[reason])
        return None
