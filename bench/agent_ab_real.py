"""The agent's cost on real jobs: concurrent 1-GPU arms on one machine, GPUs crossed with arms.

    python bench/agent_ab_real.py bench/results/real_h100g --md bench/results/agent_ab_h100g.md

Reads the jobs' own step clocks (bench/real_job.py ``--steps-out``: host time after
``loss.item()``, the same measurement with or without the agent) named
``<anything>_<round letter><gpu digit>_<n>_<arm>.steps.json``, as
``run_real_device.sh ddp-arms`` and ``latin`` write them (``--ddp``: the 2-GPU DDP jobs'
``.steps.r0.json`` instead, rank 0's clock, the digit then the job's slot, a pair of GPUs). Per job: the median step after its
first 30 s. Then log(median) = round + GPU + arm, fitted by least squares, so a GPU that is a
little faster, or a round when the host was slower, does not read as the agent's cost: each
arm's effect against ``none`` (no agent) in percent, with a standard error from the residuals
when the design leaves any. Per round, the arms' medians side by side (same minutes, same host).

``--blocks 200:2000,2100:4050`` fits the same model on each range of steps (0-based, end
excluded) instead of the whole job: when in the job an arm's cost appears (before the first
analysed window, after it). ``--around 2050,4098`` prints, per arm, each job's median of the
~1,000 steps after that step over the ~500 before it: a before/after check like the one the
agent makes around its own windows (counted in steps here, not seconds), computed for the arms
that had no window there too, so a ratio that the host's own wander gives every arm is not read
as a window's after-effect.

``--sequence PREFIX`` reads instead the arms one job after the other on the same GPUs
(``ddp-arms PREFIX ...`` writes ``PREFIX_<n>_<arm>.steps.json``, or ``.steps.r0.json`` for rank
0 of a DDP job) and fits log(median) = order + arm, the order a straight line in n: with arms
alternated (none, default, none, default) a host that drifts steadily through the session does
not read as an arm's cost.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import re
import statistics

import numpy as np

_JOB = r"_(?P<round>[a-z]+)(?P<gpu>\d)_\d+_(?P<arm>[a-z0-9]+)\.steps"
_NAME, _NAME_DDP = re.compile(_JOB + r"\.json$"), re.compile(_JOB + r"\.r0\.json$")
SETTLE_S = 30.0


def settled_steps(step_s: list, settle_s: float = SETTLE_S) -> list:
    """The steps that end after the first ``settle_s`` seconds of the job's own clock."""
    t, kept = 0.0, []
    for s in step_s:
        t += s
        if t > settle_s:
            kept.append(s)
    return kept


def _clock(path: str) -> dict:
    """A job's step clock (a list, or ``{"step_s": [...]}``) and its median step after its
    first SETTLE_S seconds."""
    data = json.load(open(path))
    step_s = data["step_s"] if isinstance(data, dict) else data
    kept = settled_steps(step_s)
    return {"median_ms": statistics.median(kept) * 1e3, "steps": len(kept),
            "file": os.path.basename(path), "step_s": step_s}


def load(folder: str, ddp: bool = False) -> list[dict]:
    """One row per job, each file read once: its step clock (``step_s``) and the median step
    after its first SETTLE_S seconds. ``ddp``: the DDP jobs' rank-0 clocks instead."""
    rows = []
    name = _NAME_DDP if ddp else _NAME
    for path in sorted(glob.glob(os.path.join(folder, "*.steps*.json"))):
        m = name.search(os.path.basename(path))
        if m:
            rows.append({"round": m["round"], "gpu": int(m["gpu"]), "arm": m["arm"], **_clock(path)})
    return rows


