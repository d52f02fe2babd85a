#!/usr/bin/env python3
"""Float64 golden of a `scored-ppl --kld` report (issue 17) on real WikiText windows: Q = the
stories260k-w4a16-channel fixture, R = stories260K-hf, WikiText-2 test (wiki.test.raw), method chunks,
ctx 512, the first NUM_WINDOWS windows (each [BOS] + 511 consecutive ids of the whole file tokenized without
BOS; every id after BOS scored).

The ids come from a running scored's Tokenize RPC (the stories260K tokenizer; its first 64 ids are checked
against the sentencepiece ids in stories260K-hf/reference_wikitext2_test_ppl.json, and R's per-window sums
against that file's float64 window sums). The logits come from scripts/fixtures/kld_golden.py's float64 numpy
forward of both models. The statistics follow client/ppl/kld.h (llama-perplexity's definitions), written
here independently with numpy in float64.

Usage: kld_report_golden.py --server HOST:PORT [--data DATA_DIR] [--out tests/client/golden/kld_report_golden.json]
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "scripts" / "fixtures"))
import kld_golden as kg  # noqa: E402

QUANT = "stories260k-w4a16-channel"
CTX = 512
NUM_WINDOWS = 4
PERCENTILES = {"max": 100.0, "p99.9": 99.9, "p99": 99.0, "p95": 95.0, "p90": 90.0, "median": 50.0, "p10": 10.0,
               "p5": 5.0, "p1": 1.0, "p0.1": 0.1, "min": 0.0}


def mean_and_error(x):
    n = x.size
    var = np.mean(x * x) - np.mean(x) ** 2
    return float(np.mean(x)), float(np.sqrt(var / (n - 1))) if var > 0 and n > 10 else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", required=True, help="a scored serving stories260K (for Tokenize only)")
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "kld_report_golden.json"))
    args = ap.parse_args()
    from scored_client import ScorerClient

    data = Path(args.data)
    text = (data / "wikitext-2-raw" / "wiki.test.raw").read_text(encoding="utf-8")
    with ScorerClient(args.server) as c:
        ids, _ = c.tokenize(text, add_bos=False)
    ref_ppl = json.loads((data / "stories260K-hf" / "reference_wikitext2_test_ppl.json").read_text())
    assert ids[:64] == ref_ppl["first_64_token_ids"], "Tokenize differs from sentencepiece"
    windows = [[1] + ids[i * (CTX - 1):(i + 1) * (CTX - 1)] for i in range(NUM_WINDOWS)]
    lq, lr, kld, same = [], [], [], []
    for w_index, w in enumerate(windows):
        ref_logits = kg.forward_logits(data / "stories260K-hf", w)
        q_logits = kg.forward_logits(ROOT / "tests" / "fixtures" / QUANT, w)
        c = kg.compare(ref_logits, q_logits, w)
        q_lp = kg.log_softmax(q_logits)
        lq.append([float(q_lp[j, w[j + 1]]) for j in range(len(w) - 1)])
        lr.append(c["ref_logprob"])
        kld.append(c["kld"])
        same.append(c["same_top"])
        golden_sum = ref_ppl["window_sum_logprob"][w_index]
        assert abs(sum(c["ref_logprob"]) - golden_sum) < 1e-6 * abs(golden_sum), (w_index, golden_sum)
    lq, lr, kl = (np.concatenate([np.array(v, dtype=np.float64) for v in x]) for x in (lq, lr, kld))
    st = np.concatenate([np.array(v, dtype=np.float64) for v in same])
    n = lq.size
    nq, nr = -lq, -lr
    eq, er = mean_and_error(nq)[1], mean_and_error(nr)[1]
    cov = (np.mean(nq * nr) - nq.mean() * nr.mean()) / (n - 1)
    dp = np.exp(lq) - np.exp(lr)
    mse, mse_err = mean_and_error(dp * dp)
    p = float(st.mean())
    stats = {
        "count": int(n),
        "ppl_q": float(np.exp(nq.mean())), "ppl_q_error": float(np.exp(nq.mean()) * eq),
        "ppl_r": float(np.exp(nr.mean())), "ppl_r_error": float(np.exp(nr.mean()) * er),
        "ln_ppl_ratio": float(nq.mean() - nr.mean()),
        "ln_ppl_ratio_error": float(np.sqrt(eq * eq + er * er - 2 * cov)),
        "nll_correlation": float(np.corrcoef(nq, nr)[0, 1]),
        "kld_mean": mean_and_error(kl)[0], "kld_error": mean_and_error(kl)[1],
        "kld_percentiles": {k: float(np.percentile(kl, v)) for k, v in PERCENTILES.items()},
        "same_top": p, "same_top_error": float(np.sqrt(p * (1 - p) / (n - 1))),
        "delta_p_mean": mean_and_error(dp)[0], "delta_p_error": mean_and_error(dp)[1],
        "delta_p_rms": float(np.sqrt(mse)), "delta_p_rms_error": float(0.5 / np.sqrt(mse) * mse_err),
        "abs_delta_logprob_mean": float(np.mean(np.abs(lq - lr))),
        "abs_delta_logprob_max": float(np.max(np.abs(lq - lr))),
    }
    out = {"description": "float64 golden of scored-ppl --kld (Q = " + QUANT + ", R = stories260K-hf) on "
                          "wiki.test.raw, chunks ctx 512, first 4 windows; made by "
                          "tests/client/golden/kld_report_golden.py",
           "method": "chunks", "ctx": CTX, "max_windows": NUM_WINDOWS, "quant": QUANT,
           "kld": stats}
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(stats, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
