"""The trainer <-> sidecar contract: record kinds, their keys, the line framing, and the two
name helpers every path or label goes through.

Both directions are newline-delimited JSON objects with a ``"t"`` key naming the kind.
Trainer -> sidecar (the sidecar's stdin)::

    config  {"settings": {AgentSettings by name}, "trainer_pid": N, "hello": {Hello by name}}
    gpu     {"index", "uuid", "name", "total_memory_bytes"}
    step    {"step", "end_time_s", "duration_s", "clock": "host"|"cuda_event",
             "dataloader_wait_s", "samples"?, "tokens"?, "profiled"?, "phase"?}
    phase_times {"step", "end_time_s", "clock", "data_s", "forward_s", "backward_s", "sync_s",
             "optimizer_s", "host_data_s", ... "host_optimizer_s", "points"}   (sampled steps)
    alloc   {"time_s", "device", "device_total_bytes", AllocatorSample fields...}
    event   {"time_s", "kind", "message"}
    stats   {"records_dropped", "hook_errors", "windows", "window_skips": {reason: N},
             "overhead_ratio", "window_warmup_s", "window_aftereffect_ratio"}               (cumulative, trainer side)
    window  {"window_id", "path", "first_step", "last_step", "start_time_s", "activities",
             "overhead_s", "export_s", "discard", "graph_breaks"?, "recompiles"?}
    trace   {"request_id", "path", "first_step", "last_step", "error"}
    bye     {}

Sidecar -> trainer (the sidecar's stdout, the back channel)::

    window_result  {"window_id", "gpu_event_count"}
    capture        {"request_id", "steps"}
    window_now     {"reason"}                                    a window at the next boundary

Keys are the protobuf field names of the message each record becomes, so the sidecar fills
messages by name. Pure module: no I/O, no threads; both processes import it.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterator, List, Optional

__all__ = ["CONFIG", "GPU", "STEP", "PHASE_TIMES", "ALLOC", "EVENT", "STATS", "WINDOW", "TRACE", "BYE", "IDENTITY",
           "WINDOW_RESULT", "CAPTURE", "TRAINER_KINDS", "SIDECAR_KINDS", "MAX_LINE_BYTES",
           "encode", "decode", "read_lines", "LineSplitter", "safe_name", "label_problem",
           "normalize_uuid", "phase_name", "ALLOC_STATS", "config", "gpu", "step", "phase_times",
           "alloc", "event", "stats", "window", "trace", "bye", "identity", "window_result", "capture",
           "window_now"]

CONFIG, GPU, STEP, ALLOC, EVENT, STATS = "config", "gpu", "step", "alloc", "event", "stats"
WINDOW, TRACE, BYE, IDENTITY = "window", "trace", "bye", "identity"
PHASE_TIMES = "phase_times"
WINDOW_RESULT, CAPTURE, WINDOW_NOW = "window_result", "capture", "window_now"
TRAINER_KINDS = (CONFIG, GPU, STEP, PHASE_TIMES, ALLOC, EVENT, STATS, WINDOW, TRACE, BYE, IDENTITY)
SIDECAR_KINDS = (WINDOW_RESULT, CAPTURE, WINDOW_NOW)

MAX_LINE_BYTES = 16 * 1024 * 1024  # a longer line is cut and then fails to decode

# torch.cuda.memory_stats() key -> AllocatorSample field / alloc record key.
ALLOC_STATS = {
    "allocated_bytes": "allocated_bytes.all.current",
    "reserved_bytes": "reserved_bytes.all.current",
    "active_bytes": "active_bytes.all.current",
    "inactive_split_bytes": "inactive_split_bytes.all.current",
    "alloc_retries": "num_alloc_retries",
    "ooms": "num_ooms",
    "allocated_peak_bytes": "allocated_bytes.all.peak",
    "reserved_peak_bytes": "reserved_bytes.all.peak",
    "device_allocs": "num_device_alloc",
    "device_frees": "num_device_free",
}


# -- framing ----------------------------------------------------------------------------------
def encode(record: dict) -> bytes:
    """One record as one line, newline included."""
    return json.dumps(record, separators=(",", ":")).encode() + b"\n"


class LineSplitter:
    """Turns a byte stream into complete lines (without the newline). A line longer than
    ``max_line`` is yielded once, cut at that length (it then fails to decode: counted, not
    fatal), and the rest of it up to its newline is dropped. Not thread-safe: one reader."""

    def __init__(self, max_line: int = MAX_LINE_BYTES) -> None:
        self._pending = bytearray()
        self._max = max_line
        self._skipping = False  # inside the remainder of an over-long line

    def feed(self, data: bytes) -> List[bytes]:
        self._pending += data
        *lines, rest = self._pending.split(b"\n")
        self._pending = bytearray(rest)
        if lines and self._skipping:
            lines, self._skipping = lines[1:], False
        out = [bytes(line[:self._max]) for line in lines]
        if self._skipping:
            self._pending.clear()
        elif len(self._pending) > self._max:
            out.append(bytes(self._pending[:self._max]))
            self._pending.clear()
            self._skipping = True
        return out

    def rest(self) -> Optional[bytes]:
        """The trailing partial line at end of input, or None."""
        rest, self._pending = bytes(self._pending), bytearray()
        return None if self._skipping else (rest or None)


def decode(line: bytes) -> dict:
    """One line to a record; ValueError (with the reason) when it is not a JSON object with a
    string ``t``."""
    obj = json.loads(line)
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    if not isinstance(obj.get("t"), str):
        raise ValueError(f"missing record kind 't', got {obj.get('t')!r:.50}")
    return obj


def read_lines(fd: int, chunk: int = 65536) -> Iterator[bytes]:
    """Lines of file descriptor ``fd`` until EOF, read with ``os.read`` (holds no lock while
    blocked, so a daemon thread parked here cannot crash interpreter shutdown)."""
    import os

    splitter = LineSplitter()
    while True:
        data = os.read(fd, chunk)
        if not data:
            break
        yield from splitter.feed(data)
    rest = splitter.rest()
    if rest is not None:
        yield rest


# -- names ------------------------------------------------------------------------------------
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def safe_name(name: Any, max_len: int = 128) -> Optional[str]:
    """``name`` usable as one path component: every character outside ``[A-Za-z0-9._-]``
    ("/", NUL, spaces, ...) becomes "_", cut to ``max_len``; None when the result is empty or
    only dots ("", ".", ".."), which callers must refuse or replace."""
    safe = _UNSAFE.sub("_", str(name))[:max_len]
    return None if not safe.strip(".") else safe


MAX_LABEL_CHARS = 256


def label_problem(value: Any) -> Optional[str]:
    """Why ``value`` cannot be a job name (a Prometheus label value and, through
    :func:`safe_name`, a path component), or None when it can: it must be 1 to
    MAX_LABEL_CHARS characters without control characters (NUL, newline, the C1 range), line
    or paragraph separators or bidirectional formatting (nothing ``str.isprintable`` refuses
    but the space)."""
    text = str(value)
    if not text.strip():
        return "must not be empty"
    if len(text) > MAX_LABEL_CHARS:
        return f"must be at most {MAX_LABEL_CHARS} characters, got {len(text)}"
    if not text.isprintable():
        bad = next(c for c in text if not c.isprintable())
        return f"must not contain control, line-breaking or formatting characters (U+{ord(bad):04X})"
    return None


MAX_PHASE_CHARS = 32
_PHASE_UNSAFE = re.compile(r"[^a-z0-9_]")


def phase_name(kind: Any) -> str:
    """A marked phase's name as it goes on the wire and into the ``kind`` label: lower case,
    every character outside ``[a-z0-9_]`` made "_", at most MAX_PHASE_CHARS; "pause" when
    nothing is left ("Eval loop" -> "eval_loop")."""
    name = _PHASE_UNSAFE.sub("_", str(kind).strip().lower())[:MAX_PHASE_CHARS].strip("_")
    return name or "pause"


def normalize_uuid(uuid: Any) -> str:
    """NVML style GPU id: torch reports "abcd-..." without NVML's "GPU-" prefix; "GPU-..." and
    MIG ids ("MIG-...") are kept as they are."""
    uuid = str(uuid or "").strip()
    if not uuid or uuid.startswith(("GPU-", "MIG-")):
        return uuid
    return "GPU-" + uuid


# -- records, trainer -> sidecar ----------------------------------------------------------------
def _record(t: str, **fields: Any) -> dict:
    return {"t": t, **{k: v for k, v in fields.items() if v is not None}}


def config(settings: dict, hello: dict, trainer_pid: int, workdir: Optional[str] = None) -> dict:
    """``workdir``: the trainer's temporary directory (window traces), removed by the sidecar
    once it has finished with them."""
    return _record(CONFIG, settings=settings, hello=hello, trainer_pid=trainer_pid, workdir=workdir)


def identity(rank: int, world_size: int) -> dict:
    """The rank and world size torch.distributed reports once initialised (they win over the
    launcher's environment): the sidecar reconnects under them."""
    return _record(IDENTITY, rank=rank, world_size=world_size)


def gpu(index: int, uuid: str, name: str, total_memory_bytes: int) -> dict:
    return _record(GPU, index=index, uuid=normalize_uuid(uuid), name=name,
                   total_memory_bytes=total_memory_bytes)


def step(step: int, end_time_s: float, duration_s: float, clock: str, dataloader_wait_s: float,
         samples: Optional[int] = None, tokens: Optional[int] = None,
         profiled: bool = False, phase: Optional[str] = None) -> dict:
    """``profiled``: the step ran inside the agent's own profiler window or capture (or paid
    for its export), so its time is not the job's own. ``phase``: a phase the user or an
    integration marked during the step (:func:`phase_name` form)."""
    return _record(STEP, step=step, end_time_s=end_time_s, duration_s=duration_s, clock=clock,
                   dataloader_wait_s=dataloader_wait_s, samples=samples, tokens=tokens,
                   profiled=profiled or None, phase=phase or None)


def phase_times(step: int, end_time_s: float, clock: str, times: list, host: list, points: int) -> dict:
    """A sampled step's five phase times (data, forward, backward, sync, optimizer) on its clock,
    and the host's seconds between the same points; ``points``: the bitmask of points seen."""
    return _record(PHASE_TIMES, step=step, end_time_s=end_time_s, clock=clock,
                   data_s=times[0], forward_s=times[1], backward_s=times[2], sync_s=times[3],
                   optimizer_s=times[4], host_data_s=host[0], host_forward_s=host[1],
                   host_backward_s=host[2], host_sync_s=host[3], host_optimizer_s=host[4],
                   points=points)


def alloc(time_s: float, device: int, device_total_bytes: int, stats: dict) -> dict:
    """``stats`` is ``torch.cuda.memory_stats(device)``; the keys of :data:`ALLOC_STATS` are
    taken from it (0 when absent)."""
    return _record(ALLOC, time_s=time_s, device=device, device_total_bytes=device_total_bytes,
                   **{field: int(stats.get(key, 0)) for field, key in ALLOC_STATS.items()})


def event(time_s: float, kind: str, message: str) -> dict:
    return _record(EVENT, time_s=time_s, kind=kind, message=message)


def stats(records_dropped: int, hook_errors: int, windows: int, window_skips: dict,
          overhead_ratio: float, window_warmup_s: float = 0.0,
          window_aftereffect_ratio: float = 0.0) -> dict:
    return _record(STATS, records_dropped=records_dropped, hook_errors=hook_errors,
                   windows=windows, window_skips=dict(window_skips),
                   overhead_ratio=overhead_ratio, window_warmup_s=window_warmup_s,
                   window_aftereffect_ratio=window_aftereffect_ratio)


def window(window_id: int, path: str, first_step: int, last_step: int, start_time_s: float,
           activities: str, overhead_s: float, export_s: float, discard: bool,
           graph_breaks: Optional[int] = None, recompiles: Optional[int] = None) -> dict:
    return _record(WINDOW, window_id=window_id, path=path, first_step=first_step,
                   last_step=last_step, start_time_s=start_time_s, activities=activities,
                   overhead_s=overhead_s, export_s=export_s, discard=discard,
                   graph_breaks=graph_breaks, recompiles=recompiles)


def trace(request_id: str, path: str, first_step: int, last_step: int, error: str = "") -> dict:
    return _record(TRACE, request_id=request_id, path=path, first_step=first_step,
                   last_step=last_step, error=error)


def bye() -> dict:
    return _record(BYE)


# -- records, sidecar -> trainer ----------------------------------------------------------------
def window_result(window_id: int, gpu_event_count: int) -> dict:
    return _record(WINDOW_RESULT, window_id=window_id, gpu_event_count=gpu_event_count)


def capture(request_id: str, steps: int) -> dict:
    return _record(CAPTURE, request_id=request_id, steps=steps)


def window_now(reason: str) -> dict:
    return _record(WINDOW_NOW, reason=reason)
