"""Data-loader wait: time the training thread spends in DataLoader iterator ``__next__``.

``_BaseDataLoaderIter.__next__`` is wrapped at class level, so every DataLoader (single- and
multi-process) is covered without user code changes. Only calls made on the attaching thread
are counted. The wrapper adds two clock reads per batch and never alters what the iterator
returns or raises; ``notify`` (set by the phase timer for a sampled step) is called after the
next batch is handed over.

It is also the step-hook watchdog: it runs whether or not the optimizer hook fires, so when
``silent_after`` batches are drawn with no step boundary in between (a fused or compiled step
that bypasses ``optimizer.step``, an inference loop), ``on_silent(batches)`` is called, once.
"""

from __future__ import annotations

import threading
import time

__all__ = ["DataLoaderTimer"]


class DataLoaderTimer:
    """Accumulates wait seconds between step boundaries; read with :meth:`take`."""

    def __init__(self, clock=time.perf_counter, on_silent=None, silent_after: int = 64):
        self._clock = clock
        self._on_silent = on_silent
        self.silent_after = silent_after  # raised by the step tracker for accumulation
        self.silent_reported = False
        self._thread = threading.get_ident()
        self._wait = 0.0
        self.batches = 0
        self.enabled = True
        self.notify = None  # called (no arguments) after the next batch is handed over, once
        self._original = None
        self._cls = None

    def take(self) -> tuple[float, int]:
        """Return (wait seconds, batches) since the last call and reset both."""
        wait, batches = self._wait, self.batches
        self._wait, self.batches = 0.0, 0
        return wait, batches

    def install(self) -> bool:
        try:
            from torch.utils.data import dataloader
        except Exception:
            return False
        cls = dataloader._BaseDataLoaderIter
        original = cls.__next__
        timer = self

        def __next__(it):
            if not timer.enabled or threading.get_ident() != timer._thread:
                return original(it)
            start = timer._clock()
            try:
                batch = original(it)
                if timer.notify is not None:
                    notify, timer.notify = timer.notify, None
                    notify()
                return batch
            finally:
                timer._wait += timer._clock() - start
                timer.batches += 1
                if timer.batches >= timer.silent_after and not timer.silent_reported:
                    timer._silent()

        __next__.__wrapped__ = original
        __next__._stepwatch = True
        cls.__next__ = __next__
        self._cls, self._original = cls, original
        return True

    def _silent(self) -> None:
        self.silent_reported = True
        if self._on_silent is not None:
            try:
                self._on_silent(self.batches)
            except Exception:  # never into the training loop
                pass

    def uninstall(self) -> None:
        self.enabled = False
        if self._cls is not None and getattr(self._cls.__next__, "_stepwatch", False):
            self._cls.__next__ = self._original
        self._cls = None
