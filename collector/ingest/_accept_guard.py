"""Out of file descriptors: refused connections are counted and logged once a minute, not once
per attempt.

When the process has no file descriptor left, asyncio's accept loop reports every failed
``accept()`` to the event loop's exception handler (with a traceback each: 113,000 log entries,
50 MB, in 20 s at a limit of 256 with 343 idle connections held). :class:`AcceptGuard` is that
handler for the collector's loop: an accept that failed for want of descriptors or memory
(EMFILE, ENFILE, ENOBUFS, ENOMEM) counts in ``IngestCounters`` (``accepts_failed``) (exported as
``stepwatch_collector_accepts_failed_total{reason}``) and gives one log line per
``interval_s`` with the count and the limit; the retry asyncio schedules after such a refusal,
when it finds the listener closed by a shutdown meanwhile, logs at debug only; anything else
goes to asyncio's default handler.
The connections already open are served; idle ones close after their timeouts (HTTP read 10 s,
gRPC Hello 30 s), which gives the descriptors back. :func:`raise_fd_limit` lifts the soft
descriptor limit to the hard one (the CLI does it at start).
"""

from __future__ import annotations

import errno
import logging
import resource
import time
from typing import Callable

__all__ = ["AcceptGuard", "raise_fd_limit"]

log = logging.getLogger("stepwatch.collector")

_REASONS = {errno.EMFILE: "fd_exhausted", errno.ENFILE: "fd_exhausted", errno.ENOBUFS: "no_memory",
            errno.ENOMEM: "no_memory"}


def raise_fd_limit() -> int:
    """Set the soft RLIMIT_NOFILE to the hard limit where allowed; return the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return soft


class AcceptGuard:
    """``loop.set_exception_handler(AcceptGuard(state))``; ``count(reason)`` is the state's
    counter (called on the loop thread)."""

    def __init__(self, count: Callable[[str], None], interval_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic):
        self._count, self.interval_s, self._clock = count, interval_s, clock
        self._last = float("-inf")
        self._since = 0

    def __call__(self, loop, context: dict) -> None:
        exc = context.get("exception")
        if isinstance(exc, ValueError) and "_start_serving" in str(context.get("message", "")):
            # asyncio retries a refused accept 1 s later; when the listener was closed meanwhile
            # (shutdown) that retry finds its socket gone ("Invalid file descriptor: -1"): nothing
            # is lost, and a traceback in the log at every such shutdown would say otherwise
            log.debug("stepwatch collector: an accept retry after the listener closed: %s", exc)
            return
        reason = _REASONS.get(getattr(exc, "errno", None)) if isinstance(exc, OSError) else None
        if reason is None or "accept" not in str(context.get("message", "")):
            loop.default_exception_handler(context)
            return
        self._count(reason)
        self._since += 1
        now = self._clock()
        if now - self._last >= self.interval_s:
            soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
            log.warning("stepwatch collector: new connections refused (%s: %s), %d since the last such line; "
                        "file descriptor limit %s: raise it (ulimit -n) or lower the number of connections; "
                        "idle ones close after their timeouts", reason, exc.strerror or exc, self._since,
                        "unlimited" if soft == resource.RLIM_INFINITY else soft)
            self._last, self._since = now, 0
