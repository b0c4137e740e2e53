"""Does a profiler window leave a GPU job slower afterwards? Variants of one job, each in its own
process, with two windows taken the agent's way (warm-up 1 + 3 active steps, native export,
``gc.collect(1)``) or not at all, timing blocks of steps with one synchronize per block and
sampling NVML (SM clock, power, temperature) beside it.

    python bench/window_aftereffect.py --out bench/results/window_aftereffect_h100.json

A variant's figure per window: median step time of the blocks after the window over the blocks
before it (same count, the window's own block left out). The "none" variant takes no window at
the same steps: its ratios are the job's own drift.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

VARIANTS = {
    # name: (activities, export, env)
    "none": (None, False, {}),
    "cpu_cuda": ("cpu,cuda", True, {"TEARDOWN_CUPTI": "1"}),
    "cpu_cuda_no_export": ("cpu,cuda", False, {"TEARDOWN_CUPTI": "1"}),
    "cpu_cuda_no_teardown": ("cpu,cuda", True, {"TEARDOWN_CUPTI": "0"}),
    "cuda": ("cuda", True, {"TEARDOWN_CUPTI": "1"}),
    "cpu": ("cpu", True, {"TEARDOWN_CUPTI": "1"}),
}
MODELS = {"gemm": dict(d_model=1024, layers=6, batch=16, seq=512),
          "small": dict(d_model=256, layers=6, batch=4, seq=128)}


def child(variant: str, model: str, steps: int, block: int, windows: list, out: str) -> None:
    import gc
    import torch
    from stepwatch.collector.tools.train import transformer_step
    activities, export, _ = VARIANTS[variant]
    torch.cuda.set_device(0)
    step, _, _ = transformer_step(torch.device("cuda", 0), **MODELS[model])
    samples = []
    stop = threading.Event()

    def sample():
        try:
            import pynvml
            pynvml.nvmlInit()
        except Exception:  # no NVML here: step times only
            return
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        t0 = time.perf_counter()
        while not stop.wait(0.25):
            samples.append((time.perf_counter() - t0,
                            pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                            pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0,
                            pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)))

    threading.Thread(target=sample, daemon=True).start()
    tmp = tempfile.mkdtemp(prefix="stepwatch-after-")
    acts = {"cpu": torch.profiler.ProfilerActivity.CPU, "cuda": torch.profiler.ProfilerActivity.CUDA}
    blocks, t_block, prof, open_at = [], None, None, None
    for s in range(1, steps + 1):
        if s in windows and activities:
            prof = torch.profiler.profile(
                activities=[acts[a] for a in activities.split(",")],
                on_trace_ready=(lambda p, s=s: p.export_chrome_trace(os.path.join(tmp, f"w{s}.json")))
                if export else (lambda p: None),
                schedule=torch.profiler.schedule(wait=0, warmup=1, active=3, repeat=1))
            prof.start()
            open_at = s
        if s % block == 1 or block == 1:
            torch.cuda.synchronize()
            t_block = time.perf_counter()
        step()
        if prof is not None:
            prof.step()
            if s - open_at >= 4:
                prof.stop()
                prof = None
                gc.collect(1)
        if s % block == 0:
            torch.cuda.synchronize()
            blocks.append((s, (time.perf_counter() - t_block) / block))
    stop.set()
    with open(out, "w") as fh:
        json.dump({"blocks": blocks, "nvml": samples}, fh)


def ratios(blocks: list, windows: list, block: int, span: int) -> list:
    """Median step of ``span`` blocks after each window / of ``span`` blocks before it."""
    out = []
    for w in windows:
        before = [t for s, t in blocks if w - block * span < s <= w - 1]
        after = [t for s, t in blocks if w + block < s <= w + block * (span + 1)]
        if before and after:
            out.append(round(statistics.median(after) / statistics.median(before), 4))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--block", type=int, default=25)
    p.add_argument("--windows", type=int, nargs="+", default=[1001, 2001])
    p.add_argument("--span", type=int, default=12, help="blocks compared on each side")
    p.add_argument("--models", nargs="+", default=list(MODELS))
    p.add_argument("--variants", nargs="+", default=list(VARIANTS))
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--out")
    p.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    p.add_argument("--child-out", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        child(a.child[0], a.child[1], a.steps, a.block, a.windows, a.child_out)
        return
    import torch
    rows = []
    for rep in range(a.repeat):
        for model in a.models:
            for variant in a.variants:
                out = tempfile.mktemp(suffix=".json")
                env = dict(os.environ, **VARIANTS[variant][2])
                t0 = time.time()
                subprocess.run([sys.executable, __file__, "--steps", str(a.steps), "--block", str(a.block),
                                "--windows", *map(str, a.windows), "--child", variant, model,
                                "--child-out", out], env=env, check=True)
                with open(out) as fh:
                    d = json.load(fh)
                med = statistics.median(t for _, t in d["blocks"])
                nv = d["nvml"]
                row = {"model": model, "variant": variant, "repeat": rep,
                       "median_step_ms": round(med * 1e3, 3),
                       "after_over_before": ratios(d["blocks"], a.windows, a.block, a.span),
                       "sm_clock_mhz_first_last": [nv[len(nv) // 10][1], nv[-1][1]] if nv else [],
                       "power_w_first_last": [nv[len(nv) // 10][2], nv[-1][2]] if nv else [],
                       "temp_c_first_last": [nv[len(nv) // 10][3], nv[-1][3]] if nv else [],
                       "seconds": round(time.time() - t0, 1),
                       "blocks_ms": [(s, round(t * 1e3, 3)) for s, t in d["blocks"]]}
                rows.append(row)
                print(f"{model:6s} {variant:22s} step {row['median_step_ms']:7.3f} ms  after/before "
                      f"{row['after_over_before']}  sm {row['sm_clock_mhz_first_last']}  "
                      f"W {row['power_w_first_last']}  C {row['temp_c_first_last']}", flush=True)
    doc = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "command": " ".join(["python", *sys.argv]), "rows": rows}
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(doc, fh, indent=1)


if __name__ == "__main__":
    main()
