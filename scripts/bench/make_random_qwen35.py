#!/usr/bin/env python3
"""Writes a random-weight Qwen3.5 / Qwen3.6 checkpoint (hybrid Gated DeltaNet + gated full attention, dense or
mixture-of-experts) in bf16 or compressed-tensors W4A16 group-128 `pack-quantized` form, layer by layer (no dense
copy of the model in memory, no transformers model), for the speed benchmarks of issue 34. No reference windows:
the numbers a random model can check are the fixtures' (tests/fixtures/qwen35-*).

  make_random_qwen35.py --out DIR --arch qwen36-35b-a3b|qwen35-27b [--quant w4a16|bf16]
                        [--linear-attn quantized|bf16] [--layers N]
  make_random_qwen35.py --arch ARCH [--layers N] --peer-config     (prints hf_peers.py any's --config JSON)

Shapes (the text model, Qwen3_5MoeForCausalLM / Qwen3_5ForCausalLM, as the published config.json's text_config):
  qwen36-35b-a3b: Qwen/Qwen3.6-35B-A3B (= Qwen3.5-35B-A3B's shape): the text_config quoted in
                  tests/engine/model/family_test.cc (kQwen36MoeVlm), which Qwen3_5MoeTextConfig's defaults
                  repeat: hidden 2048, 40 layers (3 Gated DeltaNet : 1 full attention), 16 heads / 2 KV heads of
                  256 (q_proj 2x: [q | gate] per head), DeltaNet 16 k heads / 32 v heads of 128, conv kernel 4,
                  256 experts of 512, top 8, a gated shared expert of 512, vocab 248320, rope_theta 1e7 with
                  partial_rotary_factor 0.25, max_position_embeddings 262144, untied lm_head.
  qwen35-27b:     Qwen/Qwen3.5-27B (Qwen3_5ForCausalLM): 64 layers (48 DeltaNet + 16 full), 16 k heads / 48 v heads
                  of 128 and rope_theta 1e7 as ../shared/reviews/families-2026.md §4.1 quotes; 24 heads of 256 (the
                  6144-wide attention gate of engine/kernels/sigmoid_gate.cu) / 4 KV heads, hidden 5120,
                  intermediate 17408, vocab 248320: the public config.json's values as remembered (not quoted in
                  this repository; 26.9B text parameters, which the name bears out).
--layers N keeps the widths and the 3 linear : 1 full pattern (layer l is full_attention when (l + 1) % 4 == 0);
layer_types is written explicitly. --hidden / --intermediate / --moe-intermediate / --shared-intermediate /
--experts / --top-k / --heads / --kv-heads / --head-dim / --k-heads / --v-heads / --k-head-dim / --v-head-dim /
--conv-kernel / --vocab override the preset's (tiny shapes for scripts/bench/test_writer.py).

Layout (tensor names, dtypes and shapes those of tests/fixtures/qwen35-bf16, qwen35-moe-trained-bf16 and
qwen35-w4a16-g32, which transformers 5.17 and llm-compressor saved; test_writer.py checks it): model.layers.L.
  input_layernorm / post_attention_layernorm [hidden];
  DeltaNet layers: linear_attn.in_proj_qkv [2 k_heads dk + v_heads dv, hidden], in_proj_z [v_heads dv, hidden],
    in_proj_b / in_proj_a [v_heads, hidden], out_proj [hidden, v_heads dv], conv1d.weight [2 k_heads dk +
    v_heads dv, 1, kernel], A_log / dt_bias [v_heads], norm.weight [dv] (all bf16 as in the fixtures);
  full layers: self_attn.q_proj [2 heads head_dim, hidden], k_proj / v_proj [kv_heads head_dim, hidden], o_proj
    [hidden, heads head_dim], q_norm / k_norm [head_dim];
  dense MLP: mlp.gate_proj / up_proj [intermediate, hidden], down_proj [hidden, intermediate]; MoE: mlp.gate
    [experts, hidden], mlp.experts.E.{gate,up,down}_proj, mlp.shared_expert.{gate,up,down}_proj,
    mlp.shared_expert_gate [1, hidden];
  model.embed_tokens, model.norm, lm_head (untied).
--quant w4a16 (scripts/bench/ct_writer.py's layout: weight_packed int32 [out, in/8], weight_scale bf16
[out, in/128], weight_shape int64 [2]): every decoder Linear except the router mlp.gate, mlp.shared_expert_gate
and linear_attn.in_proj_a / in_proj_b (v_heads rows each), which stay bf16 and are listed in
quantization_config.ignore with lm_head; --linear-attn bf16 leaves every linear_attn projection in bf16 (ignore
`re:.*linear_attn.*`), as llm-compressor's examples for this family do. conv1d, A_log, dt_bias and the norms are
never quantized. Shards and index as make_random_w4a16.py writes them (its ShardedWriter: headers first, tensors
at their offsets from a thread pool, through pinned host buffers).

Values: in_proj_qkv / in_proj_z / in_proj_a / in_proj_b / q / k / v / gate / up (experts and shared expert
included) ~ N(0, 0.02), out_proj / o / down ~ N(0, 0.02 / sqrt(2 * layers)), routers and shared_expert_gate
N(0, 0.02); conv1d U(-1/sqrt(kernel), 1/sqrt(kernel)) (torch's Conv1d default); A_log = log(U(1, 16)) (decay
rates A in [1, 16]), dt_bias 1; the Qwen3_5RMSNorm weights (input / post-attention / q / k / final norms, which
multiply by 1 + w) 0, the DeltaNet output norm (Qwen3_5RMSNormGated, a plain weight) 1; embedding N(0, 1), lm_head
N(0, 1 / sqrt(hidden)). Every tensor (every stacked set of experts) has its own seeded generator
(make_random_w4a16.generator), so dense_weight() redraws the values for the tests.
Runs on CUDA when present, else on the CPU (tiny shapes in tests). Checked on the CPU: tiny checkpoints of both
presets (bf16, W4A16, W4A16 with --linear-attn bf16) load in `scored --backend=cpu` and score finite log-probs.
"""
import argparse
import json
import math
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ct_writer  # noqa: E402
import make_random_w4a16 as mrw  # noqa: E402

