"""The real lm-eval package drives the real daemon through the "scored" model, on local task files
(no hub access); its numbers must equal direct Score results."""
import glob
import json
import os
import subprocess
import sys

import pytest

from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

# lm-eval's numbers come from the same server and the same float sums: equal up to float32 round-off of
# per-window sums added in a different order.
TOL = 1e-6

MC_DOCS = [
    {"context": "Once upon a time, there was a little girl named Lily. She loved to", "choices": [" play", " swim", " car"], "gold": 0},
    {"context": "The dog was very happy. He wagged his", "choices": [" tail", " book", " sky"], "gold": 0},
    {"context": "Tom went to the park with his", "choices": [" mom", " moon", " table"], "gold": 0},
    {"context": "She saw a big red", "choices": [" ball", " idea"], "gold": 0},
]

MC_TASK = """task: scored_story_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{context}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{gold}}}}"
target_delimiter: ""
metric_list:
  - metric: acc
"""

ROLLING_TASK = """task: scored_story_rolling
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: loglikelihood_rolling
doc_to_text: ""
doc_to_target: "{{{{text}}}}"
metric_list:
  - metric: word_perplexity
  - metric: byte_perplexity
  - metric: bits_per_byte
"""


def run_lm_eval(tmp_path, daemon, tasks, model_args=""):
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "scored_client.lm_eval_cli", "run", "--model", "scored",
           "--model_args", f"server={daemon.address}{model_args}", "--tasks", tasks,
           "--include_path", str(tmp_path), "--log_samples", "--output_path", str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    samples = {}
    for path in glob.glob(str(out / "**" / "samples_*.jsonl"), recursive=True):
        task = os.path.basename(path)[len("samples_"):].rsplit("_", 1)[0]
        with open(path) as f:
            samples[task] = [json.loads(line) for line in f]
    return samples


def encode_pair(client, context, continuation):
    """lm-eval's causal convention: encode the whole, split at the context's length; both with the
    tokenizer's default BOS, as lm-eval's HF backend at its defaults."""
    whole, _ = client.tokenize(context + continuation)
    ctx, _ = client.tokenize(context)
    return ctx, whole[len(ctx):]


def test_loglikelihood_task_equals_direct_scores(tmp_path, daemon, client):
    data = tmp_path / "mc.jsonl"
    data.write_text("".join(json.dumps(d) + "\n" for d in MC_DOCS))
    (tmp_path / "mc.yaml").write_text(MC_TASK.format(data=data))
    samples = run_lm_eval(tmp_path, daemon, "scored_story_mc")["scored_story_mc"]
    assert len(samples) == len(MC_DOCS)
    for s in samples:
        doc = s["doc"]
        for choice, resp in zip(doc["choices"], s["filtered_resps"]):
            ctx, cont = encode_pair(client, doc["context"], choice)
            direct = client.score(ctx + cont, score_from=len(ctx))
            assert float(resp[0]) == pytest.approx(direct.sum_logprob, abs=TOL)
            # lm-eval's sample log writes the pair as strings ("False").
            assert str(resp[1]) == str(all(direct.greedy))


@pytest.mark.parametrize("max_length", [None, 64])
def test_rolling_task_equals_direct_scores(tmp_path, daemon, client, golden, max_length):
    stories = golden["tinystories_sample"]["stories"]
    data = tmp_path / "stories.jsonl"
    data.write_text("".join(json.dumps({"text": s["text"]}) + "\n" for s in stories))
    (tmp_path / "rolling.yaml").write_text(ROLLING_TASK.format(data=data))
    # Without BOS (add_bos_token=false, as HF's override): the stories' goldens are [BOS] + story windows.
    extra = ",add_bos_token=false" + (f",max_length={max_length}" if max_length else "")
    samples = run_lm_eval(tmp_path, daemon, "scored_story_rolling", extra)["scored_story_rolling"]
    assert len(samples) == len(stories)
    for s in samples:
        story = next(st for st in stories if st["text"] == s["doc"]["text"])
        got = float(s["filtered_resps"][0])
        if max_length is None:
            # One window [BOS] + story: the float64 golden (1e-4 per token).
            assert got == pytest.approx(story["sum_logprob"], abs=1e-4 * story["n_scored"])
        else:
            ids = story["token_ids"][1:]
            expected = 0.0
            for ctx, pred in map(make_disjoint_window, get_rolling_token_windows(ids, 1, max_length, 1)):
                expected += client.score(ctx + pred, score_from=len(ctx)).sum_logprob
            assert got == pytest.approx(expected, abs=TOL)


def test_generate_until_is_refused(daemon):
    import scored_client.lm_eval_adapter as adapter

    lm = adapter.ScoredLM(server=daemon.address)
    with pytest.raises(NotImplementedError, match="does not generate"):
        lm.generate_until([])


def test_connection_options_progress_and_clear_refusals(tmp_path, stories_dir, capfd):
    """token_file (a token= shows in ps and lm-eval's log), a progress bar while scoring, a clear error for a
    server that is not there and for --apply_chat_template (before: a 30-line traceback, NotImplementedError
    naming a method to implement)."""
    import scored_client.lm_eval_adapter as adapter
    from conftest import ScoredDaemon

    token = "lm-eval-adapter-token-0123456789"
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    daemon = ScoredDaemon([f"--model={stories_dir}", "--backend=cpu", f"--auth_token_file={token_file}"])
    try:
        with pytest.raises(Exception, match="UNAUTHENTICATED"):
            adapter.ScoredLM(server=daemon.address)
        lm = adapter.ScoredLM(server=daemon.address, token_file=str(token_file))
        ids = lm.tok_encode("Once upon a time")
        [(logprob, _)] = lm._score_all([(ids, 1)])
        assert logprob < 0
        assert "Scoring (scored)" in capfd.readouterr().err
        with pytest.raises(ValueError, match="not both"):
            adapter.ScoredLM(server=daemon.address, token=token, token_file=str(token_file))
        with pytest.raises(NotImplementedError, match="drop --apply_chat_template"):
            lm.apply_chat_template([{"role": "user", "content": "hi"}])
    finally:
        daemon.stop()
    with pytest.raises(ConnectionError, match=r"cannot reach scored at 127.0.0.1:1 .*is it running"):
        adapter.ScoredLM(server="127.0.0.1:1")
    with pytest.raises(ValueError, match="tls_cert and tls_key go together"):
        adapter.ScoredLM(server="127.0.0.1:1", tls_cert=str(token_file))
    with pytest.raises(ValueError, match="tls_ca .*No such file"):
        adapter.ScoredLM(server="127.0.0.1:1", tls_ca=str(tmp_path / "missing.pem"))
