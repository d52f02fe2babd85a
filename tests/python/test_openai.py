"""The OpenAI-compatible HTTP endpoint (--openai_listen, server/openai_http.h) of the real daemon (CPU backend,
stories260K-hf, a bearer token): its routes and errors, exact equality with gRPC Score, stock lm-eval
`local-completions` (remote tokenizer: no local tokenizer) against the gRPC lm-eval adapter on the local tasks,
and the openai Python client.

lm-eval's API models need `tenacity`, the client test `openai`: both are in scripts/requirements-test.txt
(scripts/setup_python.sh installs them); a venv without them fails these tests, saying so.
"""
import glob
import json
import math
import os
import subprocess
import sys

import pytest
import requests

import lm_eval_local_tasks
from conftest import DATA, ScoredDaemon
from scored_client import ScorerClient

TOKEN = "openai-endpoint-test-token-0123"
MODEL = "stories260K-hf"  # the model folder's name: the default --openai_model_name
# local-completions keeps max_length - 1 ids per request and adds one generated token; the gRPC adapter keeps
# max_length + 1 ids. The same requests: adapter max_length = LOCAL_MAX_LENGTH - 2. 512 = the server's
# max_seq_len, so the longest prompt (511 ids) plus max_tokens 1 fits exactly.
LOCAL_MAX_LENGTH = 512
REL = 1e-6  # metrics and per-request sums: the same float32 log-probabilities, summed in another order


@pytest.fixture(scope="module")
def oa(stories_dir, tmp_path_factory):
    token_file = tmp_path_factory.mktemp("token") / "token"
    token_file.write_text(TOKEN + "\n")
    d = ScoredDaemon([f"--model={stories_dir}", "--backend=cpu", "--openai_listen=127.0.0.1:0",
                      f"--auth_token_file={token_file}", "--max_message_bytes=1048576"])
    with open(os.path.join(d.tmp, "ports.json")) as f:
        d.openai_port = json.load(f)["openai"]
    d.base = f"http://127.0.0.1:{d.openai_port}"
    yield d
    assert d.stop() == 0, d.log_tail()


@pytest.fixture(scope="module")
def grpc_client(oa):
    with ScorerClient(oa.address, token=TOKEN) as c:
        yield c


def require(module):
    try:
        return __import__(module)
    except ImportError:
        pytest.fail(f"the Python package '{module}' is missing: run scripts/setup_python.sh "
                    "(scripts/requirements-test.txt)")


def post(oa, path, body, token=TOKEN):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return requests.post(oa.base + path, json=body, headers=headers, timeout=120)


def get(oa, path, token=TOKEN):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return requests.get(oa.base + path, headers=headers, timeout=60)


def completion(oa, **body):
    r = post(oa, "/v1/completions", body)
    assert r.status_code == 200, r.text
    return r.json()


def assert_error(r, status, says):
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert says in err["message"], err
    assert err["code"] == status
    return err


def test_port_file_log_and_routes(oa):
    assert oa.openai_port > 0
    assert f"serving the OpenAI-compatible API on http://127.0.0.1:{oa.openai_port}/v1" in oa.log_tail(20000)
    assert get(oa, "/health", token=None).json() == {"status": "ok"}  # probes need no token
    models = get(oa, "/v1/models").json()
    assert models["object"] == "list"
    assert [m["id"] for m in models["data"]] == [MODEL]
    assert models["data"][0]["max_model_len"] == 512
    info = get(oa, "/tokenizer_info").json()
    assert (info["bos_token"], info["eos_token"], info["pad_token"]) == ("<s>", "</s>", None)
    # lm-eval's remote tokenizer finds BOS / EOS by tokenizing their strings.
    assert post(oa, "/tokenize", {"prompt": "<s>", "add_special_tokens": False}).json()["tokens"] == [1]
    assert post(oa, "/tokenize", {"prompt": "</s>", "add_special_tokens": False}).json()["tokens"] == [2]
    tok = post(oa, "/tokenize", {"prompt": "Once upon a time", "add_special_tokens": False}).json()
    assert tok["count"] == len(tok["tokens"]) and tok["max_model_len"] == 512
    assert post(oa, "/tokenize", {"prompt": "Once upon a time"}).json()["tokens"] == [1] + tok["tokens"]
    assert post(oa, "/detokenize", {"tokens": tok["tokens"]}).json() == {"prompt": "Once upon a time"}