GROUP = 128
FULL_ATTENTION_INTERVAL = 4

_COMMON = dict(head_dim=256, k_heads=16, k_head_dim=128, v_head_dim=128, conv_kernel=4, vocab=248320,
               rope_theta=10000000.0, max_pos=262144, rms_norm_eps=1e-6)
PRESETS = {
    "qwen36-35b-a3b": dict(_COMMON, moe=True, hidden=2048, layers=40, heads=16, kv_heads=2, v_heads=32,
                           intermediate=0, experts=256, top_k=8, moe_intermediate=512, shared_intermediate=512),
    "qwen35-27b": dict(_COMMON, moe=False, hidden=5120, layers=64, heads=24, kv_heads=4, v_heads=48,
                       intermediate=17408, experts=0, top_k=0, moe_intermediate=0, shared_intermediate=0),
}
OVERRIDES = ("layers", "hidden", "intermediate", "moe_intermediate", "shared_intermediate", "experts", "top_k",
             "heads", "kv_heads", "head_dim", "k_heads", "v_heads", "k_head_dim", "v_head_dim", "conv_kernel",
             "vocab")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="checkpoint folder (required unless --peer-config)")
    ap.add_argument("--arch", required=True, choices=sorted(PRESETS))
    ap.add_argument("--quant", default="w4a16", choices=["w4a16", "bf16"])
    ap.add_argument("--linear-attn", default="quantized", choices=["quantized", "bf16"],
                    help="W4A16: quantize in_proj_qkv / in_proj_z / out_proj (default) or keep every linear_attn "
                         "projection bf16 (llm-compressor's examples)")
    for key in OVERRIDES:
        ap.add_argument("--" + key.replace("_", "-"), type=int, help="override the preset's (tiny test shapes)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--shard-gb", type=float, default=5.0)
    ap.add_argument("--threads", type=int, default=8, help="writer threads")
    ap.add_argument("--inflight-gb", type=float, default=4.0, help="pinned host buffers for pending writes")
    ap.add_argument("--peer-config", action="store_true",
                    help="print the text config as hf_peers.py any --config takes it, then exit")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args(argv)
    if not args.peer_config and not args.out:
        ap.error("--out is required")
    s = dict(PRESETS[args.arch], arch=args.arch, quant=args.quant, linear_attn=args.linear_attn)
    for key in OVERRIDES:
        if getattr(args, key) is not None:
            s[key] = getattr(args, key)
    if s["layers"] < 1:
        ap.error("--layers must be positive")
    if s["heads"] % s["kv_heads"] or s["v_heads"] % s["k_heads"]:
        ap.error("heads must be a multiple of kv-heads and v-heads of k-heads")
    if s["head_dim"] % 8:
        ap.error("head_dim must be a multiple of 8 (partial_rotary_factor 0.25 rotates an even quarter)")
    if s["moe"] and not (0 < s["top_k"] <= s["experts"]):
        ap.error("top-k must be in 1..experts")
    if s["quant"] == "w4a16":
        for mod, _, in_f, _, quantized in linears(s, FULL_ATTENTION_INTERVAL - 1) + linears(s, 0):
            if quantized and in_f % GROUP:
                ap.error(f"{mod}'s input width {in_f} is not a multiple of the group size {GROUP}")
    return args, s


