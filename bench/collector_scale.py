"""Collector throughput and scrape cost at N simulated ranks, with batches recorded from a real
agent (tests/data/replay/gpu_straggler_h200.jsonl.gz: steps, NVML/GPM, host, allocator and
window summaries of a real H200 job) replayed as N ranks.

One collector process, or ``--replicas`` with the jobs placed as the agents place them
(pinned with ``--collector-cpus``), and ``--gen-procs`` generator processes (pinned to the
other CPUs), each holding its share of the ranks as gRPC streams, one TCP connection per
``--ranks-per-connection`` ranks (10). Every rank ticks every ``--period-s`` from a random first
tick and sends a Batch on each tick (on every few when the collector paces it, as a sidecar's
flusher does; ``--spread``), 20 steps made per tick; each batch has the GPU, host and allocator
samples of the time it spans at ``--sample-hz`` (1 Hz: the agent's NVML, psutil and
memory_stats intervals; at least one each; 0: one each, as runs before 2026-11-24's sixth
session sent), and every ``--window-every`` batches a window summary (one per rank per minute
at the defaults). The first half of ``--duration-s`` runs without scrapes, the second half
scrapes /metrics (back to back, or every ``--scrape-every-s``; gzip, as Prometheus asks).
``--poll-every-s`` polls the live page as a browser does (every
job's steps and windows too) over the whole measured time; ``/healthz`` is timed every 0.5 s from a process of its own.
Measured: ack latency p50/p99 without and during scrapes, batches sent/acked, stream errors,
scrape time and size, collector CPU (cores, and seconds per batch and per step, from the
half without scrapes; the scraping half's CPU apart), collector RSS.

    python bench/collector_scale.py --ranks 100 1000 --out bench/results/collector_scale.json
    python bench/collector_scale.py --ranks 10000 --replicas 3 --collector-cpus "0;1;2" --gen-cpus 4,5,...

Bounded: every run stops after ``--duration-s`` (+ start-up), whatever happens.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import multiprocessing as mp
import os
import platform
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
RECORDING = os.path.join(HERE, "..", "tests", "data", "replay", "gpu_straggler_h200.jsonl.gz")


def templates():
    """Recorded pieces of a real agent's batches (rank 0 of the recording)."""
    from google.protobuf import json_format

    from stepwatch.proto.stepwatch.v1 import agent_pb2

    steps, gpu, host, alloc, windows = [], [], [], [], []
    with gzip.open(RECORDING, "rt") as fh:
        for line in fh:
            ev = json.loads(line)
            if ev["kind"] != "batch" or ev["rank"] != 0:
                continue
            b = json_format.ParseDict(ev["batch"], agent_pb2.Batch())
            steps += [s for s in b.steps if not s.profiled]
            gpu += list(b.gpu_samples)
            host += list(b.host)
            alloc += list(b.allocator)
            windows += list(b.windows)
    return steps, gpu, host, alloc, windows