def test_auth_and_errors(oa):
    assert_error(get(oa, "/v1/models", token=None), 401, "authorization")
    assert_error(post(oa, "/v1/completions", {"prompt": "x", "max_tokens": 0}, token=None), 401, "authorization")
    err = assert_error(post(oa, "/v1/completions", {"prompt": "x", "max_tokens": 0}, token="wrong-token-of-16+"),
                       401, "token")
    assert err["type"] == "authentication_error"
    # The tokenizer routes are open (as vLLM's): lm-eval's remote tokenizer sends no OPENAI_API_KEY.
    assert get(oa, "/tokenizer_info", token=None).status_code == 200
    assert post(oa, "/tokenize", {"prompt": "x"}, token=None).status_code == 200
    assert_error(post(oa, "/v1/completions", {"prompt": "x"}), 400, "max_tokens")
    assert_error(post(oa, "/v1/completions", {"prompt": "x", "max_tokens": 0, "model": "gpt-4"}), 404,
                 "gpt-4")
    assert_error(post(oa, "/v1/completions", {"prompt": [1, 999], "max_tokens": 0, "echo": True,
                                              "logprobs": 0}), 400, "999")
    # Ids outside the vocabulary, also where nothing needs scoring.
    assert_error(post(oa, "/v1/completions", {"prompt": [1, 512], "max_tokens": 0}), 400, "out of range [0, 512)")
    # max_seq_len 512: 512 ids score, but not with one more generated token.
    ids = [1] + [400] * 511
    assert len(completion(oa, prompt=ids, max_tokens=0, echo=True, logprobs=0)["choices"][0]["logprobs"]
               ["tokens"]) == 512
    assert_error(post(oa, "/v1/completions", {"prompt": ids, "max_tokens": 1}), 400, "max_seq_len is 512")
    assert_error(post(oa, "/v1/completions", {"prompt": ids + [5], "max_tokens": 0, "echo": True,
                                              "logprobs": 0}), 400, "513")
    # --max_message_bytes 1 MiB bounds the body.
    r = requests.post(oa.base + "/v1/completions", data=b"x" * (2 << 20),
                      headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
                      timeout=60)
    assert_error(r, 413, "--max_message_bytes")
    assert_error(get(oa, "/v1/nothing"), 404, "no such route")
    # Counted like gRPC calls.
    scrape = requests.get(f"http://127.0.0.1:{oa.metrics_port}/metrics", timeout=30).text
    assert 'method="OpenAI/v1/completions"' in scrape


