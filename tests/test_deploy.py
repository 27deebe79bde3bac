"""``deploy/``: what operators copy next to tacit serve. Prometheus's own tool checks the scrape
configuration, the alert rules (each firing where it should, ``tacit-alerts.test.yml``) and the
dashboard's queries; every metric they name is one the service exports; the Grafana data source
is the service's Jaeger API; the container image builds and answers its health check where
podman can build it. Skips, with the reason, where a tool is missing."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from serve_app import running, url

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
PROMETHEUS = DEPLOY / "prometheus"
needs_promtool = pytest.mark.skipif(
    shutil.which("promtool") is None,
    reason="promtool (Debian's prometheus package) is not installed",
)


def _promtool(*args: str, cwd: Path = PROMETHEUS) -> None:
    done = subprocess.run(["promtool", *args], cwd=cwd, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def _dashboard_queries() -> list[str]:
    doc = json.loads((DEPLOY / "grafana" / "dashboards" / "tacit.json").read_text())
    return [target["expr"] for panel in doc["panels"] for target in panel["targets"]]


def _rule_queries() -> list[str]:
    doc = yaml.safe_load((PROMETHEUS / "tacit-alerts.yml").read_text())
    return [rule["expr"] for group in doc["groups"] for rule in group["rules"]]


@needs_promtool
def test_promtool_checks_the_configuration_and_the_alerts_fire_as_their_tests_say():
    _promtool("check", "config", "prometheus.yml")
    _promtool("test", "rules", "tacit-alerts.test.yml")


@needs_promtool
def test_promtool_parses_every_query_of_the_dashboard(tmp_path):
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"tacit:panel{i}", "expr": expr}
                    for i, expr in enumerate(_dashboard_queries())
                ],
            }
        ]
    }
    (tmp_path / "dashboard.yml").write_text(yaml.safe_dump(rules))
    _promtool("check", "rules", "dashboard.yml", cwd=tmp_path)


def test_every_metric_the_rules_and_the_dashboard_name_is_exported(tmp_path):
    """And beside them, as exporters have them: the build's version, the process's own
    metrics, and no ``_created`` series."""
    from importlib.metadata import version

    with running(tmp_path) as svc, urllib.request.urlopen(url(svc, "/metrics")) as answer:
        families = list(text_string_to_metric_families(answer.read().decode()))
    exported = {f.name for f in families}
    samples = [s for f in families for s in f.samples]
    build = next(s for s in samples if s.name == "tacit_build_info")
    assert build.value == 1 and build.labels["version"] == version("tacit-traces")
    assert {"process_resident_memory_bytes", "process_cpu_seconds", "python_info"} <= exported
    assert not [s.name for s in samples if s.name.endswith("_created")]
    named = set()
    for expr in _rule_queries() + _dashboard_queries():
        named |= set(re.findall(r"\b(tacit_[a-z_]+)", expr))
    families = {re.sub(r"_(total|bucket|sum|count)$", "", name) for name in named}
    assert families and families <= exported, families - exported


def test_the_grafana_data_source_is_the_services_jaeger_api(tmp_path):
    doc = yaml.safe_load((DEPLOY / "grafana/provisioning/datasources/tacit.yml").read_text())
    jaeger = next(d for d in doc["datasources"] if d["type"] == "jaeger")
    port = int(jaeger["url"].rpartition(":")[2])
    assert port == 4318  # the service's HTTP address by default
    with running(tmp_path) as svc, urllib.request.urlopen(url(svc, "/api/services")) as answer:
        assert json.loads(answer.read())["data"] == []  # what Grafana asks first


def test_the_collector_pipeline_exports_to_tacits_otlp_http_address():
    doc = yaml.safe_load((DEPLOY / "otel-collector" / "config.yaml").read_text())
    exporters = doc["service"]["pipelines"]["traces"]["exporters"]
    tacit = doc["exporters"][exporters[0]]
    assert exporters == ["otlphttp/tacit"] and tacit["endpoint"].endswith(":4318")
    assert tacit["compression"] == "gzip"  # what the receiver inflates


def _podman_unavailable() -> str | None:
    if shutil.which("podman") is None:
        return "podman is not installed (Debian package podman)"
    pull = subprocess.run(
        ["podman", "pull", "-q", "docker.io/library/python:3.11-slim"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if pull.returncode:
        return f"podman cannot pull the base image: {pull.stderr.strip()[-200:]}"
    return None


def test_the_container_builds_runs_as_its_user_and_answers_its_health_check():
    if reason := _podman_unavailable():
        pytest.skip(reason)
    root = DEPLOY.parent
    tag = "localhost/tacit-test:latest"
    build = subprocess.run(
        ["podman", "build", "-q", "-f", "deploy/Dockerfile", "-t", tag, "."],
        cwd=root, capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr[-2000:]
    name = f"tacit-test-{time.monotonic_ns()}"
    run = subprocess.run(
        ["podman", "run", "-d", "--name", name, tag], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    try:
        for _ in range(60):
            health = subprocess.run(
                ["podman", "healthcheck", "run", name], capture_output=True, text=True
            )
            if health.returncode == 0:
                break
            time.sleep(1)
        assert health.returncode == 0, health.stdout + health.stderr
        user = subprocess.run(
            ["podman", "exec", name, "id", "-u"], capture_output=True, text=True
        ).stdout.strip()
        assert user == "10001"
    finally:
        subprocess.run(["podman", "rm", "-f", name], capture_output=True)


@pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="systemd-analyze (systemd) is not installed"
)
@pytest.mark.parametrize(
    ("unit", "instance"),
    [("tacit.service", "tacit.service"), ("tacit@.service", "tacit@ingest.service")],
)
def test_systemd_verifies_the_unit(tmp_path, unit, instance):
    """The single process's unit, and the roles' template (an instance of it)."""
    from clirun import TACIT

    text = (DEPLOY / "systemd" / unit).read_text()
    (tmp_path / unit).write_text(text.replace("/opt/tacit/bin/tacit", str(TACIT)))
    done = subprocess.run(
        ["systemd-analyze", "verify", str(tmp_path / instance)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr
