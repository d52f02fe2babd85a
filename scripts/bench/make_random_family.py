#!/usr/bin/env python3
"""Writes a random-weight Gemma-3- or Phi-3/Phi-4-shaped W4A16 group-128 symmetric checkpoint directly in
compressed-tensors `pack-quantized` form, layer by layer (no dense copy of the model in memory, no transformers
model), for the speed benchmarks of issue 22. No reference windows: the numbers a random model can check are the
fixtures' (tests/fixtures/{phi3,gemma2,gemma3}-*).

  make_random_family.py --out DIR --arch gemma3-27b|gemma3-12b|phi4|phi3.5-mini [--layers N]

Shapes (each as the published config.json; the ones inlined in tests/engine/model/family_test.cc are quoted from
there):
  gemma3-27b:  google/gemma-3-27b-it's text_config (family_test.cc kGemma3_27B_It) with Gemma3TextConfig's
               defaults, as Gemma3ForCausalLM: hidden 5376, 62 layers, 32 heads / 16 KV heads of 128,
               intermediate 21504, vocab 262208, query_pre_attn_scalar 168, sliding_window 1024 with 5 sliding :
               1 full layers, RoPE local base 1e4, global 1e6 with linear scaling 8, tied embeddings.
  gemma3-12b:  google/gemma-3-12b-it's text_config (public copies of its config.json): hidden 3840, 48 layers,
               16 heads / 8 KV heads of 256, intermediate 15360, query_pre_attn_scalar 256, the rest as 27b.
  phi4:        microsoft/phi-4's config.json (family_test.cc kPhi4): Phi3ForCausalLM, hidden 5120, 40 layers,
               40 heads / 10 KV heads of 128, intermediate 17920, vocab 100352, rope_theta 250000, no RoPE
               scaling, no sliding window, max_position_embeddings 16384, untied lm_head.
  phi3.5-mini: microsoft/Phi-3.5-mini-instruct's config.json (family_test.cc kPhi35MiniInstruct): hidden 3072,
               32 layers, 32 heads / 32 KV heads of 96, intermediate 8192, vocab 32064, longrope with its 48-entry
               short / long factors, original_max_position_embeddings 4096, max_position_embeddings 131072,
               sliding_window 262144.
--layers N keeps the widths. --hidden / --intermediate / --heads / --kv-heads / --head-dim / --vocab override the
preset's (tiny shapes for scripts/bench/test_writer.py; Phi-3 has no head_dim field: hidden / heads).

Layout (what llm-compressor + compressed-tensors 0.19 save for W4A16 with `ignore: ["lm_head"]`, see
scripts/bench/ct_writer.py): every decoder Linear as weight_packed int32 [out, in/8] + weight_scale bf16
[out, in/128] + weight_shape int64 [2] (Phi-3: the fused qkv_proj [(heads + 2 kv) * head_dim, hidden] and
gate_up_proj [2 * intermediate, hidden], quantized whole as llm-compressor does); embeddings, lm_head and norms
dense bf16; shards and index as make_random_w4a16.py writes them (its ShardedWriter: headers first, tensors at
their offsets from a thread pool, through pinned host buffers).

Values: q/k/v/gate/up ~ N(0, 0.02), o/down ~ N(0, 0.02 / sqrt(2 * layers)) (quantized by ct_writer.quantize_w4a16);
norm gains 1 (Gemma's (1 + weight) norms store 0, q/k norms included); Gemma's embedding N(0, 1 / hidden) (the
model multiplies it by sqrt(hidden)), Phi's N(0, 1) with lm_head N(0, 1 / sqrt(hidden)). Every tensor has its own
seeded generator (make_random_w4a16.generator). With Gemma's tied embeddings the residual stream stays close to
the current token's own embedding, so such a model mostly predicts the current token again (log-probs of other
tokens far below -log(vocab); measured: mean -35.7 nats on 200 tokens, gemma3-12b at 1 layer): meaningless as
a language model, irrelevant to speed.
Runs on CUDA when present, else on the CPU (tiny shapes in tests). Checked on the CPU: --layers 1 of phi3.5-mini,
gemma3-12b and phi4 at full width (0.4 / 2.0 / 2.1 GiB) load in `scored --backend=cpu` and score 200 tokens.
"""
import argparse
import json
import math
import os
import shutil
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ct_writer  # noqa: E402
import make_random_w4a16 as mrw  # noqa: E402

GROUP = 128

