"""The local stack end to end: a real collector fed by a real CPU training job, scraped by the
Debian Prometheus every second, alerting to the Debian Alertmanager; every dashboard query is
evaluated through Prometheus's HTTP API."""

from __future__ import annotations

import json
import shutil
import time
import urllib.parse
import urllib.request

import pytest

from _procs import run_trainers, trainer_env
from dashboard_check import FED_BY, annotations, check_panels, panels, query_range, substitute

pytestmark = pytest.mark.skipif(
    not (shutil.which("prometheus") and shutil.which("prometheus-alertmanager")),
    reason="needs the Debian prometheus and prometheus-alertmanager packages")


def _get(url: str):
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


MODES = ("summary", "full", "off")


@pytest.fixture(scope="module")
def stacks(tmp_path_factory):
    """One stack per ``--metrics-per-rank`` mode, each fed by its own CPU training job, the three
    side by side (their checks read data, not timings): ``{mode: (stack, start time)}``."""
    from stepwatch.collector.tools.stack import LocalStack
    tmp = tmp_path_factory.mktemp("stacks")
    started = {}
    try:
        for mode in MODES:
            s = LocalStack(str(tmp / mode / "stack"), scrape_interval="1s",
                           collector_args=["--metrics-per-rank", mode]).start()
            started[mode] = s
        start = time.time()
        run_trainers(*(_feed(started[mode], tmp / mode) for mode in MODES), timeout=120)
        time.sleep(3)  # a few more scrapes after the last step
        yield {mode: (s, start) for mode, s in started.items()}
    finally:
        for s in started.values():
            s.stop()


def _feed(stack, tmp_path) -> tuple:
    """The paneljob's environment and arguments for ``stack`` (run_trainers' job)."""
    # Profiler windows every 32 steps (CPU activities), so the window panels have data: the first
    # window is discarded (warm-up), the ones at steps 64 and 96 feed the window gauges.
    env = trainer_env(tmp_path, stack.collector_grpc, "paneljob", STEPWATCH_WINDOWS="scheduled", STEPWATCH_WINDOW_EVERY_STEPS=32,
                      STEPWATCH_OVERHEAD_BUDGET=0.5)
    # An evaluation after every 40th step, marked with agent.pause("eval"): the "Marked phases"
    # annotation query must find them.
    return (env, "--steps", "120", "--workers", "1", "--step-sleep-s", "0.05", "--eval-every", "40",
            "--eval-s", "0.3")


def test_panels_have_feed_tags():
    found = panels()
    assert len(found) >= 25
    untagged = [(d, t) for d, t, feeds, _, _ in found if feeds is None]
    assert not untagged, f"panels without [feeds: ...] in their description: {untagged}"
    assert {f for _, _, f, _, _ in found} == {"any", "cuda", "events"}
    # Every mode has panels: per-job ones for off, summary ones, and full-only detail.
    assert {level for _, _, _, level, _ in found} == {"", "summary", "full"}


@pytest.mark.parametrize("mode", MODES)
def test_stack_scrapes_collector_and_every_cpu_panel_has_data(stacks, mode):
    stack, start = stacks[mode]
    prom = stack.prometheus_url
    (rank,) = _get(f"http://{stack.collector_http}/api/jobs/paneljob/windows")["ranks"]  # every mode
    assert len(rank["windows"]) >= 2, rank  # the windows at steps 64 and 96
    target = _get(f"{prom}/api/v1/targets")["data"]["activeTargets"][0]
    assert target["health"] == "up", target
    ams = _get(f"{prom}/api/v1/alertmanagers")["data"]["activeAlertmanagers"]
    assert [am["url"] for am in ams] == [f"{stack.alertmanager_url}/api/v2/alerts"]
    groups = _get(f"{prom}/api/v1/rules")["data"]["groups"]
    assert len(groups) == 4 and all(r["health"] != "err" for g in groups for r in g["rules"])

    end = time.time()
    problems = check_panels(prom, "paneljob", start, end, required={"any"}, mode=mode)
    assert not problems, "\n".join(problems)
    # The check can see emptiness: on CPU every GPU-only panel the mode feeds comes back empty.
    gpu_only = check_panels(prom, "paneljob", start, end, required={"cuda"}, mode=mode)
    n_cuda = sum(len(exprs) for _, _, feeds, level, exprs in panels()
                 if feeds == "cuda" and level in FED_BY[mode])
    assert len(gpu_only) == n_cuda and all(": no data: " in p for p in gpu_only), gpu_only
    (found,) = annotations()
    body = query_range(prom, substitute(found[2], "paneljob"), start, time.time())
    assert body["status"] == "success", body
    kinds = {r["metric"].get("kind") for r in body["data"]["result"]}
    assert kinds == {"eval"}, body["data"]["result"]
