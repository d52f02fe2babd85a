#!/usr/bin/env python3
"""Writes a random-weight mixture-of-experts checkpoint for speed benchmarks (no reference windows: the
numbers it can check are the fixtures'), one safetensors shard per layer, built on the GPU layer by layer.

  make_random_moe.py --out DIR [--arch qwen3_moe|qwen3_moe_235b|mixtral] [--layers N] [--quant bf16|w4a16]

Shapes (the peers' in ../shared/bench/hf_peers.py moe): qwen3_moe = Qwen3-30B-A3B (hidden 2048, 48 layers,
32 / 4 heads of 128, 128 experts of 768, top 8, norm_topk_prob, vocab 151936, q/k norm); qwen3_moe_235b = Qwen3-235B-A22B (hidden 4096, 94 layers, 64 / 4
heads of 128, 128 experts of 1536, top 8: ~115 GiB in W4A16, for --tp 2); mixtral = Mixtral-8x7B
(hidden 4096, 32 layers, 32 / 8 heads, 8 experts of 14336, top 2, vocab 32000). --layers N keeps the widths.
--quant w4a16: every expert and attention Linear as compressed-tensors W4A16 group-128 symmetric
(scripts/bench/ct_writer.py), the routers and lm_head dense bf16 (llm-compressor's MoE ignore list).
Values: linears ~ N(0, 0.02) (o / down scaled by 1 / sqrt(2 layers)), routers N(0, 0.02), norms 1, embedding
N(0, 1), lm_head N(0, 1 / sqrt(hidden)).
"""
import argparse
import json
import math
import os
import sys
import time

import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ct_writer  # noqa: E402

SHAPES = {
    "qwen3_moe": dict(architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe", hidden_size=2048,
                      num_hidden_layers=48, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
                      intermediate_size=6144, moe_intermediate_size=768, num_experts=128,
                      num_experts_per_tok=8, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
                      vocab_size=151936, rope_theta=1000000.0, rms_norm_eps=1e-6, max_position_embeddings=40960,
                      tie_word_embeddings=False, torch_dtype="bfloat16", bos_token_id=151643,
                      eos_token_id=151645, attention_bias=False, hidden_act="silu"),
    # Qwen/Qwen3-235B-A22B's config.json: issue 20's tensor-parallel shape (about 115 GiB in W4A16 g128).
    "qwen3_moe_235b": dict(architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe", hidden_size=4096,
                           num_hidden_layers=94, num_attention_heads=64, num_key_value_heads=4, head_dim=128,
                           intermediate_size=12288, moe_intermediate_size=1536, num_experts=128,
                           num_experts_per_tok=8, norm_topk_prob=True, decoder_sparse_step=1,
                           mlp_only_layers=[], vocab_size=151936, rope_theta=1000000.0, rms_norm_eps=1e-6,
                           max_position_embeddings=40960, tie_word_embeddings=False, torch_dtype="bfloat16",
                           bos_token_id=151643, eos_token_id=151645, attention_bias=False, hidden_act="silu"),
    "mixtral": dict(architectures=["MixtralForCausalLM"], model_type="mixtral", hidden_size=4096,
                    num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                    intermediate_size=14336, num_local_experts=8, num_experts_per_tok=2, vocab_size=32000,
                    rope_theta=1000000.0, rms_norm_eps=1e-5, max_position_embeddings=32768,
                    tie_word_embeddings=False, torch_dtype="bfloat16", bos_token_id=1, eos_token_id=2,
                    hidden_act="silu", sliding_window=None),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--arch", default="qwen3_moe", choices=sorted(SHAPES))
    ap.add_argument("--layers", type=int, default=0)
    ap.add_argument("--quant", default="w4a16", choices=["bf16", "w4a16"])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    cfg = dict(SHAPES[args.arch])
    if args.layers:
        cfg["num_hidden_layers"] = args.layers
    qwen = cfg["model_type"] == "qwen3_moe"
    h, layers, hd = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["head_dim"]
    experts = cfg["num_experts"] if qwen else cfg["num_local_experts"]
    inter = cfg["moe_intermediate_size"] if qwen else cfg["intermediate_size"]
    heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    gen = torch.Generator(device=args.device).manual_seed(1234)
    os.makedirs(args.out, exist_ok=True)
    weight_map, t0, total = {}, time.time(), 0

    def normal(shape, std):
        return (torch.randn(shape, generator=gen, device=args.device, dtype=torch.float32) * std).to(torch.bfloat16)

    def put(tensors, name, w, quantize):
        if quantize and args.quant == "w4a16":
            for suffix, t in ct_writer.quantize_w4a16(w).items():
                tensors[f"{name}.{suffix}"] = t
        else:
            tensors[f"{name}.weight"] = w

    def save(tensors, fname):
        nonlocal total
        cpu = {k: v.contiguous().cpu() for k, v in tensors.items()}
        save_file(cpu, os.path.join(args.out, fname))
        total += sum(v.numel() * v.element_size() for v in cpu.values())
        for k in cpu:
            weight_map[k] = fname

    n_files = layers + 1
    small = 0.02 / math.sqrt(2 * layers)
    for layer in range(layers):
        p, t = f"model.layers.{layer}.", {}
        t[p + "input_layernorm.weight"] = torch.ones(h, dtype=torch.bfloat16, device=args.device)
        t[p + "post_attention_layernorm.weight"] = torch.ones(h, dtype=torch.bfloat16, device=args.device)
        if qwen:
            t[p + "self_attn.q_norm.weight"] = torch.ones(hd, dtype=torch.bfloat16, device=args.device)
            t[p + "self_attn.k_norm.weight"] = torch.ones(hd, dtype=torch.bfloat16, device=args.device)
        for name, shape, std in [("q_proj", (heads * hd, h), 0.02), ("k_proj", (kv * hd, h), 0.02),
                                 ("v_proj", (kv * hd, h), 0.02), ("o_proj", (h, heads * hd), small)]:
            put(t, p + "self_attn." + name, normal(shape, std), True)
        moe = p + ("mlp." if qwen else "block_sparse_moe.")
        t[moe + "gate.weight"] = normal((experts, h), 0.02)
        names = ("gate_proj", "up_proj", "down_proj") if qwen else ("w1", "w3", "w2")
        for e in range(experts):
            for name, shape, std in [(names[0], (inter, h), 0.02), (names[1], (inter, h), 0.02),
                                     (names[2], (h, inter), small)]:
                put(t, f"{moe}experts.{e}.{name}", normal(shape, std), True)
        save(t, f"model-{layer + 1:05d}-of-{n_files:05d}.safetensors")
        print(f"layer {layer + 1}/{layers} written ({time.time() - t0:.0f}s)", flush=True)
    save({"model.embed_tokens.weight": normal((cfg["vocab_size"], h), 1.0),
          "model.norm.weight": torch.ones(h, dtype=torch.bfloat16, device=args.device),
          "lm_head.weight": normal((cfg["vocab_size"], h), 1.0 / math.sqrt(h))},
         f"model-{n_files:05d}-of-{n_files:05d}.safetensors")
    with open(os.path.join(args.out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)
    if args.quant == "w4a16":
        qc = ct_writer.quantization_config("w4a16")
        qc["ignore"] = ["lm_head", "re:.*mlp.gate$" if qwen else "re:.*block_sparse_moe.gate$"]
        cfg["quantization_config"] = qc
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    print(f"make_random_moe: {args.arch} {layers} layers {args.quant}, {total / 2**30:.2f} GiB in "
          f"{time.time() - t0:.0f}s")


if __name__ == "__main__":
    main()
