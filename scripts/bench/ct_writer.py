"""Writes compressed-tensors checkpoints (W4A16 group-128 symmetric `pack-quantized`, NVFP4A16
`nvfp4-pack-quantized`, FP8 W8A8 `float-quantized` as llm-compressor's FP8_DYNAMIC, INT8 W8A8 `int-quantized` as
its W8A8 scheme) from dense weights, in the layout compressed-tensors itself saves (see
tests/fixtures/README.md, "Decode rules"; scripts/bench/test_writer.py re-packs two fixtures bit for bit).

The bit packing is written once for numpy and torch arrays alike (an `ArrayOps` adapter supplies the few
casts that differ), so the CPU test checks the very functions the GPU writer uses. The quantizers (scale
choice, rounding) need torch; they follow compressed-tensors' min-max observers:
  W4A16:  scale[o, g] = bf16(max |w[o, g*128:(g+1)*128]| / 7.5), q = clamp(round(w / scale), -8, 7),
          stored u = q + 8, 8 per int32 word, element 0 in the low nibble.
  NVFP4:  global_scale = 448 * 6 / max |w| (fp32), scale[o, g] = e4m3(max |w[o, 16g:16g+16]| / 6 *
          global_scale), x = w / (fp32(scale) / global_scale) rounded to the nearest E2M1 value
          {0, .5, 1, 1.5, 2, 3, 4, 6} (sign kept, |x| > 6 clamped), 2 per byte, element 2i in the low nibble.
  FP8:    scale[o] = bf16(max |w[o, :]| / 448), weight = e4m3(w / scale) (round to nearest even, torch's cast);
          activations are quantized per token at run time (dynamic), nothing stored for them.
  INT8:   scale[o] = bf16(max |w[o, :]| / 127.5), weight = clamp(round(w / scale), -128, 127) as int8 (symmetric
          channel-wise, compressed-tensors' min-max observer); activations int8 per token at run time.
"""
import json
import os
import re

# Linears that compressed-tensors' `targets: ["Linear"], ignore: ["lm_head"]` quantizes in a Llama.
QUANTIZED_LINEAR = re.compile(r"^model\.layers\.\d+\.(self_attn\.(q|k|v|o)_proj|mlp\.(gate|up|down)_proj)\.weight$")

E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
# Midpoints between consecutive E2M1 magnitudes: |x| > midpoint[i] moves the code past value i.
E2M1_MIDPOINTS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)


