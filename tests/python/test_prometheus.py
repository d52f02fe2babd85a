"""A real Prometheus server (Debian's package) scrapes the running daemon with deploy's scrape config;
its HTTP API must show scored's metrics, moving when requests are served. The Grafana dashboard may query
only metrics scored exports."""
import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request

import pytest
import yaml

from conftest import REPO


def http_get(url, timeout=5.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def exported_families(daemon):
    text = http_get(f"http://127.0.0.1:{daemon.metrics_port}/metrics")
    return set(re.findall(r"^# TYPE (\w+) ", text, re.M)), text


@pytest.fixture
def prometheus(tmp_path, daemon):
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus not installed (scripts/install_deps.sh installs Debian's 'prometheus')")
    with open(os.path.join(REPO, "deploy", "prometheus", "prometheus.yml")) as f:
        config = yaml.safe_load(f)
    job = next(j for j in config["scrape_configs"] if j["job_name"] == "scored")
    job["static_configs"][0]["targets"] = [f"127.0.0.1:{daemon.metrics_port}"]
    job["scrape_interval"] = "1s"  # the deploy file's 15 s would make the test slow
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    # The rule files it names, beside it as in deploy/prometheus.
    for rules in config["rule_files"]:
        shutil.copy(os.path.join(REPO, "deploy", "prometheus", rules), tmp_path / rules)
    port = free_port()
    proc = subprocess.Popen([binary, f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=open(tmp_path / "prometheus.log", "w"))
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while True:
        try:
            if "Ready" in http_get(base + "/-/ready"):
                break
        except OSError:
            pass
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            pytest.fail("prometheus did not start: " + (tmp_path / "prometheus.log").read_text()[-2000:])
        time.sleep(0.2)
    yield base
    proc.terminate()
    proc.wait(timeout=30)


def query(base, expr):
    body = json.loads(http_get(base + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})))
    assert body["status"] == "success", body
    return body["data"]["result"]


def wait_for(base, expr, predicate, timeout=30.0):
    deadline = time.time() + timeout
    while True:
        result = query(base, expr)
        if result and predicate(float(result[0]["value"][1])):
            return float(result[0]["value"][1])
        if time.time() > deadline:
            pytest.fail(f"{expr}: {result}")
        time.sleep(0.5)


def test_prometheus_scrapes_scored_and_metrics_move(prometheus, client):
    up = wait_for(prometheus, 'up{job="scored"}', lambda v: v == 1.0)
    assert up == 1.0
    before = wait_for(prometheus, "sum(scored_tokens_scored_total)", lambda v: v >= 0)
    ids = [1] + [400 + i % 50 for i in range(99)]
    for _ in range(5):
        assert client.score(ids).num_scored == 99
    after = wait_for(prometheus, "sum(scored_tokens_scored_total)", lambda v: v >= before + 5 * 99)
    assert after >= before + 5 * 99
    wait_for(prometheus, 'sum(scored_requests_total{method="Score",code="OK"})', lambda v: v >= 5)
    wait_for(prometheus, "sum(scored_request_latency_seconds_count)", lambda v: v >= 5)
    info = query(prometheus, "scored_model_info")[0]["metric"]
    assert info["backend"] == "cpu" and info["model"] == "stories260K-hf" and len(info["fingerprint"]) == 64
    # Computed tokens (scored-ppl's tok/s) count the context position too: 100 per request, 99 scored.
    wait_for(prometheus, "sum(scored_tokens_input_total)", lambda v: v >= 5 * 100)
    # The shipped config loads the alert rules (it did not name them before).
    rules = json.loads(http_get(prometheus + "/api/v1/rules"))["data"]["groups"]
    assert sum(len(g["rules"]) for g in rules) >= 8, rules


# Families the CPU backend cannot export (no device): the dashboard may use them; they exist on GPUs.
GPU_ONLY = {"scored_device_memory_bytes"}


def test_dashboard_queries_only_exported_metrics(daemon):
    families, _ = exported_families(daemon)
    with open(os.path.join(REPO, "deploy", "grafana", "scored-dashboard.json")) as f:
        dash = json.load(f)
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    assert exprs
    used = set()
    for e in exprs:
        for name in re.findall(r"\b(scored_\w+)", e):
            used.add(re.sub(r"_(bucket|count|sum)$", "", name))
    missing = used - families - GPU_ONLY
    assert not missing, f"dashboard queries metrics scored does not export: {missing}"
    assert GPU_ONLY <= used, "the dashboard shows GPU memory"
