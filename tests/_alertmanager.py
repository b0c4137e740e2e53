"""A real prometheus-alertmanager subprocess for tests (collector client tests, end-to-end).

Started on a free port (or a given one) with its storage under the test's tmp path and
clustering off; ``alerts()`` reads the v2 API, ``amtool_alerts()`` asks the amtool binary.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request
from typing import Optional

from _procs import free_port

AM = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
AMTOOL = shutil.which("amtool")


class Alertmanager:
    def __init__(self, tmp, port: Optional[int] = None):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cfg = tmp / "am.yml"
        cfg.write_text('route:\n  receiver: "null"\nreceivers:\n  - name: "null"\n')
        self.log_path = tmp / f"alertmanager-{self.port}.log"
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen([AM, f"--config.file={cfg}", f"--storage.path={tmp / f'am-data-{self.port}'}",
                                      f"--web.listen-address=127.0.0.1:{self.port}", "--cluster.listen-address="],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{self.url}/-/ready", timeout=2).read()
                break
            except OSError:
                assert self.proc.poll() is None and time.monotonic() < deadline, self.log_path.read_text()
                time.sleep(0.1)

    def alerts(self) -> list[dict]:
        """Active alerts from the v2 API (labels, annotations, startsAt, endsAt, status)."""
        with urllib.request.urlopen(f"{self.url}/api/v2/alerts", timeout=10) as resp:
            return json.loads(resp.read())

    def amtool_alerts(self) -> list[dict]:
        """Active alerts as amtool lists them."""
        out = subprocess.run([AMTOOL, f"--alertmanager.url={self.url}", "alert", "query", "-o", "json"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
        return json.loads(out or "[]")

    def wait_for(self, timeout_s: float = 30.0, **labels) -> dict:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for a in self.amtool_alerts():
                if all(a["labels"].get(k) == str(v) for k, v in labels.items()):
                    return a
            time.sleep(0.3)
        raise AssertionError(f"no alert {labels} in Alertmanager; have {[a['labels'] for a in self.alerts()]}")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)
        self.log.close()
