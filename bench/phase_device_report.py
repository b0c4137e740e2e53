"""Tables from the phase-time device runs (bench/run_real_device.sh inject1 / inject2 /
phase-ab), read from the unpacked real.tgz folder:

    python bench/phase_device_report.py DIR > bench/results/phase_times_<card>.md

(run from the repository root with the package importable: the recordings are also replayed)

Injected jobs: per job, whether its first alert's diagnosis names the cause first (EXPECTED);
then the cause, the rank it ran on, its size in ms, every alert with its
first firing time in seconds after the change (negative: raised before it), and its summary and
diagnosis. The phase-time A/B: per arm the median step time of the job's own clock (after the
first 20 s) and, for arms with the agent, the phase timer's host cost per sampled step and share
of wall time.
"""

from __future__ import annotations

import datetime
import glob
import json
import os
import re
import statistics
import sys

STEPS = "{name}.steps.json"
# what a right diagnosis names first, per injected cause (bench/real_job.py --inject): the start
# of its first contributor
EXPECTED = {"gemm_backward": ("backward",), "gemm_forward": ("forward",), "dataloader": ("data",),
            # (a busy training thread: host CPU, or the phase it ran in as host-bound: see _right)
            "host": ("host CPU", "host +"),
            "optimizer_loop": ("optimizer",), "sync": ("sync",), "d2h": ("sync",),
            "empty_cache": ("allocator churn",), "small_ops": ("forward", "data+forward"),
            "allreduce": ("sync",)}


# the phase a busy training thread ran in, grown by its own host time: "forward +5.2 ms/step
# (host-bound: its host time +5.8 ms)", a straggler's "forward +5.6 ms/step (22.1 vs 16.5 ms,
# host-bound: ..."
_HOST_PHASE = re.compile(r"^(data|forward|data\+forward) \+[0-9.]+ ms/step \((?:[^()]*, )?host-bound: its host time \+")


ONSET_S = 60.0  # an alert's onset this near the change (either side) makes it the cause's


def _onset(a: dict) -> float:
    """An alert's onset (Unix s): the first onset of its episode (``earlier``), else its own."""
    first = (a.get("earlier") or [{}])[0].get("onset_at") or a.get("starts_at") or a["fired_at"]
    return first if isinstance(first, float) else _ts(first)


def _right(cause: str, first: str) -> bool:
    """Whether the first contributor of a diagnosis names the injected cause."""
    return first.startswith(EXPECTED[cause]) or (cause == "host" and bool(_HOST_PHASE.match(first)))


def _steps(folder: str, name: str) -> list:
    out = []
    for path in sorted(glob.glob(os.path.join(folder, f"{name}.steps*.json"))):
        with open(path) as fh:
            out.append(json.load(fh))
    return out


def _ts(iso: str) -> float:
    return datetime.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def injected(folder: str) -> list[str]:
    lines = ["| job | cause | rank | ms | alert | rank | fired (s after the change) | summary | diagnosis |",
             "|---|---|---|---|---|---|---|---|---|"]
    for path in sorted(glob.glob(os.path.join(folder, "*.alerts.json"))):
        name = os.path.basename(path)[:-len(".alerts.json")]
        runs = _steps(folder, name)
        inj = next((r["injected"] for r in runs if r.get("injected")), None)
        if inj is None:
            continue
        ms = max((r["injected"].get("ms", 0.0) for r in runs if r.get("injected")), default=0.0)
        with open(path) as fh:
            alerts = json.load(fh).get("alerts", [])
        if not alerts:
            lines.append(f"| {name} | {inj['cause']} | {inj['rank']} | {ms:.1f} | none | | | | |")
        for a in alerts:
            fired = a.get("fired_at")
            after = f"{_ts(fired) - inj['time']:+.0f}" if fired else "pending"
            lines.append(f"| {name} | {inj['cause']} | {inj['rank']} | {ms:.1f} | {a['alertname']} ({a['severity']}) "
                         f"| {a['rank']} | {after} | {a['summary']} | {a.get('diagnosis') or ''} |")
    return lines


def _change(runs: list) -> str:
    """The job's own median step time, 1,000 steps before the change -> after it (rank 0)."""
    run = next((r for r in runs if r.get("injected")), None)
    if run is None:
        return ""
    k, steps = run["injected"]["step"], run["step_s"]
    before, after = steps[max(0, k - 1001):k - 1], steps[k + 50:k + 1050]
    if len(before) < 50 or len(after) < 50:
        return ""
    b, a = statistics.median(before) * 1e3, statistics.median(after) * 1e3
    return f"{b:.1f} -> {a:.1f} ({(a / b - 1) * 100:+.1f}%)"


def _replayed(folder: str, name: str) -> list:
    """The alerts of the job's recording replayed at the default detection settings with this
    code, in /api/alerts' form."""
    from stepwatch.collector._replay import replay
    from stepwatch.collector.detect import DetectionConfig
    from stepwatch.collector.tools.corpus import events, load
    corpus = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "data", "real", "diag")
    path = next(iter(glob.glob(os.path.join(folder, f"{name}.jsonl*"))
                     + glob.glob(os.path.join(corpus, f"{name}.jsonl*"))), None)
    if path is None:  # (no recording is not "nothing raised")
        raise SystemExit(f"no recording {name}.jsonl* in {folder} or {corpus}")
    out = []
    for a in replay(events(load(path)), DetectionConfig()):
        fired = datetime.datetime.fromtimestamp(a.fired_at, datetime.timezone.utc).isoformat()
        out.append({"alertname": a.alertname, "rank": a.rank, "fired_at": fired, "starts_at": a.starts_at,
                    "earlier": a.earlier, "summary": a.fired_summary, "onset_at": a.onset,
                    "ends_at": a.ends_at, "decided": a.decided,
                    "diagnosis": a.diagnosis, "severity": a.severity})
    return out


