"""Two GPUs, two DDP ranks over NCCL (bf16 transformer, ~10 ms steps), three variants run one
after the other: healthy (no alert of any kind); rank 1 with +8 ms of GEMMs in its backward
pass from step 150 (StepwatchStragglerRank names rank 1 from the windows: it computes longer,
rank 0 waits longer in NCCL); rank 1's data loader slowed from step 150 (named from its
data-loader wait). Software only: no GPU setting is touched. Skips with fewer than two GPUs.
Prints a table; JSON and the recordings under $OUT."""

from __future__ import annotations

import datetime
import json
import os
import pathlib

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                                 reason="needs two CUDA devices")]

from test_straggler_gpu import STEPS, _run, _table  # noqa: E402

FROM = 150
VARIANTS = {
    "healthy": (),
    "gemm": ("--cause", "backward", "--cause-ms", "8", "--cause-rank", "1", "--cause-from-step", str(FROM)),
    "dataloader": ("--slow-from-step", str(FROM), "--slow-factor", "1.5", "--slow-rank", "1"),
}


def test_nccl_straggler_variants(tmp_path, collector_factory):
    out = pathlib.Path(os.environ.get("OUT") or tmp_path)
    result = {"devices": [torch.cuda.get_device_name(i) for i in range(2)], "torch": torch.__version__,
              "nccl": str(torch.cuda.nccl.version())}
    found = {}
    for name, extra in VARIANTS.items():
        _, steps, windows, alerts, _ = _run(tmp_path, collector_factory, f"nccl-{name}", *extra,
                                            base=("--device", "cuda", "--steps", str(STEPS)))
        rows = _table(name, steps, windows)
        onset = steps[(1, FROM)].end_time_s
        strag = [a for a in alerts if a["alertname"] == "StepwatchStragglerRank"]
        for a in alerts:
            print("alert:", name, a["alertname"], a["rank"], a["summary"], "| why:", a.get("diagnosis"))
        delay = [datetime.datetime.fromisoformat(a["fired_at"].replace("Z", "+00:00")).timestamp() - onset
                 for a in strag if a.get("fired_at")]
        print(f"{name}: seconds from the change to the straggler alert: {delay}")
        result[name] = {"windows": rows, "alerts": [{k: a.get(k) for k in ("alertname", "rank", "summary",
                                                                            "diagnosis", "step")} for a in alerts],
                        "seconds_to_straggler_alert": delay}
        found[name] = alerts
    (out / "nccl_straggler.json").write_text(json.dumps(result, indent=1))
    assert found["healthy"] == [], found["healthy"]
    for name in ("gemm", "dataloader"):
        strag = [a for a in found[name] if a["alertname"] == "StepwatchStragglerRank"]
        assert [a["rank"] for a in strag] == [1], found[name]
    gemm = [a for a in found["gemm"] if a["alertname"] == "StepwatchStragglerRank"][0]["summary"]
    assert "ms/step vs median" in gemm and "; in collectives" in gemm, gemm
    loader = [a for a in found["dataloader"] if a["alertname"] == "StepwatchStragglerRank"][0]["summary"]
    assert "data-loader wait" in loader, loader
