"""What does one torch.profiler session leave behind in a training process? Counted, not timed.

    python bench/session_residue.py --rounds 3 --out residue.jsonl      # on a GPU machine
    python bench/session_residue.py --report residue.jsonl              # the table

One fresh process per (round, arm), arms alternated within each round. Each process trains the
launch-bound ``--size s`` model of bench/real_job.py (bf16, batch 8, tokens made on the device:
no DataLoader), warms up, then measures ``--blocks`` blocks of ``--block-steps`` steps, runs one
session as the agent's windows do (``torch.profiler.profile`` with a one-step warm-up and three
active steps, stopped, the trace exported natively unless the arm says not, ``gc.collect(1)``),
and measures the same blocks again. Per block: the training thread's **user-space instructions
and cycles** (perf_event_open on the thread itself, when the kernel allows it), its CPU time, and
the wall time per step; and, after the steps, a block of 20,000 tiny kernel launches
(``x.add_(1)`` on one element) with the same counters per launch.

Instructions per step do not move with the host's clock or its neighbours: a session that left
a per-operator or per-launch cost behind (a callback still registered, CUPTI's or the driver's
state) shows as more instructions per step after it than before, beyond what the no-session arm
moves. Cycles against instructions tell a cost of more work from one of slower work (caches,
TLB). Arms (``ARMS``): ``none`` (five plain steps where the session would be), ``cpu`` (CPU
activity only), ``cuda`` (CPU+CUDA with ``TEARDOWN_CUPTI=1``, as the agent sets it),
``cuda_noexport`` (the same, the trace never written), ``cuda_keep`` (``TEARDOWN_CUPTI=0``:
CUPTI left attached, a known lasting cost, the probe's positive control), ``cpu_noexport``,
``cpu_pyexport`` / ``cuda_pyexport`` (the trace written by torch's Python exporter,
``use_python_export=True``, instead of Kineto's C++ one).

Without hardware counters (a VM without a PMU: perf_event_open answers ENOENT) only the times
remain, and a launch-bound job's host wanders by 10-20% between processes: the figure is then
each process's after/before of wall time per step, compared across many processes per arm.

``--report`` prints, per arm, the median over its processes of after/before for each counter,
and each process's figures.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time

ARMS = ("none", "cpu", "cuda", "cuda_noexport", "cuda_keep", "cpu_noexport", "cpu_pyexport", "cuda_pyexport")
_PERF_EVENT_OPEN = 298  # x86_64
_HW_CYCLES, _HW_INSTRUCTIONS = 0, 1


class Counter:
    """A user-space hardware counter of the calling thread (perf_event_open), or None-valued
    when the kernel refuses (no PMU in a VM, perf_event_paranoid, seccomp)."""

    def __init__(self, config: int):
        self.fd, self.error = -1, ""
        libc = ctypes.CDLL(None, use_errno=True)
        attr = bytearray(128)
        struct.pack_into("IIQ", attr, 0, 0, 128, config)  # PERF_TYPE_HARDWARE, size, config
        struct.pack_into("Q", attr, 40, (1 << 5) | (1 << 6))  # exclude_kernel, exclude_hv
        fd = libc.syscall(_PERF_EVENT_OPEN, (ctypes.c_char * 128).from_buffer(attr), 0, -1, -1, 0)
        if fd < 0:
            err = ctypes.get_errno()
            self.error = f"perf_event_open: {os.strerror(err)}"
        else:
            self.fd = fd

    def read(self):
        return struct.unpack("q", os.read(self.fd, 8))[0] if self.fd >= 0 else None


def _per(a, b, n):
    return (b - a) / n if a is not None and b is not None else None


def child(arm: str, size: str, blocks: int, block_steps: int, warmup: int) -> dict:
    os.environ["TEARDOWN_CUPTI"] = "0" if arm == "cuda_keep" else "1"  # before torch loads Kineto
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import torch
    from torch import nn

    from real_job import GPT, SIZES

    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    d, layers, heads, seq, vocab, batch, _ = SIZES[size]
    torch.manual_seed(0)
    model = GPT(d, layers, heads, seq, vocab).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda)
    loss_fn = nn.CrossEntropyLoss()
    data = torch.randint(0, vocab, (16, batch, seq + 1), device=device)
    k = [0]

    def step():
        tokens = data[k[0] % 16]
        k[0] += 1
        with torch.autocast(device.type, dtype=torch.bfloat16):
            logits = model(tokens[:, :-1])
            loss = loss_fn(logits.reshape(-1, vocab).float(), tokens[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()

    ins, cyc = Counter(_HW_INSTRUCTIONS), Counter(_HW_CYCLES)
    x = torch.zeros(1, device=device)
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    def measure() -> list:
        out = []
        for _ in range(blocks):
            gc.collect()
            sync()
            i0, c0, t0, w0 = ins.read(), cyc.read(), time.thread_time(), time.perf_counter()
            for _ in range(block_steps):
                step()
            i1, c1, t1, w1 = ins.read(), cyc.read(), time.thread_time(), time.perf_counter()
            sync()
            n = 20000
            i2, c2, w2 = ins.read(), cyc.read(), time.perf_counter()
            for _ in range(n):
                x.add_(1)
            i3, c3, w3 = ins.read(), cyc.read(), time.perf_counter()
            sync()
            out.append({"ins_step": _per(i0, i1, block_steps), "cyc_step": _per(c0, c1, block_steps),
                        "cpu_ms_step": 1e3 * (t1 - t0) / block_steps, "wall_ms_step": 1e3 * (w1 - w0) / block_steps,
                        "ins_launch": _per(i2, i3, n), "cyc_launch": _per(c2, c3, n),
                        "wall_us_launch": 1e6 * (w3 - w2) / n})
        return out

    for _ in range(warmup):
        step()
    before = measure()
    t0 = time.perf_counter()
    if arm == "none":
        for _ in range(5):
            step()
    else:
        acts = [torch.profiler.ProfilerActivity.CPU]
        if not arm.startswith("cpu") and cuda:
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        path = os.path.join(tempfile.mkdtemp(), "window.json")

        def ready(prof):
            if arm.endswith("_pyexport"):  # torch's Python writer instead of Kineto's C++ one
                prof.export_chrome_trace(path, use_python_export=True)
            elif not arm.endswith("_noexport"):
                prof.export_chrome_trace(path)

        prof = torch.profiler.profile(activities=acts, on_trace_ready=ready,
                                      schedule=torch.profiler.schedule(wait=0, warmup=1, active=3, repeat=1))
        prof.start()
        for _ in range(5):
            step()
            prof.step()  # (an exporter this torch lacks raises here: the process reports it)
        prof.stop()
        del prof
        gc.collect(1)
    session_s = time.perf_counter() - t0
    after = measure()
    return {"arm": arm, "torch": torch.__version__, "device": torch.cuda.get_device_name() if cuda else "cpu",
            "counters": ins.error or "user-space instructions and cycles", "session_s": session_s,
            "before": before, "after": after}


def _median(rows: list, key: str):
    vals = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(vals) if vals else None


_KEYS = ("ins_step", "cyc_step", "cpu_ms_step", "wall_ms_step", "ins_launch", "cyc_launch", "wall_us_launch")


def ratios(rec: dict) -> dict:
    """after / before of each counter's median over the blocks (the first block after the
    session left out: it holds the session's own clean-up)."""
    out = {}
    for key in _KEYS:
        b, a = _median(rec["before"], key), _median(rec["after"][1:], key)
        out[key] = a / b if a is not None and b else None
    return out


