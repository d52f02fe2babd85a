"""Static checks of deploy/ and docker/ (no Kubernetes, Grafana or Docker engine on the test machines):
manifests parse and are wired together, referenced files and scripts exist, ports agree."""
import configparser
import json
import os
import re
import shutil
import subprocess

import pytest
import yaml

from conftest import BUILD, REPO


def load_yaml_docs(*parts):
    with open(os.path.join(REPO, *parts)) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def by_kind(docs, kind):
    found = [d for d in docs if d["kind"] == kind]
    assert found, f"no {kind}"
    return found[0]


def container_ports(pod_spec):
    return {p["name"]: p["containerPort"] for c in pod_spec["containers"] for p in c.get("ports", [])}


def flag_value(args, flag):
    for a in args:
        m = re.search(rf"{flag}=(\S+)", a)
        if m:
            return m.group(1)
    return None


def test_deployment_service_podmonitor_are_wired():
    docs = load_yaml_docs("deploy", "kubernetes", "deployment.yaml")
    dep, svc, mon = by_kind(docs, "Deployment"), by_kind(docs, "Service"), by_kind(docs, "PodMonitor")
    pod = dep["spec"]["template"]
    labels = pod["metadata"]["labels"]
    assert dep["spec"]["selector"]["matchLabels"].items() <= labels.items()
    c = pod["spec"]["containers"][0]
    assert c["resources"]["limits"]["nvidia.com/gpu"] >= 1
    assert flag_value(c["args"], "--model") and flag_value(c["args"], "--listen").endswith(":50051")
    assert flag_value(c["args"], "--metrics_listen").endswith(":9464")
    ports = container_ports(pod["spec"])
    assert ports == {"grpc": 50051, "metrics": 9464}
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert c[probe]["grpc"]["port"] == ports["grpc"], probe  # grpc.health.v1
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert svc["spec"]["selector"].items() <= labels.items()
    assert {p["targetPort"] for p in svc["spec"]["ports"]} <= set(ports)
    assert mon["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert mon["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"


def assert_token_secret_mounted(pod_spec, args):
    """A non-loopback --listen needs TLS or a token (scored refuses it otherwise): the token file must lie
    in a mounted Secret."""
    token = flag_value(args, "--auth_token_file")
    assert token, "--listen 0.0.0.0 needs --auth_token_file (or TLS)"
    mounts = {m["name"]: m["mountPath"] for m in pod_spec["containers"][0]["volumeMounts"]}
    secrets = {v["name"] for v in pod_spec["volumes"] if "secret" in v}
    assert any(token.startswith(mounts[name] + "/") for name in secrets if name in mounts), token


def test_deployment_mounts_its_token():
    dep = by_kind(load_yaml_docs("deploy", "kubernetes", "deployment.yaml"), "Deployment")
    pod = dep["spec"]["template"]["spec"]
    assert_token_secret_mounted(pod, pod["containers"][0]["args"])


@pytest.mark.parametrize("name,kind", [("deployment.yaml", "Deployment"),
                                       ("statefulset-multihost.yaml", "StatefulSet")])
def test_every_pod_has_a_read_only_root_and_a_writable_tmp(name, kind):
    """README promises Pod Security "restricted" with a read-only root and an emptyDir /tmp for every pod: the
    StatefulSet had neither."""
    pod = by_kind(load_yaml_docs("deploy", "kubernetes", name), kind)["spec"]["template"]["spec"]
    c = pod["containers"][0]
    security = c["securityContext"]
    assert security["readOnlyRootFilesystem"] is True and security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"] and security["runAsNonRoot"] is True
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "/tmp" in mounts and "emptyDir" in volumes[mounts["/tmp"]]


def test_statefulset_for_multihost_tp():
    docs = load_yaml_docs("deploy", "kubernetes", "statefulset-multihost.yaml")
    sts, svc = by_kind(docs, "StatefulSet"), by_kind(docs, "Service")
    assert svc["spec"]["clusterIP"] == "None" and sts["spec"]["serviceName"] == svc["metadata"]["name"]
    # Followers resolve rank 0's name before it is Ready (it turns Ready only once they joined).
    assert svc["spec"]["publishNotReadyAddresses"] is True
    pod = sts["spec"]["template"]["spec"]
    c = pod["containers"][0]
    args = " ".join(c["args"])
    for flag in ("--nnodes", "--node_rank", "--rendezvous", "--tp"):
        assert flag in args
    rendezvous_port = int(re.search(r"--rendezvous=\S+:(\d+)", args).group(1))
    assert rendezvous_port in container_ports(pod).values()
    # The rendezvous host is pod 0 of this StatefulSet under the headless service.
    rendezvous_host = re.search(r"--rendezvous=(\S+):\d+", args).group(1)
    assert rendezvous_host.split(".")[:2] == [sts["metadata"]["name"] + "-0", svc["metadata"]["name"]]
    # The node rank is the pod ordinal; one pod per node; each pod holds tp / nnodes GPUs.
    assert "--node_rank=${HOSTNAME##*-}" in args
    nnodes, tp = int(flag_value([args], "--nnodes")), int(flag_value([args], "--tp"))
    assert sts["spec"]["replicas"] == nnodes and tp % nnodes == 0
    assert c["resources"]["limits"]["nvidia.com/gpu"] == tp // nnodes
    # Pods start together and are replaced together; only rank 0 can answer probes.
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    assert sts["spec"]["updateStrategy"]["type"] == "OnDelete"
    assert c["readinessProbe"]["grpc"]["port"] == container_ports(pod)["grpc"]
    assert "livenessProbe" not in c and "startupProbe" not in c
    assert_token_secret_mounted(pod, [args])
    # Clients reach rank 0 only.
    client_svc = next(d for d in docs if d["kind"] == "Service" and d["spec"].get("clusterIP") != "None")
    assert client_svc["spec"]["selector"]["statefulset.kubernetes.io/pod-name"] == sts["metadata"]["name"] + "-0"
    assert {p["targetPort"] for p in client_svc["spec"]["ports"]} <= set(container_ports(pod))


def test_prometheus_config_targets_metrics_port():
    config = load_yaml_docs("deploy", "prometheus", "prometheus.yml")[0]
    job = next(j for j in config["scrape_configs"] if j["job_name"] == "scored")
    assert job["metrics_path"] == "/metrics"
    assert job["static_configs"][0]["targets"][0].endswith(":9464")


def test_prometheus_configs_load_the_rules_and_compose_publishes_on_loopback():
    for config, folder in ((load_yaml_docs("deploy", "prometheus", "prometheus.yml")[0], "deploy/prometheus"),
                           (load_yaml_docs("docker", "prometheus-compose.yml")[0], None)):
        assert config["rule_files"] == ["scored-rules.yml"]
        if folder:
            assert os.path.exists(os.path.join(REPO, folder, "scored-rules.yml"))
    compose = load_yaml_docs("docker", "compose.yaml")[0]["services"]
    assert any(v.endswith("scored-rules.yml:/etc/prometheus/scored-rules.yml:ro")
               for v in compose["prometheus"]["volumes"])
    for service in compose.values():
        for port in service.get("ports", []):
            assert port.startswith("127.0.0.1:"), port  # Grafana's admin/admin, Prometheus unauthenticated


SYSTEMD_UNIT = os.path.join(REPO, "deploy", "systemd", "scored.service")


def test_systemd_unit():
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str
    unit.read(SYSTEMD_UNIT)
    svc = unit["Service"]
    assert svc["ExecStart"].split()[0].endswith("/scored")
    assert svc["Restart"] == "on-failure" and int(svc["RestartSec"]) >= 1
    assert svc["KillSignal"] == "SIGTERM" and unit["Install"]["WantedBy"] == "multi-user.target"
    assert svc["User"] != "root"
    # Readiness over sd_notify (server/sd_notify.h; tests/server/sd_notify_e2e_test.cc sends it for real).
    assert svc["Type"] == "notify" and svc["NotifyAccess"] == "main"
    assert int(svc["TimeoutStartSec"]) >= 600  # a large model's load
    # The restart limit is a [Unit] setting: systemd ignores it in [Service] and restarts forever.
    assert "StartLimitIntervalSec" not in svc and "StartLimitBurst" not in svc
    assert int(unit["Unit"]["StartLimitIntervalSec"]) > 0 and int(unit["Unit"]["StartLimitBurst"]) >= 1


def test_systemd_analyze_verify(tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    # verify requires ExecStart's binary to exist: point it at the build's scored (else any executable).
    binary = os.path.join(BUILD, "server", "scored")
    if not os.access(binary, os.X_OK):
        binary = shutil.which("true")
    with open(SYSTEMD_UNIT) as f:
        text = f.read()
    assert "ExecStart=/usr/local/bin/scored " in text
    unit = tmp_path / "scored.service"
    unit.write_text(text.replace("ExecStart=/usr/local/bin/scored ", f"ExecStart={binary} "))
    run = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, timeout=120)
    complaints = [line for line in (run.stdout + run.stderr).splitlines() if "scored.service" in line]
    assert run.returncode == 0 and not complaints, run.stdout + run.stderr


def test_grafana_dashboard_is_valid_json_with_queries():
    with open(os.path.join(REPO, "deploy", "grafana", "scored-dashboard.json")) as f:
        dash = json.load(f)
    titles = " ".join(p["title"] for p in dash["panels"]).lower()
    for want in ("tokens", "latency", "queue", "errors", "batch", "gpu memory"):
        assert want in titles
    assert all(t["expr"] for p in dash["panels"] for t in p["targets"])


def dockerfile_instructions():
    with open(os.path.join(REPO, "docker", "Dockerfile")) as f:
        text = f.read().replace("\\\n", " ")
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_dockerfile_uses_project_scripts_and_nonroot_runtime():
    ins = dockerfile_instructions()
    stages = [i for i in ins if i.startswith("FROM ")]
    assert len(stages) == 2 and "AS builder" in stages[0] and "AS runtime" in stages[1]
    runtime = ins[ins.index(stages[1]):]
    body = " ".join(ins)
    assert "scripts/install_deps.sh" in body and "--runtime" in body
    for path in re.findall(r"\b(scripts/[\w./-]+)", body):
        assert os.path.exists(os.path.join(REPO, path)), path
    assert any(i.startswith("USER ") and i.split()[1] != "root" for i in runtime)
    assert any(i.startswith("ENTRYPOINT") and "scored" in i for i in runtime)


def test_compose_services_are_wired():
    compose = load_yaml_docs("docker", "compose.yaml")[0]
    svcs = compose["services"]
    assert set(svcs) == {"scored", "prometheus", "grafana"}
    # Published on the host's loopback only; inside the container scored listens on every address, which it
    # refuses without TLS, a token or the explicit --allow_insecure_remote.
    assert set(svcs["scored"]["ports"]) == {"127.0.0.1:50051:50051", "127.0.0.1:9464:9464"}
    cmd = svcs["scored"]["command"]
    assert "--listen=0.0.0.0:50051" in cmd
    assert "--allow_insecure_remote" in cmd or any(
        a.startswith(("--auth_token_file=", "--tls_cert=")) for a in cmd)
    assert os.path.exists(os.path.join(REPO, "docker", svcs["scored"]["build"]["context"],
                                       svcs["scored"]["build"]["dockerfile"]))
    prom_mount = svcs["prometheus"]["volumes"][0].split(":")[0]
    prom = load_yaml_docs("docker", prom_mount)[0]
    assert prom["scrape_configs"][0]["static_configs"][0]["targets"] == ["scored:9464"]
    for vol in svcs["grafana"]["volumes"]:
        assert os.path.exists(os.path.normpath(os.path.join(REPO, "docker", vol.split(":")[0]))), vol
