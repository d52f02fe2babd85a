"""Operations checks of deploy/ (no Kubernetes cluster or Grafana on the test machines): the pods meet Pod
Security "restricted", a PodDisruptionBudget and the headless Service of the many-replica setup select the
Deployment's pods, the alert rules pass `promtool check rules` and their unit tests, the PrometheusRule holds
the same groups, the dashboard has an instance variable and covers ScoreStream, and a real scrape of the
running daemon passes `promtool check metrics` and exports every metric the rules and the dashboard name."""
import glob
import json
import os
import re
import shutil
import subprocess
import urllib.request

import pytest
import yaml

from conftest import REPO

K8S = os.path.join(REPO, "deploy", "kubernetes")
RULES = os.path.join(REPO, "deploy", "prometheus", "scored-rules.yml")
DASHBOARD = os.path.join(REPO, "deploy", "grafana", "scored-dashboard.json")
HERE = os.path.dirname(os.path.abspath(__file__))

# Families only the CUDA backend exports (no device on the CPU test daemon).
GPU_ONLY = {"scored_device_memory_bytes"}
# Volume types Pod Security "restricted" allows.
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                      "projected", "secret"}


def manifests():
    docs = []
    for path in sorted(glob.glob(os.path.join(K8S, "*.yaml"))):
        with open(path) as f:
            docs += [(os.path.basename(path), d) for d in yaml.safe_load_all(f) if d]
    assert docs
    return docs


def workloads():
    found = [(name, d) for name, d in manifests() if d["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job")]
    assert {d["kind"] for _, d in found} >= {"Deployment", "StatefulSet"}
    return found


def the_deployment():
    return next(d for _, d in manifests() if d["kind"] == "Deployment")


@pytest.mark.parametrize("name,workload", workloads(), ids=lambda v: v if isinstance(v, str) else v["kind"])
def test_pods_meet_pod_security_restricted(name, workload):
    pod = workload["spec"]["template"]["spec"]
    pod_sc = pod.get("securityContext", {})
    assert pod_sc.get("runAsNonRoot") is True, name
    assert pod_sc.get("runAsUser", 1) != 0, name
    assert pod_sc.get("seccompProfile", {}).get("type") == "RuntimeDefault", name
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        assert not pod.get(key), f"{name}: {key}"
    for v in pod.get("volumes", []):
        kinds = set(v) - {"name"}
        assert kinds <= RESTRICTED_VOLUMES, f"{name}: volume {v['name']} is {kinds}"
    for c in pod.get("initContainers", []) + pod["containers"]:
        sc = c.get("securityContext", {})
        where = f"{name}: container {c['name']}"
        assert sc.get("allowPrivilegeEscalation") is False, where
        assert sc.get("capabilities", {}).get("drop") == ["ALL"], where
        assert not sc.get("capabilities", {}).get("add"), where
        assert not sc.get("privileged"), where
        assert sc.get("runAsUser", 1) != 0 and sc.get("runAsNonRoot", True) is True, where
        assert sc.get("seccompProfile", {"type": "RuntimeDefault"})["type"] in ("RuntimeDefault", "Localhost")
        for p in c.get("ports", []):
            assert "hostPort" not in p, where