def _pacing():
    """The sidecar's pacing rules (agent/_sidecar/_pacing.py) from this tree, loaded by path: the
    generator sends as this code's sidecars do whatever code the collector under test runs (an
    older one on PYTHONPATH may have no such module)."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "agent", "_sidecar", "_pacing.py")
    spec = importlib.util.spec_from_file_location("_bench_pacing", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.paced_interval, mod.seal_due


def generator(index, ranks, args, ports, results, start_at, stop_at, scrape_from, measure_at):
    """One generator process: ``ranks`` (job, rank, replica index) streams; results into the queue."""
    if args.gen_cpus:
        cpus = [int(c) for c in args.gen_cpus.split(",")]
        os.sched_setaffinity(0, {cpus[index % len(cpus)]})
    import grpc

    from stepwatch.proto.stepwatch.v1 import agent_pb2

    paced_interval, seal_due = _pacing()
    steps, gpu, host, alloc, windows = templates()
    rng = random.Random(index)
    seen_errors: set = set()
    lat = {"warmup": [], "quiet": [], "scrape": []}
    counts = {"sent": 0, "acked": 0, "errors": 0, "connect_failures": 0, "steps": 0,
              "unacked_warmup": 0, "unacked_quiet": 0, "unacked_scrape": 0, "streams_never_acked": 0}

    def batch(seq, step0, now, with_window, n_steps, span_s):
        b = agent_pb2.Batch(seq=seq, sealed_time_s=now)
        for i in range(n_steps):
            s = b.steps.add()
            s.CopyFrom(steps[(step0 + i) % len(steps)])
            s.step, s.end_time_s = step0 + i + 1, now - (n_steps - i) * 0.01
        n = max(1, round(span_s * args.sample_hz))  # samples of each kind over the batch's span
        for src, dst in ((gpu, b.gpu_samples), (host, b.host), (alloc, b.allocator)):
            for k in range(n if src else 0):
                dst.add().CopyFrom(src[(seq * n + k) % len(src)])
                dst[-1].time_s = now - (n - 1 - k) / args.sample_hz if args.sample_hz else now
        if with_window and windows:
            w = b.windows.add()
            w.CopyFrom(windows[seq % len(windows)])
            w.first_step, w.last_step, w.start_time_s = step0 + 1, step0 + 3, now
        return agent_pb2.AgentMessage(batch=b).SerializeToString()

    async def rank_stream(channel, job, rank, rep):
        queue: asyncio.Queue = asyncio.Queue()
        hello = agent_pb2.AgentMessage(hello=agent_pb2.Hello(
            job=job, rank=rank, world_size=args.ranks_per_job, host=f"node-{rank // 8}", pid=rank,
            session_id=f"{job}-{rank}", agent_version="bench", gpu=agent_pb2.GpuIdentity(
                index=rank % 8, uuid=f"GPU-{job}-{rank}", name="NVIDIA H200")))
        await queue.put(hello.SerializeToString())
        sent_at = {}
        pace = [0.0]  # the collector's batch-interval ask, followed as the sidecar does

        async def requests():
            while True:
                item = await queue.get()
                if item is None:
                    return
                yield item

        call = channel.stream_stream("/stepwatch.v1.AgentService/Connect", request_serializer=None,
                                     response_deserializer=agent_pb2.Command.FromString)(requests())

        async def reader():
            async for cmd in call:
                if cmd.HasField("ack"):  # (a collector from before the ask has no such field)
                    pace[0] = getattr(cmd.ack, "batch_interval_ask_s", 0.0)
                if cmd.HasField("ack") and cmd.ack.seq in sent_at:
                    t0, kind = sent_at.pop(cmd.ack.seq)
                    lat[kind].append((rep, time.time() - t0, t0))
                    counts["acked"] += 1

        read = asyncio.ensure_future(reader())
        # As the sidecar's flusher: a tick every --period-s from a random first one (the ranks
        # start together; the sidecar picks its first tick at random), --steps-per-batch steps
        # made per tick, a batch sealed on the tick where the (paced) interval has passed; when
        # the collector's ask changes, the next seal falls on a random tick of the new interval
        # (--spread 1, as sidecars do now; 0: from the last seal, as they did before).
        tick_at = max(start_at, time.time()) + rng.uniform(0, args.period_s)
        seq, step0, made = 0, 0, 0
        last_seal, seal_every = -1e18, args.period_s
        try:
            while True:
                await asyncio.sleep(max(0.0, tick_at - time.time()))
                now = time.time()
                if now >= stop_at:
                    break
                tick_at += args.period_s
                made += args.steps_per_batch
                want = paced_interval(args.period_s, pace[0]) if args.follow_ask else args.period_s
                if want != seal_every:
                    seal_every = want
                    if args.spread:
                        last_seal = now - rng.uniform(0.0, want)
                if not seal_due(now, last_seal, seal_every, args.period_s):
                    continue
                span = now - last_seal if last_seal > 0 else args.period_s
                last_seal, n_steps, made = now, made, 0
                seq += 1
                sent_at[seq] = (now, "warmup" if now < measure_at else "scrape" if now >= scrape_from else "quiet")
                await queue.put(batch(seq, step0, now, seq % args.window_every == 0, n_steps, span))
                step0 += n_steps
                counts["sent"] += 1
                counts["steps"] += n_steps
                if measure_at <= now < scrape_from:
                    counts["steps_quiet"] = counts.get("steps_quiet", 0) + n_steps
            await asyncio.sleep(3.0)  # the last acks
        finally:
            await queue.put(None)
            try:
                await asyncio.wait_for(read, 5.0)
            except asyncio.TimeoutError:
                counts["errors"] += 1
                counts["error_timeout"] = counts.get("error_timeout", 0) + 1
            except grpc.aio.AioRpcError as exc:
                counts["errors"] += 1
                key = f"error_{exc.code().name.lower()}"
                counts[key] = counts.get(key, 0) + 1
                if key not in seen_errors:
                    seen_errors.add(key)
                    print(f"generator {index}: stream {job}/{rank}: {exc.code().name}: {exc.details()}",
                          file=sys.stderr, flush=True)
            except Exception:  # noqa: BLE001 - counted, reported
                counts["errors"] += 1
            for _, kind in sent_at.values():  # never acked while the stream lived
                counts["unacked_" + kind] += 1
            counts["streams_never_acked"] += len(sent_at) == seq

    async def main():
        # One TCP connection per --ranks-per-connection ranks (a local subchannel pool per
        # channel: channels to one address would otherwise share one connection). Real agents
        # have one each; all ranks of a generator on one connection left acks seconds late.
        per = max(1, len(ranks) // args.ranks_per_connection // len(ports))
        channels = [[grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.use_local_subchannel_pool", 1)])
                     for _ in range(per)] for port in ports]
        tasks = [rank_stream(channels[rep][i % per], job, rank, rep) for i, (job, rank, rep) in enumerate(ranks)]
        for r in await asyncio.gather(*tasks, return_exceptions=True):
            if isinstance(r, Exception):
                counts["errors"] += 1
        for chs in channels:
            for ch in chs:
                await ch.close()

    asyncio.run(main())
    results.put({"lat": lat, "counts": counts})


def pct(values, q):
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def start_collector(tmp, i, args):
    """Collector replica ``i``, pinned to the i-th entry of ``--collector-cpus`` (``;``-separated
    lists, one per replica); returns (process, grpc port, http address)."""
    ready = os.path.join(tmp, f"ready-{i}.json")
    cmd = [sys.executable, "-m", "stepwatch.collector.tools", "collector", "--grpc-listen", "127.0.0.1:0",
           "--http-listen", "127.0.0.1:0", "--ready-file", ready, "--max-jobs", "100000",
           "--log-level", "WARNING"] + (["--metrics-per-rank", args.per_rank] if args.per_rank != "unset" else []) \
        + (["--max-batches-per-s", str(args.max_batches_per_s)] if args.max_batches_per_s is not None else []) \
        + (["--metrics-render", args.render] if args.render != "unset" else []) \
        + (["--state-dir", os.path.join(tmp, f"state-{i}")] if args.state_dir else []) \
        + (["--detection", args.detection] if args.detection else [])
    if args.loop_stalls:  # every event-loop callback of 50 ms or more, recorded (bench/loop_stalls.py)
        out = args.loop_stalls if args.replicas == 1 else f"{args.loop_stalls}.{i}"
        cmd = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "loop_stalls.py"),
               "--out", out, "--"] + cmd[3:]
    if args.collector_cpus:
        cmd = ["taskset", "-c", args.collector_cpus.split(";")[i % len(args.collector_cpus.split(";"))]] + cmd
    log = os.path.join(tmp, f"collector-{i}.log")
    col = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(log, "w"))
    deadline = time.time() + 60
    while not os.path.exists(ready):
        assert time.time() < deadline and col.poll() is None, open(log).read()
        time.sleep(0.05)
    addr = json.load(open(ready))
    return col, int(addr["grpc"].rsplit(":", 1)[1]), addr["http"]


_SELF = ("stepwatch_collector_loop_lag_seconds", "stepwatch_collector_housekeeping_seconds")


def collector_self(text):
    """The collector's own delays from a /metrics body: {name: {"le": {bound: cumulative count},
    "sum": s, "count": n}} for its loop lag and housekeeping histograms (older collector: {})."""
    out = {}
    for line in text.splitlines():
        for name in _SELF:
            if line.startswith(name + "_bucket{le=\""):
                le = line[len(name) + 12:line.index('"', len(name) + 12)]
                out.setdefault(name, {"le": {}, "sum": 0.0, "count": 0})["le"][le] = float(line.rsplit(" ", 1)[1])
            elif line.startswith((name + "_sum ", name + "_count ")):
                out.setdefault(name, {"le": {}, "sum": 0.0, "count": 0})[line.split(" ")[0][len(name) + 1:]] = \
                    float(line.rsplit(" ", 1)[1])
    return out


def series(text, prefix):
    """{series name with labels: value} of a /metrics body's lines starting with ``prefix``."""
    out = {}
    for line in text.splitlines():
        if line.startswith(prefix):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def fork_times(text):
    """The render process's fork() durations from a /metrics body: count, mean ms, and how many
    took over each bound (seconds); None without a render process."""
    sums = {k.removeprefix("stepwatch_collector_scrape_fork_seconds"): v
            for k, v in series(text, "stepwatch_collector_scrape_fork_seconds").items()}
    n = sums.get("_count")
    if not n:
        return None
    over = {k[len('_bucket{le="'):-2]: n - v for k, v in sums.items()
            if k.startswith("_bucket") and "+Inf" not in k and n - v}
    return {"count": n, "mean_ms": 1e3 * sums.get("_sum", 0.0) / n, "over_s": over}


