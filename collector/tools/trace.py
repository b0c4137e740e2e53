"""``stepwatch trace``: ask a collector (ControlService.Capture) for a trace of the next steps.

Prints one line per rank, ``rank R  host H  PATH  (SIZE)  [collector: /api/traces/ID]`` or
``rank R  host H  error: E``. With ``--out DIR`` each uploaded trace is downloaded from the
collector (ControlService.DownloadTrace) into ``DIR/ID.json.gz`` (opens in Perfetto).
Exit status: 0 when every asked rank delivered a trace (and, with --out, it was saved), 1
otherwise (including an unreachable collector or a refused token), 2 on bad arguments (here or
as judged by the collector).
"""

from __future__ import annotations

import argparse
import math
import os
import sys

from stepwatch.core.placement import parse_collectors

__all__ = ["add_parser", "run"]

_GRACE_S = 10.0  # the collector answers before the RPC deadline; this covers the network


def add_parser(sub) -> None:
    p = sub.add_parser("trace", help="capture a full profiler trace on the ranks of a running job",
                       description="Ask the collector to have the job's ranks write a trace of the next "
                                   "steps, wait until they report where it is, and print the paths.")
    p.add_argument("--collector", metavar="HOST:PORT", default=os.environ.get("STEPWATCH_COLLECTOR"),
                   help="collector gRPC address, or the agents' list of replicas (the job's replica is "
                        "chosen as the agents choose it) [env STEPWATCH_COLLECTOR]")
    p.add_argument("--job", required=True, help="training job name (label training_job)")
    p.add_argument("--rank", dest="ranks", type=int, action="extend", nargs="+", metavar="R", default=[],
                   help="rank(s) to capture; repeatable; default: every connected rank")
    p.add_argument("--steps", type=int, default=5, help="steps to trace, 1..1000 (default 5)")
    p.add_argument("--timeout", type=float, default=120.0,
                   help="seconds to wait for the ranks' reports, > 0 (default 120)")
    p.add_argument("--out", metavar="DIR", default="",
                   help="download each rank's uploaded trace from the collector into DIR")
    p.add_argument("--token", default=os.environ.get("STEPWATCH_TOKEN", ""),
                   help="collector auth token (visible in ps; prefer the env var) [env STEPWATCH_TOKEN]")
    p.add_argument("--tls-ca", default=os.environ.get("STEPWATCH_TLS_CA", ""),
                   help="PEM CA of the collector's certificate: connect over TLS [env STEPWATCH_TLS_CA]")
    p.add_argument("--tls-cert", default=os.environ.get("STEPWATCH_TLS_CERT", ""),
                   help="PEM client certificate for mutual TLS [env STEPWATCH_TLS_CERT]")
    p.add_argument("--tls-key", default=os.environ.get("STEPWATCH_TLS_KEY", ""),
                   help="PEM key of --tls-cert [env STEPWATCH_TLS_KEY]")
    p.set_defaults(func=run)


def _problem(args: argparse.Namespace) -> str:
    if not args.collector:
        return "--collector (or STEPWATCH_COLLECTOR) is required"
    try:
        parse_collectors(args.collector)
    except ValueError as exc:
        return f"--collector: {exc}"
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
    where = f"  collector: /api/traces/{ref.trace_id}" if ref.trace_id else \
        (f"  ({ref.upload_error})" if ref.upload_error else "")
    return head + f"{ref.path}  ({_size(ref.bytes)}){where}"


def _size(n: int) -> str:
    """Bytes for a person: "20.3 KiB", not "0.0 MiB"."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def download(stub, trace_id: str, out_dir: str, timeout: float, metadata) -> str:
    """Save one uploaded trace as ``out_dir/trace_id.json.gz`` (atomically); returns the path."""
    if os.path.basename(trace_id) != trace_id or trace_id in ("", ".", ".."):
        raise ValueError(f"unusable trace id {trace_id!r}")
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, trace_id + ".json.gz")
    tmp = path + ".part"
    from stepwatch.proto.stepwatch.v1 import agent_pb2
    try:
        with open(tmp, "wb") as fh:
            for chunk in stub.DownloadTrace(agent_pb2.TraceId(trace_id=trace_id), timeout=timeout,
                                            metadata=metadata):
                fh.write(chunk.data)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def run(args: argparse.Namespace) -> int:
    """Call Capture and print the result; return the exit status (see the module docstring)."""
    problem = _problem(args)
    if problem:
        print(f"stepwatch trace: error: {problem}", file=sys.stderr)
        return 2
    import grpc  # only once we really call

    from stepwatch.core.placement import Placement
    from stepwatch.core.support import collector_channel
    from stepwatch.proto.stepwatch.v1 import agent_pb2, agent_pb2_grpc

    request = agent_pb2.CaptureRequest(job=args.job, ranks=args.ranks, steps=args.steps, timeout_s=args.timeout)
    metadata = (("authorization", f"Bearer {args.token}"),) if args.token else None
    saved_ok = True
    try:
        target = Placement(args.collector).choose(args.job)  # the replica that holds the job
        with collector_channel(target, ca=args.tls_ca, cert=args.tls_cert, key=args.tls_key) as channel:
            stub = agent_pb2_grpc.ControlServiceStub(channel)
            reply = stub.Capture(request, timeout=args.timeout + _GRACE_S, metadata=metadata)
            for rank_trace in reply.traces:
                print(line(rank_trace))
                if not args.out or not rank_trace.trace.path:
                    continue
                if not rank_trace.trace.trace_id:
                    print(f"rank {rank_trace.rank}  not saved: the trace was not uploaded"
                          f" ({rank_trace.trace.upload_error or 'uploads off'})", file=sys.stderr)
                    saved_ok = False
                    continue
                try:
                    path = download(stub, rank_trace.trace.trace_id, args.out, args.timeout + _GRACE_S, metadata)
                    print(f"rank {rank_trace.rank}  saved {path}")
                except (grpc.RpcError, OSError, ValueError) as exc:
                    detail = f"{exc.code().name}: {exc.details()}" if isinstance(exc, grpc.RpcError) else str(exc)
                    print(f"rank {rank_trace.rank}  not saved: {detail}", file=sys.stderr)
                    saved_ok = False
    except grpc.RpcError as exc:
        print(f"stepwatch trace: error: {exc.code().name}: {exc.details()}", file=sys.stderr)
        return 2 if exc.code() == grpc.StatusCode.INVALID_ARGUMENT else 1
    except ValueError as exc:  # an unreadable TLS file
        print(f"stepwatch trace: error: {exc}", file=sys.stderr)
        return 2
    ok = bool(reply.traces) and all(t.trace.path and not t.trace.error for t in reply.traces)
    return 0 if ok and saved_ok else 1