# microsoft/Phi-3.5-mini-instruct's rope_scaling factor lists, as published (rotary_dim / 2 = 48 entries each).
PHI35_LONG_FACTOR = [
    1.0800000429153442, 1.1100000143051147, 1.1399999856948853, 1.340000033378601, 1.5899999141693115,
    1.600000023841858, 1.6200000047683716, 2.620000123977661, 3.2300000190734863, 3.2300000190734863,
    4.789999961853027, 7.400000095367432, 7.700000286102295, 9.09000015258789, 12.199999809265137,
    17.670000076293945, 24.46000099182129, 28.57000160217285, 30.420001983642578, 30.840002059936523,
    32.590003967285156, 32.93000411987305, 42.320003509521484, 44.96000289916992, 50.340003967285156,
    50.45000457763672, 57.55000305175781, 57.93000411987305, 58.21000289916992, 60.1400032043457,
    62.61000442504883, 62.62000274658203, 62.71000289916992, 63.1400032043457, 63.1400032043457,
    63.77000427246094, 63.93000411987305, 63.96000289916992, 63.970001220703125, 64.02999877929688,
    64.06999969482422, 64.08000183105469, 64.12000274658203, 64.41000366210938, 64.4800033569336,
    64.51000213623047, 64.52999877929688, 64.83999633789062]
PHI35_SHORT_FACTOR = [
    1.0, 1.0199999809265137, 1.0299999713897705, 1.0299999713897705, 1.0499999523162842, 1.0499999523162842,
    1.0499999523162842, 1.0499999523162842, 1.0499999523162842, 1.0699999332427979, 1.0999999046325684,
    1.1099998950958252, 1.1599998474121094, 1.1599998474121094, 1.1699998378753662, 1.2899998426437378,
    1.339999794960022, 1.679999828338623, 1.7899998426437378, 1.8199998140335083, 1.8499997854232788,
    1.8799997568130493, 1.9099997282028198, 1.9399996995925903, 1.9899996519088745, 2.0199997425079346,
    2.0199997425079346, 2.0199997425079346, 2.0199997425079346, 2.0199997425079346, 2.0199997425079346,
    2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0299997329711914,
    2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0799996852874756,
    2.0899996757507324, 2.189999580383301, 2.2199995517730713, 2.5899994373321533, 2.729999542236328,
    2.749999523162842, 2.8399994373321533]

_GEMMA3 = dict(family="gemma3", vocab=262208, sliding_window=1024, max_pos=131072, bos=2, eos=1)
_PHI3 = dict(family="phi3")
PRESETS = {
    "gemma3-27b": dict(_GEMMA3, hidden=5376, layers=62, heads=32, kv_heads=16, head_dim=128, intermediate=21504,
                       query_pre_attn_scalar=168),
    "gemma3-12b": dict(_GEMMA3, hidden=3840, layers=48, heads=16, kv_heads=8, head_dim=256, intermediate=15360,
                       query_pre_attn_scalar=256),
    "phi4": dict(_PHI3, hidden=5120, layers=40, heads=40, kv_heads=10, intermediate=17920, vocab=100352,
                 rope_theta=250000.0, max_pos=16384, original_max_pos=16384, sliding_window=None, longrope=False,
                 bos=100257, eos=100257, pad=100257),
    "phi3.5-mini": dict(_PHI3, hidden=3072, layers=32, heads=32, kv_heads=32, intermediate=8192, vocab=32064,
                        rope_theta=10000.0, max_pos=131072, original_max_pos=4096, sliding_window=262144,
                        longrope=True, bos=1, eos=32000, pad=32000),
}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--arch", required=True, choices=sorted(PRESETS))
    ap.add_argument("--layers", type=int, help="decoder layers (default: the preset's)")
    for flag in ("hidden", "intermediate", "heads", "kv-heads", "head-dim", "vocab"):
        ap.add_argument(f"--{flag}", type=int, help="override the preset's (tiny test shapes)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--shard-gb", type=float, default=5.0)
    ap.add_argument("--threads", type=int, default=8, help="writer threads")
    ap.add_argument("--inflight-gb", type=float, default=4.0, help="pinned host buffers for pending writes")
    ap.add_argument("--tokenizer", default="", help="file(s) to copy into DIR, comma-separated")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args(argv)
    s = dict(PRESETS[args.arch], arch=args.arch)
    for key in ("layers", "hidden", "intermediate", "heads", "kv_heads", "head_dim", "vocab"):
        if getattr(args, key) is not None:
            s[key] = getattr(args, key)
    for key in ("bos", "eos", "pad"):  # a shrunk vocab (tests) keeps the special ids inside it
        if key in s and s[key] >= s["vocab"]:
            s[key] = s["vocab"] - 1
    if s["family"] == "phi3":
        if args.head_dim is not None and args.head_dim * s["heads"] != s["hidden"]:
            ap.error("Phi-3's head_dim is hidden / heads: drop --head-dim or make them agree")
        s["head_dim"] = s["hidden"] // s["heads"]
        if s["longrope"] and s["head_dim"] != 2 * len(PHI35_LONG_FACTOR):
            ap.error(f"longrope's factor lists have {len(PHI35_LONG_FACTOR)} entries: head_dim must stay "
                     f"{2 * len(PHI35_LONG_FACTOR)}")
    for name, width in (("hidden", s["hidden"]), ("intermediate", s["intermediate"]),
                        ("heads * head_dim", s["heads"] * s["head_dim"])):
        if width % GROUP:
            ap.error(f"{name} = {width} is not a multiple of the group size {GROUP}")
    if s["heads"] % s["kv_heads"]:
        ap.error("heads must be a multiple of kv-heads")
    return args, s


