"""The "scored" lm-eval model at its defaults against lm-eval's own HF backend (goldens made by
scripts/make_lm_eval_hf_goldens.py: float32, stories260K-hf, lm-eval 0.4.13 at its defaults), through the real
lm-eval command line on local tasks (tests/python/lm_eval_local_tasks.py: lm-eval's wikitext task definition
on full WikiText-2 test articles, and a small multiple-choice task; no hub access).

- A server started with --max_seq_len 513 gives the adapter's default max_length 512, HF's default for this
  model (config max_position_embeddings 512): every request's log-likelihood and is_greedy, and every metric,
  equal HF's (1e-6 relative), BOS handling included (HF adds the tokenizer's BOS to rolling documents and
  contexts at its defaults).
- A server at its default --max_seq_len (512): the defaults still work on full-length documents (max_length
  511: before, rolling windows of max_seq_len + 1 ids were refused with OUT_OF_RANGE).
- add_bos_token=false: no BOS, equal to HF with add_bos_token=False (its own goldens, made with
  --add_bos_token false).
"""
import glob
import json
import os
import subprocess
import sys

import pytest

import lm_eval_local_tasks
from conftest import DATA, ScoredDaemon

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "fixtures", "lm_eval_hf_golden.json")
REL = 1e-6  # metrics, and each request's log-likelihood relative to its size
# HF computes each token's log-softmax in float32 (the server in float32 with double sums): a request of a few
# tokens differs by float32 round-off of the logits, ~1e-7 of their size, so requests also get 1e-5 absolute.
ABS = 1e-5


@pytest.fixture(scope="module")
def hf_golden():
    with open(GOLDEN) as f:
        return json.load(f)


@pytest.fixture(scope="module")
def daemon_513(stories_dir):
    d = ScoredDaemon([f"--model={stories_dir}", "--backend=cpu", "--max_seq_len=513"])
    yield d
    assert d.stop() == 0, d.log_tail()


def run_lm_eval(tmp_path, address, model_args=""):
    """lm-eval's command line with the scored model on the local tasks: (metrics by task, requests by task)."""
    task_dir = tmp_path / "tasks"
    tasks = lm_eval_local_tasks.write_tasks(str(task_dir), DATA)
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "scored_client.lm_eval_cli", "run", "--model", "scored",
           "--model_args", f"server={address}{model_args}", "--tasks", ",".join(tasks),
           "--include_path", str(task_dir), "--log_samples", "--output_path", str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    [results_path] = glob.glob(str(out / "**" / "results_*.json"), recursive=True)
    with open(results_path) as f:
        results = json.load(f)["results"]
    metrics, requests = {}, {}
    for task in tasks:
        metrics[task] = {k.split(",")[0]: v for k, v in results[task].items()
                         if k.endswith(",none") and not k.split(",")[0].endswith("_stderr")}
        [samples_path] = glob.glob(str(out / "**" / f"samples_{task}_*.jsonl"), recursive=True)
        with open(samples_path) as f:
            requests[task] = lm_eval_local_tasks.per_request([json.loads(line) for line in f])
    return metrics, requests


def assert_equals_golden(metrics, requests, hf_golden):
    """Every metric (1e-6 relative), every request's log-likelihood and is_greedy, as HF's."""
    assert hf_golden["wiki_docs"] == lm_eval_local_tasks.WIKI_DOCS
    for task, golden in hf_golden["tasks"].items():
        assert set(metrics[task]) == set(golden["metrics"]), task
        for name, value in golden["metrics"].items():
            assert metrics[task][name] == pytest.approx(value, rel=REL), f"{task} {name}"
        assert len(requests[task]) == len(golden["requests"]), task
        for doc, (got, want) in enumerate(zip(requests[task], golden["requests"])):
            assert len(got) == len(want), f"{task} doc {doc}"
            for g, w in zip(got, want):
                assert g[0] == pytest.approx(w[0], rel=REL, abs=ABS), f"{task} doc {doc}"
                assert g[1:] == w[1:], f"{task} doc {doc}: is_greedy"  # multiple choice only


def test_defaults_equal_the_hf_backend(tmp_path, daemon_513, hf_golden):
    assert hf_golden["max_length"] == 512 and hf_golden["add_bos_token"] is None
    metrics, requests = run_lm_eval(tmp_path, daemon_513.address)
    assert_equals_golden(metrics, requests, hf_golden)
    # The same accuracy, from the same per-request numbers.
    assert metrics["scored_story_mc"]["acc"] == hf_golden["tasks"]["scored_story_mc"]["metrics"]["acc"]
    # The documents really are full length: longer than one window.
    with open(tmp_path / "tasks" / "wikitext_docs.jsonl") as f:
        pages = [json.loads(line)["page"] for line in f]
    assert min(len(p) for p in pages) > 4 * 512


def test_defaults_fit_a_default_server(tmp_path, daemon, hf_golden, client):
    """max_seq_len 512: max_length 511, windows of 512 ids; full documents score, close to HF's 512."""
    metrics, requests = run_lm_eval(tmp_path, daemon.address)
    golden = hf_golden["tasks"]["scored_wikitext_local"]
    for name, value in golden["metrics"].items():
        assert metrics["scored_wikitext_local"][name] == pytest.approx(value, rel=2e-2), name
    # Multiple choice requests are short: the same as HF's.
    for got, want in zip(requests["scored_story_mc"], hf_golden["tasks"]["scored_story_mc"]["requests"]):
        for g, w in zip(got, want):
            assert g[0] == pytest.approx(w[0], rel=REL, abs=ABS)


def test_add_bos_token_override(tmp_path, daemon_513):
    """add_bos_token=false: rolling documents and contexts without BOS (HF with add_bos_token=False)."""
    from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

    from scored_client import ScorerClient

    metrics, requests = run_lm_eval(tmp_path, daemon_513.address, ",add_bos_token=false")
    with open(os.path.join(HERE, "fixtures", "lm_eval_hf_golden_no_bos.json")) as f:
        no_bos_golden = json.load(f)
    assert no_bos_golden["max_length"] == 512 and no_bos_golden["add_bos_token"] is False
    assert_equals_golden(metrics, requests, no_bos_golden)
    with open(tmp_path / "tasks" / "wikitext_docs.jsonl") as f:
        docs = [json.loads(line) for line in f]
    from lm_eval.tasks.wikitext.preprocess_wikitext import wikitext_detokenizer

    with ScorerClient(daemon_513.address) as client:
        bos = client.model_info().bos_id
        for doc, got in zip(docs, requests["scored_wikitext_local"]):
            ids, _ = client.tokenize(wikitext_detokenizer(doc), add_bos=False)
            assert ids[0] != bos
            windows = map(make_disjoint_window, get_rolling_token_windows(ids, bos, 512, 1))
            expected = sum(client.score(c + p, score_from=len(c)).sum_logprob for c, p in windows)
            assert got[0][0] == pytest.approx(expected, rel=1e-9)
        # Multiple choice contexts without BOS: the first request of the first document, scored directly.
        doc = lm_eval_local_tasks.MC_DOCS[0]
        whole, _ = client.tokenize(doc["context"] + doc["choices"][0], add_bos=False)
        context, _ = client.tokenize(doc["context"], add_bos=False)
        direct = client.score(whole, score_from=len(context)).sum_logprob
        assert requests["scored_story_mc"][0][0][0] == pytest.approx(direct, rel=1e-9)