def self_delta(end, start):
    """What ``collector_self`` counted between two bodies: per histogram the count, mean, and how
    many samples were over each bound."""
    out = {}
    for name, h in end.items():
        h0 = start.get(name, {"le": {}, "sum": 0.0, "count": 0})
        n = h["count"] - h0["count"]
        over = {le: (n - (c - h0["le"].get(le, 0))) for le, c in h["le"].items() if le != "+Inf"}
        out[name.removeprefix("stepwatch_collector_")] = {
            "count": n, "mean_s": (h["sum"] - h0["sum"]) / n if n else None,
            "over": {le: k for le, k in over.items() if k}}
    return out


def collector_gc(http, texts=None):
    """The collector's garbage collections so far, by generation: {gen: [seconds, count, longest
    s]} from its /metrics (an older collector without them: {}); the body is appended to
    ``texts`` when given."""
    out = {}
    try:
        with urllib.request.urlopen(f"http://{http}/metrics", timeout=120) as resp:
            text = resp.read().decode()
    except OSError:
        return out
    if texts is not None:
        texts.append(text)
    for i, name in enumerate(("stepwatch_collector_gc_seconds_total", "stepwatch_collector_gc_collections_total",
                              "stepwatch_collector_gc_pause_max_seconds")):
        for line in text.splitlines():
            if line.startswith(name + '{generation="'):
                gen = line[len(name) + 13]
                out.setdefault(gen, [0.0, 0, 0.0])[i] = float(line.rsplit(" ", 1)[1])
    return out