def layer_types(s):
    """Gemma 3: every 6th layer full attention (Gemma3TextConfig's default sliding_window_pattern 6)."""
    return ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(s["layers"])]


def config_json(s):
    """config.json as the published checkpoint has it (see the top), with llm-compressor's quantization_config."""
    common = {"attention_bias": False, "attention_dropout": 0.0, "bos_token_id": s["bos"],
              "eos_token_id": s["eos"], "hidden_size": s["hidden"], "initializer_range": 0.02,
              "intermediate_size": s["intermediate"], "max_position_embeddings": s["max_pos"],
              "num_attention_heads": s["heads"], "num_hidden_layers": s["layers"],
              "num_key_value_heads": s["kv_heads"], "torch_dtype": "bfloat16", "use_cache": True,
              "vocab_size": s["vocab"]}
    if s["family"] == "gemma3":
        conf = {"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", **common,
                "attn_logit_softcapping": None, "final_logit_softcapping": None, "head_dim": s["head_dim"],
                "hidden_activation": "gelu_pytorch_tanh", "layer_types": layer_types(s), "pad_token_id": 0,
                "query_pre_attn_scalar": s["query_pre_attn_scalar"], "rms_norm_eps": 1e-06,
                "rope_local_base_freq": 10000.0, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                "rope_theta": 1000000.0, "sliding_window": s["sliding_window"], "sliding_window_pattern": 6,
                "tie_word_embeddings": True}
    else:
        rope_scaling = None
        if s["longrope"]:
            rope_scaling = {"long_factor": PHI35_LONG_FACTOR, "short_factor": PHI35_SHORT_FACTOR, "type": "longrope"}
        conf = {"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", **common, "embd_pdrop": 0.0,
                "hidden_act": "silu", "original_max_position_embeddings": s["original_max_pos"],
                "pad_token_id": s["pad"], "resid_pdrop": 0.0, "rms_norm_eps": 1e-05, "rope_scaling": rope_scaling,
                "rope_theta": s["rope_theta"], "sliding_window": s["sliding_window"], "tie_word_embeddings": False}
    conf["quantization_config"] = ct_writer.quantization_config("w4a16")
    return conf


def linears(s):
    """(module suffix, out, in, std) of one decoder layer, in the order they are generated."""
    h, hd, inter = s["hidden"], s["head_dim"], s["intermediate"]
    q, kv = s["heads"] * hd, s["kv_heads"] * hd
    small = 0.02 / math.sqrt(2 * s["layers"])
    if s["family"] == "phi3":
        return [("self_attn.qkv_proj", q + 2 * kv, h, 0.02), ("self_attn.o_proj", h, q, small),
                ("mlp.gate_up_proj", 2 * inter, h, 0.02), ("mlp.down_proj", h, inter, small)]
    return [("self_attn.q_proj", q, h, 0.02), ("self_attn.k_proj", kv, h, 0.02), ("self_attn.v_proj", kv, h, 0.02),
            ("self_attn.o_proj", h, q, small), ("mlp.gate_proj", inter, h, 0.02), ("mlp.up_proj", inter, h, 0.02),
            ("mlp.down_proj", h, inter, small)]