def layer_types(s):
    """3 linear : 1 full, as Qwen3_5TextConfig's default (full_attention_interval 4)."""
    return ["full_attention" if (i + 1) % FULL_ATTENTION_INTERVAL == 0 else "linear_attention"
            for i in range(s["layers"])]


def is_full(s, layer):
    return (layer + 1) % FULL_ATTENTION_INTERVAL == 0


def config_json(s):
    """config.json of the text model (Qwen3_5MoeForCausalLM / Qwen3_5ForCausalLM, as transformers 5.17 saves the
    fixtures), with llm-compressor's quantization_config for --quant w4a16."""
    conf = {"architectures": ["Qwen3_5MoeForCausalLM" if s["moe"] else "Qwen3_5ForCausalLM"],
            "model_type": "qwen3_5_moe_text" if s["moe"] else "qwen3_5_text",
            "attention_bias": False, "attention_dropout": 0.0, "dtype": "bfloat16", "head_dim": s["head_dim"],
            "hidden_act": "silu", "hidden_size": s["hidden"], "initializer_range": 0.02,
            "layer_types": layer_types(s), "linear_conv_kernel_dim": s["conv_kernel"],
            "linear_key_head_dim": s["k_head_dim"], "linear_num_key_heads": s["k_heads"],
            "linear_num_value_heads": s["v_heads"], "linear_value_head_dim": s["v_head_dim"],
            "max_position_embeddings": s["max_pos"], "num_attention_heads": s["heads"],
            "num_hidden_layers": s["layers"], "num_key_value_heads": s["kv_heads"], "partial_rotary_factor": 0.25,
            "rms_norm_eps": s["rms_norm_eps"],
            "rope_parameters": {"mrope_interleaved": True, "mrope_section": [11, 11, 10],
                                "partial_rotary_factor": 0.25, "rope_theta": s["rope_theta"], "rope_type": "default"},
            "tie_word_embeddings": False, "use_cache": True, "vocab_size": s["vocab"]}
    if s["moe"]:
        conf.update({"moe_intermediate_size": s["moe_intermediate"], "num_experts": s["experts"],
                     "num_experts_per_tok": s["top_k"], "output_router_logits": False,
                     "router_aux_loss_coef": 0.001, "shared_expert_intermediate_size": s["shared_intermediate"]})
    else:
        conf["intermediate_size"] = s["intermediate"]
    if s["quant"] == "w4a16":
        qc = ct_writer.quantization_config("w4a16")
        ignore = ["lm_head"]
        if s["moe"]:
            ignore += ["re:.*mlp.gate$", "re:.*mlp.shared_expert_gate$"]
        if s["linear_attn"] == "bf16":
            ignore.append("re:.*linear_attn.*")
        else:
            ignore += ["re:.*linear_attn.in_proj_a$", "re:.*linear_attn.in_proj_b$"]
        qc["ignore"] = ignore
        conf["quantization_config"] = qc
    return dict(sorted(conf.items()))


