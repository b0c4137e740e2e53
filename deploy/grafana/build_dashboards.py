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
"""

from __future__ import annotations

import json
import pathlib
import sys

OUT = pathlib.Path(__file__).resolve().parent / "dashboards"
DATASOURCE = {"type": "prometheus", "uid": "stepwatch-prometheus"}
R = 'training_job=~"$training_job", rank=~"$rank"'
J = 'training_job=~"$training_job"'
RI = "$__rate_interval"
STEP_MEAN = (f"rate(stepwatch_step_duration_seconds_sum{{{R}}}[{RI}]) "
             f"/ rate(stepwatch_step_duration_seconds_count{{{R}}}[{RI}])")


def panel(title, desc, feeds, targets, unit="short", kind="timeseries", **opts):
    """One panel; ``targets`` is a list of (expr, legend)."""
    assert feeds in ("any", "cuda", "events")
    p = {"type": kind, "title": title, "description": f"{desc} [feeds: {feeds}]", "datasource": DATASOURCE,
         "fieldConfig": {"defaults": {"unit": unit, **opts.pop("defaults", {})}, "overrides": []},
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
    out = [var("training_job", "label_values(stepwatch_steps_total, training_job)", False)]
    if rank:
        out.append(var("rank", 'label_values(stepwatch_steps_total{training_job=~"$training_job"}, rank)', True))
    return out


def dashboard(uid, title, panels, rank=True):
    for i, p in enumerate(panels):
        p["id"] = i + 1
        p["gridPos"] = {"x": 12 * (i % 2), "y": 8 * (i // 2), "w": 12, "h": 8}
    return {"uid": uid, "title": title, "tags": ["stepwatch"], "editable": True, "schemaVersion": 39,
            "time": {"from": "now-1h", "to": "now"}, "refresh": "30s", "timezone": "",
            "templating": {"list": variables(rank)}, "annotations": {"list": []},
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
        panel("Step time quantiles", "Step time quantiles over the selected ranks, from the histogram.", "any",
              [(f"histogram_quantile({q}, sum by (le) (rate(stepwatch_step_duration_seconds_bucket{{{R}}}[{RI}])))",
                f"p{int(q * 100)}") for q in (0.5, 0.9, 0.99)], "s"),
        panel("Rank skew", "Slowest rank's mean step time over the fastest's, and over the median "
              "(1 = balanced; a straggler shows above 1.2).", "any",
              [(f"max by (training_job) {per_rank} / min by (training_job) {per_rank}", "max / min"),
               (f"max by (training_job) {per_rank} / quantile by (training_job) (0.5, {per_rank})", "max / median")]),
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
    ])


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
        panel("Out-of-memory errors", "CUDA allocator OOMs, per interval.", "cuda",
              [(f"increase(stepwatch_allocator_ooms_total{{{R}}}[{RI}])", "rank {{rank}}")]),
        panel("Device memory (NVML)", "Device memory in use (all processes) and capacity.", "cuda",
              [(f"stepwatch_gpu_memory_used_bytes{{{R}}}", "used rank {{rank}}"),
               (f"stepwatch_gpu_memory_total_bytes{{{R}}}", "total rank {{rank}}")], "bytes"),
        panel("Trainer resident memory", "Resident host memory of each trainer process.", "any",
              [(f"stepwatch_process_resident_memory_bytes{{{R}}}", "rank {{rank}}")], "bytes"),
        panel("Host memory available", "Available memory of each rank's host.", "any",
              [(f"stepwatch_host_memory_available_bytes{{{R}}}", "{{node}} rank {{rank}}")], "bytes"),
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
    ], rank=False)


DASHBOARDS = {"job-overview.json": job_overview, "memory.json": memory, "gpu.json": gpu, "alerts.json": alerts}


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