def report(path: str) -> str:
    recs = [json.loads(line) for line in open(path) if line.strip().startswith("{")]
    if not recs:
        return "no records"
    lines = [f"{recs[0]['device']}, torch {recs[0]['torch']}; counters: {recs[0]['counters']}; "
             f"{len(recs)} processes", "",
             "| arm | processes | " + " | ".join(f"{k} after/before" for k in _KEYS) + " |",
             "|---|---:|" + "---:|" * len(_KEYS)]
    for arm in ARMS:
        mine = [ratios(r) for r in recs if r["arm"] == arm]
        if not mine:
            continue
        cells = []
        for key in _KEYS:
            vals = [m[key] for m in mine if m[key] is not None]
            cells.append(" ".join(f"{v:.4f}" for v in vals) if vals else "-")
        lines.append(f"| {arm} | {len(mine)} | " + " | ".join(cells) + " |")
    lines += ["", "Per process, medians before -> after (instructions per step, per launch; ms per step):"]
    for r in recs:
        b, a = r["before"], r["after"][1:]
        lines.append(f"- {r['arm']}: ins/step {_median(b, 'ins_step')} -> {_median(a, 'ins_step')}, "
                     f"ins/launch {_median(b, 'ins_launch')} -> {_median(a, 'ins_launch')}, "
                     f"wall ms/step {_median(b, 'wall_ms_step'):.3f} -> {_median(a, 'wall_ms_step'):.3f}, "
                     f"session {r['session_s']:.2f} s")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--child", choices=ARMS, help=argparse.SUPPRESS)
    p.add_argument("--arms", default=",".join(ARMS))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--size", default="s")
    p.add_argument("--blocks", type=int, default=6)
    p.add_argument("--block-steps", type=int, default=150)
    p.add_argument("--warmup", type=int, default=300)
    p.add_argument("--out", default="-")
    p.add_argument("--report")
    a = p.parse_args()
    if a.report:
        print(report(a.report))
        return
    if a.child:
        print(json.dumps(child(a.child, a.size, a.blocks, a.block_steps, a.warmup)), flush=True)
        return
    arms = a.arms.split(",")
    out = sys.stdout if a.out == "-" else open(a.out, "a")
    for r in range(a.rounds):
        order = arms[r % len(arms):] + arms[:r % len(arms)]  # each round starts one arm later
        for arm in order:
            res = subprocess.run([sys.executable, __file__, "--child", arm, "--size", a.size, "--blocks", str(a.blocks),
                                  "--block-steps", str(a.block_steps), "--warmup", str(a.warmup)],
                                 capture_output=True, text=True)
            line = next((x for x in res.stdout.splitlines() if x.startswith("{")), None)
            if line is None:
                print(json.dumps({"arm": arm, "error": res.stderr[-2000:]}), file=sys.stderr, flush=True)
                continue
            out.write(line + "\n")
            out.flush()


if __name__ == "__main__":
    main()
