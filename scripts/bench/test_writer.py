#!/usr/bin/env python3
"""Checks ct_writer.py against compressed-tensors' own output, on the CPU with numpy only:

  python3 scripts/bench/test_writer.py        (exit 0 = pass; run from the repository root)

For tests/fixtures/llama-w4a16-g128, llama-nvfp4a16 and llama-fp8-dynamic (saved by llm-compressor +
compressed-tensors 0.19):
  - the quantization_config block equals the fixture's config.json block;
  - the set of quantized Linears is the fixture's, each with exactly the tensors, dtypes and shapes of
    ct_writer.LAYOUT;
  - decoding every weight_packed by the README's rules and re-packing it with ct_writer's own functions
    (pack_int4_rows; e2m1_codes + pack_nibbles) gives the fixture's bytes bit for bit;
  - W4A16: re-quantizing the decoded weights with the stored scale (round(w / scale), clamp to [-8, 7],
    + 8: the rule quantize_w4a16 applies) gives the same codes;
  - NVFP4: the E2M1 decoder's values re-encode to the same codes, -0 included.
  - FP8: weight / stored scale recovers the stored E4M3 values exactly (w = e4m3 * scale is exact in fp32), and
    every stored scale is at least max |w[o, :]| / 448 rounded down by at most one bf16 step (so the cast
    never saturates by more than that step), as quantize_fp8's amax / 448 gives.
(The E4M3 and bf16 casts themselves are torch's; only the layout and the rules around them are checked here.)

Then make_random_w4a16.py (the packed writer of the large benchmark checkpoints), when torch, transformers and
compressed-tensors import (python from /work/venv-fixtures; otherwise this part prints SKIPPED): a tiny Llama, a
tiny Mistral and a tiny Qwen2 (q/k/v biases) written on the CPU in several shards are
  - valid safetensors shards (header length a multiple of 8, offsets contiguous from 0 to the file's end, every
    tensor aligned to its element size) covered exactly by model.safetensors.index.json;
  - loaded by transformers + compressed-tensors' own decompression (dequantize to dense bf16): every decoder
    Linear equals make_random_w4a16.unpack_w4a16 of the stored words bit for bit, and lies within one scale step
    of the dense values the writer drew before quantizing (the rounding plus the clamp at +7);
  - ref_windows.bin equals transformers' forward of the decompressed model on its windows: fp32model within
    1e-4 nats (both fp32; only summation order differs), fp32head and bf16logits within 0.02 nats mean (bf16
    activations: the same ops in a different order round differently).
The Qwen2 one is written with --dense-out, and its dense bf16 original is checked too: valid shards, the W4A16's
config.json less quantization_config, the same tensor names with each Linear's `weight` in place of the packed
triple; loaded by transformers, every Linear equals the writer's drawn values rounded to bf16 bit for bit and
every other tensor equals the W4A16 checkpoint's; the W4A16's packed words and scales are ct_writer.quantize_w4a16
of those bf16 weights bit for bit; the KL divergence of the W4A16 model from the original on the windows (fp32
forwards) is positive and small (the two are one model up to quantization).
Then make_random_family.py (Gemma-3- and Phi-3/Phi-4-shaped W4A16, issue 22), under the same condition: each
preset's config read back by transformers has the published shape, and a tiny checkpoint of each loads in
transformers + compressed-tensors with every Linear (Phi-3's fused ones too) bit for bit the stored words' decode
(check_random_family).
Then make_random_qwen35.py (Qwen3.5 / 3.6 hybrid DeltaNet models, dense and MoE, issue 34), under the same
condition: the presets' configs read back by transformers have the published shapes; written at the shapes of
tests/fixtures/qwen35-bf16 and qwen35-moe-trained-bf16 it reproduces their tensor names, dtypes and shapes exactly;
tiny W4A16 and bf16 checkpoints load in transformers (+ compressed-tensors) with every Linear, the routed experts
included, bit for bit what was stored and drawn, and score finite log-probs (check_random_qwen35).
"""
import json
import math
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ct_writer  # noqa: E402

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures")
GROUP_W4 = 128  # ct_writer's W4A16 group size
NP_DTYPES = {"I32": np.int32, "I64": np.int64, "U8": np.uint8, "F32": np.float32, "BF16": np.uint16,
             "F8_E4M3": np.uint8}


