"""``stepwatch trace``: ask a collector (ControlService.Capture) for a trace of the next steps.

Prints one line per rank, ``rank R  host H  PATH  (N MiB)`` or ``rank R  host H  error: E``.
Exit status: 0 when every asked rank delivered a trace, 1 otherwise (including an unreachable
collector or a refused token), 2 on bad arguments (here or as judged by the collector).
"""

from __future__ import annotations

import argparse
import math
import os
import sys

__all__ = ["add_parser", "run"]

_GRACE_S = 10.0  # the collector answers before the RPC deadline; this covers the network


def add_parser(sub) -> None:
    p = sub.add_parser("trace", help="capture a full profiler trace on the ranks of a running job",
                       description="Ask the collector to have the job's ranks write a trace of the next "
                                   "steps, wait until they report where it is, and print the paths.")
    p.add_argument("--collector", metavar="HOST:PORT", default=os.environ.get("STEPWATCH_COLLECTOR"),
                   help="collector gRPC address [env STEPWATCH_COLLECTOR]")
    p.add_argument("--job", required=True, help="training job name (label training_job)")
    p.add_argument("--rank", dest="ranks", type=int, action="extend", nargs="+", metavar="R", default=[],
                   help="rank(s) to capture; repeatable; default: every connected rank")
    p.add_argument("--steps", type=int, default=5, help="steps to trace, 1..1000 (default 5)")
    p.add_argument("--timeout", type=float, default=120.0,
                   help="seconds to wait for the ranks' reports, > 0 (default 120)")
    p.add_argument("--token", default=os.environ.get("STEPWATCH_TOKEN", ""),
                   help="collector auth token (visible in ps; prefer the env var) [env STEPWATCH_TOKEN]")
    p.set_defaults(func=run)


def _problem(args: argparse.Namespace) -> str:
    if not args.collector:
        return "--collector (or STEPWATCH_COLLECTOR) is required"
    if ":" not in args.collector:
        return f"--collector must be HOST:PORT, got {args.collector!r}"
    if not args.job:
        return "--job must not be empty"
    if not 1 <= args.steps <= 1000:
        return f"--steps must be in 1..1000, got {args.steps}"
    if not (math.isfinite(args.timeout) and 0 < args.timeout <= 3600):
        return f"--timeout must be in (0, 3600] seconds, got {args.timeout}"
    if any(r < 0 for r in args.ranks):
        return "--rank must be >= 0"
    return ""


def line(rank_trace) -> str:
    """The output line of one ``RankTrace``."""
    head = f"rank {rank_trace.rank}  host {rank_trace.host or '?'}  "
    ref = rank_trace.trace
    if ref.error or not ref.path:
        return head + f"error: {ref.error or 'no path reported'}"
    return head + f"{ref.path}  ({ref.bytes / (1 << 20):.1f} MiB)"


def run(args: argparse.Namespace) -> int:
    """Call Capture and print the result; return the exit status (see the module docstring)."""
    problem = _problem(args)
    if problem:
        print(f"stepwatch trace: error: {problem}", file=sys.stderr)
        return 2
    import grpc  # only once we really call

    from stepwatch.proto.stepwatch.v1 import agent_pb2, agent_pb2_grpc

    request = agent_pb2.CaptureRequest(job=args.job, ranks=args.ranks, steps=args.steps, timeout_s=args.timeout)
    metadata = (("authorization", f"Bearer {args.token}"),) if args.token else None
    try:
        with grpc.insecure_channel(args.collector) as channel:
            reply = agent_pb2_grpc.ControlServiceStub(channel).Capture(
                request, timeout=args.timeout + _GRACE_S, metadata=metadata)
    except grpc.RpcError as exc:
        print(f"stepwatch trace: error: {exc.code().name}: {exc.details()}", file=sys.stderr)
        return 2 if exc.code() == grpc.StatusCode.INVALID_ARGUMENT else 1
    for rank_trace in reply.traces:
        print(line(rank_trace))
    ok = bool(reply.traces) and all(t.trace.path and not t.trace.error for t in reply.traces)
    return 0 if ok else 1