def get(url, timeout=60.0):
    """(seconds, bytes) of one GET with gzip accepted, as a browser asks; (seconds, -1) on failure."""
    t0 = time.time()
    try:
        req = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            size = len(resp.read())
    except OSError:
        size = -1
    return time.time() - t0, size


def page_poller(http, jobs, every_s, start, stop, out, page_jobs=12):
    """The live page as a browser polls it, every ``every_s`` from ``start`` to ``stop``, plus a
    script reading the whole ``/api/jobs`` each time. Each refresh fetches what
    collector/api/_page.py's script fetches: ``/``, ``/api``, ``/api/jobs?summary=1``,
    ``/api/alerts``, then for the first ``page_jobs`` jobs (0: every job, as the page before the
    summary did, with the full ``/api/jobs`` as its list) ``/api/jobs?job=NAME``, ``/api/steps``
    (its 32 drawn ranks'; 0: every rank's)
    and ``/api/jobs/{job}/windows`` over six connections (a browser's per-host limit), then
    ``/api/traces``. ``out["refresh"]``: (start, seconds, bytes); ``out["api_jobs"]``: the full
    ``/api/jobs`` (start, seconds, bytes)."""
    from concurrent.futures import ThreadPoolExecutor

    base = f"http://{http}"
    with ThreadPoolExecutor(6) as pool:
        while time.time() < start:
            time.sleep(0.05)
        while time.time() < stop:
            t0 = time.time()
            total = sum(get(base + path)[1] for path in ("/", "/api"))
            took, size = get(base + "/api/jobs")  # a script's (or, with page_jobs 0, the page's) full list
            out["api_jobs"].append((t0, took, size))
            if page_jobs:
                total += get(base + "/api/jobs?summary=1")[1]
            else:
                total += size
            total += get(base + "/api/alerts")[1]
            drawn = jobs[:page_jobs] if page_jobs else jobs
            urls = ([f"{base}/api/jobs?job={j}" for j in drawn] if page_jobs else []) + \
                [f"{base}/api/steps?job={j}" + ("&ranks=32" if page_jobs else "") for j in drawn] + \
                [f"{base}/api/jobs/{j}/windows" for j in drawn]
            total += sum(size for _, size in pool.map(get, urls)) + get(base + "/api/traces")[1]
            out["refresh"].append((t0, time.time() - t0, total))
            time.sleep(max(0.0, t0 + every_s - time.time()))


def healthz_poller(http, every_s, start, stop, out):
    """``/healthz`` every ``every_s`` from ``start`` to ``stop``: (start, seconds) in ``out``."""
    while time.time() < start:
        time.sleep(0.05)
    while time.time() < stop:
        t0 = time.time()
        took, size = get(f"http://{http}/healthz", timeout=30.0)
        out.append((t0, took if size >= 0 else float("inf")))
        time.sleep(max(0.0, t0 + every_s - time.time()))


def healthz_process(http, every_s, start, stop, queue):
    """:func:`healthz_poller` in a process of its own: its timings are the collector's, not the
    GIL of this process, whose threads read 21 MB answers and scrapes meanwhile (in a thread of
    it, /healthz p99 read 188-215 ms at 10,000 ranks while the collector's own loop lag was
    over 0.1 s 8 times in the minute)."""
    out = []
    healthz_poller(http, every_s, start, stop, out)
    queue.put(out)


