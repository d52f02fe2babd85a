"""Hostile clients on every port of one real `scored` (CPU backend, stories260K, a token, a 64 MiB memory
budget), beside normal clients: the soak of the adversarial trial's findings.

- Stalled gRPC messages (raw HTTP/2, tests/python/h2_raw.py): a Score message declared 60 MiB, 20 MiB sent,
  then nothing, on 100 streams over 4 connections and no token. Before the transport quota RSS grew by
  ~2 GiB; now the quota (the size of the memory budget) resets the streams holding the most.
- The soak (SOAK_SECONDS): slow HTTP heads, chunked floods with and without the token, header floods,
  garbage on both ports and stalled gRPC messages, while a gRPC and an HTTP client score the same requests
  over and over. Every normal request must be answered with exactly the result it had on the idle server,
  within DEADLINE_S (no normal client starved), and RSS must stay within the budget plus a stated overhead.

The latency target (the normal clients' p99 under attack within 2x the idle server's, plus 20 ms for the
scheduling of this process's own attacker threads on the same cores) is a speed target: it is checked by the
benchmark scripts/bench/hostile_soak.sh (SCORED_SOAK_LATENCY_TARGET=1, a release build on otherwise idle cores),
not here, where the suite shares 2 cores with other tests and runs again under AddressSanitizer. Here the
p99s are printed (and written to SCORED_SOAK_REPORT when it names a file).
"""
import json
import os
import random
import socket
import sys
import threading
import time
import urllib.request

import grpc
import pytest

from conftest import ScoredDaemon
from scored_client import ScoreError, ScorerClient

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import h2_raw  # noqa: E402

TOKEN = "hostile-soak-token-0123456789"
BUDGET = 64 << 20
# What RSS may grow by beyond the budget: the gRPC transport's quota (the budget's size again), thread stacks
# and allocator slack.
OVERHEAD = 96 << 20
SOAK_SECONDS = float(os.environ.get("SCORED_SOAK_SECONDS", "45"))
# A normal request pair (one gRPC Score, one HTTP completion) answered later than this is a starved client.
DEADLINE_S = 30.0
LATENCY_TARGET = os.environ.get("SCORED_SOAK_LATENCY_TARGET") == "1"
IDS = [1] + [random.Random(7).randrange(3, 500) for _ in range(200)]


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


@pytest.fixture(scope="module")
def hostile_daemon(stories_dir, tmp_path_factory):
    token = tmp_path_factory.mktemp("soak") / "token"
    token.write_text(TOKEN + "\n")
    d = ScoredDaemon([f"--model={stories_dir}", "--backend=cpu", f"--auth_token_file={token}",
                      f"--max_buffered_bytes={BUDGET}", "--max_message_bytes=4194304",
                      "--openai_listen=127.0.0.1:0", "--openai_header_timeout_s=3"])
    with open(os.path.join(d.tmp, "ports.json")) as f:
        d.openai_port = json.load(f)["openai"]
    d.grpc_port = int(d.address.rsplit(":", 1)[1])
    yield d
    assert d.stop() == 0, d.log_tail()


def stall_grpc(port, connections, streams, declared, send):
    conns = [h2_raw.Connection("127.0.0.1", port) for _ in range(connections)]
    for c in conns:
        c.pump(0.1)
    resets = 0
    for c in conns:
        for _ in range(streams):
            if c.closed or c.goaway is not None:
                break
            c.send_message_part(c.open_grpc("/scored.v1.Scorer/Score"), declared, send, deadline_s=5)
        c.pump(0.2)
        resets += len(c.reset_streams) + (1 if c.goaway is not None else 0)
    return conns, resets


def test_stalled_grpc_messages_are_bounded(hostile_daemon):
    pid = hostile_daemon.proc.pid
    before = rss_bytes(pid)
    peak = [before]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], rss_bytes(pid))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample)
    sampler.start()
    conns, resets = stall_grpc(hostile_daemon.grpc_port, 4, 25, 60 << 20, 20 << 20)
    done.set()
    sampler.join()
    assert resets > 0, "the transport never pushed back"
    assert peak[0] - before < BUDGET + OVERHEAD, f"RSS {before >> 20} -> peak {peak[0] >> 20} MiB"
    with ScorerClient(hostile_daemon.address, token=TOKEN) as c:
        assert c.health(timeout=5.0)
        assert len(c.score(IDS).logprob) == len(IDS) - 1
    for c in conns:
        c.close()


def http_completion(port):
    body = json.dumps({"prompt": IDS, "max_tokens": 0, "echo": True, "logprobs": 1}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                 headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())["choices"][0]["logprobs"]["token_logprobs"]