# What each quantized Linear holds, per scheme: suffix -> (safetensors dtype, shape as a function of (out, in)).
LAYOUT = {
    "w4a16": {"weight_packed": ("I32", lambda o, i: [o, i // 8]),
              "weight_scale": ("BF16", lambda o, i: [o, i // 128]),
              "weight_shape": ("I64", lambda o, i: [2])},
    "fp8_dynamic": {"weight": ("F8_E4M3", lambda o, i: [o, i]),
                    "weight_scale": ("BF16", lambda o, i: [o, 1])},
    "w4a8": {"weight": ("I8", lambda o, i: [o, i]),
             "weight_scale": ("BF16", lambda o, i: [o, i // 128])},
    "fp8_static": {"weight": ("F8_E4M3", lambda o, i: [o, i]),
                   "weight_scale": ("BF16", lambda o, i: [1]),
                   "input_scale": ("BF16", lambda o, i: [1])},
    "w4a16_kv_fp8": {"weight_packed": ("I32", lambda o, i: [o, i // 8]),
                     "weight_scale": ("BF16", lambda o, i: [o, i // 128]),
                     "weight_shape": ("I64", lambda o, i: [2])},
    "int8_w8a8": {"weight": ("I8", lambda o, i: [o, i]),
                  "weight_scale": ("BF16", lambda o, i: [o, 1])},
    "nvfp4a16": {"weight_packed": ("U8", lambda o, i: [o, i // 2]),
                 "weight_scale": ("F8_E4M3", lambda o, i: [o, i // 16]),
                 "weight_global_scale": ("F32", lambda o, i: [1])},
}
TORCH_TO_SAFETENSORS = {"torch.int8": "I8", "torch.int32": "I32", "torch.int64": "I64", "torch.uint8": "U8", "torch.bfloat16": "BF16",
                        "torch.float8_e4m3fn": "F8_E4M3", "torch.float32": "F32"}


def _weights_block(num_bits, group_size, strategy, type_, scale_dtype):
    return {"actorder": None, "block_structure": None, "dynamic": False, "group_size": group_size,
            "num_bits": num_bits, "observer": "memoryless_minmax", "observer_kwargs": {},
            "scale_dtype": scale_dtype, "strategy": strategy, "symmetric": True, "type": type_,
            "zp_dtype": None}


def quantization_config(scheme):
    """The `quantization_config` block of config.json, as compressed-tensors 0.19 writes it."""
    inputs, kv = None, None
    if scheme == "w4a16":
        fmt, weights = "pack-quantized", _weights_block(4, 128, "group", "int", None)
    elif scheme == "fp8_dynamic":
        fmt, weights = "float-quantized", _weights_block(8, None, "channel", "float", None)
        inputs = _weights_block(8, None, "token", "float", None)
        inputs.update({"dynamic": True, "observer": None})
    elif scheme == "w4a8":
        fmt, weights = "int-quantized", _weights_block(4, 128, "group", "int", None)
        inputs = _weights_block(8, None, "token", "int", None)
        inputs.update({"dynamic": True, "observer": None})
    elif scheme == "fp8_static":
        fmt, weights = "float-quantized", _weights_block(8, None, "tensor", "float", None)
        inputs = _weights_block(8, None, "tensor", "float", None)
    elif scheme == "w4a16_kv_fp8":
        fmt, weights = "pack-quantized", _weights_block(4, 128, "group", "int", None)
        kv = _weights_block(8, None, "tensor", "float", None)
        kv["observer"] = None
    elif scheme == "int8_w8a8":
        fmt, weights = "int-quantized", _weights_block(8, None, "channel", "int", None)
        inputs = _weights_block(8, None, "token", "int", None)
        inputs.update({"dynamic": True, "observer": None})
    elif scheme == "nvfp4a16":
        fmt, weights = "nvfp4-pack-quantized", _weights_block(4, 16, "tensor_group", "float",
                                                              "torch.float8_e4m3fn")
    else:
        raise ValueError(f"unknown scheme {scheme}")
    return {"config_groups": {"group_0": {"format": fmt, "input_activations": inputs, "output_activations": None,
                                          "targets": ["Linear"], "weights": weights}},
            "format": fmt, "global_compression_ratio": None, "ignore": ["lm_head"],
            "kv_cache_scheme": kv if scheme == "w4a16_kv_fp8" else None,
            "quant_method": "compressed-tensors", "quantization_status": "compressed", "sparsity_config": {},
            "transform_config": {}, "version": "0.19.0"}


class ArrayOps:
    """Casts that differ between numpy and torch; everything else below uses operators both share."""

    def __init__(self, lib):
        self.lib = lib
        self.is_torch = lib.__name__ == "torch"

    def int64(self, a):
        return a.to(self.lib.int64) if self.is_torch else a.astype(self.lib.int64)

    def int32(self, a):
        return a.to(self.lib.int32) if self.is_torch else a.astype(self.lib.int32)

    def uint8(self, a):
        return a.to(self.lib.uint8) if self.is_torch else a.astype(self.lib.uint8)

    def signbit(self, a):
        return self.lib.signbit(a)

    def abs(self, a):
        return self.lib.abs(a)


def pack_int4_rows(ops, u):
    """u: [out, in] integers in [0, 16), in % 8 == 0 -> [out, in / 8] int32 (little-endian bit stream)."""
    out, inn = u.shape
    v = ops.int64(u).reshape(out, inn // 8, 8)
    word = v[..., 0]
    for j in range(1, 8):
        word = word | (v[..., j] << (4 * j))
    return ops.int32(word - ((word >> 31) << 32))  # [0, 2^32) -> the same bits as int32


def e2m1_codes(ops, x):
    """x: float array -> 4-bit codes (sign in bit 3, magnitude index in bits 0-2) of the nearest E2M1 value."""
    mag = ops.abs(x)
    idx = ops.int64(mag > E2M1_MIDPOINTS[0])
    for m in E2M1_MIDPOINTS[1:]:
        idx = idx + ops.int64(mag > m)
    return idx | (ops.int64(ops.signbit(x)) << 3)


def pack_nibbles(ops, codes):
    """codes: [out, in] integers in [0, 16), in even -> [out, in / 2] uint8, element 2i in the low nibble."""
    out, inn = codes.shape
    v = ops.int64(codes).reshape(out, inn // 2, 2)
    return ops.uint8(v[..., 0] | (v[..., 1] << 4))


def quantize_w4a16(w):
    """w: [out, in] torch tensor (any float dtype, any device) -> {suffix: tensor} of one linear."""
    import torch
    ops = ArrayOps(torch)
    out, inn = w.shape
    g = w.float().reshape(out, inn // 128, 128)
    scale = (g.abs().amax(-1) / 7.5).clamp(min=1e-30).to(torch.bfloat16)       # [out, in / 128]
    q = torch.round(g / scale.float()[..., None]).clamp(-8, 7)
    u = (q + 8).reshape(out, inn)
    return {"weight_packed": pack_int4_rows(ops, u), "weight_scale": scale,
            "weight_shape": torch.tensor([out, inn], dtype=torch.int64, device=w.device)}


def quantize_nvfp4(w):
    """w: [out, in] torch tensor -> {suffix: tensor} of one NVFP4 (weight-only) linear."""
    import torch
    ops = ArrayOps(torch)
    out, inn = w.shape
    wf = w.float()
    global_scale = (448.0 * 6.0 / wf.abs().amax().clamp(min=1e-30)).reshape(1)       # [1] fp32
    g = wf.reshape(out, inn // 16, 16)
    scale = (g.abs().amax(-1) / 6.0 * global_scale).clamp(min=2.0 ** -9, max=448.0).to(torch.float8_e4m3fn)
    x = g / (scale.float() / global_scale)[..., None]
    codes = e2m1_codes(ops, x.clamp(-6.0, 6.0)).reshape(out, inn)
    return {"weight_packed": pack_nibbles(ops, codes), "weight_scale": scale, "weight_global_scale": global_scale}


def quantize_fp8(w):
    """w: [out, in] torch tensor -> {suffix: tensor} of one FP8 (per-channel weight scale) linear."""
    import torch
    wf = w.float()
    scale = (wf.abs().amax(-1, keepdim=True) / 448.0).clamp(min=1e-30).to(torch.bfloat16)    # [out, 1]
    q = (wf / scale.float()).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    return {"weight": q, "weight_scale": scale}


def quantize_int8(w):
    """w: [out, in] torch tensor -> {suffix: tensor} of one INT8 (per-channel symmetric weight scale) linear."""
    import torch
    wf = w.float()
    scale = (wf.abs().amax(-1, keepdim=True) / 127.5).clamp(min=1e-30).to(torch.bfloat16)    # [out, 1]
    q = torch.round(wf / scale.float()).clamp(-128, 127).to(torch.int8)
    return {"weight": q, "weight_scale": scale}


def quantize_w4a8(w):
    """w: [out, in] -> int4 group-128 symmetric values stored one per int8 (llm-compressor's W4A8 layout)."""
    import torch
    wf = w.float()
    out, inn = wf.shape
    g = wf.reshape(out, inn // 128, 128)
    scale = (g.abs().amax(-1) / 7.5).clamp(min=1e-30).to(torch.bfloat16)                    # [out, in/128]
    q = torch.round(g / scale.float()[..., None]).clamp(-8, 7).to(torch.int8).reshape(out, inn)
    return {"weight": q, "weight_scale": scale}


# Static scales for the speed benchmark's random model (no calibration: the values only have to be plausible
# for inputs of rms ~1; --gate 0 runs judge no quality).
BENCH_INPUT_SCALE = 0.02
BENCH_KV_SCALE = 0.05


def quantize_fp8_static(w):
    """w: [out, in] -> FP8 per-tensor weight + a per-tensor static input_scale (llm-compressor's FP8 layout)."""
    import torch
    wf = w.float()
    scale = (wf.abs().amax() / 448.0).clamp(min=1e-30).to(torch.bfloat16).reshape(1)
    q = (wf / scale.float()).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    return {"weight": q, "weight_scale": scale,
            "input_scale": torch.tensor([BENCH_INPUT_SCALE], dtype=torch.bfloat16)}


def write_checkpoint(state, config, out_dir, scheme, shard_bytes=4 << 30):
    """Quantizes every decoder Linear of `state` ({name: torch tensor}, a dense Llama) per `scheme`, keeps the
    rest as is, and writes out_dir/{config.json, model-*.safetensors, model.safetensors.index.json}.
    `config`: the dense config.json dict. Returns the bytes written."""
    from safetensors.torch import save_file
    quantize = {"w4a16": quantize_w4a16, "nvfp4a16": quantize_nvfp4, "fp8_dynamic": quantize_fp8,
                "int8_w8a8": quantize_int8, "w4a8": quantize_w4a8, "fp8_static": quantize_fp8_static,
                "w4a16_kv_fp8": quantize_w4a16}[scheme]
    os.makedirs(out_dir, exist_ok=True)
    shards, cur, cur_bytes = [], {}, 0
    items = list(state.items())
    if scheme == "w4a16_kv_fp8":  # the FP8 KV cache's per-layer scales
        import torch
        layers = sorted({int(m.group(1)) for m in (re.match(r"^model\.layers\.(\d+)\.", k) for k in state) if m})
        for l in layers:
            for kv in ("k_scale", "v_scale"):
                items.append((f"model.layers.{l}.self_attn.{kv}",
                               torch.tensor([BENCH_KV_SCALE], dtype=torch.bfloat16)))
    for name, t in items:
        parts = {name: t}
        if QUANTIZED_LINEAR.match(name):
            prefix = name[: -len("weight")]
            out_f, in_f = t.shape
            parts = quantize(t)
            for k, v in parts.items():
                dtype, shape = LAYOUT[scheme][k]
                if TORCH_TO_SAFETENSORS[str(v.dtype)] != dtype or list(v.shape) != shape(out_f, in_f):
                    raise AssertionError(f"{prefix}{k}: {v.dtype} {list(v.shape)} is not the layout {dtype}")
            parts = {prefix + k: v for k, v in parts.items()}
        for k, v in parts.items():
            v = v.detach().contiguous().cpu()
            nbytes = v.numel() * v.element_size()
            if cur and cur_bytes + nbytes > shard_bytes:
                shards.append(cur)
                cur, cur_bytes = {}, 0
            cur[k] = v
            cur_bytes += nbytes
    shards.append(cur)
    weight_map, total = {}, 0
    for i, shard in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, os.path.join(out_dir, fname), metadata={"format": "pt"})
        for k, v in shard.items():
            weight_map[k] = fname
            total += v.numel() * v.element_size()
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=1)
    conf = dict(config)
    conf["quantization_config"] = quantization_config(scheme)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(conf, f, indent=1)
    return total
