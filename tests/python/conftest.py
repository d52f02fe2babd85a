"""Fixtures for the Python tests: a real `scored` daemon (CPU backend, stories260K) on 127.0.0.1:0.

Environment (set by tests/python/CMakeLists.txt when run through ctest):
  SCORED_BINARY_DIR  the CMake build folder (server/scored lives there)
  SCORED_DATA        offline assets (stories260K-hf, wikitext-2-raw, ...)
"""
import json
import os
import signal
import subprocess
import tempfile
import time

import pytest

from scored_client import ScorerClient

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.environ.get("SCORED_DATA", os.path.join(REPO, "..", "shared", "data"))
BUILD = os.environ.get("SCORED_BINARY_DIR", os.path.join(REPO, "build"))


class ScoredDaemon:
    """A running `scored` subprocess; .address is "127.0.0.1:P", .metrics_port the metrics port."""

    def __init__(self, args, startup_timeout=120.0):
        self.tmp = tempfile.mkdtemp(prefix="scored-py-")
        port_file = os.path.join(self.tmp, "ports.json")
        self.log_path = os.path.join(self.tmp, "scored.log")
        binary = os.path.join(BUILD, "server", "scored")
        if not os.path.exists(binary):
            pytest.fail(f"scored binary not found at {binary} (build first, or set SCORED_BINARY_DIR)")
        cmd = [binary, "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0", f"--port_file={port_file}"] + args
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + startup_timeout
        while not os.path.exists(port_file):
            if self.proc.poll() is not None or time.time() > deadline:
                self.stop()
                pytest.fail(f"scored did not start: {self.log_tail()}")
            time.sleep(0.05)
        with open(port_file) as f:
            ports = json.load(f)
        self.address = f"127.0.0.1:{ports['grpc']}"
        self.metrics_port = ports["metrics"]
        with ScorerClient(self.address) as c:
            while not c.health(timeout=2.0):
                if self.proc.poll() is not None or time.time() > deadline:
                    self.stop()
                    pytest.fail(f"scored never became SERVING: {self.log_tail()}")
                time.sleep(0.1)

    def log_tail(self, n=4000):
        try:
            with open(self.log_path) as f:
                return f.read()[-n:]
        except OSError:
            return ""

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


@pytest.fixture(scope="session")
def stories_dir():
    d = os.path.join(DATA, "stories260K-hf")
    if not os.path.exists(os.path.join(d, "model.safetensors")):
        pytest.fail(f"test assets missing: {d} (set SCORED_DATA)")
    return d


@pytest.fixture(scope="session")
def daemon(stories_dir):
    d = ScoredDaemon([f"--model={stories_dir}", "--backend=cpu"])
    yield d
    assert d.stop() == 0, d.log_tail()


@pytest.fixture(scope="session")
def client(daemon):
    with ScorerClient(daemon.address) as c:
        yield c


@pytest.fixture(scope="session")
def golden(stories_dir):
    with open(os.path.join(stories_dir, "reference_logprobs.json")) as f:
        return json.load(f)
