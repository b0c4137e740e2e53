"""Window summaries and trace references: state bounds, Prometheus export, JSON API."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.parse

import pytest
from prometheus_client.parser import text_string_to_metric_families

from collector_testlib import apply, batch, hello
from stepwatch.collector.state._state import CollectorState
from stepwatch.collector.state._trace_requests import TraceBook
from stepwatch.collector.export._windows_metrics import MAX_SKIP_REASONS, skip_reasons
from stepwatch.proto.stepwatch.v1 import agent_pb2, agent_pb2_grpc

T0 = 1_700_000_000.0
RANK = {"training_job": "j", "rank": "0", "local_rank": "0", "node": "node-a"}
LONG = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>" * 3


def window(window_id: int, busy: float = 0.8, **kw) -> agent_pb2.WindowSummary:
    fields = dict(
        window_id=window_id, first_step=100 * window_id, last_step=100 * window_id + 2, start_time_s=T0,
        activities="cuda", span_s=0.105, gpu_busy_ratio=busy, gpu_idle_ratio=1 - busy, compute_s=0.07,
        communication_s=0.02, memcpy_s=0.001, overlap_ratio=0.6, kernel_count=12345, short_kernel_ratio=0.25,
        top_kernels=[agent_pb2.NamedTime(name=f"kernel_{i}", seconds=0.001 * i, count=i) for i in range(1, 9)]
        + [agent_pb2.NamedTime(name=LONG, seconds=0.5, count=1)],
        top_ops=[agent_pb2.NamedTime(name="aten::mm", seconds=0.03, count=40),
                 agent_pb2.NamedTime(name="aten::add_", seconds=0.002, count=90)],
        breakdown=agent_pb2.StepBreakdown(step_time_s=0.035, forward_s=0.01, backward_s=0.02, optimizer_s=0.002,
                                          communication_s=0.001, other_s=0.002),
        overhead_s=0.04, export_s=0.025, trace_bytes=5 << 20, analysis_s=0.09, gpu_event_count=20000)
    fields.update(kw)
    return agent_pb2.WindowSummary(**fields)


def stats(**kw) -> agent_pb2.AgentStats:
    return agent_pb2.AgentStats(windows=7, window_skips={"user_profiler": 2, "budget": 3}, overhead_ratio=0.004, **kw)


def send(running, messages, job: str = "j") -> None:
    with running.channel() as chan:
        list(agent_pb2_grpc.AgentServiceStub(chan).Connect(iter(messages), timeout=10))


def samples(text: str, name: str) -> dict:
    """``{frozenset(labels minus RANK): value}`` of every sample called ``name``."""
    return {frozenset((k, v) for k, v in s.labels.items() if k not in RANK): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples if s.name == name}


# --- state -----------------------------------------------------------------------------------

def test_state_keeps_last_windows_and_latest_stats():
    state = CollectorState(60.0, windows_kept=3)
    key = state.connect(hello().hello, T0)
    for seq in range(1, 6):
        apply(state, key, "s1", agent_pb2.Batch(seq=seq, windows=[window(seq)], stats=stats()), T0)
    apply(state, key, "s1", agent_pb2.Batch(seq=5, windows=[window(99)]), T0)  # duplicate: ignored
    (rank,) = state.snapshot()
    assert [w.window_id for w in rank.windows] == [3, 4, 5]
    assert rank.stats.windows == 7 and dict(rank.stats.window_skips) == {"user_profiler": 2, "budget": 3}
    rank.windows.clear()  # a snapshot is a copy
    assert len(state.snapshot()[0].windows) == 3


def test_trace_book_is_bounded_and_keeps_last_report_per_rank():
    book = TraceBook(max_requests=3)
    for i in range(5):
        book.open(f"r{i}", "j", 5, [1, 0, 1], T0 + i)
    book.add("j", 0, "h0", [agent_pb2.TraceRef(request_id="r4", path="/a"), agent_pb2.TraceRef(path="/no-id")])
    book.add("j", 0, "h0", [agent_pb2.TraceRef(request_id="r4", path="/b")])
    snap = book.snapshot()
    assert [r.request_id for r in snap] == ["r4", "r3", "r2"]
    assert snap[0].ranks_asked == (0, 1) and snap[0].refs[0].ref.path == "/b"
    book.add("j", 2, "h2", [agent_pb2.TraceRef(request_id="elsewhere", path="/c")])  # not asked by us: kept apart
    assert [r.request_id for r in book.snapshot()] == ["elsewhere", "r4", "r3", "r2"]
    book.open("r5", "j", 5, [0], T0 + 9)  # the collector's own requests evict its own oldest
    assert [r.request_id for r in book.snapshot()] == ["r5", "elsewhere", "r4", "r3"]


def test_no_agent_can_evict_or_fill_another_jobs_request():
    """Agents share one token: an agent of job "evil" reporting 100 junk request ids, and
    references to job "j"'s own pending request, neither evicts that request nor lands in it;
    its junk stays within its own bound, and j's rank still reports into its request."""
    book = TraceBook(max_requests=5, max_unissued_per_job=3)
    book.open("pending", "j", 5, [0], T0)
    junk = [agent_pb2.TraceRef(request_id=f"junk{i}", path="/x") for i in range(100)]
    book.add("evil", 0, "h", junk + [agent_pb2.TraceRef(request_id="pending", path="/forged")])
    book.add("j", 7, "h", [agent_pb2.TraceRef(request_id="pending", path="/not-asked")])  # rank 7 was not asked
    assert book.issued("pending", "j", 0) and book.refs("pending") == {}
    held = [r.request_id for r in book.snapshot()]
    assert held == ["junk99", "junk98", "junk97", "pending"], held
    assert book.ignored == 2
    book.add("j", 0, "h0", [agent_pb2.TraceRef(request_id="pending", path="/real")])
    assert book.refs("pending")[0].ref.path == "/real"
    for k in range(5):  # five more jobs' junk: at most max_requests unissued in all, issued kept
        book.add(f"evil{k}", 0, "h", junk[:3])
    assert book.issued("pending", "j", 0) and len(book.snapshot()) == 1 + 5


