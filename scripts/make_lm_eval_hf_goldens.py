#!/usr/bin/env python3
"""Goldens of lm-eval's own HF backend for the "scored" lm-eval adapter test (tests/python/test_lm_eval_hf.py).

Runs the installed lm-eval (0.4.13) with --model hf at its defaults (add_bos_token unset: the tokenizer's
default; max_length: the model config's), float32 on the CPU, batch size 1, on the local tasks of
tests/python/lm_eval_local_tasks.py (lm-eval's wikitext task definition on full WikiText-2 test articles, and
a small multiple-choice task), and writes every request's log-likelihood (and is_greedy) and every metric.

    python scripts/make_lm_eval_hf_goldens.py --data DATA
    python scripts/make_lm_eval_hf_goldens.py --data DATA --add_bos_token false \
        --out tests/python/fixtures/lm_eval_hf_golden_no_bos.json

Needs torch, transformers and lm-eval (not the project's test venv: its tests need no torch); no hub access
(the model and the data are local).
"""
import argparse
import json
import os
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "python"))

import lm_eval_local_tasks  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default=os.path.join(REPO, "..", "shared", "data"))
    p.add_argument("--out", default=os.path.join(REPO, "tests", "python", "fixtures", "lm_eval_hf_golden.json"))
    p.add_argument("--add_bos_token", default=None, choices=[None, "true", "false"])
    args = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

    import importlib.metadata

    import torch
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    torch.manual_seed(0)
    model_dir = os.path.join(args.data, "stories260K-hf")
    model_args = {"pretrained": model_dir, "dtype": "float32", "device": "cpu"}
    if args.add_bos_token is not None:
        model_args["add_bos_token"] = args.add_bos_token == "true"
    lm = HFLM(**model_args)
    with tempfile.TemporaryDirectory() as task_dir:
        tasks = lm_eval_local_tasks.write_tasks(task_dir, args.data)
        out = simple_evaluate(model=lm, tasks=tasks, task_manager=TaskManager(include_path=task_dir),
                              batch_size=1, log_samples=True, bootstrap_iters=0)
    golden = {
        "lm_eval_version": importlib.metadata.version("lm_eval"),
        "transformers_version": importlib.metadata.version("transformers"),
        "torch_version": torch.__version__,
        "model": "stories260K-hf",
        "dtype": "float32",
        "add_bos_token": model_args.get("add_bos_token"),
        "max_length": lm.max_length,
        "wiki_docs": lm_eval_local_tasks.WIKI_DOCS,
        "tasks": {},
    }
    for task in tasks:
        metrics = {k.split(",")[0]: v for k, v in out["results"][task].items()
                   if k.endswith(",none") and not k.split(",")[0].endswith("_stderr")}
        golden["tasks"][task] = {"metrics": metrics,
                                 "requests": lm_eval_local_tasks.per_request(out["samples"][task])}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")
    print(f"wrote {args.out}: " + ", ".join(f"{t} {g['metrics']}" for t, g in golden["tasks"].items()))


if __name__ == "__main__":
    main()
