"""Writes the provisioned Grafana dashboards deploy/grafana/dashboards/*.json.

The JSON files are checked in (Grafana reads them as they are); edit this script and run
``python deploy/grafana/build_dashboards.py`` to change them. ``--check`` exits 1 when a
checked-in file differs from what the script makes (tests/deploy runs it).

Every panel's description ends with a tag saying which jobs can feed it, read by the panel
tests in tests/deploy and tests/gpu:
  [feeds: any]     any job, CPU-only included: must return data in the CPU test;
  [feeds: cuda]    a job on a CUDA device: must return data in the GPU test;
  [feeds: events]  only after something happened (alerts, OOMs, an hour of history):
                   checked for validity only.
Before it, panels that read per-rank series say which collector ``metrics_per_rank`` mode they
need, worked out from the metric names in their queries (``SUMMARY`` lists what summary keeps):
  [per-rank: summary]  summary or full;   [per-rank: full]  full only.
Panels without it read per-job aggregates and work in every mode; the others show a "no data"
text naming the mode they need.
"""

from __future__ import annotations

import json
import pathlib
import re
import sys

from stepwatch.collector.export._metrics import SUMMARY

OUT = pathlib.Path(__file__).resolve().parent / "dashboards"
DATASOURCE = {"type": "prometheus", "uid": "stepwatch-prometheus"}
R = 'training_job=~"$training_job", rank=~"$rank"'
J = 'training_job=~"$training_job"'
RI = "$__rate_interval"
STEP_MEAN = (f"rate(stepwatch_step_duration_seconds_sum{{{R}}}[{RI}]) "
             f"/ rate(stepwatch_step_duration_seconds_count{{{R}}}[{RI}])")


_METRIC = re.compile(r"\bstepwatch_[a-z0-9_]+")
# Families that are not per rank: per-job aggregates, the collector's own, alerts, pauses
# (summed per job unless per-rank series are full) and the drift detectors' per-job readings.
_NOT_PER_RANK = ("stepwatch_job_", "stepwatch_collector_", "stepwatch_alert_active", "stepwatch_pauses",
                 "stepwatch_drift_")
NO_VALUE = {"full": "Per-rank detail: needs the collector's metrics_per_rank: full (see Per-rank series on the "
                    "job overview); /api/jobs/<job>/windows has it in every mode",
            "summary": "No per-rank series: the collector's metrics_per_rank is off (see Per-rank series on the "
                       "job overview); the per-job panels still work"}


def per_rank_level(exprs) -> str:
    """"full", "summary" (per-rank series summary mode keeps) or "" (per-job only)."""
    level = ""
    for name in _METRIC.findall(" ".join(exprs)):
        if name.startswith(_NOT_PER_RANK):
            continue
        family = re.sub(r"_(total|bucket|sum|count|info)$", "", name)
        if family not in SUMMARY:
            return "full"
        level = "summary"
    return level


def panel(title, desc, feeds, targets, unit="short", kind="timeseries", **opts):
    """One panel; ``targets`` is a list of (expr, legend)."""
    assert feeds in ("any", "cuda", "events")
    level = per_rank_level([e for e, _ in targets])
    tag = f" [per-rank: {level}]" if level else ""
    no_value = {"noValue": NO_VALUE[level]} if level else {}
    p = {"type": kind, "title": title, "description": f"{desc}{tag} [feeds: {feeds}]", "datasource": DATASOURCE,
         "fieldConfig": {"defaults": {"unit": unit, **no_value, **opts.pop("defaults", {})},
                         "overrides": opts.pop("overrides", [])},
         "options": opts.pop("options", {}),
         "targets": [{"refId": chr(65 + i), "datasource": DATASOURCE, "expr": e, "legendFormat": lg,
                      **({"format": "table", "instant": True} if kind == "table" else {})}
                     for i, (e, lg) in enumerate(targets)]}
    p.update(opts)
    return p


def variables(rank=True):
    def var(name, query, multi):
        return {"name": name, "label": name, "type": "query", "datasource": DATASOURCE,
                "query": {"query": query, "refId": name}, "definition": query, "refresh": 2,
                "includeAll": True, "allValue": ".*", "multi": multi, "sort": 3 if name == "rank" else 1,
                "current": {}, "options": []}
    out = [var("training_job", "label_values(stepwatch_job_ranks, training_job)", False)]
    if rank:
        out.append(var("rank", 'label_values(stepwatch_steps_total{training_job=~"$training_job"}, rank)', True))
    return out