def run_once(n, args):
    """One run at ``n`` ranks over ``args.replicas`` collectors; jobs placed as the agents place
    them (rendezvous hashing, stepwatch.core.placement)."""
    tmp = tempfile.mkdtemp(prefix="stepwatch-scale-")
    cols = []
    try:
        import psutil
        for i in range(args.replicas):
            cols.append(start_collector(tmp, i, args))
        ports = [port for _, port, _ in cols]
        jobs = [f"job{j:04d}" for j in range((n + args.ranks_per_job - 1) // args.ranks_per_job)]
        owner = {job: 0 for job in jobs}
        if len(ports) > 1:
            from stepwatch.core.placement import Placement

            placement = Placement(",".join(f"127.0.0.1:{p}" for p in ports))
            replica = {f"127.0.0.1:{p}": i for i, p in enumerate(ports)}
            owner = {job: replica[placement.choose(job)] for job in jobs}
        ranks = [(f"job{r // args.ranks_per_job:04d}", r % args.ranks_per_job,
                  owner[f"job{r // args.ranks_per_job:04d}"]) for r in range(n)]
        col, _, http = cols[0]  # measured: replica 0 (CPU, RSS, scrapes); acks: every replica
        proc = psutil.Process(col.pid)
        start_at = time.time() + 5.0 + n / 2000.0  # time to open the streams
        measure_at = start_at + args.warmup_s  # the start-up burst (first batches unpaced) left out
        stop_at = measure_at + args.duration_s
        scrape_from = measure_at + args.duration_s / 2
        results = mp.Queue()
        procs = [mp.Process(target=generator, args=(i, ranks[i::args.gen_procs], args, ports, results, start_at,
                                                     stop_at, scrape_from, measure_at))
                 for i in range(args.gen_procs)]
        for p in procs:
            p.start()
        gc_before, bodies, first_scrape = None, [], []
        if args.warmup_s >= 8:  # the collector's collections so far, read (a scrape) before measuring
            while time.time() < measure_at - 6:
                time.sleep(0.1)
            gc_before = collector_gc(http, bodies)
        while time.time() < measure_at:
            time.sleep(0.1)
        cpu0 = proc.cpu_times()
        scrapes = []

        def scraper():
            while time.time() < scrape_from:
                time.sleep(0.1)
            while time.time() < stop_at:
                if scrapes and args.scrape_every_s:
                    time.sleep(max(0.0, scrapes[-1][4] + args.scrape_every_s - time.time()))
                t0 = time.time()
                headers = {"Accept-Encoding": "gzip"}
                if args.scrape_timeout_s:  # as Prometheus sends its scrape_timeout
                    headers["X-Prometheus-Scrape-Timeout-Seconds"] = f"{args.scrape_timeout_s:g}"
                req = urllib.request.Request(f"http://{http}/metrics", headers=headers)
                with urllib.request.urlopen(req, timeout=120) as resp:
                    body = resp.read()
                raw = gzip.decompress(body) if resp.headers.get("Content-Encoding") == "gzip" else body
                if not scrapes:
                    first_scrape.append(raw.decode())
                scrapes.append((time.time() - t0, len(raw), len(body), raw.count(b"\n") - raw.count(b"\n#"), t0))

        th = threading.Thread(target=scraper, daemon=True)
        th.start()
        polled = {"refresh": [], "api_jobs": []}
        health_q = mp.Queue()
        health_proc = mp.Process(target=healthz_process, args=(http, 0.5, measure_at, stop_at, health_q), daemon=True)
        health_proc.start()
        pollers = []
        if args.poll_every_s:
            mine = sorted({job for job, _, rep in ranks if rep == 0})
            pollers.append(threading.Thread(target=page_poller, daemon=True,
                                            args=(http, mine, args.poll_every_s, measure_at, stop_at, polled,
                                                  args.page_jobs)))
        for t in pollers:
            t.start()
        stuck = []
        if args.stuck_readers:  # HTTP clients that ask for the whole fleet's /api/jobs and never read
            while time.time() < measure_at:
                time.sleep(0.05)
            host, port = http.rsplit(":", 1)
            for _ in range(args.stuck_readers):
                sock = socket.socket()
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                sock.connect((host, int(port)))
                sock.sendall(b"GET /api/jobs HTTP/1.1\r\nHost: x\r\n\r\n")
                stuck.append(sock)
        rss_peak = 0
        while time.time() < scrape_from:
            time.sleep(0.2)
            rss_peak = max(rss_peak, proc.memory_info().rss)
        cpu_mid = proc.cpu_times()
        while time.time() < stop_at:
            time.sleep(0.2)
        cpu1 = proc.cpu_times()
        rss = proc.memory_info().rss
        for sock in stuck:
            sock.close()
        got = [results.get(timeout=60 + n / 100) for _ in procs]
        for p in procs:
            p.join(30)
        th.join(150)
        for t in pollers:
            t.join(150)
        health = health_q.get(timeout=150)
        health_proc.join(30)
        gc_stats = collector_gc(http, bodies)
    finally:
        for col, _, _ in cols:
            col.terminate()
        for col, _, _ in cols:
            try:
                col.wait(20)
            except subprocess.TimeoutExpired:
                col.kill()
    counts = {k: sum(g["counts"].get(k, 0) for g in got) for k in sorted({k for g in got for k in g["counts"]})}
    quiet = [x for g in got for _, x, _ in g["lat"]["quiet"]]
    warm = [x for g in got for _, x, _ in g["lat"]["warmup"]]
    during = [x for g in got for rep, x, _ in g["lat"]["scrape"] if rep == 0]  # the scraped replica's acks
    # Acks over 250 ms by the second their batch went out (seconds from measure_at): whether
    # the tail comes in bursts (a tick, a collection, a scrape) or spread out.
    late: dict = {}
    slowest: dict = {}  # second of the measured time -> its slowest ack, ms
    for g in got:
        for kind in ("quiet", "scrape"):
            for rep, x, t0 in g["lat"][kind]:
                if rep == 0:
                    sec = int(t0 - measure_at)
                    row = late.setdefault(sec, [0, 0, 0.0])
                    row[0] += 1
                    slowest[sec] = max(slowest.get(sec, 0.0), round(1e3 * x, 1))
                    if x > 0.25:
                        row[1] += 1
                        row[2] = max(row[2], 1e3 * x)
    full_seconds = [late.get(sec, [0])[0] for sec in range(int(args.duration_s) - 1)]
    self_mid = collector_self(first_scrape[0]) if first_scrape else {}
    self_start = collector_self(bodies[0]) if len(bodies) == 2 else {}
    self_end = collector_self(bodies[-1]) if bodies else {}
    cpu = (cpu_mid.user + cpu_mid.system) - (cpu0.user + cpu0.system)  # ingest only (no scrapes)
    cpu_scraping = (cpu1.user + cpu1.system) - (cpu_mid.user + cpu_mid.system)
    # Render processes (metrics_render process): their CPU, counted once reaped.
    cpu_children = (cpu1.children_user + cpu1.children_system) - (cpu_mid.children_user + cpu_mid.children_system)
    on_measured = sum(1 for _, _, rep in ranks if rep == 0)
    # Batches the measured replica took in the half without scrapes (its share of the ranks).
    measured_batches = max(1, len(quiet) * on_measured / max(1, n))
    return {"ranks": n, "replicas": args.replicas, "ranks_per_connection": args.ranks_per_connection, "ranks_on_measured_replica": on_measured,
            "ranks_per_replica": [sum(1 for _, _, rep in ranks if rep == i) for i in range(args.replicas)],
            "per_rank": args.per_rank, "render": args.render, "scrape_every_s": args.scrape_every_s,
            "period_s": args.period_s, "sample_hz": args.sample_hz, "spread": args.spread, "duration_s": args.duration_s, **counts,
            "warmup_s": args.warmup_s,
            "ack_ms_warmup": {"p50": 1e3 * (pct(warm, 0.5) or 0), "p99": 1e3 * (pct(warm, 0.99) or 0),
                              "max": 1e3 * max(warm, default=0)},
            "ack_ms_quiet": {"p50": 1e3 * (pct(quiet, 0.5) or 0), "p99": 1e3 * (pct(quiet, 0.99) or 0),
                             "max": 1e3 * max(quiet, default=0)},
            "ack_ms_scrape": {"p50": 1e3 * (pct(during, 0.5) or 0), "p99": 1e3 * (pct(during, 0.99) or 0),
                              "max": 1e3 * max(during, default=0)},
            "collector_cpu_cores": cpu / (args.duration_s / 2),
            "collector_cpu_cores_scraping": cpu_scraping / (args.duration_s / 2),
            "render_child_cpu_cores_scraping": cpu_children / (args.duration_s / 2),
            "collector_cpu_us_per_batch": 1e6 * cpu / measured_batches,
            "collector_cpu_us_per_step": 1e6 * cpu / max(1, counts.get("steps_quiet", 0) * on_measured / max(1, n)),
            "steps_per_batch_quiet": counts.get("steps_quiet", 0) / max(1, len(quiet)),
            "collector_rss_mb": rss / 1e6, "collector_gc": gc_stats,
            "stuck_readers": args.stuck_readers, "collector_rss_peak_first_half_mb": rss_peak / 1e6,
            "http_cut_off": max(series(bodies[-1], "stepwatch_collector_http_cut_off_total").values(), default=None)
            if bodies else None,
            "render_child_private_mb": max((v / 1e6 for body in bodies[-1:] for v in
                                            series(body, "stepwatch_collector_scrape_child_private_bytes ").values()),
                                           default=None),
            "render_fork": fork_times(bodies[-1]) if bodies else None,
            # seconds the thread renders slept giving way to ingest, all scrapes so far (the one
            # before measuring included; each ends inside 0.75 of its timeout: collector/state/_yield.py)
            "scrape_yield_s": next(iter(series(bodies[-1], "stepwatch_collector_scrape_yield_seconds_total ").values()),
                                   None) if bodies else None,
            "render_child_failures": sum(v for body in bodies[-1:] for v in
                                         series(body, "stepwatch_collector_scrape_child_failures_total{").values()),
            # measured window only (after the warm-up): {gen: [seconds, collections]}
            "collector_gc_measured": None if gc_before is None else {
                g: [v[0] - gc_before.get(g, [0.0, 0, 0.0])[0], v[1] - gc_before.get(g, [0.0, 0, 0.0])[1]]
                for g, v in gc_stats.items()},
            "collector_self_quiet": self_delta(self_mid, self_start) if self_start and self_mid else None,
            "collector_self_scraping": self_delta(self_end, self_mid) if self_mid and self_end else None,
            # at the end: ranks whose drift detector armed (and so saved its state, with --state-dir)
            # and the state store's failures
            "armed_ranks": sum(series(bodies[-1], "stepwatch_drift_armed_ranks{").values()) if bodies else None,
            "state_store_failures": sum(series(bodies[-1], "stepwatch_collector_state_store_failures_total").values())
            if bodies else None,
            # {second: [acks, acks over 250 ms, slowest ms]} for the seconds with a late ack
            "late_acks_by_second": {sec: row for sec, row in sorted(late.items()) if row[1]},
            # {second: its slowest ack, ms}: where in the measured time the slow acks lie
            "slowest_ack_ms_by_second": dict(sorted(slowest.items())),
            # batches the measured replica got per second (by send time): how even the load is
            "batches_per_second": {"min": min(full_seconds, default=0), "max": max(full_seconds, default=0),
                                   "mean": statistics.mean(full_seconds) if full_seconds else 0},
            "poll_every_s": args.poll_every_s, "page_jobs": args.page_jobs,
            "page_refreshes": len(polled["refresh"]),
            "page_refresh_s": {"p50": pct([r[1] for r in polled["refresh"]], 0.5),
                               "max": max((r[1] for r in polled["refresh"]), default=None)},
            "page_refresh_mb": max((r[2] for r in polled["refresh"]), default=0) / 1e6,
            "api_jobs_s": {"p50": pct([r[1] for r in polled["api_jobs"]], 0.5),
                           "max": max((r[1] for r in polled["api_jobs"]), default=None)},
            "api_jobs_mb": max((r[2] for r in polled["api_jobs"]), default=0) / 1e6,
            # /healthz every 0.5 s over the whole measured time (both halves)
            "healthz_ms": {"n": len(health), "p50": 1e3 * (pct([h[1] for h in health], 0.5) or 0),
                           "p99": 1e3 * (pct([h[1] for h in health], 0.99) or 0),
                           "max": 1e3 * max((h[1] for h in health), default=0)},
            "scrapes": len(scrapes),
            "scrape_timeout_s": args.scrape_timeout_s,
            "scrapes_over_timeout": sum(1 for s in scrapes if args.scrape_timeout_s and s[0] > args.scrape_timeout_s),
            "scrape_s": {"p50": pct([s[0] for s in scrapes], 0.5), "max": max((s[0] for s in scrapes), default=None)},
            "scrape_mb": max((s[1] for s in scrapes), default=0) / 1e6,
            "scrape_gzip_mb": max((s[2] for s in scrapes), default=0) / 1e6,
            "series": max((s[3] for s in scrapes), default=0)}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, nargs="+", default=[100, 1000])
    p.add_argument("--ranks-per-job", type=int, default=64)
    p.add_argument("--ranks-per-connection", type=int, default=10,
                   help="simulated ranks sharing one gRPC connection (real agents: 1 each)")
    p.add_argument("--period-s", type=float, default=5.0)
    p.add_argument("--steps-per-batch", type=int, default=20)
    p.add_argument("--sample-hz", type=float, default=1.0, help="GPU, host and allocator samples per second of "
                   "each kind in a batch (the agent's 1 Hz; 0: one of each per batch)")
    p.add_argument("--window-every", type=int, default=12, help="a window summary every this many batches")
    p.add_argument("--duration-s", type=float, default=40.0)
    p.add_argument("--warmup-s", type=float, default=0.0,
                   help="seconds of sending before the measured --duration-s (acks then reported apart: the "
                   "start-up burst, every rank's first batches before the collector's batch-interval ask)")
    p.add_argument("--follow-ask", type=int, default=1, help="1: ranks follow the collector's batch-interval "
                   "ask (as sidecars do); 0: they keep --period-s")
    p.add_argument("--spread", type=int, default=1, help="1: a paced rank's next batch on a random tick of the "
                   "new interval (as sidecars do); 0: counted from its last batch (as before), which keeps "
                   "ranks that sent together together")
    p.add_argument("--max-batches-per-s", type=float, default=None,
                   help="the collector's max_batches_per_s (default: its own default)")
    p.add_argument("--state-dir", type=int, default=0, help="1: the collectors keep their drift state in a "
                   "directory on disk (state_dir)")
    p.add_argument("--detection", default="", help="the collectors' --detection (YAML/JSON), e.g. a short "
                   "warm-up so every rank arms (and saves its state) inside the run")
    p.add_argument("--gen-procs", type=int, default=4)
    p.add_argument("--collector-cpus", default="", help="taskset CPU list for the collector, e.g. 0; with "
                   "--replicas, one list per replica separated by ';' (0;1;2)")
    p.add_argument("--replicas", type=int, default=1, help="collector replicas, jobs placed by rendezvous hashing "
                   "(CPU, RSS and scrapes are measured on replica 0)")
    p.add_argument("--render", default="unset", choices=("process", "thread", "unset"),
                   help="the collectors' metrics_render (unset: not passed: the default, or a collector older "
                        "than it)")
    p.add_argument("--per-rank", default="summary", choices=("full", "summary", "off", "unset"),
                   help="the collectors' metrics_per_rank (unset: not passed, for a collector older than it)")
    p.add_argument("--scrape-every-s", type=float, default=0.0,
                   help="scrape every this many seconds in the second half (0: back to back)")
    p.add_argument("--scrape-timeout-s", type=float, default=10.0,
                   help="the scrape timeout sent with each scrape, as Prometheus does (its default 10 s; 0: none); "
                   "scrapes longer than it are counted (scrapes_over_timeout)")
    p.add_argument("--gen-cpus", default="", help="CPUs for the generators, comma-separated")
    p.add_argument("--poll-every-s", type=float, default=0.0,
                   help="poll the live page as a browser does (/api/jobs, /api/alerts, every job's steps and "
                   "windows, traces) every this many seconds of the measured time (0: not polled); /healthz is "
                   "timed every 0.5 s either way")
    p.add_argument("--page-jobs", type=int, default=12, help="jobs the polled page draws (the page's MAX_JOBS); 0: "
                   "every job, as the page drew them before its summary (the full /api/jobs as its list)")
    p.add_argument("--loop-stalls", default="", help="record the collector's event-loop callbacks of 50 ms or more "
                   "into this JSON file (bench/loop_stalls.py)")
    p.add_argument("--stuck-readers", type=int, default=0, help="HTTP clients that ask for the whole fleet's "
                   "/api/jobs when the measured time begins and never read (held to its end)")
    p.add_argument("--out", default="")
    args = p.parse_args()
    rows = []
    for n in args.ranks:
        row = run_once(n, args)
        rows.append(row)
        print(json.dumps(row), flush=True)
    doc = {"command": " ".join(sys.argv), "python": platform.python_version(), "cpus": os.cpu_count(),
           "machine": platform.platform(), "rows": rows}
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(doc, fh, indent=1)
    print("\n| ranks (replicas) | batches sent/acked | errors | ack p50/p99 ms (no scrape) | ack p50/p99 ms (scraping) | "
          "collector CPU (ingest; while scraping) | CPU us/step | scrape s (p50/max) | MB (gzip) | series | RSS MB | "
          "full GCs (longest s) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        full = r["collector_gc"].get("2", [0.0, 0, 0.0])
        print(f"| {r['ranks']} ({r['replicas']}) | {r['sent']}/{r['acked']} | {r['errors']} | {r['ack_ms_quiet']['p50']:.1f} / "
              f"{r['ack_ms_quiet']['p99']:.1f} | {r['ack_ms_scrape']['p50']:.1f} / {r['ack_ms_scrape']['p99']:.1f} | "
              f"{r['collector_cpu_cores']:.2f} core ({r['collector_cpu_cores_scraping']:.2f} scraping"
              f"{', render process %.2f' % r['render_child_cpu_cores_scraping'] if r['render_child_cpu_cores_scraping'] else ''}) | "
              f"{r['collector_cpu_us_per_step']:.1f} | "
              f"{(r['scrape_s']['p50'] or 0):.2f} / {(r['scrape_s']['max'] or 0):.2f} | {r['scrape_mb']:.1f} "
              f"({r['scrape_gzip_mb']:.1f}) | {r['series']} | {r['collector_rss_mb']:.0f} | {full[1]:.0f} "
              f"({full[2]:.2f}) |")
    print("\n| ranks | page polled every s (jobs drawn) | refreshes | page refresh s (p50/max) | /api/jobs s (p50/max), MB | "
          "/healthz ms (p50/p99/max) |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['ranks']} | {r['poll_every_s'] or '-'} ({r['page_jobs'] or 'all'}) | {r['page_refreshes']} | "
              f"{(r['page_refresh_s']['p50'] or 0):.2f} / {(r['page_refresh_s']['max'] or 0):.2f} | "
              f"{(r['api_jobs_s']['p50'] or 0):.2f} / {(r['api_jobs_s']['max'] or 0):.2f}, {r['api_jobs_mb']:.2f} | "
              f"{r['healthz_ms']['p50']:.1f} / {r['healthz_ms']['p99']:.1f} / {r['healthz_ms']['max']:.1f} |")


if __name__ == "__main__":
    main()
