"""The installed package runs on its own: `cmake --install` of the build tree into a temporary prefix, then
the installed binaries print their version and help, the installed `scored` loads stories260K from the
data path and serves (readiness through sd_notify, its ports through --port_file), and the installed
`scored-ppl` scores WikiText-2 test against it with the golden of reference_methods.json. Nothing here
runs from the build tree: before install() rules existed, `cmake --install` installed nothing and exited
0."""
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import tempfile

import pytest

from conftest import BINARIES, BUILD, DATA

STARTUP_TIMEOUT_S = 180.0


def run(path, *args, timeout=60):
    return subprocess.run([path, *args], capture_output=True, text=True, timeout=timeout)


def test_installed_binaries_print_version_and_help(prefix):
    for name in BINARIES:
        installed = os.path.join(prefix, "bin", name)
        version = run(installed, "--version")
        assert version.returncode == 0, version.stderr
        pattern = rf"{re.escape(name)} \d+\.\d+\.\d+( \(git [0-9a-f]+(-dirty)?\))?\n"
        assert re.fullmatch(pattern, version.stdout), version.stdout
        help_run = run(installed, "--help")
        assert help_run.returncode == 0, help_run.stderr
        assert "No flags matched" not in help_run.stdout
        assert ("--model" if name == "scored" else "--server") in help_run.stdout
        # The installed binary needs nothing from the build tree (its RUNPATH names no build folder).
        readelf = run("readelf", "-d", installed)
        assert readelf.returncode == 0, readelf.stderr
        assert os.path.realpath(BUILD) not in readelf.stdout


class InstalledDaemon:
    """The installed `scored` on 127.0.0.1:0 (CPU backend). Waits for its READY=1 on a notify socket of our
    own (the readiness protocol of the systemd unit) or for its exit, whichever comes first."""

    def __init__(self, prefix, model_dir):
        self.tmp = tempfile.mkdtemp(prefix="scored-install-")
        self.port_file = os.path.join(self.tmp, "ports.json")
        self.log_path = os.path.join(self.tmp, "scored.log")
        notify_path = os.path.join(self.tmp, "notify")
        self.notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.notify.bind(notify_path)
        env = dict(os.environ, NOTIFY_SOCKET=notify_path)
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [os.path.join(prefix, "bin", "scored"), f"--model={model_dir}", "--backend=cpu",
             "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0", f"--port_file={self.port_file}"],
            stdout=self.log, stderr=subprocess.STDOUT, env=env, cwd=self.tmp)
        self.pidfd = os.pidfd_open(self.proc.pid)

    def wait_ready(self):
        while True:
            ready, _, _ = select.select([self.notify, self.pidfd], [], [], STARTUP_TIMEOUT_S)
            if not ready:
                pytest.fail(f"scored sent no READY=1 in {STARTUP_TIMEOUT_S} s: {self.log_tail()}")
            if self.pidfd in ready:
                pytest.fail(f"scored exited during startup ({self.proc.wait()}): {self.log_tail()}")
            message = self.notify.recv(4096).decode()
            if "READY=1" in message.split("\n"):
                break
        with open(self.port_file) as f:
            return json.load(f)["grpc"]

    def log_tail(self, n=4000):
        self.log.flush()
        with open(self.log_path) as f:
            return f.read()[-n:]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        os.close(self.pidfd)
        self.notify.close()
        self.log.close()
        return self.proc.returncode


def test_installed_daemon_serves_and_installed_scored_ppl_scores(prefix, tmp_path):
    model_dir = os.path.join(DATA, "stories260K-hf")
    data = os.path.join(DATA, "wikitext-2-raw", "wiki.test.raw")
    for path in (os.path.join(model_dir, "model.safetensors"), data):
        assert os.path.exists(path), f"test assets missing: {path} (set SCORED_DATA)"
    with open(os.path.join(model_dir, "reference_methods.json")) as f:
        golden = next(r for r in json.load(f)["results"] if r["method"] == "gptq")
    daemon = InstalledDaemon(prefix, model_dir)
    try:
        port = daemon.wait_ready()
        report_path = tmp_path / "report.json"
        ppl = run(os.path.join(prefix, "bin", "scored-ppl"), f"--server=127.0.0.1:{port}", f"--data={data}",
                  "--method=gptq", f"--ctx={golden['params']['ctx']}",
                  f"--max_windows={golden['params']['max_windows']}", f"--json={report_path}", "--quiet",
                  timeout=300)
        assert ppl.returncode == 0, ppl.stdout + ppl.stderr + daemon.log_tail()
        with open(report_path) as f:
            report = json.load(f)
    finally:
        rc = daemon.stop()
    assert rc == 0, daemon.log_tail()
    assert report["num_windows"] == golden["num_windows"]
    assert report["num_scored"] == golden["num_scored"]
    # The float64 reference of the same windows; the CPU engine matches it to 1e-5 (as in ppl_e2e_test).
    assert report["sum_logprob"] == pytest.approx(golden["sum_logprob"], rel=1e-5)
    assert report["ppl"] == pytest.approx(golden["ppl"], rel=1e-5)


def test_installed_systemd_unit_names_the_installed_binary(prefix):
    """`--prefix P` installs a unit whose ExecStart is P/bin/scored (it named /usr/local/bin whatever the
    prefix), and the /etc/default template it reads, which sets --model."""
    unit_dir = os.path.join(prefix, "share", "scored", "systemd")
    with open(os.path.join(unit_dir, "scored.service")) as f:
        unit = f.read()
    [exec_start] = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    binary = exec_start[len("ExecStart="):].split()[0]
    assert binary == os.path.join(prefix, "bin", "scored"), exec_start
    assert os.access(binary, os.X_OK)
    assert "EnvironmentFile=-/etc/default/scored" in unit and "User=scored" in unit
    assert "useradd --system" in unit  # how to create the user it runs as
    with open(os.path.join(unit_dir, "scored.default")) as f:
        defaults = f.read()
    assert re.search(r'^SCORED_ARGS="--model=\S+', defaults, re.M), defaults
    systemd_analyze = shutil.which("systemd-analyze")
    if systemd_analyze:  # not installed everywhere; where it is, the unit verifies
        check = run(systemd_analyze, "verify", os.path.join(unit_dir, "scored.service"))
        assert "is not executable" not in check.stderr, check.stderr
