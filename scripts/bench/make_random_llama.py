#!/usr/bin/env python3
"""Writes a random-weight Llama-3-8B-shaped checkpoint (bf16 safetensors, sharded), optionally compressed-tensors
W4A16 / NVFP4A16 checkpoints of the same weights, and transformers' reference logprobs for a few windows.
Runs on a GPU machine (torch + transformers + safetensors).

  make_random_llama.py --out DIR [--layers 32] [--windows 4] [--ctx 2048] [--quant w4a16,nvfp4a16]
  (--quant writes DIR-w4a16, DIR-nvfp4a16 with scripts/bench/ct_writer.py)

Well-conditioned weights (so that a bf16 engine can be held to 0.01 nats against the fp32 forward; the old
all-N(0, 0.02) model with lm_head 0.04 had PPL 3.3M on uniform tokens and amplified bf16 rounding ~10x):
  q/k/v/gate/up ~ N(0, 0.02); o_proj/down_proj ~ N(0, 0.02 / sqrt(2 * layers)) (GPT-2's residual scaling);
  norms = 1; lm_head ~ N(0, LOGIT_STD / sqrt(hidden)) so logits over the final-normed state have std
  LOGIT_STD (peaked next-token distributions); the embedding std is calibrated (two forwards) so the final
  residual keeps a correlation of about EMBED_SHARE with the current token's embedding.
Windows are not uniform ids (uniform targets give PPL >= vocab whatever the model): each is a chain sampled
from the model's bigram part, t[j+1] ~ softmax(lm_head . rmsnorm(embed[t[j]])), so PPL lands in the tens to
hundreds and the check exercises confident predictions. Everything is generated on the GPU from fixed seeds.

DIR/ref_windows.bin (little-endian): int32 num_windows, int32 ctx, int32 tokens[num_windows][ctx], then three
float32 arrays [num_windows][ctx-1] with logprob[w][j-1] = log P(tokens[w][j] | tokens[w][<j]) from transformers:
  fp32head:   bf16 model (SDPA); final hidden states (bf16) times lm_head in fp32, log_softmax in fp32;
  bf16logits: bf16 model; model(ids).logits (bf16) -> float -> log_softmax (what common evaluation scripts do);
  fp32model:  the same weights widened to fp32, fp32 forward (no TF32): the near-exact answer both bf16 runs
              are measured against.
"""
import argparse
import json
import math
import os
import struct
import sys
import time

import torch
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ct_writer  # noqa: E402