# Phases the user or an integration marked (agent.pause("eval"), agent.mark("checkpoint"), the
# HF / Lightning callbacks) as annotations on the step-time graphs; the detector's own guesses
# (stall, pause) and profiler steps are left out.
MARKED_PHASES = {
    "name": "Marked phases", "datasource": DATASOURCE, "enable": True, "iconColor": "purple",
    "expr": f'sum by (training_job, kind) (increase(stepwatch_pauses_total{{{J}, kind!~"stall|pause|profiler"}}[1m])) > 0',
    "step": "60s", "titleFormat": "{{kind}}", "textFormat": "{{training_job}}: {{kind}} marked",
    "useValueForTime": False}


def dashboard(uid, title, panels, rank=True, annotations=()):
    for i, p in enumerate(panels):
        p["id"] = i + 1
        p["gridPos"] = {"x": 12 * (i % 2), "y": 8 * (i // 2), "w": 12, "h": 8}
    return {"uid": uid, "title": title, "tags": ["stepwatch"], "editable": True, "schemaVersion": 39,
            "time": {"from": "now-1h", "to": "now"}, "refresh": "30s", "timezone": "",
            "templating": {"list": variables(rank)}, "annotations": {"list": list(annotations)},
            "links": [{"type": "dashboards", "tags": ["stepwatch"], "title": "stepwatch", "asDropdown": True}],
            "panels": panels}


def job_overview():
    per_rank = f"({STEP_MEAN})"
    return dashboard("stepwatch-job", "stepwatch / job overview", [
        panel("Steps per second", "Optimizer steps per second, per rank.", "any",
              [(f"rate(stepwatch_steps_total{{{R}}}[{RI}])", "rank {{rank}}")], "ops"),
        panel("Throughput", "Samples and tokens per second summed over the job's ranks "
              "(needs samples_per_step / tokens_per_step in attach()).", "any",
              [(f"sum by (training_job) (rate(stepwatch_samples_total{{{J}}}[{RI}]))", "samples/s"),
               (f"sum by (training_job) (rate(stepwatch_tokens_total{{{J}}}[{RI}]))", "tokens/s")]),
        panel("Step time per rank", "Mean step time of each rank (CUDA events on GPU, host clock on CPU).",
              "any", [(per_rank, "rank {{rank}}")], "s"),
        panel("Step time quantiles", "Step time quantiles over all the job's ranks, from the job's "
              "histogram.", "any",
              [(f"histogram_quantile({q}, sum by (le) (rate(stepwatch_job_step_duration_seconds_bucket{{{J}}}[{RI}])))",
                f"p{int(q * 100)}") for q in (0.5, 0.9, 0.99)], "s"),
        panel("Step time across ranks", "Mean step time over each rank's last 100 steps: the fastest, "
              "median and slowest rank, and which rank is slowest.", "any",
              [(f"stepwatch_job_rank_step_seconds{{{J}}}", "{{stat}}")], "s"),
        panel("Rank skew", "Slowest rank's mean step time (last 100 steps) over the fastest's, and over "
              "the median (1 = balanced; a straggler shows above 1.2).", "any",
              [(f'stepwatch_job_rank_step_seconds{{{J}, stat="max"}} / ignoring (stat) '
                f'stepwatch_job_rank_step_seconds{{{J}, stat="min"}}', "max / min"),
               (f'stepwatch_job_rank_step_seconds{{{J}, stat="max"}} / ignoring (stat) '
                f'stepwatch_job_rank_step_seconds{{{J}, stat="median"}}', "max / median")]),
        panel("Per-rank series", "The collector's metrics_per_rank mode: full (every series), summary "
              "(a bounded set per rank: panels tagged [per-rank: full] stay empty) or off (per-job "
              "aggregates only).", "any",
              [("max by (mode) (stepwatch_collector_per_rank_series)", "{{mode}}")], kind="stat",
              options={"textMode": "name", "reduceOptions": {"calcs": ["lastNotNull"]}}),
        panel("Data loader wait", "Share of step time spent waiting for the DataLoader, last 100 steps.", "any",
              [(f"stepwatch_dataloader_wait_ratio{{{R}}}", "rank {{rank}}")], "percentunit"),
        panel("Time since last step", "Seconds since each rank finished a step (a stall grows this).", "any",
              [(f"time() - stepwatch_last_step_timestamp_seconds{{{R}}}", "rank {{rank}}")], "s"),
        panel("Trainer CPU", "CPU seconds per second used by each trainer process.", "any",
              [(f"rate(stepwatch_process_cpu_seconds_total{{{R}}}[{RI}])", "rank {{rank}}")], "short"),
        panel("Agents connected", "1 while the rank's agent streams to the collector.", "any",
              [(f"stepwatch_agent_connected{{{R}}}", "rank {{rank}}")], "short",
              defaults={"min": 0, "max": 1}),
        panel("Step time drift", "Job step time over its lagged 2-hour median (Prometheus recording rule; "
              "needs an hour of history). Alerts at 1.05 and 1.10.", "events",
              [(f"training_job:stepwatch_step_duration_seconds:drift_ratio{{{J}}}", "{{training_job}}")]),
    ], annotations=[MARKED_PHASES])


def memory():
    return dashboard("stepwatch-memory", "stepwatch / memory", [
        panel("Allocated and reserved", "CUDA caching allocator: bytes held by tensors and bytes reserved "
              "from the device, per rank.", "cuda",
              [(f"stepwatch_allocator_allocated_bytes{{{R}}}", "allocated rank {{rank}}"),
               (f"stepwatch_allocator_reserved_bytes{{{R}}}", "reserved rank {{rank}}")], "bytes"),
        panel("Reserved share of the device", "Allocator reserved bytes over device capacity.", "cuda",
              [(f"stepwatch_allocator_reserved_bytes{{{R}}} / stepwatch_allocator_device_total_bytes{{{R}}}",
                "rank {{rank}}")], "percentunit", defaults={"min": 0, "max": 1}),
        panel("Fragmentation", "Inactive split bytes over reserved bytes, and 1 - allocated/reserved "
              "(cached but unused).", "cuda",
              [(f"stepwatch_allocator_inactive_split_bytes{{{R}}} / (stepwatch_allocator_reserved_bytes{{{R}}} > 0)",
                "inactive split rank {{rank}}"),
               (f"1 - stepwatch_allocator_allocated_bytes{{{R}}} / (stepwatch_allocator_reserved_bytes{{{R}}} > 0)",
                "unused cache rank {{rank}}")], "percentunit"),
        panel("Allocation retries", "cudaMalloc retries after a cache flush, per interval (any is a warning).",
              "cuda", [(f"increase(stepwatch_allocator_alloc_retries_total{{{R}}}[{RI}])", "rank {{rank}}")]),
        panel("Allocator churn", "cudaMalloc and cudaFree calls of the caching allocator per second "
              "(a steady job makes almost none; empty_cache or memory pressure makes many).", "cuda",
              [(f"rate(stepwatch_allocator_device_allocs_total{{{R}}}[{RI}]) + "
                f"rate(stepwatch_allocator_device_frees_total{{{R}}}[{RI}])", "rank {{rank}}")], "ops"),
        panel("Out-of-memory errors", "CUDA allocator OOMs, per interval.", "cuda",
              [(f"increase(stepwatch_allocator_ooms_total{{{R}}}[{RI}])", "rank {{rank}}")]),
        panel("Device memory (NVML)", "Device memory in use (all processes) and capacity.", "cuda",
              [(f"stepwatch_gpu_memory_used_bytes{{{R}}}", "used rank {{rank}}"),
               (f"stepwatch_gpu_memory_total_bytes{{{R}}}", "total rank {{rank}}")], "bytes"),
        panel("Trainer resident memory", "Resident host memory of each trainer process.", "any",
              [(f"stepwatch_process_resident_memory_bytes{{{R}}}", "rank {{rank}}")], "bytes"),
        panel("Host memory available", "Available memory of each rank's host.", "any",
              [(f"stepwatch_host_memory_available_bytes{{{R}}}", "rank {{rank}}")], "bytes"),
    ])


def gpu():
    lg = "rank {{rank}} GPU {{gpu}}"
    return dashboard("stepwatch-gpu", "stepwatch / GPU", [
        panel("Utilization", "Share of time a kernel ran (NVML), per rank's GPU.", "cuda",
              [(f"stepwatch_gpu_utilization_ratio{{{R}}}", lg)], "percentunit", defaults={"min": 0, "max": 1}),
        panel("Memory bandwidth utilization", "Share of time device memory was read or written (NVML).", "cuda",
              [(f"stepwatch_gpu_memory_utilization_ratio{{{R}}}", lg)], "percentunit", defaults={"min": 0, "max": 1}),
        panel("Power", "Power draw, and energy per second from the energy counter.", "cuda",
              [(f"stepwatch_gpu_power_watts{{{R}}}", "draw " + lg),
               (f"rate(stepwatch_gpu_energy_joules_total{{{R}}}[{RI}])", "energy/s " + lg)], "watt"),
        panel("Temperature", "GPU temperature.", "cuda",
              [(f"stepwatch_gpu_temperature_celsius{{{R}}}", lg)], "celsius"),
        panel("Clocks", "SM and memory clocks.", "cuda",
              [(f"stepwatch_gpu_sm_clock_hertz{{{R}}}", "SM " + lg),
               (f"stepwatch_gpu_memory_clock_hertz{{{R}}}", "memory " + lg)], "hertz"),
        panel("Clock event reasons", "NVML clock event (throttle) reasons, 1 while active; "
              "thermal, power brake and hardware slowdown hurt.", "cuda",
              [(f"max by (reason) (stepwatch_gpu_clock_event_active{{{R}}})", "{{reason}}")],
              defaults={"min": 0, "max": 1}),
        panel("ECC errors", "Volatile ECC errors per interval (GPUs with ECC enabled).", "events",
              [(f"increase(stepwatch_gpu_ecc_errors_total{{{R}}}[{RI}])", "{{type}} " + lg)]),
        panel("SM activity and occupancy (GPM)", "Share of time SMs had a warp active, and resident "
              "warps vs the maximum, averaged over SMs (NVML GPM, Hopper and newer). Utilization above "
              "counts any kernel running; SM activity shows how much of the GPU it used.", "cuda",
              [(f"stepwatch_gpu_sm_active_ratio{{{R}}}", "SM active " + lg),
               (f"stepwatch_gpu_sm_occupancy_ratio{{{R}}}", "occupancy " + lg)], "percentunit",
              defaults={"min": 0, "max": 1}),
        panel("Tensor and FP pipes (GPM)", "Share of time the tensor pipes (any; HMMA = fp16/bf16/tf32) "
              "and the non-tensor FP32 pipe were active (NVML GPM).", "cuda",
              [(f"stepwatch_gpu_tensor_active_ratio{{{R}}}", "tensor " + lg),
               (f"stepwatch_gpu_tensor_hmma_active_ratio{{{R}}}", "tensor HMMA " + lg),
               (f"stepwatch_gpu_fp32_active_ratio{{{R}}}", "FP32 " + lg)], "percentunit",
              defaults={"min": 0, "max": 1}),
        panel("DRAM bandwidth (GPM)", "DRAM bandwidth used vs the device's peak (NVML GPM).", "cuda",
              [(f"stepwatch_gpu_dram_active_ratio{{{R}}}", lg)], "percentunit", defaults={"min": 0, "max": 1}),
        panel("PCIe and NVLink traffic (GPM)", "Bytes per second over PCIe and NVLink, sent and received "
              "(NVML GPM; NVLink only on GPUs that have it).", "cuda",
              [(f"stepwatch_gpu_pcie_tx_bytes_per_second{{{R}}}", "PCIe tx " + lg),
               (f"stepwatch_gpu_pcie_rx_bytes_per_second{{{R}}}", "PCIe rx " + lg),
               (f"stepwatch_gpu_nvlink_tx_bytes_per_second{{{R}}}", "NVLink tx " + lg),
               (f"stepwatch_gpu_nvlink_rx_bytes_per_second{{{R}}}", "NVLink rx " + lg)], "Bps"),
    ])


def alerts():
    table_opts = {"options": {"showHeader": True}}
    return dashboard("stepwatch-alerts", "stepwatch / alerts", [
        panel("Collector alerts firing", "Alerts raised by the collector's detectors (drift, straggler, "
              "fragmentation, stall).", "events",
              [(f"stepwatch_alert_active{{{J}}} == 1", "")], kind="table", **table_opts),
        panel("Prometheus alerts", "Alerts of deploy/prometheus/rules, firing and pending.", "events",
              [(f'ALERTS{{{J}, alertname=~"Stepwatch.*"}}', "")], kind="table", **table_opts),
        panel("Active alerts by severity", "Collector and Prometheus alerts over time.", "events",
              [(f"count by (severity) (stepwatch_alert_active{{{J}}} == 1)", "collector {{severity}}"),
               (f'count by (severity) (ALERTS{{{J}, alertstate="firing", alertname=~"Stepwatch.*"}})',
                "prometheus {{severity}}")]),
        panel("Agent events", "Events reported by agents (OOM, hook failure, profiler skipped...), per interval.",
              "events", [(f"increase(stepwatch_agent_events_total{{{J}}}[{RI}]) > 0", "rank {{rank}} {{kind}}")]),
        panel("Agents connected", "1 while the rank's agent streams to the collector.", "any",
              [(f"stepwatch_agent_connected{{{J}}}", "rank {{rank}}")], defaults={"min": 0, "max": 1}),
        panel("Collectors up", "Prometheus scrape health of each collector.", "any",
              [('up{job="stepwatch-collector"}', "{{instance}}")], defaults={"min": 0, "max": 1}),
        panel("Drift detector reach", "The smallest sustained step-time shift the collector's drift "
              "detector raises at each severity at the job's own noise (median over its armed ranks). "
              "A slowdown under it is not raised; on a host whose speed wanders it stands far above "
              "the severity's ratio (+3%, +5%, +10%). Empty until a rank is armed.", "events",
              [(f"stepwatch_drift_reach_ratio{{{J}}}", "{{training_job}} {{severity}}")], "percentunit"),
        panel("Drift detector armed", "Ranks of each job whose drift detector judges (past warm-up and "
              "settling, about 3 minutes).", "any",
              [(f"stepwatch_drift_armed_ranks{{{J}}}", "{{training_job}}")]),
    ], rank=False)


def on_gpu(metric):
    """``metric`` of the selected ranks, only where the last window recorded kernels: a CPU-only
    job (activities "cpu") exports the device gauges as 0, which would read as an idle GPU."""
    return f"{metric}{{{R}}} and (stepwatch_window_kernels{{{R}}} > 0)"


def windows():
    lg = "rank {{rank}}"
    unit_pct = {"min": 0, "max": 1}
    table = {"kind": "table", "options": {"showHeader": True,
                                          "sortBy": [{"displayName": "seconds", "desc": True}]},
             "transformations": [{"id": "organize", "options": {
                 "excludeByName": {k: True for k in ("Time", "__name__", "job", "instance", "local_rank",
                                                     "node", "training_job")},
                 "indexByName": {"rank": 0, "position": 1, "kernel": 2, "op": 2, "Value": 3},
                 "renameByName": {"Value": "seconds"}}}]}
    budget = {"thresholds": {"mode": "absolute", "steps": [{"color": "green", "value": None},
                                                           {"color": "red", "value": 0.005}]},
              "custom": {"thresholdsStyle": {"mode": "dashed"}}, "min": 0}
    step_line = [{"matcher": {"id": "byName", "options": "step"},
                  "properties": [{"id": "custom.stacking", "value": {"mode": "none", "group": "step"}},
                                 {"id": "custom.fillOpacity", "value": 0},
                                 {"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}}]}]
    return dashboard("stepwatch-windows", "stepwatch / profiler windows", [
        panel("GPU busy and idle", "Share of the last profiler window's device timeline with GPU work "
              "running, and idle (both 0 on a CPU-only job: no device timeline).", "any",
              [(f"stepwatch_window_gpu_busy_ratio{{{R}}}", "busy " + lg),
               (f"stepwatch_window_gpu_idle_ratio{{{R}}}", "idle " + lg)], "percentunit", defaults=unit_pct),
        panel("Compute, communication and memcpy", "Device seconds of the last window in compute kernels, "
              "communication (NCCL) kernels and memcpy/memset (overlapping work counts in each).", "cuda",
              [(on_gpu("stepwatch_window_compute_seconds"), "compute " + lg),
               (on_gpu("stepwatch_window_communication_seconds"), "communication " + lg),
               (on_gpu("stepwatch_window_memcpy_seconds"), "memcpy " + lg)], "s"),
        panel("Communication overlapped by compute", "Share of the last window's communication time "
              "that ran under compute kernels (0 when there was no communication).", "cuda",
              [(on_gpu("stepwatch_window_overlap_ratio"), lg)], "percentunit", defaults=unit_pct),
        panel("Kernels per window", "Kernels launched in the last profiler window.", "cuda",
              [(f"stepwatch_window_kernels{{{R}}} > 0", lg)]),
        panel("Short kernel share", "Share of the last window's kernels shorter than 10 us "
              "(high: launch-bound, consider CUDA graphs or fusion).", "cuda",
              [(on_gpu("stepwatch_window_short_kernel_ratio"), lg)], "percentunit", defaults=unit_pct),
        panel("Step breakdown", "One average step of the last window by phase, stacked, mean over the "
              "selected ranks (pick one rank to see it alone); the dashed line is the whole step. "
              "Device time on GPU, host time on a CPU-only job.", "any",
              [(f'avg by (phase) (stepwatch_window_step_phase_seconds{{{R}, phase!="step"}})', "{{phase}}"),
               (f'avg by (phase) (stepwatch_window_step_phase_seconds{{{R}, phase="step"}})', "{{phase}}")],
              "s", defaults={"custom": {"stacking": {"mode": "normal", "group": "A"}, "fillOpacity": 40}},
              overrides=step_line),
        panel("Compute per step by rank", "Compute seconds per step in each rank's last window (device "
              "kernels; host operators on a CPU-only job) and communication per step (total). Under "
              "synchronous data parallelism every rank has the same step time: the rank computing "
              "longest and waiting least holds the others up.", "any",
              [(f"stepwatch_rank_compute_seconds_per_step{{{R}}}", "compute " + lg),
               (f'stepwatch_rank_communication_seconds_per_step{{{R}, kind="total"}}', "communication " + lg)],
              "s"),
        panel("Rank skew", "Slowest rank's compute per step / the median rank's, in the job's latest "
              "windows (1 = balanced); the straggler alert names the rank (multi-rank jobs).", "events",
              [(f"stepwatch_job_rank_skew_ratio{{{J}}}", "{{training_job}}")], defaults={"min": 1}),
        panel("Top kernels", "Kernels with the most device seconds in each rank's last window "
              "(position 1 = most).", "cuda",
              [(f"stepwatch_window_top_kernel_seconds{{{R}}}", "")], "s", **table),
        panel("Top operators", "Operators with the most self time in each rank's last window: device "
              "time on GPU, CPU self time on a CPU-only job.", "any",
              [(f"stepwatch_window_top_op_seconds{{{R}}}", "")], "s", **table),
        panel("Agent overhead vs budget", "Share of wall time since attach spent on profiler windows "
              "and export; the dashed line is the default budget 0.005 (STEPWATCH_OVERHEAD_BUDGET), "
              "which the agent keeps by spacing windows.", "any",
              [(f"stepwatch_agent_overhead_ratio{{{R}}}", lg)], "percentunit", defaults=budget),
        panel("Window cost", "Extra trainer seconds the last window cost (slower steps and export), "
              "and sidecar seconds spent analysing its trace.", "any",
              [(f"stepwatch_window_overhead_seconds{{{R}}}", "trainer " + lg),
               (f"stepwatch_window_analysis_seconds{{{R}}}", "analysis " + lg)], "s"),
        panel("Windows taken", "Profiler windows taken since attach (warm-up window included).", "any",
              [(f"stepwatch_windows_total{{{R}}}", lg)]),
        panel("Window skips by reason", "Windows the agent did not take since attach, by reason "
              "(user_profiler, no_gpu_events_backoff, over_budget...), summed over the selected ranks.",
              "events", [(f"sum by (reason) (stepwatch_window_skips_total{{{R}}})", "{{reason}}")]),
    ])


DASHBOARDS = {"job-overview.json": job_overview, "memory.json": memory, "gpu.json": gpu, "alerts.json": alerts,
              "windows.json": windows}


def render() -> dict[str, str]:
    return {name: json.dumps(make(), indent=2) + "\n" for name, make in DASHBOARDS.items()}


def main(argv) -> int:
    stale = []
    for name, text in render().items():
        path = OUT / name
        if "--check" in argv:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            OUT.mkdir(exist_ok=True)
            path.write_text(text)
    if stale:
        print(f"stale dashboards: {', '.join(stale)}; run python {__file__}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
