#!/usr/bin/env python3
"""transformers' own bf16 and fp32 runs of stories260K-hf against the float64 golden (reference_logprobs.json):
the yardstick for the engine's bf16 tolerance. Runs on a GPU machine.

  hf_stories_bf16.py DATA_DIR/stories260K-hf
"""
import json
import math
import sys

import torch
from transformers import AutoModelForCausalLM

model_dir = sys.argv[1]
golden = json.load(open(f"{model_dir}/reference_logprobs.json"))["tinystories_sample"]["stories"]
torch.backends.cuda.matmul.allow_tf32 = False
for dtype in (torch.bfloat16, torch.float32):
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).cuda().eval()
    total_abs, total, total_lp, gold_lp = 0.0, 0, 0.0, 0.0
    with torch.inference_mode():
        for story in golden:
            ids = torch.tensor([story["token_ids"]], device="cuda")
            lp = torch.log_softmax(model(ids).logits[0, :-1].float(), -1).gather(-1, ids[0, 1:, None]).squeeze(-1)
            lp = lp.double().cpu().tolist()
            total_abs += sum(abs(a - b) for a, b in zip(lp, story["token_logprobs"]))
            total += len(lp)
            total_lp += sum(lp)
            gold_lp += sum(story["token_logprobs"])
    print(f"transformers stories260K {str(dtype):15s}: mean |delta logprob| vs float64 golden {total_abs / total:.5f}, "
          f"PPL {math.exp(-total_lp / total):.5f} (golden {math.exp(-gold_lp / total):.5f})", flush=True)