def test_deployment_read_only_root_has_writable_tmp():
    pod = the_deployment()["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    assert "emptyDir" in next(v for v in pod["volumes"] if v["name"] == mounts["/tmp"])


def test_pod_disruption_budget_keeps_replicas():
    dep = the_deployment()
    labels = dep["spec"]["template"]["metadata"]["labels"]
    pdbs = [d for _, d in manifests() if d["kind"] == "PodDisruptionBudget"]
    assert len(pdbs) == 1
    pdb = pdbs[0]
    assert pdb["apiVersion"] == "policy/v1"
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    replicas = dep["spec"]["replicas"]
    assert replicas >= 2, "one replica: any disruption budget either blocks drains or allows an outage"
    # Exactly one of the two; at least one replica stays while a drain can still make progress.
    spec = pdb["spec"]
    assert ("maxUnavailable" in spec) != ("minAvailable" in spec)
    if "maxUnavailable" in spec:
        assert 1 <= spec["maxUnavailable"] < replicas
    else:
        assert 1 <= spec["minAvailable"] < replicas


def test_headless_service_reaches_every_replica():
    dep = the_deployment()
    pod = dep["spec"]["template"]
    headless = [d for _, d in manifests()
                if d["kind"] == "Service" and d["spec"].get("clusterIP") == "None"
                and d["spec"]["selector"].items() <= pod["metadata"]["labels"].items()]
    assert len(headless) == 1
    svc = headless[0]
    ports = {p["name"]: p["containerPort"] for p in pod["spec"]["containers"][0]["ports"]}
    grpc = next(p for p in svc["spec"]["ports"] if p["name"] == "grpc")
    assert grpc["targetPort"] == "grpc" and grpc["port"] == ports["grpc"]
    # The name the README and the manifest's own comment tell scored-ppl to resolve.
    name = svc["metadata"]["name"]
    with open(os.path.join(REPO, "README.md")) as f:
        assert f"dns:///{name}." in f.read()


def load_rules():
    with open(RULES) as f:
        return yaml.safe_load(f)


def test_prometheus_rule_holds_the_rules_file():
    rule = next(d for _, d in manifests() if d["kind"] == "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["spec"]["groups"] == load_rules()["groups"]
    alerts = {r["alert"] for g in load_rules()["groups"] for r in g["rules"]}
    # Not serving, error rate, queue saturation, device memory.
    assert {"ScoredDown", "ScoredNotServing", "ScoredHighErrorRate", "ScoredQueueSaturated",
            "ScoredDeviceMemoryHigh"} <= alerts


def promtool():
    binary = shutil.which("promtool")
    if binary is None:
        pytest.skip("promtool is not installed (scripts/install_deps.sh installs Debian's 'prometheus')")
    return binary


def test_promtool_check_rules():
    run = subprocess.run([promtool(), "check", "rules", RULES], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS: 8 rules found" in run.stdout


def test_promtool_rule_unit_tests():
    run = subprocess.run([promtool(), "test", "rules", "scored-rules-test.yml"], cwd=HERE,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS" in run.stdout


def load_dashboard():
    with open(DASHBOARD) as f:
        return json.load(f)


def dashboard_exprs():
    return [t["expr"] for p in load_dashboard()["panels"] for t in p["targets"]]


def test_dashboard_instance_variable_and_score_stream():
    dash = load_dashboard()
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    inst = variables["instance"]
    assert inst["type"] == "query" and inst["includeAll"] and inst["multi"]
    assert "label_values(" in inst["definition"] and ", instance)" in inst["definition"]
    for e in dashboard_exprs():
        # Every selector of every query is narrowed to the chosen instances.
        for selector in re.findall(r"\b(?:scored|process)_\w+(\{[^}]*\})?", e):
            assert 'instance=~"$instance"' in selector, e
    latency = [e for e in dashboard_exprs() if "scored_request_latency_seconds_bucket" in e]
    assert latency and all("ScoreStream" in e for e in latency), latency
    assert not any('method="Score"' in e for e in dashboard_exprs())


def metric_names(expr):
    names = set()
    for name in re.findall(r"\b((?:scored|process)_\w+)", expr):
        names.add(re.sub(r"_(bucket|count|sum)$", "", name))
    return names


def scrape(daemon):
    with urllib.request.urlopen(f"http://127.0.0.1:{daemon.metrics_port}/metrics", timeout=10) as r:
        return r.read().decode()


@pytest.fixture(scope="module")
def exposition(daemon, client):
    """One scrape after Score and ScoreStream traffic (so that every labelled family has a series)."""
    ids = [1] + [300 + i % 64 for i in range(63)]
    assert client.score(ids).num_scored == 63
    assert sum(r.num_scored for _, r in client.score_stream([(ids, 1), (ids[:32], 1)])) == 63 + 31
    return scrape(daemon)


def test_promtool_check_metrics_on_a_real_scrape(exposition):
    run = subprocess.run([promtool(), "check", "metrics"], input=exposition, capture_output=True, text=True,
                         timeout=120)
    # promtool exits 1 for lint problems too (printed one per line): there must be none.
    assert run.returncode == 0, run.stdout + run.stderr


def test_scrape_has_operations_metrics(exposition):
    families = dict(re.findall(r"^# TYPE (\w+) (\w+)", exposition, re.M))
    for name, kind in {"process_cpu_seconds_total": "counter", "process_resident_memory_bytes": "gauge",
                       "process_open_fds": "gauge", "process_max_fds": "gauge",
                       "process_start_time_seconds": "gauge", "scored_build_info": "gauge",
                       "scored_serving": "gauge", "scored_requests_in_flight": "gauge",
                       "scored_queue_wait_seconds": "histogram", "scored_batch_compute_seconds": "histogram"}.items():
        assert families.get(name) == kind, name
    samples = {m.group(1): float(m.group(2)) for m in re.finditer(r"^(\S+) (\S+)$", exposition, re.M)}
    assert samples["scored_serving"] == 1
    assert samples["scored_requests_in_flight"] == 0  # everything was answered before the scrape
    assert samples["scored_queue_wait_seconds_count"] >= 3  # one per scored sequence
    assert samples["scored_batch_compute_seconds_count"] >= 1
    assert samples["process_resident_memory_bytes"] > 1 << 20
    build = next(k for k in samples if k.startswith("scored_build_info{"))
    assert re.search(r'cuda="(on|off)"', build) and re.search(r'version="\d+\.\d+\.\d+"', build), build


def test_rules_and_dashboard_name_only_exported_metrics(exposition):
    exported = set(re.findall(r"^# TYPE (\w+) ", exposition, re.M))
    rules = [r["expr"] for g in load_rules()["groups"] for r in g["rules"]]
    for where, exprs in (("rules", rules), ("dashboard", dashboard_exprs())):
        used = set().union(*(metric_names(e) for e in exprs))
        assert used, where
        missing = used - exported - GPU_ONLY
        assert not missing, f"{where} name metrics scored does not export: {missing}"