LOGIT_STD = 5.0
EMBED_SHARE = 0.95
SHARD_BYTES = 4 << 30


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--windows", type=int, default=4)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--quant", default="")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()

    cfg = LlamaConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=args.layers,
                      num_attention_heads=32, num_key_value_heads=8, vocab_size=128256, rope_theta=500000.0,
                      max_position_embeddings=8192, rms_norm_eps=1e-5, tie_word_embeddings=False,
                      bos_token_id=128000, eos_token_id=128001, attn_implementation="sdpa")
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg)
    model.eval()

    gen = torch.Generator(device="cuda")
    gen.manual_seed(1234)
    small = 0.02 / math.sqrt(2 * args.layers)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            elif name == "lm_head.weight":
                p.normal_(0.0, LOGIT_STD / math.sqrt(cfg.hidden_size), generator=gen)
            elif name.endswith(("o_proj.weight", "down_proj.weight")):
                p.normal_(0.0, small, generator=gen)
            else:
                p.normal_(0.0, 0.02, generator=gen)
    embed = model.model.embed_tokens.weight

    # Calibrate the embedding scale: measure the layers' share of the final residual (input of model.norm).
    captured = {}
    hook = model.model.norm.register_forward_hook(lambda m, inp, out: captured.__setitem__("r", inp[0]))
    probe = torch.randint(0, cfg.vocab_size, (1, 512), device="cuda", generator=gen)
    embed_std = 0.02
    with torch.no_grad():
        for _ in range(3):
            model.model(probe)
            r = captured["r"].float()[0]                                       # [512, hidden]
            e = embed[probe[0]].float()
            layers_rms = (r - e).pow(2).mean().sqrt().item()
            target = layers_rms * EMBED_SHARE / math.sqrt(1 - EMBED_SHARE ** 2)
            embed.mul_(target / embed_std)
            embed_std = target
    hook.remove()
    torch.cuda.synchronize()
    t_gen = time.time() - t0

    # Windows: chains from the bigram part of the model (fp32).
    tok_gen = torch.Generator(device="cuda")
    tok_gen.manual_seed(99)
    head32 = model.lm_head.weight.float()
    ids = torch.empty((args.windows, args.ctx), device="cuda", dtype=torch.int64)
    ids[:, 0] = torch.randint(0, cfg.vocab_size, (args.windows,), device="cuda", generator=tok_gen)
    with torch.inference_mode():
        for j in range(1, args.ctx):
            e = embed[ids[:, j - 1]].float()
            h = e * torch.rsqrt(e.pow(2).mean(-1, keepdim=True) + cfg.rms_norm_eps)
            probs = torch.softmax(h @ head32.t(), -1)
            ids[:, j] = torch.multinomial(probs, 1, generator=tok_gen)[:, 0]
    del head32
    lp32, lp16 = [], []
    with torch.inference_mode():
        for w in range(args.windows):
            x = ids[w:w + 1]
            h = model.model(x).last_hidden_state[0, :-1]                      # [ctx-1, hidden] bf16
            logits = h.float() @ model.lm_head.weight.float().t()              # [ctx-1, vocab] fp32
            lp = torch.log_softmax(logits, -1).gather(-1, x[0, 1:, None]).squeeze(-1)
            lp32.append(lp.float().cpu())
            del logits
            logits16 = model(x).logits[0, :-1].float()
            lp = torch.log_softmax(logits16, -1).gather(-1, x[0, 1:, None]).squeeze(-1)
            lp16.append(lp.float().cpu())
            del logits16
    t_ref = time.time() - t0 - t_gen

    # Sharded safetensors + index.
    state = {k: v.detach() for k, v in model.state_dict().items()}
    shards, cur, cur_bytes = [], {}, 0
    for name, t in state.items():
        nbytes = t.numel() * t.element_size()
        if cur and cur_bytes + nbytes > SHARD_BYTES:
            shards.append(cur)
            cur, cur_bytes = {}, 0
        cur[name] = t
        cur_bytes += nbytes
    shards.append(cur)
    weight_map, total = {}, 0
    for i, shard in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file({k: v.contiguous().cpu() for k, v in shard.items()}, os.path.join(args.out, fname),
                  metadata={"format": "pt"})
        for k, v in shard.items():
            weight_map[k] = fname
            total += v.numel() * v.element_size()
    with open(os.path.join(args.out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=1)
    conf = cfg.to_dict()
    conf["architectures"] = ["LlamaForCausalLM"]
    conf["torch_dtype"] = "bfloat16"
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(conf, f, indent=1)
    n_params, n_shards = sum(v.numel() for v in state.values()), len(shards)
    del shards, cur
    quant_notes = []
    for scheme in filter(None, args.quant.split(",")):
        tq = time.time()
        qbytes = ct_writer.write_checkpoint(state, conf, f"{args.out}-{scheme}", scheme)
        quant_notes.append(f"{scheme} {qbytes / 2**30:.2f} GiB in {time.time() - tq:.1f}s")
    del state
    t_write = time.time() - t0 - t_gen - t_ref

    # fp32 reference: the same (bf16-representable) weights in fp32, fp32 matmuls without TF32.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    model.float()
    lpf = []
    with torch.inference_mode():
        for w in range(args.windows):
            x = ids[w:w + 1]
            logits = model(x).logits[0, :-1]                                   # [ctx-1, vocab] fp32
            lp = torch.log_softmax(logits, -1).gather(-1, x[0, 1:, None]).squeeze(-1)
            lpf.append(lp.float().cpu())
            del logits
    with open(os.path.join(args.out, "ref_windows.bin"), "wb") as f:
        f.write(struct.pack("<ii", args.windows, args.ctx))
        f.write(ids.to(torch.int32).cpu().numpy().tobytes())
        for arr in (lp32, lp16, lpf):
            f.write(torch.stack(arr).numpy().astype("<f4").tobytes())
    print(f"make_random_llama: embed std {embed_std:.3f} (layers' final residual rms {layers_rms:.3f}), "
          f"lm_head std {LOGIT_STD / math.sqrt(cfg.hidden_size):.4f}; quantized: {'; '.join(quant_notes) or '-'}")
    print(f"make_random_llama: {n_params / 1e9:.2f}B params, {n_shards} shards, {total / 2**30:.1f} GiB; "
          f"generate {t_gen:.1f}s, bf16 reference {t_ref:.1f}s, write {t_write:.1f}s, "
          f"fp32 reference {time.time() - t0 - t_gen - t_ref - t_write:.1f}s",
          flush=True)


if __name__ == "__main__":
    main()
