"""Public entry to the window analysis the sidecar runs on every profiler window: any
torch.profiler / Kineto Chrome trace (plain or gzipped JSON) -> a WindowSummary. Definitions
(span, busy/idle, compute/communication/memcpy, overlap, top kernels and ops, phases) are in
:mod:`stepwatch.agent._sidecar._analysis`. Used by ``stepwatch analyze``."""

from ._sidecar._analysis import TraceError, summarize

__all__ = ["TraceError", "summarize"]
