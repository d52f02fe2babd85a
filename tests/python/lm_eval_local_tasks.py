"""Local lm-eval tasks for the adapter tests and their HF goldens (scripts/make_lm_eval_hf_goldens.py): no hub.

- scored_wikitext_local: lm-eval's own wikitext task definition (output type, detokenizer, process_results and
  metrics, imported from lm_eval.tasks.wikitext.preprocess_wikitext) on the first WIKI_DOCS articles of the
  local WikiText-2 raw test file, split into articles as the document-level dataset is (each article starts at
  a top-level " = Title = " heading line) and stored under its "page" field.
- scored_story_mc: a small multiple-choice task (acc, acc_norm) on short TinyStories-like contexts.
"""
import json
import os
import re

WIKI_DOCS = 3

MC_DOCS = [
    {"context": "Once upon a time, there was a little girl named Lily. She loved to", "choices": [" play", " swim", " car"], "gold": 0},
    {"context": "The dog was very happy. He wagged his", "choices": [" tail", " book", " sky"], "gold": 0},
    {"context": "Tom went to the park with his", "choices": [" mom", " moon", " table"], "gold": 0},
    {"context": "She saw a big red", "choices": [" ball", " idea"], "gold": 0},
    {"context": "The cat sat on the", "choices": [" mat", " run", " happy"], "gold": 0},
    {"context": "", "choices": ["Once upon a time", "Twice below a space"], "gold": 0},
]

WIKITEXT_TASK = """task: scored_wikitext_local
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
output_type: loglikelihood_rolling
test_split: test
doc_to_text: ""
doc_to_target: !function scored_wikitext_utils.wikitext_detokenizer
process_results: !function scored_wikitext_utils.process_results
should_decontaminate: true
doc_to_decontamination_query: "{{{{page}}}}"
metric_list:
  - metric: word_perplexity
  - metric: byte_perplexity
  - metric: bits_per_byte
"""

WIKITEXT_UTILS = """# lm-eval's own wikitext processing, reused as it is.
from lm_eval.tasks.wikitext.preprocess_wikitext import process_results, wikitext_detokenizer  # noqa: F401
"""

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
  - metric: acc_norm
"""

TASKS = ["scored_wikitext_local", "scored_story_mc"]

_HEADING = re.compile(r"^ = [^=].* = $")


def wikitext_articles(raw_path, count):
    """The first `count` articles of a WikiText raw file, each from its top-level heading line to the line
    before the next one, lines kept as they are (newlines included)."""
    with open(raw_path, encoding="utf-8") as f:
        lines = f.readlines()
    articles, current = [], None
    for line in lines:
        if _HEADING.match(line.rstrip("\n")):
            if current is not None:
                articles.append("".join(current))
                if len(articles) == count:
                    return articles
            current = [line]
        elif current is not None:
            current.append(line)
    if current is not None and len(articles) < count:
        articles.append("".join(current))
    return articles


def write_tasks(task_dir, data_dir):
    """Writes both tasks (yaml, data, the wikitext utils module) into `task_dir`; returns TASKS."""
    os.makedirs(task_dir, exist_ok=True)
    raw = os.path.join(data_dir, "wikitext-2-raw", "wiki.test.raw")
    wiki_data = os.path.join(task_dir, "wikitext_docs.jsonl")
    with open(wiki_data, "w", encoding="utf-8") as f:
        for page in wikitext_articles(raw, WIKI_DOCS):
            f.write(json.dumps({"page": page}) + "\n")
    with open(os.path.join(task_dir, "scored_wikitext_utils.py"), "w") as f:
        f.write(WIKITEXT_UTILS)
    with open(os.path.join(task_dir, "scored_wikitext_local.yaml"), "w") as f:
        f.write(WIKITEXT_TASK.format(data=wiki_data))
    mc_data = os.path.join(task_dir, "story_mc.jsonl")
    with open(mc_data, "w", encoding="utf-8") as f:
        f.write("".join(json.dumps(d) + "\n" for d in MC_DOCS))
    with open(os.path.join(task_dir, "scored_story_mc.yaml"), "w") as f:
        f.write(MC_TASK.format(data=mc_data))
    return TASKS


def per_request(samples):
    """Per-sample responses of lm-eval's sample log, in doc order: rolling -> [loglikelihood],
    multiple choice -> [[loglikelihood, is_greedy], ...] (is_greedy as a bool)."""
    out = []
    for s in sorted(samples, key=lambda s: s["doc_id"]):
        resps = []
        for r in s["resps"]:
            r = r[0] if isinstance(r, (list, tuple)) and len(r) == 1 and isinstance(r[0], (list, tuple)) else r
            if isinstance(r, (list, tuple)) and len(r) == 2:
                resps.append([float(r[0]), str(r[1]) == "True"])
            elif isinstance(r, (list, tuple)):
                resps.append([float(r[0])])
            else:
                resps.append([float(r)])
        out.append(resps)
    return out
