"""deploy/kubernetes: core resources validated against the Kubernetes JSON schemas
(kubernetes-validate, strict); the prometheus-operator resources, which have no schema there,
are checked for what matters: the rules pass promtool and equal deploy/prometheus/rules."""

from __future__ import annotations

import copy
import glob
import shutil
import subprocess

import pytest
import yaml

from dashboard_check import DEPLOY

kv = pytest.importorskip("kubernetes_validate")
K8S = DEPLOY / "kubernetes"
OPERATOR_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}


def _docs():
    return [(p.name, d) for p in sorted(K8S.glob("*.yaml")) for d in yaml.safe_load_all(p.read_text()) if d]


def _by_kind(kind):
    return [d for _, d in _docs() if d["kind"] == kind]


def test_core_resources_match_the_kubernetes_schemas():
    kinds = set()
    for name, doc in _docs():
        if doc["kind"] in OPERATOR_KINDS:
            continue
        kv.validate(doc, kv.latest_version(), strict=True)  # raises ValidationError
        kinds.add(doc["kind"])
    assert kinds == {"Namespace", "ConfigMap", "StatefulSet", "Service", "Job"}


def test_validator_rejects_a_broken_manifest():
    dep = copy.deepcopy(_by_kind("StatefulSet")[0])
    dep["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "http"
    with pytest.raises(kv.ValidationError):
        kv.validate(dep, kv.latest_version(), strict=True)
    dep = copy.deepcopy(_by_kind("StatefulSet")[0])
    dep["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    with pytest.raises(kv.ValidationError):
        kv.validate(dep, kv.latest_version(), strict=True)


def test_prometheus_rule_is_the_rule_files(tmp_path):
    groups = []
    for path in sorted(glob.glob(str(DEPLOY / "prometheus" / "rules" / "*.yml"))):
        groups += yaml.safe_load(open(path))["groups"]
    (rule,) = _by_kind("PrometheusRule")
    assert rule["spec"]["groups"] == groups, "regenerate deploy/kubernetes/monitoring.yaml"
    promtool = shutil.which("promtool")
    if promtool:
        (tmp_path / "rules.yml").write_text(yaml.safe_dump(rule["spec"]))
        run = subprocess.run([promtool, "check", "rules", str(tmp_path / "rules.yml")], capture_output=True, text=True)
        assert run.returncode == 0, run.stdout + run.stderr


def test_collector_config_map_is_a_valid_collector_config(tmp_path):
    from stepwatch.core.settings import SettingsError
    from stepwatch.collector._config import load_settings

    (cm,) = _by_kind("ConfigMap")
    (tmp_path / "collector.yaml").write_text(cm["data"]["collector.yaml"])
    # the StatefulSet sets STEPWATCH_AUTH_TOKEN and STEPWATCH_HTTP_TOKEN from the stepwatch-auth
    # Secret; without either the collector refuses its 0.0.0.0 addresses (secure defaults)
    secrets = {"STEPWATCH_AUTH_TOKEN": "from-the-secret", "STEPWATCH_HTTP_TOKEN": "http-from-the-secret"}
    settings = load_settings({}, environ=secrets, config_file=str(tmp_path / "collector.yaml"))
    for name in secrets:
        with pytest.raises(SettingsError, match="no credential is set"):
            load_settings({}, environ={k: v for k, v in secrets.items() if k != name},
                          config_file=str(tmp_path / "collector.yaml"))
    (sts,) = _by_kind("StatefulSet")
    env = {e["name"]: e for e in sts["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["STEPWATCH_HTTP_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "stepwatch-auth", "key": "http-token"}
    for kind, field in (("ServiceMonitor", "endpoints"), ("PodMonitor", "podMetricsEndpoints")):
        (mon,) = _by_kind(kind)
        (endpoint,) = mon["spec"][field]
        assert endpoint["authorization"] == {"type": "Bearer",
                                             "credentials": {"name": "stepwatch-auth", "key": "http-token"}}, kind
    assert settings.agent_grace_s == 300 and settings.grpc_listen == "0.0.0.0:7470"
    # the collector's own alerts reach the operator's Alertmanager
    assert settings.alertmanager_url == "http://alertmanager-operated.monitoring.svc:9093"
    with pytest.raises(SettingsError, match="no credential is set"):
        load_settings({}, environ={}, config_file=str(tmp_path / "collector.yaml"))


def test_wiring_service_monitor_service_statefulset_job():
    (svc,) = _by_kind("Service")
    (sts,) = _by_kind("StatefulSet")
    (mon,) = _by_kind("ServiceMonitor")
    (pmon,) = _by_kind("PodMonitor")
    (cm,) = _by_kind("ConfigMap")
    (job,) = _by_kind("Job")
    pod = sts["spec"]["template"]
    assert svc["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    # Headless, so the agents resolve one address per replica and place their job on one.
    assert svc["spec"]["clusterIP"] == "None" and sts["spec"]["serviceName"] == svc["metadata"]["name"]
    assert mon["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert pmon["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert pod["metadata"]["labels"][pmon["spec"]["jobLabel"]] == "stepwatch-collector"  # the rules' job
    pod_ports = {p["name"] for p in pod["spec"]["containers"][0]["ports"]}
    assert {e["port"] for e in pmon["spec"]["podMetricsEndpoints"]} <= pod_ports
    assert svc["metadata"]["name"] == "stepwatch-collector"  # becomes job="stepwatch-collector"
    port_names = {p["name"] for p in svc["spec"]["ports"]}
    assert {e["port"] for e in mon["spec"]["endpoints"]} <= port_names
    config = yaml.safe_load(cm["data"]["collector.yaml"])
    grpc_port = int(config["grpc_listen"].rsplit(":", 1)[1])
    assert {"name": "grpc", "port": grpc_port}.items() <= {**svc["spec"]["ports"][0]}.items()
    env = {e["name"]: e for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    ns = svc["metadata"]["namespace"]
    assert env["STEPWATCH_COLLECTOR"]["value"] == f"stepwatch-collector.{ns}.svc.cluster.local:{grpc_port}"
    assert {"JOB_NAME", "NODE_NAME"} <= env.keys() and job["spec"]["completionMode"] == "Indexed"