def test_logprobs_equal_grpc_score(oa, grpc_client):
    text = "Once upon a time, there was a little girl named Lily. She loved to play outside."
    ids, _ = grpc_client.tokenize(text)
    want = grpc_client.score(ids, top_k=2)
    for max_tokens in (0, 1):
        out = completion(oa, model=MODEL, prompt=text, max_tokens=max_tokens, echo=True, logprobs=2)
        [choice] = out["choices"]
        lp = choice["logprobs"]
        n = len(ids)
        assert len(lp["tokens"]) == n + max_tokens
        assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
        # Exactly the gRPC float32 values (JSON carries them as doubles).
        assert lp["token_logprobs"][1:n] == want.logprob
        for pos in range(1, n):
            top = lp["top_logprobs"][pos]
            assert list(top.values())[:2] == [lp_ for _, lp_ in want.top_k[pos - 1]]
            assert max(top.values()) == want.top_k[pos - 1][0][1]
            # The position's own token is always there.
            assert lp["tokens"][pos] in top and top[lp["tokens"][pos]] == want.logprob[pos - 1]
        assert "".join(lp["tokens"][:n]) == "<s>" + text
        # text_offset indexes the echoed text: the BOS the tokenizer added is not in it and takes no characters.
        assert choice["text"].startswith(text)
        assert lp["text_offset"] == [0] + [sum(len(t) for t in lp["tokens"][1:i]) for i in range(1, len(lp["tokens"]))]
        for pos in range(1, len(lp["tokens"])):
            piece = lp["tokens"][pos]
            assert choice["text"][lp["text_offset"][pos]:lp["text_offset"][pos] + len(piece)] == piece
        assert out["usage"]["prompt_tokens"] == n and out["usage"]["completion_tokens"] == max_tokens
        if max_tokens == 1:
            # The greedy next token: the argmax after the whole prompt, as gRPC finds it (any appended id).
            nxt = grpc_client.score(ids + [ids[-1]], score_from=n, top_k=1).top_k[0][0]
            assert lp["token_logprobs"][n] == nxt[1]
            # Its string: what it adds to the decoded prompt; the text is the prompt and that string.
            before = post(oa, "/detokenize", {"tokens": ids}).json()["prompt"]
            after = post(oa, "/detokenize", {"tokens": ids + [nxt[0]]}).json()["prompt"]
            assert after.startswith(before) and lp["tokens"][n] == after[len(before):] != ""
            assert choice["text"] == text + lp["tokens"][n]
    # Without echo: only the generated token.
    out = completion(oa, prompt=ids, max_tokens=1, logprobs=1)
    lp = out["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == 1 and lp["token_logprobs"][0] == nxt[1]


def test_batches_keep_their_order(oa, grpc_client):
    texts = ["Once upon a time", "The dog was very happy.", "She saw a big red ball"]
    ids = [grpc_client.tokenize(t)[0] for t in texts]
    out = completion(oa, prompt=[ids[0], texts[1], ids[2]], max_tokens=0, echo=True, logprobs=0)
    assert [c["index"] for c in out["choices"]] == [0, 1, 2]
    for choice, seq in zip(out["choices"], ids):
        assert choice["logprobs"]["token_logprobs"][1:] == grpc_client.score(seq).logprob
    out = completion(oa, prompt=texts, max_tokens=1, echo=False)
    assert [c["index"] for c in out["choices"]] == [0, 1, 2]
    assert all(c["logprobs"] is None and c["text"] for c in out["choices"])


def run_lm_eval(tmp_path, cli_module, model, model_args, env_extra=None, extra_args=()):
    """lm-eval's command line on the local tasks: (metrics by task, per-request responses by task)."""
    task_dir = tmp_path / "tasks"
    tasks = lm_eval_local_tasks.write_tasks(str(task_dir), DATA)
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               **(env_extra or {}))
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", cli_module, "run", "--model", model, "--model_args", model_args,
           "--tasks", ",".join(tasks), "--include_path", str(task_dir), "--log_samples",
           "--output_path", str(out), *extra_args]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    [results_path] = glob.glob(str(out / "**" / "results_*.json"), recursive=True)
    with open(results_path) as f:
        results = json.load(f)["results"]
    metrics, per_request = {}, {}
    for task in tasks:
        metrics[task] = {k.split(",")[0]: v for k, v in results[task].items()
                         if k.endswith(",none") and not k.split(",")[0].endswith("_stderr")}
        [samples_path] = glob.glob(str(out / "**" / f"samples_{task}_*.jsonl"), recursive=True)
        with open(samples_path) as f:
            per_request[task] = lm_eval_local_tasks.per_request([json.loads(line) for line in f])
    return metrics, per_request, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def grpc_adapter(oa, tmp_path_factory):
    """The gRPC lm-eval adapter on the same tasks. The remote tokenizer never adds BOS (add_special_tokens
    false): the adapter with add_bos_token=false; its max_length keeps the same ids per request."""
    grpc_args = f"server={oa.address},token={TOKEN},max_length={LOCAL_MAX_LENGTH - 2},add_bos_token=false"
    metrics, requests, _ = run_lm_eval(tmp_path_factory.mktemp("grpc"), "scored_client.lm_eval_cli", "scored",
                                       grpc_args)
    return metrics, requests


