"""``stepwatch analyze TRACE [TRACE_B] [--format text|json]``: the sidecar's window analysis on
any torch.profiler / Kineto trace a user has; with two traces, what changed from the first to
the second, ranked by milliseconds per step as in an alert's diagnosis.

The numbers are those of the sidecar (:mod:`stepwatch.agent.analysis`): device time unions
over the profiled steps; step time is the span divided by the ``ProfilerStep`` count.
Holistic Trace Analysis reports the same idle and kernel-type figures but drops the last
step of a trace and rounds to microseconds, so its per-step figures can differ by a step's
worth. Exit status 2 for a file that cannot be read or is not a Chrome trace.
"""

from __future__ import annotations

import argparse
import json
import sys

from google.protobuf import json_format

from stepwatch.agent.analysis import TraceError, summarize


__all__ = ["add_parser"]


def add_parser(sub) -> None:
    p = sub.add_parser("analyze", help="summarize a profiler trace (or compare two)",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("traces", nargs="+", metavar="TRACE.json[.gz]", help="one trace, or two to compare")
    p.add_argument("--top-k", type=int, default=10, help="kernels and ops listed (default 10)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..why import compare_windows, fmt  # (with the command: the collector extra)

    if len(args.traces) > 2:
        print("stepwatch analyze: error: give one trace, or two to compare", file=sys.stderr)
        return 2
    try:
        summaries = [summarize(path, top_k=args.top_k) for path in args.traces]
    except (OSError, TraceError, ValueError) as exc:
        print(f"stepwatch analyze: error: {exc}", file=sys.stderr)
        return 2
    if args.format == "json":
        doc = {"summaries": [json_format.MessageToDict(s, preserving_proto_field_name=True) for s in summaries]}
        if len(summaries) == 2:
            doc["changes"] = _changes(*summaries)
        print(json.dumps(doc, indent=1))
        return 0
    for path, s in zip(args.traces, summaries):
        print(_text(path, s))
    if len(summaries) == 2:
        a, b = summaries
        delta = (b.breakdown.step_time_s - a.breakdown.step_time_s) * 1e3
        print(f"\nfrom {args.traces[0]} to {args.traces[1]}: step {delta:+.2f} ms; "
              + "; ".join(fmt(c) for c in compare_windows(a, b)[:3]))
    return 0


def _changes(a, b) -> dict:
    from ..why import compare_windows

    return {"step_time_ms": (b.breakdown.step_time_s - a.breakdown.step_time_s) * 1e3,
            "contributors": [{"name": n, "delta_ms_per_step": d, "detail": det}
                             for n, d, det in compare_windows(a, b)]}


def _text(path: str, s) -> str:
    b, ms = s.breakdown, (lambda v: f"{v * 1e3:.2f} ms")
    lines = [f"{path}", f"  step {ms(b.step_time_s)}: forward {ms(b.forward_s)}, backward {ms(b.backward_s)}, "
             f"optimizer {ms(b.optimizer_s)}, communication {ms(b.communication_s)}, other {ms(b.other_s)}"]
    if s.gpu_event_count:
        lines.append(f"  GPU busy {s.gpu_busy_ratio:.1%}, idle {s.gpu_idle_ratio:.1%}; compute {ms(s.compute_s)}, "
                     f"communication {ms(s.communication_s)}, memcpy {ms(s.memcpy_s)} over {ms(s.span_s)}; "
                     f"overlap {s.overlap_ratio:.1%}; {s.kernel_count} kernels, {s.short_kernel_ratio:.1%} < 10 us")
    else:
        lines.append(f"  no GPU events: CPU trace over {ms(s.span_s)}; operators by CPU self time")
    for title, items in (("top kernels", s.top_kernels), ("top ops", s.top_ops)):
        if items:
            lines.append(f"  {title}:")
            lines += [f"    {n.seconds * 1e3:9.3f} ms  {n.count:6d}x  {n.name[:100]}" for n in items]
    return "\n".join(lines)
