"""The ``/api/jobs/<job>/windows`` and ``/api/traces`` JSON documents (any thread).

Protobuf messages become plain dicts keyed by the proto field names. Unlike protobuf's own
JSON mapping, 64-bit integers stay numbers, and every field is present (absent optional
fields are left out), so a client reads ``kernel_count`` the same way whatever its value.
NaN and infinities become null.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from google.protobuf.descriptor import FieldDescriptor

from ._json_routes import _finite
from ..state import CollectorState
from ..state import TraceRequest
from ..export import aligned_compute

__all__ = ["message_dict", "windows_document", "windows_json", "traces_document", "traces_json"]


def _repeated(f: FieldDescriptor) -> bool:
    if hasattr(f, "is_repeated"):  # protobuf >= 6; ``label`` is gone in 7
        return f.is_repeated
    return f.label == FieldDescriptor.LABEL_REPEATED


def message_dict(msg: Any) -> dict[str, Any]:
    """All fields of ``msg`` by proto name, recursing into messages; unset optional fields left out."""
    out: dict[str, Any] = {}
    for f in msg.DESCRIPTOR.fields:
        value = getattr(msg, f.name)
        is_msg = f.type == FieldDescriptor.TYPE_MESSAGE
        if _repeated(f):
            if is_msg and f.message_type.GetOptions().map_entry:
                out[f.name] = {k: (message_dict(v) if hasattr(v, "DESCRIPTOR") else v) for k, v in value.items()}
            else:
                out[f.name] = [message_dict(v) if is_msg else v for v in value]
        elif f.has_presence and not msg.HasField(f.name):
            continue
        else:
            out[f.name] = message_dict(value) if is_msg else value
    return out


def windows_document(state: CollectorState, job: str) -> Optional[dict[str, Any]]:
    """``{"job", "ranks": [{"rank", "host", "connected", "windows": [WindowSummary...]}],
    "aligned": {...} or null}``, ranks sorted, windows oldest first (at most ``windows_kept``);
    ``aligned`` compares the ranks' compute and communication per step at the same steps
    (:func:`._windows_metrics.aligned_compute`). None when no rank of ``job`` is known."""
    states = state.snapshot(job=job)
    ranks = [{"rank": st.rank, "host": st.hello.host, "connected": st.connected,
              "windows": [message_dict(w) for w in st.windows]} for st in states]
    if not ranks:
        return None
    return {"job": job, "ranks": ranks, "aligned": aligned_compute([(st.rank, st.windows) for st in states])}


def windows_json(state: CollectorState, job: str) -> tuple[int, bytes]:
    """``(200, document)`` or ``(404, {"error": ...})`` as JSON bytes."""
    doc = windows_document(state, job)
    if doc is None:
        return 404, json.dumps({"error": f"unknown job {job!r}"}).encode()
    return 200, json.dumps(_finite(doc), allow_nan=False).encode()


def _request(req: TraceRequest) -> dict[str, Any]:
    return {"request_id": req.request_id, "job": req.job, "steps": req.steps, "time_s": req.time_s,
            "ranks_asked": list(req.ranks_asked),
            "traces": [{"rank": r.rank, "host": r.host, **message_dict(r.ref)}
                       for _, r in sorted(req.refs.items())]}


def traces_document(state: CollectorState, held: Optional[list] = None) -> dict[str, Any]:
    """``{"requests": [{"request_id", "job", "steps", "time_s", "ranks_asked", "traces": [...]}],
    "held": [{"trace_id", "bytes", "time_s", "url"}]}``, newest first; each trace is a TraceRef
    plus ``rank``, ``host`` and, once uploaded, ``url`` (``/api/traces/<trace_id>``)."""
    urls = {h["trace_id"] for h in held or ()}
    requests = [_request(r) for r in state.traces.snapshot()]
    for req in requests:
        for t in req["traces"]:
            if t.get("trace_id") in urls:
                t["url"] = f"/api/traces/{t['trace_id']}"
    return {"requests": requests, "held": [dict(h, url=f"/api/traces/{h['trace_id']}") for h in held or ()]}


def traces_json(state: CollectorState, held: Optional[list] = None) -> bytes:
    return json.dumps(_finite(traces_document(state, held)), allow_nan=False).encode()