def test_skip_reasons_are_bounded():
    many = {f"reason_{i:02d}": 1 for i in range(40)}
    out = dict(skip_reasons(many))
    assert len(out) == MAX_SKIP_REASONS and out["other"] == 40 - (MAX_SKIP_REASONS - 1)
    assert skip_reasons({"": 1, "x" * 100: 2}) == [("unknown", 1), ("x" * 64, 2)]


# --- metrics ---------------------------------------------------------------------------------

def test_window_metrics_from_latest_window(start_collector):
    collector = start_collector(metrics_per_rank="full")
    send(collector, [hello(), batch(1, windows=[window(1, busy=0.5)]),
                     batch(2, windows=[window(2, busy=0.75)], stats=stats())])
    text = collector.get("/metrics")[2].decode()
    one = lambda name: samples(text, name)[frozenset()]  # noqa: E731
    assert one("stepwatch_window_gpu_busy_ratio") == 0.75 and one("stepwatch_window_gpu_idle_ratio") == 0.25
    assert one("stepwatch_window_compute_seconds") == 0.07 and one("stepwatch_window_communication_seconds") == 0.02
    assert one("stepwatch_window_memcpy_seconds") == 0.001 and one("stepwatch_window_overlap_ratio") == 0.6
    assert one("stepwatch_window_kernels") == 12345 and one("stepwatch_window_short_kernel_ratio") == 0.25
    assert one("stepwatch_window_overhead_seconds") == 0.04 and one("stepwatch_window_analysis_seconds") == 0.09
    assert one("stepwatch_agent_overhead_ratio") == 0.004 and one("stepwatch_windows_total") == 7
    assert samples(text, "stepwatch_window_skips_total") == {
        frozenset({("reason", "budget")}): 3, frozenset({("reason", "user_profiler")}): 2}
    phases = samples(text, "stepwatch_window_step_phase_seconds")
    assert {dict(k)["phase"]: v for k, v in phases.items()} == {
        "step": 0.035, "forward": 0.01, "backward": 0.02, "optimizer": 0.002, "communication": 0.001, "other": 0.002}
    kernels = {int(dict(k)["position"]): (dict(k)["kernel"], v)
               for k, v in samples(text, "stepwatch_window_top_kernel_seconds").items()}
    assert kernels == {1: (LONG[:120], 0.5), 2: ("kernel_8", 0.008), 3: ("kernel_7", 0.007),
                       4: ("kernel_6", 0.006), 5: ("kernel_5", 0.005)}  # top 5 of 9 only
    ops = samples(text, "stepwatch_window_top_op_seconds")
    assert ops == {frozenset({("op", "aten::mm"), ("position", "1")}): 0.03,
                   frozenset({("op", "aten::add_"), ("position", "2")}): 0.002}
    for fam in text_string_to_metric_families(text):
        if fam.name.startswith(("stepwatch_window", "stepwatch_agent_overhead")):
            assert fam.documentation and all(set(RANK) <= set(s.labels) for s in fam.samples), fam.name