def peer_config(s):
    """The text config's fields for hf_peers.py any (AutoConfig.for_model(model_type, **fields))."""
    return {k: v for k, v in config_json(s).items()
            if k not in ("architectures", "model_type", "dtype", "quantization_config")}


def linears(s, layer):
    """(module suffix, out, in, std, quantized) of one decoder layer's Linears other than the experts (the routed
    experts: expert_linears), in the order they are generated. `quantized`: stored W4A16 under --quant w4a16."""
    h, hd, small = s["hidden"], s["head_dim"], 0.02 / math.sqrt(2 * s["layers"])
    w4 = s["quant"] == "w4a16"
    if is_full(s, layer):
        q, kv = s["heads"] * hd, s["kv_heads"] * hd
        mixer = [("self_attn.q_proj", 2 * q, h, 0.02, w4), ("self_attn.k_proj", kv, h, 0.02, w4),
                 ("self_attn.v_proj", kv, h, 0.02, w4), ("self_attn.o_proj", h, q, small, w4)]
    else:
        conv, vd, vh = conv_dim(s), s["v_heads"] * s["v_head_dim"], s["v_heads"]
        la = w4 and s["linear_attn"] == "quantized"
        mixer = [("linear_attn.in_proj_qkv", conv, h, 0.02, la), ("linear_attn.in_proj_z", vd, h, 0.02, la),
                 ("linear_attn.in_proj_b", vh, h, 0.02, False), ("linear_attn.in_proj_a", vh, h, 0.02, False),
                 ("linear_attn.out_proj", h, vd, small, la)]
    if not s["moe"]:
        inter = s["intermediate"]
        return mixer + [("mlp.gate_proj", inter, h, 0.02, w4), ("mlp.up_proj", inter, h, 0.02, w4),
                        ("mlp.down_proj", h, inter, small, w4)]
    si = s["shared_intermediate"]
    return mixer + [("mlp.gate", s["experts"], h, 0.02, False),
                    ("mlp.shared_expert.gate_proj", si, h, 0.02, w4), ("mlp.shared_expert.up_proj", si, h, 0.02, w4),
                    ("mlp.shared_expert.down_proj", h, si, small, w4), ("mlp.shared_expert_gate", 1, h, 0.02, False)]


def expert_linears(s):
    """(projection, out, in, std) of every routed expert (MoE only); each is drawn for all experts at once."""
    if not s["moe"]:
        return []
    h, mi, small = s["hidden"], s["moe_intermediate"], 0.02 / math.sqrt(2 * s["layers"])
    return [("gate_proj", mi, h, 0.02), ("up_proj", mi, h, 0.02), ("down_proj", h, mi, small)]


def conv_dim(s):
    return 2 * s["k_heads"] * s["k_head_dim"] + s["v_heads"] * s["v_head_dim"]


def small_tensors(s, layer):
    """(name suffix, shape) of one layer's tensors that are neither Linears nor experts: norms and the DeltaNet
    parameters (all bf16)."""
    h, hd = s["hidden"], s["head_dim"]
    out = [("input_layernorm.weight", [h]), ("post_attention_layernorm.weight", [h])]
    if is_full(s, layer):
        return out + [("self_attn.q_norm.weight", [hd]), ("self_attn.k_norm.weight", [hd])]
    return out + [("linear_attn.conv1d.weight", [conv_dim(s), 1, s["conv_kernel"]]),
                  ("linear_attn.A_log", [s["v_heads"]]), ("linear_attn.dt_bias", [s["v_heads"]]),
                  ("linear_attn.norm.weight", [s["v_head_dim"]])]