class Attackers:
    def __init__(self, daemon):
        self.http = daemon.openai_port
        self.grpc = daemon.grpc_port
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=f, daemon=True) for f in
                        (self.slow_heads, self.chunked, self.headers, self.garbage, self.stalled)]

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=30)

    def _connect(self, port):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        return s

    def slow_heads(self):
        conns = []
        while not self.stop.is_set():
            while len(conns) < 40:
                s = self._connect(self.http)
                s.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n")
                conns.append(s)
            alive = []
            for s in conns:
                try:
                    s.sendall(b"X")
                    alive.append(s)
                except OSError:
                    s.close()
            conns = alive
            self.stop.wait(0.5)
        for s in conns:
            s.close()

    def _flood(self, head, chunk, total):
        s = self._connect(self.http)
        try:
            s.sendall(head)
            sent = 0
            while sent < total and not self.stop.is_set():
                s.sendall(chunk)
                sent += len(chunk)
        except OSError:
            pass
        finally:
            s.close()

    def chunked(self):
        chunk = b"100000\r\n" + b" " * (1 << 20) + b"\r\n"
        while not self.stop.is_set():
            for token in (b"", f"Authorization: Bearer {TOKEN}\r\n".encode()):
                self._flood(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + token +
                            b"Transfer-Encoding: chunked\r\n\r\n", chunk, 16 << 20)
                self.stop.wait(0.25)

    def headers(self):
        while not self.stop.is_set():
            self._flood(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n", b"X-Flood: " + b"a" * 1000 + b"\r\n", 4 << 20)
            self.stop.wait(0.25)

    def garbage(self):
        rng = random.Random(11)
        while not self.stop.is_set():
            for port in (self.http, self.grpc):
                try:
                    s = self._connect(port)
                    s.sendall(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4096))))
                    s.close()
                except OSError:
                    pass
            self.stop.wait(0.05)

    def stalled(self):
        while not self.stop.is_set():
            conns, _ = stall_grpc(self.grpc, 2, 10, 60 << 20, 8 << 20)
            self.stop.wait(3.0)
            for c in conns:
                c.close()


def score_retrying(client, counts):
    """Score(IDS), retried as scored-ppl retries: under transport memory pressure gRPC resets streams
    (RESOURCE_EXHAUSTED "Buffers full"), a normal client's among them."""
    for _ in range(10):
        try:
            return list(client.score(IDS).logprob)
        except ScoreError as e:
            if e.code not in (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE):
                raise
            counts["retries"] += 1
    raise AssertionError("Score failed 10 times in a row")


def p99(latencies):
    s = sorted(latencies)
    return s[min(len(s) - 1, int(0.99 * len(s)))]


def test_normal_clients_beside_every_kind_of_hostile_client(hostile_daemon):
    pid = hostile_daemon.proc.pid
    with ScorerClient(hostile_daemon.address, token=TOKEN) as grpc_client:
        want_grpc = list(grpc_client.score(IDS).logprob)
        want_http = http_completion(hostile_daemon.openai_port)
        idle = []
        for _ in range(60):
            t = time.perf_counter()
            grpc_client.score(IDS)
            http_completion(hostile_daemon.openai_port)
            idle.append(time.perf_counter() - t)
        start_rss = rss_bytes(pid)
        peak = start_rss
        loaded, answered, counts = [], 0, {"retries": 0}
        with Attackers(hostile_daemon):
            end = time.time() + SOAK_SECONDS
            while time.time() < end:
                t = time.perf_counter()
                assert score_retrying(grpc_client, counts) == want_grpc
                assert http_completion(hostile_daemon.openai_port) == want_http
                loaded.append(time.perf_counter() - t)
                answered += 1
                peak = max(peak, rss_bytes(pid))
        assert answered >= 20
        assert peak - start_rss < BUDGET + OVERHEAD, f"RSS {start_rss >> 20} -> peak {peak >> 20} MiB"
        assert grpc_client.health(timeout=5.0)
    print(f"idle p99 {p99(idle) * 1e3:.1f} ms, under attack p99 {p99(loaded) * 1e3:.1f} ms, max "
          f"{max(loaded) * 1e3:.1f} ms over {answered} pairs ({counts['retries']} gRPC retries); "
          f"RSS {start_rss >> 20} -> peak {peak >> 20} MiB")
    report = os.environ.get("SCORED_SOAK_REPORT")
    if report:
        with open(report, "w") as f:
            json.dump({"seconds": SOAK_SECONDS, "pairs": answered, "grpc_retries": counts["retries"],
                       "idle_p99_s": p99(idle), "loaded_p99_s": p99(loaded), "loaded_max_s": max(loaded),
                       "rss_start_bytes": start_rss, "rss_peak_bytes": peak}, f)
    assert max(loaded) < DEADLINE_S, f"a normal request pair took {max(loaded):.1f} s under attack"
    if LATENCY_TARGET:
        assert p99(loaded) <= 2 * p99(idle) + 0.020, (p99(idle), p99(loaded))
