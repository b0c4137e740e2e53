"""deploy/ configs checked by the real tools: promtool (config, rules, rule unit tests in
deploy/prometheus/tests), amtool, and the compose file against the compose specification."""

from __future__ import annotations

import json
import pathlib
import re
import shutil
import subprocess
import sys
import tomllib

import pytest
import yaml

from dashboard_check import DASHBOARDS, DEPLOY

ROOT = DEPLOY.parent


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} not installed (Debian packages prometheus, prometheus-alertmanager)")
    return path


def _run(*cmd) -> None:
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr


def test_promtool_check_config(tmp_path):
    """The shipped file, with its one machine-specific path (the scrape token file, a compose
    secret at /run/secrets) pointed at a file of this test: promtool reads it."""
    prom_dir = DEPLOY / "prometheus"
    cfg = yaml.safe_load((prom_dir / "prometheus.yml").read_text())
    (job,) = [j for j in cfg["scrape_configs"] if j["job_name"] == "stepwatch-collector"]
    assert job["authorization"]["credentials_file"] == "/run/secrets/stepwatch_http_token"
    (tmp_path / "token").write_text("t0ken\n")
    job["authorization"]["credentials_file"] = str(tmp_path / "token")
    cfg["rule_files"] = [str(prom_dir / pattern) for pattern in cfg["rule_files"]]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(cfg))
    _run(_tool("promtool"), "check", "config", str(tmp_path / "prometheus.yml"))


def test_promtool_check_rules():
    _run(_tool("promtool"), "check", "rules", *map(str, sorted((DEPLOY / "prometheus" / "rules").glob("*.yml"))))


def test_promtool_rule_unit_tests():
    tests = sorted((DEPLOY / "prometheus" / "tests").glob("*.yml"))
    assert len(tests) >= 3
    _run(_tool("promtool"), "test", "rules", *map(str, tests))


def test_every_alert_has_a_unit_test_and_a_severity():
    alerts = set()
    for path in (DEPLOY / "prometheus" / "rules").glob("*.yml"):
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                if "alert" in rule:
                    assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
                    alerts.add(rule["alert"])
    tested = set()
    for path in (DEPLOY / "prometheus" / "tests").glob("*.yml"):
        for test in yaml.safe_load(path.read_text())["tests"]:
            tested |= {t["alertname"] for t in test.get("alert_rule_test", []) if t.get("exp_alerts")}
    assert alerts and alerts <= tested, f"alerts never seen firing in a unit test: {alerts - tested}"


def test_amtool_check_config():
    _run(_tool("amtool"), "check-config", str(DEPLOY / "alertmanager" / "alertmanager.yml"))


def test_alertmanager_groups_by_job_and_routes_by_severity():
    route = yaml.safe_load((DEPLOY / "alertmanager" / "alertmanager.yml").read_text())["route"]
    assert "training_job" in route["group_by"]
    assert sorted(r["matchers"][0] for r in route["routes"]) == \
        ['severity="critical"', 'severity="warning"', 'source="collector"']
    assert route["routes"][0]["matchers"] == ['source="collector"']  # first: no severity label


def test_dashboards_are_generated_and_use_the_provisioned_datasource():
    _run(sys.executable, str(DEPLOY / "grafana" / "build_dashboards.py"), "--check")
    ds = yaml.safe_load((DEPLOY / "grafana" / "provisioning" / "datasources" / "stepwatch.yml").read_text())
    uid = ds["datasources"][0]["uid"]
    names = set()
    for path in DASHBOARDS.glob("*.json"):
        dash = json.loads(path.read_text())
        variables = {v["name"] for v in dash["templating"]["list"]}
        assert "training_job" in variables, path.name
        for p in dash["panels"]:
            assert p["datasource"]["uid"] == uid and all(t["datasource"]["uid"] == uid for t in p["targets"])
            used = set(re.findall(r"\$(\w+)", " ".join(t["expr"] for t in p["targets"])))
            assert used <= variables | {"__rate_interval"}, (path.name, p["title"], used)
        names.add(path.name)
    assert names == {"job-overview.json", "memory.json", "gpu.json", "alerts.json", "windows.json"}


def test_compose_file_is_valid_and_everything_it_mounts_exists():
    compose_spec = pytest.importorskip("compose_spec")
    path = DEPLOY / "compose" / "docker-compose.yml"
    text = path.read_text()
    compose_spec.PyCompose.from_yaml(text)  # raises on anything outside the compose specification
    doc = yaml.safe_load(text)
    services = doc["services"]
    assert set(services) == {"collector", "prometheus", "alertmanager", "grafana"}
    for name, svc in services.items():
        assert set(svc.get("depends_on", [])) <= set(services), name
        for vol in svc.get("volumes", []):
            source = vol.split(":")[0]
            if source.startswith("."):
                assert (path.parent / source).resolve().exists(), f"{name} mounts missing {source}"
            else:
                assert source in doc["volumes"], f"{name}: undeclared volume {source}"
    build = services["collector"]["build"]
    assert (path.parent / build["context"] / build["dockerfile"]).resolve().is_file()
    # Prometheus in compose reaches the collector and Alertmanager by service name and port.
    prom = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    assert prom["scrape_configs"][0]["static_configs"][0]["targets"] == ["collector:7471"]
    assert prom["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] == ["alertmanager:9093"]
    # ... with the collector's http_token, which compose hands to both as the same variable.
    env = services["collector"]["environment"]
    assert env["STEPWATCH_HTTP_TOKEN"].startswith("${STEPWATCH_HTTP_TOKEN:?"), env
    assert services["prometheus"]["secrets"] == ["stepwatch_http_token"]
    assert doc["secrets"]["stepwatch_http_token"] == {"environment": "STEPWATCH_HTTP_TOKEN"}
    auth = prom["scrape_configs"][0]["authorization"]
    assert auth == {"credentials_file": "/run/secrets/stepwatch_http_token"}
    # ... and the collector sends its own alerts to that Alertmanager.
    cmd = services["collector"]["command"]
    assert cmd[cmd.index("--alertmanager-url") + 1] == "http://alertmanager:9093", cmd
    assert "alertmanager" in services["collector"]["depends_on"]


def test_dockerfile_installs_the_collectors_dependencies():
    """The image installs with --no-deps: its list must be pyproject's dependencies and its
    collector extra, minus torch and NVML."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = project["dependencies"] + project["optional-dependencies"]["collector"]
    wanted = {re.split(r"[<>=!~ ]", d)[0].lower() for d in deps} - {"torch", "nvidia-ml-py"}
    dockerfile = (DEPLOY / "compose" / "Dockerfile").read_text()
    listed = {re.split(r"[<>=!~ ]", d)[0].lower() for d in re.findall(r'"([A-Za-z][\w.-]*[<>=~!][^"]*)"', dockerfile)}
    assert listed == wanted
    for copied in re.findall(r"^COPY (\S+)", dockerfile, re.M):
        assert (ROOT / copied).exists(), copied