def module_plan(module, out_f, in_f, quantized):
    """[(name, dtype, shape)] of one Linear as stored."""
    if not quantized:
        return [(f"{module}.weight", "BF16", [out_f, in_f])]
    return [(f"{module}.{suffix}", dtype, shape(out_f, in_f))
            for suffix, (dtype, shape) in ct_writer.LAYOUT["w4a16"].items()]


def tensor_plan(s):
    """[(name, safetensors dtype, shape)] in HF order (embedding, layers, norm, lm_head)."""
    plan = [("model.embed_tokens.weight", "BF16", [s["vocab"], s["hidden"]])]
    w4 = s["quant"] == "w4a16"
    for layer in range(s["layers"]):
        p = f"model.layers.{layer}."
        plan += [(p + name, "BF16", shape) for name, shape in small_tensors(s, layer)]
        for mod, out_f, in_f, _, quantized in linears(s, layer):
            plan += module_plan(p + mod, out_f, in_f, quantized)
        for e in range(s["experts"] if s["moe"] else 0):
            for proj, out_f, in_f, _ in expert_linears(s):
                plan += module_plan(f"{p}mlp.experts.{e}.{proj}", out_f, in_f, w4)
    plan += [("model.norm.weight", "BF16", [s["hidden"]]), ("lm_head.weight", "BF16", [s["vocab"], s["hidden"]])]
    return plan


def dense_weight(s, layer, module, device, seed):
    """The fp32 values drawn for `module` of `layer` (a linears() suffix, or "mlp.experts.<proj>" for the
    [experts, out, in] stack of one expert projection), before bf16 rounding or quantization."""
    shapes = {m: (o, i, std) for m, o, i, std, _ in linears(s, layer)}
    shapes.update({f"mlp.experts.{p}": (o, i, std) for p, o, i, std in expert_linears(s)})
    out_f, in_f, std = shapes[module]
    shape = (s["experts"], out_f, in_f) if module.startswith("mlp.experts.") else (out_f, in_f)
    g = mrw.generator(device, seed, layer, module)
    return torch.randn(shape, generator=g, device=device, dtype=torch.float32).mul_(std)


def small_tensor(s, layer, name, device, seed):
    """The bf16 value of small_tensors()'s `name` in `layer`."""
    shape = dict(small_tensors(s, layer))[name]
    if name.endswith("layernorm.weight") or name.endswith("q_norm.weight") or name.endswith("k_norm.weight"):
        return torch.zeros(shape, dtype=torch.bfloat16, device=device)   # Qwen3_5RMSNorm: x (1 + w)
    if name in ("linear_attn.norm.weight", "linear_attn.dt_bias"):   # Qwen3_5RMSNormGated: x w
        return torch.ones(shape, dtype=torch.bfloat16, device=device)
    g = mrw.generator(device, seed, layer, name)
    if name == "linear_attn.A_log":
        return torch.empty(shape, device=device).uniform_(1.0, 16.0, generator=g).log_().to(torch.bfloat16)
    bound = 1.0 / math.sqrt(s["conv_kernel"])  # conv1d
    return torch.empty(shape, device=device).uniform_(-bound, bound, generator=g).to(torch.bfloat16)