def norms(s):
    """(name suffix, size) of one decoder layer's norms."""
    if s["family"] == "phi3":
        return [("input_layernorm", s["hidden"]), ("post_attention_layernorm", s["hidden"])]
    return [("input_layernorm", s["hidden"]), ("post_attention_layernorm", s["hidden"]),
            ("pre_feedforward_layernorm", s["hidden"]), ("post_feedforward_layernorm", s["hidden"]),
            ("self_attn.q_norm", s["head_dim"]), ("self_attn.k_norm", s["head_dim"])]


def tensor_plan(s):
    """[(name, safetensors dtype, shape)] in HF order (embedding, layers, norm, lm_head unless tied)."""
    plan = [("model.embed_tokens.weight", "BF16", [s["vocab"], s["hidden"]])]
    for layer in range(s["layers"]):
        p = f"model.layers.{layer}."
        plan += [(f"{p}{name}.weight", "BF16", [size]) for name, size in norms(s)]
        for mod, out_f, in_f, _ in linears(s):
            for suffix, (dtype, shape) in ct_writer.LAYOUT["w4a16"].items():
                plan.append((f"{p}{mod}.{suffix}", dtype, shape(out_f, in_f)))
    plan.append(("model.norm.weight", "BF16", [s["hidden"]]))
    if s["family"] == "phi3":
        plan.append(("lm_head.weight", "BF16", [s["vocab"], s["hidden"]]))
    return plan


def dense_weight(s, layer, i, device, seed):
    """The dense fp32 values of linear i of `layer`, before quantization."""
    _, out_f, in_f, std = linears(s)[i]
    g = mrw.generator(device, seed, layer, i)
    return torch.randn((out_f, in_f), generator=g, device=device, dtype=torch.float32).mul_(std)


def main(argv=None):
    args, s = parse_args(argv)
    t0 = time.time()
    device = torch.device(args.device)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config_json(s), f, indent=1)
    for path in filter(None, args.tokenizer.split(",")):
        shutil.copy(path, args.out)
    writer = mrw.ShardedWriter(args.out, tensor_plan(s), int(args.shard_gb * 2**30), args.threads,
                               int(args.inflight_gb * 2**30))
    gemma = s["family"] == "gemma3"
    gain = torch.zeros if gemma else torch.ones  # Gemma's norms multiply by (1 + weight)
    t_quant = 0.0
    with torch.inference_mode():
        g = mrw.generator(device, args.seed, "embed")
        embed = torch.randn((s["vocab"], s["hidden"]), generator=g, device=device, dtype=torch.float32)
        writer.put("model.embed_tokens.weight", embed.mul_(1.0 / math.sqrt(s["hidden"]) if gemma else 1.0)
                   .to(torch.bfloat16))
        del embed
        writer.put("model.norm.weight", gain(s["hidden"], dtype=torch.bfloat16, device=device))
        if not gemma:
            g = mrw.generator(device, args.seed, "lm_head")
            head = torch.randn((s["vocab"], s["hidden"]), generator=g, device=device, dtype=torch.float32)
            writer.put("lm_head.weight", head.mul_(1.0 / math.sqrt(s["hidden"])).to(torch.bfloat16))
            del head
        for layer in range(s["layers"]):
            p = f"model.layers.{layer}."
            for name, size in norms(s):
                writer.put(f"{p}{name}.weight", gain(size, dtype=torch.bfloat16, device=device))
            for i, (mod, _, _, _) in enumerate(linears(s)):
                tq = time.time()
                parts = ct_writer.quantize_w4a16(dense_weight(s, layer, i, device, args.seed))
                if device.type == "cuda":
                    torch.cuda.synchronize()
                t_quant += time.time() - tq
                for suffix, tensor in parts.items():
                    writer.put(f"{p}{mod}.{suffix}", tensor)
                del parts
        tw = time.time()
        writer.close()
        t_drain = time.time() - tw
    n_params = s["vocab"] * s["hidden"] * (1 if gemma else 2) + s["layers"] * sum(
        o * i for _, o, i, _ in linears(s))
    print(f"make_random_family: {s['arch']} ({config_json(s)['architectures'][0]}) hidden {s['hidden']}, "
          f"{s['layers']} layers, heads {s['heads']}/{s['kv_heads']} of {s['head_dim']}, intermediate "
          f"{s['intermediate']}, vocab {s['vocab']}: {n_params / 1e9:.2f}B params, {len(writer.fds)} shards, "
          f"{writer.total / 2**30:.2f} GiB")
    print(f"make_random_family: total {time.time() - t0:.1f}s (quantize {t_quant:.1f}s, device-to-host copies "
          f"{writer.copy_s:.1f}s, final write drain {t_drain:.1f}s) on {device}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