# batch_size 4: lists of prompts per request; num_concurrent 4: lm-eval's asyncio path, requests at once.
@pytest.mark.parametrize("batch_size,num_concurrent", [(1, 1), (4, 1), (1, 4)])
def test_lm_eval_local_completions_equals_the_grpc_adapter(tmp_path, oa, grpc_adapter, batch_size,
                                                           num_concurrent):
    require("tenacity")  # lm-eval's API models import it
    # Stock local-completions as lm-eval documents it: the tokenizer backend is auto-detected (the server's
    # /tokenizer_info and /tokenize routes, open), requests are token ids, the key only in OPENAI_API_KEY.
    local_args = (f"base_url={oa.base}/v1/completions,model={MODEL},max_length={LOCAL_MAX_LENGTH},"
                  f"num_concurrent={num_concurrent}")
    local, local_requests, log = run_lm_eval(tmp_path / "local", "lm_eval", "local-completions", local_args,
                                             {"OPENAI_API_KEY": TOKEN}, ["--batch_size", str(batch_size)])
    assert "Auto-detected remote tokenizer support" in log, log[-3000:]
    grpc, grpc_requests = grpc_adapter
    assert set(local) == set(grpc)
    assert len(grpc_requests["scored_story_mc"]) == len(lm_eval_local_tasks.MC_DOCS)
    assert len(grpc_requests["scored_wikitext_local"]) == lm_eval_local_tasks.WIKI_DOCS
    for task in grpc:
        assert set(local[task]) == set(grpc[task]), task
        for name, value in grpc[task].items():
            assert local[task][name] == pytest.approx(value, rel=REL), f"{task} {name}"
        assert len(local_requests[task]) == len(grpc_requests[task]), task
        for doc, (got, want) in enumerate(zip(local_requests[task], grpc_requests[task])):
            assert len(got) == len(want), f"{task} doc {doc}"
            for g, w in zip(got, want):
                assert g[0] == pytest.approx(w[0], rel=REL, abs=1e-9), f"{task} doc {doc}"
                assert g[1:] == w[1:], f"{task} doc {doc}: is_greedy"
    # The wikitext documents are longer than one window: several requests each.
    assert all(math.isfinite(r[0][0]) for r in local_requests["scored_wikitext_local"])
    with open(tmp_path / "local" / "tasks" / "wikitext_docs.jsonl") as f:
        assert min(len(json.loads(line)["page"]) for line in f) > 4 * LOCAL_MAX_LENGTH


def test_openai_python_client(oa, grpc_client):
    openai = require("openai")
    client = openai.OpenAI(base_url=f"{oa.base}/v1", api_key=TOKEN, max_retries=0)
    assert [m.id for m in client.models.list().data] == [MODEL]
    text = "The cat sat on the mat."
    out = client.completions.create(model=MODEL, prompt=text, max_tokens=0, echo=True, logprobs=1)
    ids, _ = grpc_client.tokenize(text)
    assert out.choices[0].logprobs.token_logprobs[1:] == grpc_client.score(ids).logprob
    assert out.choices[0].text == text
    batch = client.completions.create(model=MODEL, prompt=[ids, ids[:4]], max_tokens=1, echo=False)
    assert [c.index for c in batch.choices] == [0, 1]
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{oa.base}/v1", api_key="not-the-token-000", max_retries=0).models.list()
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL, prompt=text, max_tokens=5)
    assert "max_tokens" in str(e.value)
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="another-model", prompt=text, max_tokens=0)