def verdicts(folder: str, replayed: bool = False) -> list[str]:
    """Per injected job: its step change, the first slowdown alert after the change whose onset
    is within ``ONSET_S`` of it (the straggler's on its rank, else drift's) and whether its
    diagnosis names the cause first;
    ``replayed``: from its recording replayed with this code, not the live run's alerts."""
    lines = ["| job | cause | step before -> after (ms) | first alert (s after the change) | named first | right |",
             "|---|---|---|---|---|---|"]
    right = raised = total = 0
    for path in sorted(glob.glob(os.path.join(folder, "*.alerts.json"))):
        name = os.path.basename(path)[:-len(".alerts.json")]
        runs = _steps(folder, name)
        inj = next((r["injected"] for r in runs if r.get("injected")), None)
        if inj is None or inj["cause"] not in EXPECTED or inj["rank"] not in (-1, 0, 1, 2, 3):
            continue
        total += 1
        with open(path) as fh:
            alerts = json.load(fh).get("alerts", [])
        if replayed:
            alerts = _replayed(folder, name)
        # the cause's own alert: fired after the change, its onset within ONSET_S of it (a later
        # change on the same job, e.g. its host slowing minutes on, is not this cause raised)
        alerts = [a for a in alerts if a.get("fired_at") and _ts(a["fired_at"]) >= inj["time"] - 5
                  and abs(_onset(a) - inj["time"]) <= ONSET_S]
        mine = [a for a in alerts if a["alertname"] == "StepwatchStragglerRank"] or \
            [a for a in alerts if a["alertname"] == "StepwatchThroughputDrift"] or alerts
        mine.sort(key=lambda a: _ts(a["fired_at"]))
        if not mine:
            lines.append(f"| {name} | {inj['cause']} | {_change(runs)} | none | | |")
            continue
        raised += 1
        a = mine[0]
        first = (a.get("diagnosis") or "").split(";")[0]
        for lead in ("waiting for rank", "against the other ranks"):
            if first.startswith(lead):
                first = first.split(": ", 1)[-1]
        ok = _right(inj["cause"], first)
        right += ok
        lines.append(f"| {name} | {inj['cause']} | {_change(runs)} | {a['alertname']} rank {a['rank']} "
                     f"({_ts(a['fired_at']) - inj['time']:+.0f}) | {first} | {'yes' if ok else 'no'} |")
    return [f"Raised {raised} of {total}; the cause named first in {right} of {total}.", ""] + lines


def phase_ab(folder: str) -> list[str]:
    arms: dict = {}
    for path in sorted(glob.glob(os.path.join(folder, "pab_*.steps.json"))):
        name = os.path.basename(path)[:-len(".steps.json")]
        _, size, gpu, _, arm = name.split("_", 4)
        with open(path) as fh:
            run = json.load(fh)
        t, kept = 0.0, []
        for s in run["step_s"]:
            t += s
            if t >= 20.0:
                kept.append(s)
        cost = run.get("phase_times") or {}
        arms.setdefault((size, gpu, run["device"]), {}).setdefault(arm, []).append(
            (statistics.median(kept) * 1e3 if kept else float("nan"), cost, len(run["step_s"])))
    lines = []
    for (size, gpu, device), by_arm in sorted(arms.items()):
        lines += [f"\n{device}, GPU {gpu}, size {size}:\n",
                  "| arm | median step (ms) per run | vs no agent | steps sampled / taken | phase cost per sampled step (us) | share of wall time |",
                  "|---|---|---|---|---|---|"]
        base = statistics.mean(m for m, _, _ in by_arm.get("none", [(float("nan"), {}, 0)]))
        for arm in ("none", "off", "default", "every"):
            runs = by_arm.get(arm, [])
            if not runs:
                continue
            med = statistics.mean(m for m, _, _ in runs)
            sampled = sum(c.get("sampled", 0) for _, c, _ in runs)
            taken = sum(n for _, _, n in runs)
            cost = sum(c.get("cost_s", 0.0) for _, c, _ in runs)
            per = f"{cost / sampled * 1e6:.1f}" if sampled else ""
            share = "; ".join(f"{c['cost_ratio']:.5f}" for _, c, _ in runs if "cost_ratio" in c)
            lines.append(f"| {arm} | {', '.join(f'{m:.3f}' for m, _, _ in runs)} | {(med / base - 1) * 100:+.2f}% "
                         f"| {sampled} / {taken} | {per} | {share} |")
    return lines


def main() -> None:
    folder = sys.argv[1]
    print("\n".join(verdicts(folder)))
    print("\nReplayed with this code:\n")
    print("\n".join(verdicts(folder, replayed=True)))
    print()
    print("\n".join(injected(folder)))
    print("\n".join(phase_ab(folder)))


if __name__ == "__main__":
    main()