def load_sequence(folder: str, prefix: str) -> list[dict]:
    """One row per job of ``PREFIX_<n>_<arm>.steps[.r0].json`` in ``folder`` (rank 0's clock of
    a DDP job), in the order n, with the median step after its first SETTLE_S seconds."""
    rows = []
    pattern = re.compile(re.escape(prefix) + r"_(?P<n>\d+)_(?P<arm>[a-z0-9]+)\.steps(\.r0)?\.json$")
    for path in glob.glob(os.path.join(folder, f"{prefix}_*.json")):
        m = pattern.fullmatch(os.path.basename(path))
        if m:
            rows.append({"order": int(m["n"]), "arm": m["arm"], **_clock(path)})
    return sorted(rows, key=lambda r: r["order"])


def fit_sequence(rows: list[dict]) -> dict:
    """Arm effects against 'none' (percent) from log(median) = mean + slope * order + arm."""
    arms = ["none"] + sorted({r["arm"] for r in rows} - {"none"})
    cols = ["mean", "order (per job)"] + arms[1:]
    mid = statistics.fmean(r["order"] for r in rows)
    X = np.zeros((len(rows), len(cols)))
    y = np.array([math.log(r["median_ms"]) for r in rows])
    for i, r in enumerate(rows):
        X[i, 0], X[i, 1] = 1, r["order"] - mid
        if r["arm"] != "none":
            X[i, cols.index(r["arm"])] = 1
    return _solve(X, y, cols, arms)


def _solve(X, y, cols: list, arms: list) -> dict:
    beta, *_ = np.linalg.lstsq(X, y, rcond=None)
    resid = y - X @ beta
    dof = len(y) - np.linalg.matrix_rank(X)
    se = None
    if dof > 0:
        sigma2 = float(resid @ resid) / dof
        cov = sigma2 * np.linalg.pinv(X.T @ X)
        se = {c: 100 * math.sqrt(max(cov[k, k], 0.0)) for k, c in enumerate(cols)}
    effects = {c: 100 * (math.exp(beta[k]) - 1) for k, c in enumerate(cols) if k > 0}
    return {"effects_pct": effects, "se_pct": se, "dof": int(dof), "arms": arms}


def block(rows: list[dict], lo: int, hi: int) -> list[dict]:
    """The same rows with the median of steps [lo, hi) instead (every job must hold them)."""
    out = []
    for r in rows:
        if len(r["step_s"]) < hi:
            raise SystemExit(f"{r['file']} has {len(r['step_s'])} steps, fewer than {hi}")
        out.append(dict(r, median_ms=statistics.median(r["step_s"][lo:hi]) * 1e3, steps=hi - lo))
    return out


def fit(rows: list[dict]) -> dict:
    """Arm effects against 'none' (percent) from log(median) = round + gpu + arm."""
    rounds = sorted({r["round"] for r in rows})
    gpus = sorted({r["gpu"] for r in rows})
    arms = ["none"] + sorted({r["arm"] for r in rows} - {"none"})
    cols = ["mean"] + [f"round {x}" for x in rounds[1:]] + [f"gpu {g}" for g in gpus[1:]] + arms[1:]
    X = np.zeros((len(rows), len(cols)))
    y = np.array([math.log(r["median_ms"]) for r in rows])
    for i, r in enumerate(rows):
        X[i, 0] = 1
        if r["round"] != rounds[0]:
            X[i, cols.index(f"round {r['round']}")] = 1
        if r["gpu"] != gpus[0]:
            X[i, cols.index(f"gpu {r['gpu']}")] = 1
        if r["arm"] != "none":
            X[i, cols.index(r["arm"])] = 1
    return _solve(X, y, cols, arms)


def around(rows: list[dict], at: int, before: int = 500, after: int = 1000, gap: int = 20,
           skip: int = 30) -> dict:
    """Per arm, each job's median of steps [at+skip, at+after) over [at-before, at-gap)."""
    out: dict = {}
    for row in rows:
        s = row["step_s"]
        if len(s) < at + after or at < before:
            continue
        ratio = statistics.median(s[at + skip:at + after]) / statistics.median(s[at - before:at - gap])
        out.setdefault(row["arm"], []).append(ratio)
    return out


def _ranges(text: str) -> list:
    try:
        return [tuple(int(x) for x in part.split(":")) for part in text.split(",")]
    except ValueError:
        raise SystemExit(f"--blocks wants START:END[,START:END...] step ranges, got {text!r}")