def test_no_window_no_window_metrics_and_top_k_setting(start_collector):
    running = start_collector(metrics_top_k=2, metrics_per_rank="full")
    send(running, [hello(rank=1), batch(1)])
    assert "stepwatch_window_" not in running.get("/metrics")[2].decode()
    send(running, [hello(rank=1), batch(2, windows=[window(1, breakdown=None)])])
    text = running.get("/metrics")[2].decode()
    assert len(samples(text, "stepwatch_window_top_kernel_seconds")) == 2
    assert "stepwatch_window_step_phase_seconds" not in text  # no breakdown reported
    assert "stepwatch_agent_overhead_ratio" not in text  # no AgentStats yet
    assert "stepwatch_window_graph_breaks" not in text  # job without torch.compile


def test_compile_health_metrics(start_collector):
    collector = start_collector(metrics_per_rank="full")
    send(collector, [hello(), batch(1, windows=[window(1, graph_breaks=3, recompiles=1)])])
    text = collector.get("/metrics")[2].decode()
    assert samples(text, "stepwatch_window_graph_breaks") == {frozenset(): 3.0}
    assert samples(text, "stepwatch_window_recompiles") == {frozenset(): 1.0}


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_promtool_check_metrics_with_windows(start_collector):
    collector = start_collector(metrics_per_rank="full")
    send(collector, [hello(), batch(1, windows=[window(1, top_ops=[agent_pb2.NamedTime(name='say "hi"\\n', seconds=1)])],
                                    stats=stats())])
    body = collector.get("/metrics")[2]
    assert b"stepwatch_window_top_op_seconds" in body
    proc = subprocess.run(["promtool", "check", "metrics"], input=body.replace(b"modelName=", b"model_name="),
                          capture_output=True, timeout=30)
    assert proc.stdout + proc.stderr == b"" and proc.returncode == 0


# --- JSON API --------------------------------------------------------------------------------

def test_windows_api_url_decoded_job_and_404(collector):
    job = "llama 70b/run#2"
    send(collector, [hello(job=job), batch(1, windows=[window(1), window(2, graph_breaks=3)])])
    status, ctype, body = collector.get(f"/api/jobs/{urllib.parse.quote(job, safe='')}/windows")
    assert status == 200 and ctype == "application/json"
    doc = json.loads(body)
    (rank,) = doc["ranks"]
    assert doc["job"] == job and rank["rank"] == 0 and rank["host"] == "node-a" and rank["connected"] is False
    first, second = rank["windows"]
    assert first["window_id"] == 1 and first["kernel_count"] == 12345 and first["trace_bytes"] == 5 << 20
    assert "graph_breaks" not in first and second["graph_breaks"] == 3
    assert first["breakdown"]["forward_s"] == 0.01 and first["top_ops"][0] == {"name": "aten::mm", "seconds": 0.03,
                                                                               "count": 40}
    assert set(first) >= {f.name for f in agent_pb2.WindowSummary.DESCRIPTOR.fields} - {"graph_breaks", "recompiles"}
    status, ctype, body = collector.get("/api/jobs/nope/windows")
    assert status == 404 and ctype == "application/json" and json.loads(body) == {"error": "unknown job 'nope'"}
    assert "/api/jobs/{job}/windows" in json.loads(collector.get("/api")[2])["routes"]


def test_traces_api_lists_reported_refs(collector):
    ref = agent_pb2.TraceRef(request_id="abc", path="/traces/r0.json.gz", bytes=3 << 20, first_step=10, last_step=14)
    send(collector, [hello(), batch(1, traces=[ref])])
    status, _, body = collector.get("/api/traces")
    assert status == 200
    assert json.loads(body) == {"requests": [{
        "request_id": "abc", "job": "j", "steps": 0, "time_s": None, "ranks_asked": [],
        "traces": [{"rank": 0, "host": "node-a", "request_id": "abc", "path": "/traces/r0.json.gz",
                    "bytes": 3 << 20, "first_step": 10, "last_step": 14, "error": "", "trace_id": "",
                    "upload_error": ""}]}], "held": []}
