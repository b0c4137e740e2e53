"""TLS and mutual TLS on loopback with certificates made by the test (openssl): a real trainer's
sidecar reports over TLS; plain, wrong-CA and certificate-less clients are refused; HTTPS
serves /metrics with the same certificate; `stepwatch trace` speaks TLS too."""

from __future__ import annotations

import shutil
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from _procs import Collector, run_trainers, trainer_env

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(d, name="ca"):
    """A CA, a server certificate for 127.0.0.1/localhost and a client certificate."""
    d.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={name}",
             "-keyout", f"{name}.key", "-out", f"{name}.pem", cwd=d)
    for who, ext in (("server", "subjectAltName=IP:127.0.0.1,DNS:localhost"), ("client", "extendedKeyUsage=clientAuth")):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={who}", "-keyout", f"{who}.key",
                 "-out", f"{who}.csr", cwd=d)
        (d / f"{who}.ext").write_text(ext + "\n")
        _openssl("x509", "-req", "-in", f"{who}.csr", "-CA", f"{name}.pem", "-CAkey", f"{name}.key",
                 "-CAcreateserial", "-days", "2", "-extfile", f"{who}.ext", "-out", f"{who}.pem", cwd=d)
    return d


def steps_of(col, job):
    return col.value("stepwatch_steps_total", training_job=job)


def test_agent_reports_over_tls_and_plain_or_wrong_ca_clients_are_refused(tmp_path):
    pki, other = make_pki(tmp_path / "pki"), make_pki(tmp_path / "other", name="otherca")
    col = Collector(tmp_path, ["--tls-cert", str(pki / "server.pem"), "--tls-key", str(pki / "server.key")]).start()
    col.ssl = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    try:
        # the same trainer without TLS, or trusting another CA, never gets through (the three
        # jobs side by side: each is judged by what reached the collector, not by its timing)
        run_trainers((trainer_env(tmp_path, col.grpc, "tlsjob", STEPWATCH_TLS_CA=pki / "ca.pem"), "--steps", "30"),
                     *((trainer_env(tmp_path, col.grpc, job, STEPWATCH_SHUTDOWN_TIMEOUT_S=2, **extra), "--steps", "10")
                       for job, extra in (("plainjob", {}), ("wrongca", {"STEPWATCH_TLS_CA": other / "ca.pem"}))))
        col.wait_value("stepwatch_steps_total", 30, training_job="tlsjob")
        time.sleep(1)
        assert steps_of(col, "plainjob") is None and steps_of(col, "wrongca") is None
        with pytest.raises((urllib.error.URLError, ConnectionError)):  # plain HTTP to the HTTPS port
            urllib.request.urlopen(f"http://{col.http}/metrics", timeout=5).read()
    finally:
        col.kill()


def test_mutual_tls_needs_a_client_certificate_signed_by_the_client_ca(tmp_path):
    pki = make_pki(tmp_path / "pki")
    col = Collector(tmp_path, ["--tls-cert", str(pki / "server.pem"), "--tls-key", str(pki / "server.key"),
                               "--tls-client-ca", str(pki / "ca.pem")]).start()
    ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    try:
        run_trainers((trainer_env(tmp_path, col.grpc, "nocert", STEPWATCH_TLS_CA=pki / "ca.pem",
                                  STEPWATCH_SHUTDOWN_TIMEOUT_S=2), "--steps", "10"),
                     (trainer_env(tmp_path, col.grpc, "mtls", STEPWATCH_TLS_CA=pki / "ca.pem",
                                  STEPWATCH_TLS_CERT=pki / "client.pem", STEPWATCH_TLS_KEY=pki / "client.key"), "--steps", "30"))
        with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):  # HTTPS without a certificate
            urllib.request.urlopen(f"https://{col.http}/metrics", timeout=5, context=ctx).read()
        ctx.load_cert_chain(str(pki / "client.pem"), str(pki / "client.key"))
        col.ssl = ctx
        col.wait_value("stepwatch_steps_total", 30, training_job="mtls")
        assert steps_of(col, "nocert") is None
        # stepwatch trace: a job with no live rank is answered (NOT_FOUND) only over mTLS
        base = [sys.executable, "-m", "stepwatch.collector.tools", "trace", "--collector", col.grpc, "--job", "mtls",
                "--timeout", "5", "--tls-ca", str(pki / "ca.pem")]
        no_cert = subprocess.run(base, capture_output=True, text=True, timeout=60)
        with_cert = subprocess.run(base + ["--tls-cert", str(pki / "client.pem"), "--tls-key", str(pki / "client.key")],
                                   capture_output=True, text=True, timeout=60)
        assert "UNAVAILABLE" in no_cert.stderr, no_cert.stderr
        assert "UNAVAILABLE" not in with_cert.stderr and "stepwatch trace: error:" in with_cert.stderr, with_cert.stderr
    finally:
        col.kill()


def test_a_missing_certificate_file_is_a_clear_error(tmp_path):
    run = subprocess.run([sys.executable, "-m", "stepwatch.collector.tools", "collector", "--tls-cert",
                          str(tmp_path / "nope.pem"), "--tls-key", str(tmp_path / "nope.key")],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "tls_cert" in run.stderr and "no such file" in run.stderr, run.stderr