def read_safetensors(path):
    """{name: (dtype string, shape, numpy array of the raw element bits)}."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        b, e = h["data_offsets"]
        arr = np.frombuffer(data[base + b:base + e], dtype=NP_DTYPES.get(h["dtype"], np.uint8))
        out[name] = (h["dtype"], h["shape"], arr.reshape(h["shape"]) if h["dtype"] in NP_DTYPES else arr)
    return out


def bf16_to_f32(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def unpack_int4_rows(packed, in_features):
    words = packed.view(np.uint32).astype(np.int64)                      # [out, in / 8]
    nibbles = [(words >> (4 * j)) & 0xF for j in range(8)]
    return np.stack(nibbles, axis=-1).reshape(packed.shape[0], -1)[:, :in_features]


def decode_e2m1(packed):
    b = packed.astype(np.int64)
    codes = np.stack([b & 0xF, b >> 4], axis=-1).reshape(packed.shape[0], -1)
    mag = np.array(ct_writer.E2M1_VALUES, dtype=np.float32)[codes & 7]
    return codes, np.where(codes & 8, -mag, mag)


def decode_e4m3(bits):
    b = bits.astype(np.int64)
    sign = np.where(b & 0x80, -1.0, 1.0)
    exp, man = (b >> 3) & 0xF, b & 7
    val = np.where(exp == 0, man / 8.0 * 2.0 ** -6, (1 + man / 8.0) * 2.0 ** (exp - 7))
    return (sign * val).astype(np.float32), (exp == 15) & (man == 7)   # values, NaN mask


def check(cond, what, failures):
    if not cond:
        failures.append(what)


def check_fixture(folder, scheme, failures):
    ops = ct_writer.ArrayOps(np)
    path = os.path.join(FIXTURES, folder)
    with open(os.path.join(path, "config.json")) as f:
        config = json.load(f)
    check(config["quantization_config"] == ct_writer.quantization_config(scheme),
          f"{folder}: quantization_config differs", failures)
    tensors = read_safetensors(os.path.join(path, "model.safetensors"))
    layout = ct_writer.LAYOUT[scheme]
    modules = sorted({n.rsplit(".", 1)[0] for n in tensors
                      if n.rsplit(".", 1)[1] in layout and n.rsplit(".", 1)[1] != "weight"})
    expected = sorted(n[: -len(".weight")] for n in (m + ".weight" for m in modules)
                      if ct_writer.QUANTIZED_LINEAR.match(n))
    check(modules == expected and len(modules) == 14, f"{folder}: quantized modules {modules}", failures)
    for name, (dtype, _, _) in tensors.items():
        if ct_writer.QUANTIZED_LINEAR.match(name) and "weight" not in layout:
            failures.append(f"{folder}: {name} kept dense")
        if ct_writer.QUANTIZED_LINEAR.match(name) and "weight" in layout and dtype != layout["weight"][0]:
            failures.append(f"{folder}: {name} is {dtype}")
    checked = 0
    for m in modules:
        suffixes = {n.rsplit(".", 1)[1] for n in tensors if n.rsplit(".", 1)[0] == m}
        check(suffixes == set(layout), f"{folder}: {m} has {sorted(suffixes)}", failures)
        values_name = m + (".weight" if scheme == "fp8_dynamic" else ".weight_packed")
        _, packed_shape, packed = tensors[values_name]
        out_f = packed_shape[0]
        in_f = packed_shape[1] * {"w4a16": 8, "nvfp4a16": 2, "fp8_dynamic": 1}[scheme]
        for suffix, (dtype, shape) in layout.items():
            got_dtype, got_shape, _ = tensors[f"{m}.{suffix}"]
            check((got_dtype, got_shape) == (dtype, shape(out_f, in_f)),
                  f"{folder}: {m}.{suffix} is {got_dtype} {got_shape}", failures)
        if scheme == "w4a16":
            shape = tensors[m + ".weight_shape"][2]
            check(list(shape) == [out_f, in_f], f"{folder}: {m}.weight_shape {shape}", failures)
            u = unpack_int4_rows(packed, in_f)
            repacked = ct_writer.pack_int4_rows(ops, u)
            check(np.array_equal(repacked, packed), f"{folder}: {m} int4 re-pack differs", failures)
            scale = bf16_to_f32(tensors[m + ".weight_scale"][2])            # [out, in / 128]
            w = (u - 8).astype(np.float32) * np.repeat(scale, 128, axis=1)  # exact in fp32
            q = np.clip(np.round(w / np.repeat(scale, 128, axis=1)), -8, 7) + 8
            check(np.array_equal(ct_writer.pack_int4_rows(ops, q.astype(np.int64)), packed),
                  f"{folder}: {m} re-quantized codes differ", failures)
        elif scheme == "fp8_dynamic":
            values, nan = decode_e4m3(packed)
            scale = bf16_to_f32(tensors[m + ".weight_scale"][2])              # [out, 1]
            w = values * scale                                                 # exact in fp32
            check(not nan.any() and np.array_equal(w / scale, values), f"{folder}: {m} E4M3 round trip", failures)
            amax = np.abs(w).max(axis=1, keepdims=True) / 448.0
            check(bool(np.all((scale >= amax * (1 - 2.0 ** -7)) & (scale <= amax * (1 + 2.0 ** -7) + 1e-30))),
                  f"{folder}: {m} scale is not amax / 448", failures)
        else:
            codes, values = decode_e2m1(packed)
            check(np.array_equal(ct_writer.e2m1_codes(ops, values), codes), f"{folder}: {m} E2M1 codes differ",
                  failures)
            check(np.array_equal(ct_writer.pack_nibbles(ops, ct_writer.e2m1_codes(ops, values)), packed),
                  f"{folder}: {m} nibble re-pack differs", failures)
        checked += 1
    return checked


def check_shard_layout(folder, failures):
    """Raw safetensors checks of every shard plus the index; returns {tensor name: shard file}."""
    with open(os.path.join(folder, "model.safetensors.index.json")) as f:
        index = json.load(f)["weight_map"]
    found = {}
    for fname in sorted(set(index.values())):
        with open(os.path.join(folder, fname), "rb") as f:
            data = f.read()
        (n,) = struct.unpack("<Q", data[:8])
        header = json.loads(data[8:8 + n])
        header.pop("__metadata__", None)
        check(n % 8 == 0, f"{fname}: header length {n}", failures)
        spans = sorted((h["data_offsets"][0], h["data_offsets"][1], name, h["dtype"]) for name, h in header.items())
        end = 0
        for b, e, name, dtype in spans:
            check(b == end, f"{fname}: {name} starts at {b}, not {end}", failures)
            check((8 + n + b) % NP_DTYPES[dtype]().itemsize == 0, f"{fname}: {name} misaligned", failures)
            end = e
            found[name] = fname
        check(8 + n + end == len(data), f"{fname}: data ends at {8 + n + end} of {len(data)}", failures)
    check(found == index, "index weight_map differs from the shards' headers", failures)
    return found


def load_and_compare_linears(d, where, shape, linears, dense_weight, arch, failures):
    """Loads the random W4A16 checkpoint `d` (shards `where`, check_shard_layout's) in transformers with
    compressed-tensors' decompression and checks every decoder Linear of `linears` (a writer's linears(shape):
    (module, out_features, in_features, ...)): bf16 [out, in], equal bit for bit to make_random_w4a16.unpack_w4a16
    of the stored words, within one scale step of dense_weight(shape, layer, i, "cpu", 1234), the values drawn.
    Returns (the bf16 model, the number of Linears compared)."""
    import torch
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM, CompressedTensorsConfig
    import make_random_w4a16 as mrw
    try:
        qc = CompressedTensorsConfig(dequantize=True)
    except TypeError:
        qc = CompressedTensorsConfig(run_compressed=False)
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.bfloat16, quantization_config=qc)
    params = dict(model.named_parameters())
    compared = 0
    for layer in range(shape["layers"]):
        for i, (mod, out_f, in_f, *_) in enumerate(linears):
            prefix = f"model.layers.{layer}.{mod}."
            with safe_open(os.path.join(d, where[prefix + "weight_packed"]), "pt") as f:
                packed = f.get_tensor(prefix + "weight_packed")
            with safe_open(os.path.join(d, where[prefix + "weight_scale"]), "pt") as f:
                scale = f.get_tensor(prefix + "weight_scale")
            ours = mrw.unpack_w4a16(packed, scale)
            theirs = params[prefix + "weight"].detach()
            check(theirs.dtype == torch.bfloat16 and list(theirs.shape) == [out_f, in_f]
                  and torch.equal(ours.view(torch.int16), theirs.view(torch.int16)),
                  f"{arch}: {prefix}weight differs from compressed-tensors' decompression", failures)
            dense = dense_weight(shape, layer, i, "cpu", 1234)
            step = scale.float().repeat_interleave(mrw.GROUP, dim=1) * (1 + 2.0 ** -7)
            check(bool(((dense - ours.float()).abs() <= step).all()),
                  f"{arch}: {prefix}weight is not within a scale step of the dense values", failures)
            compared += 1
    return model, compared


def check_random_w4a16(failures):
    """make_random_w4a16.py against compressed-tensors and transformers; returns the linears compared or None."""
    try:
        import tempfile

        import torch
        import compressed_tensors  # noqa: F401
        from transformers import CompressedTensorsConfig  # noqa: F401  (load_and_compare_linears needs it)
    except ImportError as e:
        print(f"random_w4a16: SKIPPED ({e}; run with /work/venv-fixtures/bin/python)")
        return None
    import make_random_w4a16 as mrw
    compared = 0
    for arch in ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM"):
        with tempfile.TemporaryDirectory() as d, tempfile.TemporaryDirectory() as dense_dir:
            argv = ["--out", d, "--architecture", arch, "--hidden", "256", "--intermediate", "512", "--layers", "3",
                    "--heads", "4", "--kv-heads", "2", "--vocab", "1000", "--windows", "2", "--ctx", "64",
                    "--shard-gb", "0.0005", "--threads", "3", "--device", "cpu"]
            with_dense = arch == "Qwen2ForCausalLM"
            if with_dense:
                argv += ["--dense-out", dense_dir]
            _, shape = mrw.parse_args(argv)
            mrw.main(argv)
            where = check_shard_layout(d, failures)
            check(len(set(where.values())) >= 3, f"{arch}: expected several shards", failures)
            model, n = load_and_compare_linears(d, where, shape, mrw.linears(shape), mrw.dense_weight, arch,
                                                failures)
            compared += n
            with open(os.path.join(d, "ref_windows.bin"), "rb") as f:
                windows, ctx = struct.unpack("<ii", f.read(8))
                ids = torch.from_numpy(np.frombuffer(f.read(windows * ctx * 4), dtype="<i4").reshape(windows, ctx)
                                       .astype(np.int64))
                refs = [torch.from_numpy(np.frombuffer(f.read(windows * (ctx - 1) * 4), dtype="<f4")
                                         .reshape(windows, ctx - 1).copy()) for _ in range(3)]

            def logprobs(m, fp32_head):
                with torch.no_grad():
                    if fp32_head:
                        h = m.model(ids).last_hidden_state[:, :-1]
                        logits = h.float() @ m.lm_head.weight.float().t()
                    else:
                        logits = m(ids).logits[:, :-1].float()
                return torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)

            head32, logits16 = logprobs(model, True), logprobs(model, False)
            fp32 = logprobs(model.float(), True)
            d32 = (fp32 - refs[2]).abs().max().item()
            dh, dl = ((head32 - refs[0]).abs().mean().item(), (logits16 - refs[1]).abs().mean().item())
            print(f"random_w4a16 {arch}: vs transformers, max |delta| fp32model {d32:.2e}; mean |delta| fp32head "
                  f"{dh:.2e}, bf16logits {dl:.2e}; PPL {math.exp(-refs[2].double().mean().item()):.1f}")
            check(d32 <= 1e-4, f"{arch}: fp32model differs from transformers by {d32}", failures)
            check(dh <= 0.02 and dl <= 0.02, f"{arch}: bf16 references differ from transformers", failures)
            if with_dense:
                compared += check_dense_original(mrw, shape, d, dense_dir, where, model, ids, failures)
    return compared


def check_dense_original(mrw, shape, d, dense_dir, where, quant_model, ids, failures):
    """--dense-out: the dense bf16 original against the W4A16 written in the same run (see the top)."""
    import torch
    from transformers import AutoModelForCausalLM
    from safetensors import safe_open
    arch = shape["architecture"]
    dense_where = check_shard_layout(dense_dir, failures)
    expected = {n for n in where if not n.endswith((".weight_packed", ".weight_scale", ".weight_shape"))}
    expected |= {n[: -len("_packed")] for n in where if n.endswith(".weight_packed")}
    check(set(dense_where) == expected, f"{arch} dense: tensor names differ from the W4A16's", failures)
    with open(os.path.join(d, "config.json")) as f:
        quant_conf = json.load(f)
    with open(os.path.join(dense_dir, "config.json")) as f:
        dense_conf = json.load(f)
    quant_conf.pop("quantization_config")
    check(dense_conf == quant_conf, f"{arch} dense: config.json is not the W4A16's less quantization_config",
          failures)
    model = AutoModelForCausalLM.from_pretrained(dense_dir, dtype=torch.bfloat16)
    params = dict(model.named_parameters())
    quant_params = dict(quant_model.named_parameters())  # quant_model is fp32 by now: compare widened values
    compared = 0
    for name, p in params.items():
        m = re_linear_module(name)
        if m is not None:
            layer, mod = m
            i = [x[0] for x in mrw.linears(shape)].index(mod)
            drawn = mrw.dense_weight(shape, layer, i, "cpu", 1234).to(torch.bfloat16)
            check(p.dtype == torch.bfloat16 and torch.equal(p.detach().view(torch.int16), drawn.view(torch.int16)),
                  f"{arch} dense: {name} is not the drawn values in bf16", failures)
            prefix = name[: -len("weight")]
            with safe_open(os.path.join(d, where[prefix + "weight_packed"]), "pt") as f:
                packed = f.get_tensor(prefix + "weight_packed")
            with safe_open(os.path.join(d, where[prefix + "weight_scale"]), "pt") as f:
                scale = f.get_tensor(prefix + "weight_scale")
            ours = ct_writer.quantize_w4a16(p.detach())
            check(torch.equal(ours["weight_packed"], packed) and torch.equal(ours["weight_scale"].view(torch.int16),
                                                                           scale.view(torch.int16)),
                  f"{arch} dense: the W4A16 {prefix}* is not quantize_w4a16 of the original", failures)
            compared += 1
        else:
            check(torch.equal(p.detach().float(), quant_params[name].detach().float()),
                  f"{arch} dense: {name} differs from the W4A16 checkpoint's", failures)
    check(any(n.endswith("q_proj.bias") for n in params), f"{arch} dense: no q/k/v biases", failures)
    with torch.no_grad():
        lp_r = torch.log_softmax(model.float()(ids).logits[:, :-1].double(), -1)
        lp_q = torch.log_softmax(quant_model(ids).logits[:, :-1].double(), -1)
    kld = (lp_r.exp() * (lp_r - lp_q)).sum(-1).mean().item()
    print(f"random_w4a16 {arch} --dense-out: {compared} linears are the original's bf16 draws; mean KLD(original "
          f"|| W4A16) {kld:.5f} nats over the windows")
    check(0 < kld < 0.1, f"{arch} dense: mean KLD {kld} of the W4A16 from its original is not in (0, 0.1)", failures)
    return compared


# Tiny shapes of make_random_family.py's presets: the preset's layout (fused or not, tied or not, head_dim 256 / 96
# kept where it matters), hidden and intermediate shrunk; 6 layers give Gemma 3 its one full-attention layer.
FAMILY_TINY = {
    "gemma3-27b": ["--hidden", "256", "--heads", "4", "--kv-heads", "2", "--head-dim", "128", "--intermediate", "512",
                   "--layers", "6"],
    "gemma3-12b": ["--hidden", "256", "--heads", "2", "--kv-heads", "1", "--head-dim", "256", "--intermediate", "512",
                   "--layers", "6"],
    "phi4": ["--hidden", "256", "--heads", "4", "--kv-heads", "1", "--intermediate", "512", "--layers", "2"],
    "phi3.5-mini": ["--hidden", "384", "--heads", "4", "--kv-heads", "4", "--intermediate", "512", "--layers", "2"],
}


def check_random_family(failures):
    """make_random_family.py: each preset's published shape read back by transformers' own config classes, and a
    tiny checkpoint of each written on the CPU in several shards: valid shards covered by the index; loaded by
    transformers + compressed-tensors' decompression, every decoder Linear (Phi-3's fused qkv_proj / gate_up_proj
    included) equals make_random_w4a16.unpack_w4a16 of the stored words bit for bit and lies within one scale step
    of the drawn values; norms and embeddings as documented; a forward gives finite log-probs. Returns the linears
    compared or None when torch / transformers are missing."""
    try:
        import tempfile

        import torch
        import compressed_tensors  # noqa: F401
        from transformers import AutoConfig, CompressedTensorsConfig  # noqa: F401  (CompressedTensorsConfig: as above)
    except ImportError as e:
        print(f"random_family: SKIPPED ({e}; run with /work/venv-fixtures/bin/python)")
        return None
    import make_random_family as mrf
    published = {  # (layers, hidden, heads, kv heads, head_dim, intermediate, vocab) of the real checkpoints
        "gemma3-27b": (62, 5376, 32, 16, 128, 21504, 262208),
        "gemma3-12b": (48, 3840, 16, 8, 256, 15360, 262208),
        "phi4": (40, 5120, 40, 10, 128, 17920, 100352),
        "phi3.5-mini": (32, 3072, 32, 32, 96, 8192, 32064),
    }
    compared = 0
    for arch, tiny in FAMILY_TINY.items():
        # The full shape, as transformers reads the config.json the script writes.
        _, full = mrf.parse_args(["--out", "unused", "--arch", arch])
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "config.json"), "w") as f:
                json.dump(mrf.config_json(full), f)
            c = AutoConfig.from_pretrained(d)
        head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        got = (c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.num_key_value_heads, head_dim,
               c.intermediate_size, c.vocab_size)
        check(got == published[arch], f"{arch}: transformers reads {got}, published {published[arch]}", failures)
        if full["family"] == "gemma3":
            check(c.layer_types.count("full_attention") == (10 if arch == "gemma3-27b" else 8),
                  f"{arch}: layer_types {c.layer_types[:6]}...", failures)
            check(c.query_pre_attn_scalar == {"gemma3-27b": 168, "gemma3-12b": 256}[arch] and c.sliding_window == 1024,
                  f"{arch}: query_pre_attn_scalar / sliding_window", failures)
        else:
            rope = getattr(c, "rope_parameters", None) or getattr(c, "rope_scaling", None) or {}
            longrope = rope.get("rope_type", rope.get("type")) == "longrope"
            check(longrope == (arch == "phi3.5-mini"), f"{arch}: rope {rope.get('rope_type')}", failures)
            if longrope:
                check(len(rope["long_factor"]) == 48 and len(rope["short_factor"]) == 48, f"{arch}: factors", failures)

        with tempfile.TemporaryDirectory() as d:
            argv = ["--out", d, "--arch", arch, "--vocab", "512", "--shard-gb", "0.0005", "--threads", "3",
                    "--device", "cpu"] + tiny
            _, shape = mrf.parse_args(argv)
            mrf.main(argv)
            where = check_shard_layout(d, failures)
            check(len(set(where.values())) >= 3, f"{arch}: expected several shards", failures)
            model, n = load_and_compare_linears(d, where, shape, mrf.linears(shape), mrf.dense_weight, arch,
                                                failures)
            compared += n
            params = dict(model.named_parameters())
            gemma = shape["family"] == "gemma3"
            gains = [p for n, p in params.items() if "norm" in n]
            check(len(gains) == shape["layers"] * (6 if gemma else 2) + 1 and all(
                bool((p == (0.0 if gemma else 1.0)).all()) for p in gains), f"{arch}: norm gains", failures)
            tied = model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr() or torch.equal(
                model.lm_head.weight, model.model.embed_tokens.weight)
            check(tied == gemma, f"{arch}: lm_head tied {tied}", failures)
            ids = torch.arange(1, 41, dtype=torch.long)[None] * 7 % 512
            with torch.no_grad():
                lp = torch.log_softmax(model.float()(ids).logits[0, :-1].double(), -1)
            lp = lp.gather(-1, ids[0, 1:, None])
            check(bool(torch.isfinite(lp).all()), f"{arch}: non-finite log-probs", failures)
            print(f"random_family {arch}: {shape['layers']} layers, {len(set(where.values()))} shards, loaded by "
                  f"transformers; mean log-prob {lp.mean().item():.2f} on 40 tokens")
    return compared


# Tiny shapes of make_random_qwen35.py's presets: 4 layers (3 DeltaNet, 1 full attention), widths that W4A16's group of
# 128 divides, 2 k heads serving 4 v heads; "fixture": the shapes of tests/fixtures/qwen35-bf16 and
# qwen35-moe-trained-bf16 (bf16 only: their hidden 64 is below one group).
QWEN35_TINY = ["--hidden", "128", "--heads", "2", "--kv-heads", "1", "--head-dim", "64", "--k-heads", "2", "--v-heads",
               "4", "--k-head-dim", "32", "--v-head-dim", "32", "--vocab", "512", "--layers", "4"]
QWEN35_FIXTURE = ["--hidden", "64", "--heads", "4", "--kv-heads", "2", "--head-dim", "32", "--k-heads", "2", "--v-heads",
                  "4", "--k-head-dim", "16", "--v-head-dim", "16", "--vocab", "512", "--layers", "4"]
QWEN35_MOE_TINY = ["--experts", "4", "--top-k", "2", "--moe-intermediate", "128", "--shared-intermediate", "128"]
QWEN35_CASES = [  # (arch, extra flags, what is checked): "forward" loads it in transformers and runs 72 tokens
    # (more than one 64-token DeltaNet chunk; slow on the CPU: two cases), "load" only loads it and compares every
    # tensor, a fixture's name compares the tensors' names, dtypes and shapes with that fixture's bit for bit.
    ("qwen36-35b-a3b", QWEN35_TINY + QWEN35_MOE_TINY, "forward"),
    ("qwen36-35b-a3b", QWEN35_TINY + QWEN35_MOE_TINY + ["--quant", "bf16"], "load"),
    ("qwen35-27b", QWEN35_TINY + ["--intermediate", "256"], "forward"),
    ("qwen35-27b", QWEN35_TINY + ["--intermediate", "256", "--linear-attn", "bf16"], "load"),
    ("qwen35-27b", QWEN35_FIXTURE + ["--intermediate", "128", "--quant", "bf16"], "qwen35-bf16"),
    ("qwen36-35b-a3b", QWEN35_FIXTURE + ["--quant", "bf16", "--experts", "8", "--top-k", "2", "--moe-intermediate",
                                         "32", "--shared-intermediate", "32"], "qwen35-moe-trained-bf16"),
]


def check_random_qwen35(failures):
    """make_random_qwen35.py (Qwen3.5 / 3.6, issue 34): each preset's published shape read back by transformers'
    own config classes; at the two bf16 fixtures' shapes the very tensor names, dtypes and shapes of
    tests/fixtures/qwen35-bf16 / qwen35-moe-trained-bf16 and their config.json fields; tiny checkpoints (MoE and
    dense, W4A16 with and without quantized linear_attn projections, bf16) written on the CPU in several shards
    are valid shards covered by the index, list the documented quantization_config.ignore, and load in
    transformers (+ compressed-tensors' decompression) with every Linear (the routed experts through transformers'
    fused gate_up_proj / down_proj) bit for bit the stored words' decode (W4A16, within one scale step of the
    drawn values) or the drawn values in bf16; norms, dt_bias and A_log as documented; a forward over 72 tokens
    (more than one 64-token DeltaNet chunk) of the two W4A16 defaults gives finite log-probs. Returns the linears compared or None when
    torch / transformers are missing."""
    try:
        import tempfile

        import torch
        import compressed_tensors  # noqa: F401
        from transformers import AutoConfig, AutoModelForCausalLM, CompressedTensorsConfig
    except ImportError as e:
        print(f"random_qwen35: SKIPPED ({e}; run with /work/venv-fixtures/bin/python)")
        return None
    from safetensors import safe_open
    import make_random_qwen35 as mq
    import make_random_w4a16 as mrw
    published = {  # (layers, hidden, heads, kv heads, head_dim, k heads, v heads, dk, dv, vocab, MLP widths)
        "qwen36-35b-a3b": (40, 2048, 16, 2, 256, 16, 32, 128, 128, 248320, (256, 8, 512, 512)),
        "qwen35-27b": (64, 5120, 24, 4, 256, 16, 48, 128, 128, 248320, (17408,)),
    }
    for arch, want in published.items():
        _, full = mq.parse_args(["--out", "unused", "--arch", arch])
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "config.json"), "w") as f:
                json.dump(mq.config_json(full), f)
            c = AutoConfig.from_pretrained(d)
        mlp = ((c.num_experts, c.num_experts_per_tok, c.moe_intermediate_size, c.shared_expert_intermediate_size)
               if full["moe"] else (c.intermediate_size,))
        got = (c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim,
               c.linear_num_key_heads, c.linear_num_value_heads, c.linear_key_head_dim, c.linear_value_head_dim,
               c.vocab_size, mlp)
        check(got == want, f"{arch}: transformers reads {got}, published {want}", failures)
        check(c.layer_types.count("full_attention") == want[0] // 4 and c.layer_types[3] == "full_attention",
              f"{arch}: layer_types {c.layer_types[:4]}...", failures)
        check(c.rope_parameters["rope_theta"] == 1e7 and c.rope_parameters["partial_rotary_factor"] == 0.25,
              f"{arch}: rope_parameters {c.rope_parameters}", failures)
        _, short = mq.parse_args(["--arch", arch, "--layers", "6", "--peer-config"])
        peer = mq.peer_config(short)
        check(peer["num_hidden_layers"] == 6 and len(peer["layer_types"]) == 6 and "quantization_config" not in peer,
              f"{arch}: --peer-config at 6 layers", failures)

    compared = 0
    for arch, flags, what in QWEN35_CASES:
        fixture = None if what in ("forward", "load") else what
        with tempfile.TemporaryDirectory() as d:
            argv = ["--out", d, "--arch", arch, "--shard-gb", "0.0001", "--threads", "3", "--device", "cpu"] + flags
            _, s = mq.parse_args(argv)
            mq.main(argv)
            label = f"{arch} {s['quant']}" + (f" linear_attn {s['linear_attn']}" if s["quant"] == "w4a16" else "")
            where = check_shard_layout(d, failures)
            check(len(set(where.values())) >= 3, f"{label}: expected several shards", failures)
            with open(os.path.join(d, "config.json")) as f:
                conf = json.load(f)
            if fixture is not None:
                label += f" ({fixture}'s shapes)"
                fx = os.path.join(FIXTURES, fixture)
                theirs = {n: (t[0], tuple(t[1])) for n, t in read_safetensors(os.path.join(fx, "model.safetensors")).items()}
                ours = {}
                for fname in set(where.values()):
                    ours.update({n: (t[0], tuple(t[1])) for n, t in read_safetensors(os.path.join(d, fname)).items()})
                check(ours == theirs, f"{label}: tensors differ from the fixture's: "
                      f"{sorted(set(ours.items()) ^ set(theirs.items()))[:4]}", failures)
                with open(os.path.join(fx, "config.json")) as f:
                    fx_conf = json.load(f)
                unlike = {"max_position_embeddings", "rope_parameters", "bos_token_id", "eos_token_id", "pad_token_id",
                          "transformers_version"}
                check(set(conf) <= set(fx_conf) and all(conf[k] == fx_conf[k] for k in conf if k not in unlike),
                      f"{label}: config.json differs from the fixture's", failures)
                print(f"random_qwen35 {label}: {len(ours)} tensors and config.json as the fixture's")
                continue
            quantized = set()
            for layer in range(s["layers"]):
                quantized |= {f"model.layers.{layer}.{m}" for m, _, _, _, q in mq.linears(s, layer) if q}
                quantized |= {f"model.layers.{layer}.mlp.experts.{e}.{p}" for e in range(s["experts"] if s["moe"] else 0)
                              for p, *_ in mq.expert_linears(s) if s["quant"] == "w4a16"}
            stored = {n[: -len(".weight_packed")] for n in where if n.endswith(".weight_packed")}
            check(stored == quantized, f"{label}: quantized modules {sorted(stored ^ quantized)[:4]}", failures)
            if s["quant"] == "w4a16":
                ignore = conf["quantization_config"]["ignore"]
                want = (["lm_head"] + (["re:.*mlp.gate$", "re:.*mlp.shared_expert_gate$"] if s["moe"] else []) +
                        (["re:.*linear_attn.*"] if s["linear_attn"] == "bf16" else
                         ["re:.*linear_attn.in_proj_a$", "re:.*linear_attn.in_proj_b$"]))
                check(ignore == want, f"{label}: ignore {ignore}", failures)
                qc = CompressedTensorsConfig(dequantize=True)
                model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.bfloat16, quantization_config=qc)
            else:
                check("quantization_config" not in conf, f"{label}: a quantization_config", failures)
                model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.bfloat16)
            params = {n: p.detach() for n, p in model.named_parameters()}

            def stored_weight(module, drawn):
                """module's weight as stored, decoded to bf16; checks it against `drawn` (fp32)."""
                if module not in quantized:
                    w = drawn.to(torch.bfloat16)
                    with safe_open(os.path.join(d, where[module + ".weight"]), "pt") as f:
                        check(torch.equal(f.get_tensor(module + ".weight").view(torch.int16), w.view(torch.int16)),
                              f"{label}: {module}.weight is not the drawn values in bf16", failures)
                    return w
                with safe_open(os.path.join(d, where[module + ".weight_packed"]), "pt") as f:
                    packed = f.get_tensor(module + ".weight_packed")
                with safe_open(os.path.join(d, where[module + ".weight_scale"]), "pt") as f:
                    scale = f.get_tensor(module + ".weight_scale")
                w = mrw.unpack_w4a16(packed, scale)
                step = scale.float().repeat_interleave(GROUP_W4, dim=1) * (1 + 2.0 ** -7)
                check(bool(((drawn - w.float()).abs() <= step).all()),
                      f"{label}: {module} is not within a scale step of the drawn values", failures)
                return w

            def same(theirs, ours, what):
                check(theirs.dtype == torch.bfloat16 and theirs.shape == ours.shape and
                      torch.equal(theirs.view(torch.int16), ours.view(torch.int16)),
                      f"{label}: {what} differs from transformers' load", failures)

            for layer in range(s["layers"]):
                p = f"model.layers.{layer}."
                for mod, *_ in mq.linears(s, layer):
                    ours = stored_weight(p + mod, mq.dense_weight(s, layer, mod, "cpu", 1234))
                    same(params[p + mod + ".weight"], ours, p + mod)
                    compared += 1
                experts = {proj: mq.dense_weight(s, layer, "mlp.experts." + proj, "cpu", 1234)
                           for proj, *_ in mq.expert_linears(s)}
                for e in range(s["experts"] if s["moe"] else 0):
                    ours = {proj: stored_weight(f"{p}mlp.experts.{e}.{proj}", w[e]) for proj, w in experts.items()}
                    same(params[p + "mlp.experts.gate_up_proj"][e], torch.cat([ours["gate_proj"], ours["up_proj"]]),
                         f"{p}mlp.experts.{e}.gate|up")
                    same(params[p + "mlp.experts.down_proj"][e], ours["down_proj"], f"{p}mlp.experts.{e}.down")
                    compared += 3
                for name, _ in mq.small_tensors(s, layer):
                    same(params[p + name], mq.small_tensor(s, layer, name, "cpu", 1234), p + name)
                if not mq.is_full(s, layer):
                    a_log = params[p + "linear_attn.A_log"].float()
                    check(bool((a_log >= 0).all() and (a_log <= math.log(16) + 0.02).all()) and
                          bool((params[p + "linear_attn.dt_bias"] == 1).all()) and
                          bool((params[p + "linear_attn.norm.weight"] == 1).all()),
                          f"{label}: {p}linear_attn A_log / dt_bias / norm", failures)
            gains = [t for n, t in params.items() if n.endswith("layernorm.weight") or n.endswith("_norm.weight")
                     or n == "model.norm.weight"]
            check(len(gains) == 2 * s["layers"] + 2 * (s["layers"] // 4) + 1 and all(bool((t == 0).all()) for t in gains),
                  f"{label}: the (1 + w) norms are not all 0", failures)
            scored = ""
            if what == "forward":
                ids = torch.arange(1, 73, dtype=torch.long)[None] * 7 % s["vocab"]
                with torch.no_grad():
                    lp = torch.log_softmax(model.float()(ids).logits[0, :-1].double(), -1)
                lp = lp.gather(-1, ids[0, 1:, None])
                check(bool(torch.isfinite(lp).all()), f"{label}: non-finite log-probs", failures)
                scored = f"; mean log-prob {lp.mean().item():.2f} on 72 tokens"
            print(f"random_qwen35 {label}: {s['layers']} layers, {len(set(where.values()))} shards, loaded by "
                  f"transformers ({type(model).__name__}){scored}")
    return compared


def re_linear_module(name):
    """(layer, module suffix) of a decoder Linear's weight name, else None."""
    if not ct_writer.QUANTIZED_LINEAR.match(name):
        return None
    parts = name.split(".")
    return int(parts[2]), ".".join(parts[3:5])


def main():
    failures = []
    counts = {f: check_fixture(f, s, failures) for f, s in (("llama-w4a16-g128", "w4a16"),
                                                             ("llama-nvfp4a16", "nvfp4a16"),
                                                             ("llama-fp8-dynamic", "fp8_dynamic"))}
    counts["random_w4a16"] = check_random_w4a16(failures)
    counts["random_family"] = check_random_family(failures)
    counts["random_qwen35"] = check_random_qwen35(failures)
    for f in failures:
        print("FAIL", f)
    print(f"test_writer: {counts} linears re-packed; {'FAILED' if failures else 'passed'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