def fit_table(rows: list[dict], out: dict, what: str, model: str = "round + GPU + arm") -> list:
    lines = [f"Fit log(median) = {model} ({what}, {len(rows)} jobs, {out['dof']} degrees of freedom left):", "",
             "| term | effect | standard error |", "|---|---:|---:|"]
    for c, v in out["effects_pct"].items():
        se = out["se_pct"][c] if out["se_pct"] else None
        lines.append(f"| {c} | {v:+.2f}% | {'-' if se is None else f'{se:.2f}%'} |")
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folder")
    p.add_argument("--md", help="write the tables here too")
    p.add_argument("--blocks", help="also fit each START:END range of steps, comma-separated")
    p.add_argument("--around", help="also the after/before ratio at these steps, comma-separated")
    p.add_argument("--sequence", metavar="PREFIX", help="arms one after the other: PREFIX_<n>_<arm> jobs")
    p.add_argument("--ddp", action="store_true", help="the DDP jobs' rank-0 clocks (.steps.r0.json)")
    a = p.parse_args()
    if a.sequence:
        rows = load_sequence(a.folder, a.sequence)
        if len(rows) < 3:
            raise SystemExit(f"{len(rows)} {a.sequence}_<n>_<arm>.steps[.r0].json files in {a.folder}; "
                             "an order and an arm need at least 3")
        lines = ["| order | arm | steps after 30 s | median step (ms) |", "|---:|---|---:|---:|"]
        lines += [f"| {r['order']} | {r['arm']} | {r['steps']} | {r['median_ms']:.2f} |" for r in rows]
        lines += [""] + fit_table(rows, fit_sequence(rows), "steps after 30 s", "order + arm")
        _emit(lines, a.md)
        return
    rows = load(a.folder, a.ddp)
    if not rows:
        raise SystemExit(f"no <name>_<round><gpu>_<n>_<arm>.steps{'.r0' if a.ddp else ''}.json files in {a.folder}")
    out = fit(rows)
    lines = ["| round | GPU | arm | steps after 30 s | median step (ms) |", "|---|---:|---|---:|---:|"]
    for r in sorted(rows, key=lambda r: (r["round"], r["gpu"])):
        lines.append(f"| {r['round']} | {r['gpu']} | {r['arm']} | {r['steps']} | {r['median_ms']:.2f} |")
    lines += ["", "Per round (same minutes, same host), mean of the arms' medians:", "",
              "| round | " + " | ".join(out["arms"]) + " |", "|---|" + "---:|" * len(out["arms"])]
    for rd in sorted({r["round"] for r in rows}):
        cells = []
        for arm in out["arms"]:
            v = [r["median_ms"] for r in rows if r["round"] == rd and r["arm"] == arm]
            cells.append(f"{statistics.mean(v):.2f}" if v else "-")
        lines.append(f"| {rd} | " + " | ".join(cells) + " |")
    lines += [""] + fit_table(rows, out, "steps after 30 s")
    for lo, hi in _ranges(a.blocks) if a.blocks else []:
        part = block(rows, lo, hi)
        lines += [""] + fit_table(part, fit(part), f"steps {lo} to {hi}")
    if a.around:
        lines += ["", "Median of the ~1,000 steps after a step over the ~500 before it, per job:", "",
                  "| step | arm | ratios | mean |", "|---:|---|---|---:|"]
        for at in (int(x) for x in a.around.split(",")):
            for arm, ratios in sorted(around(rows, at).items()):
                lines.append(f"| {at} | {arm} | {', '.join(f'{r:.4f}' for r in ratios)} | "
                             f"{100 * (statistics.mean(ratios) - 1):+.2f}% |")
    _emit(lines, a.md)


def _emit(lines: list, md) -> None:
    text = "\n".join(lines)
    print(text)
    if md:
        with open(md, "w") as fh:
            fh.write(text + "\n")


if __name__ == "__main__":
    main()