def main(argv=None):
    args, s = parse_args(argv)
    if args.peer_config:
        print(json.dumps(peer_config(s), separators=(",", ":")))
        return 0
    t0 = time.time()
    device = torch.device(args.device)
    os.makedirs(args.out, exist_ok=True)
    conf = config_json(s)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(conf, f, indent=1)
    writer = mrw.ShardedWriter(args.out, tensor_plan(s), int(args.shard_gb * 2**30), args.threads,
                               int(args.inflight_gb * 2**30))
    t_quant = 0.0

    def put_linear(name, w, quantized):
        """w: fp32 [out, in] or a stack [experts, out, in] whose rows go to name.format(e)."""
        nonlocal t_quant
        stacked = w.dim() == 3
        rows = w.reshape(-1, w.shape[-1])
        if not quantized:
            wb = rows.to(torch.bfloat16).reshape(w.shape)
            for e in range(w.shape[0] if stacked else 1):
                writer.put(name.format(e) + ".weight", wb[e] if stacked else wb)
            return
        tq = time.time()
        parts = ct_writer.quantize_w4a16(rows)  # row-wise: the stack quantizes as its experts one by one
        if device.type == "cuda":
            torch.cuda.synchronize()
        t_quant += time.time() - tq
        out_f, in_f = w.shape[-2:]
        shape = torch.tensor([out_f, in_f], dtype=torch.int64, device=w.device)
        for e in range(w.shape[0] if stacked else 1):
            sl = slice(e * out_f, (e + 1) * out_f)
            writer.put(name.format(e) + ".weight_packed", parts["weight_packed"][sl])
            writer.put(name.format(e) + ".weight_scale", parts["weight_scale"][sl])
            writer.put(name.format(e) + ".weight_shape", shape)

    with torch.inference_mode():
        g = mrw.generator(device, args.seed, "embed")
        embed = torch.randn((s["vocab"], s["hidden"]), generator=g, device=device, dtype=torch.float32)
        writer.put("model.embed_tokens.weight", embed.to(torch.bfloat16))
        del embed
        writer.put("model.norm.weight", torch.zeros(s["hidden"], dtype=torch.bfloat16, device=device))
        g = mrw.generator(device, args.seed, "lm_head")
        head = torch.randn((s["vocab"], s["hidden"]), generator=g, device=device, dtype=torch.float32)
        writer.put("lm_head.weight", head.mul_(1.0 / math.sqrt(s["hidden"])).to(torch.bfloat16))
        del head
        for layer in range(s["layers"]):
            p = f"model.layers.{layer}."
            for name, _ in small_tensors(s, layer):
                writer.put(p + name, small_tensor(s, layer, name, device, args.seed))
            for mod, _, _, _, quantized in linears(s, layer):
                put_linear(p + mod, dense_weight(s, layer, mod, device, args.seed), quantized)
            for proj, _, _, _ in expert_linears(s):
                put_linear(p + "mlp.experts.{}." + proj, dense_weight(s, layer, "mlp.experts." + proj, device,
                                                                     args.seed), s["quant"] == "w4a16")
            if device.type == "cuda" and (layer + 1) % 8 == 0:
                print(f"layer {layer + 1}/{s['layers']} queued ({time.time() - t0:.0f}s)", flush=True)
        tw = time.time()
        writer.close()
        t_drain = time.time() - tw
    n_params = sum(math.prod(shape) for name, dtype, shape in tensor_plan(dict(s, quant="bf16")))
    full = sum(is_full(s, layer) for layer in range(s["layers"]))
    la = "" if s["quant"] == "bf16" else f" (linear_attn {s['linear_attn']})"
    shape = (f"{s['experts']} experts of {s['moe_intermediate']} (top {s['top_k']}) + shared "
             f"{s['shared_intermediate']}" if s["moe"] else f"intermediate {s['intermediate']}")
    print(f"make_random_qwen35: {s['arch']} ({conf['architectures'][0]}) {s['quant']}{la} hidden {s['hidden']}, "
          f"{s['layers']} layers ({s['layers'] - full} linear / {full} full), heads {s['heads']}/{s['kv_heads']} of "
          f"{s['head_dim']}, DeltaNet {s['k_heads']}/{s['v_heads']} heads of {s['k_head_dim']}/{s['v_head_dim']}, "
          f"{shape}, vocab {s['vocab']}: {n_params / 1e9:.2f}B params, {len(writer.fds)} shards, "
          f"{writer.total / 2**30:.2f} GiB")
    print(f"make_random_qwen35: total {time.time() - t0:.1f}s (quantize {t_quant:.1f}s, device-to-host copies "
          f"{writer.copy_s:.1f}s, final write drain {t_drain:.1f}s) on {device}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
