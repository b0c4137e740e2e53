"""Named daemon thread that calls a tick every interval until stopped (sidecar samplers)."""

from __future__ import annotations

import threading

__all__ = ["PeriodicThread"]


class PeriodicThread:
    """Service base: ``start()`` runs ``_setup()``, then ``_tick()`` every ``interval_s``
    (``while not stop.wait(interval)``), then ``_teardown()``; ``stop()`` is idempotent.

    ``_setup`` returning False ends the thread at once. Subclasses catch their own errors in
    ``_tick`` so the loop never dies.
    """

    def __init__(self, name: str, interval_s: float) -> None:
        self._interval = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 1.0) -> None:
        """Stop the thread and wait up to ``timeout_s``; a tick in progress is not interrupted."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def _run(self) -> None:
        if not self._setup():
            return
        while not self._stop.wait(self._interval):
            self._tick()
        self._teardown()

    def _setup(self) -> bool:
        return True

    def _tick(self) -> None:
        raise NotImplementedError

    def _teardown(self) -> None:
        pass
