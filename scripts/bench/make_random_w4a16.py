#!/usr/bin/env python3
"""Writes a random-weight Llama/Mistral/Qwen2-shaped W4A16 group-128 symmetric checkpoint directly in
compressed-tensors `pack-quantized` form (no dense bf16 copy of the decoder in memory), plus reference log-probs of
a few windows computed from the very weights written; optionally (--dense-out) the dense bf16 original as well.

  make_random_w4a16.py --out DIR --preset 8b|70b|123b|32b [--layers N] [--windows 2] [--ctx 2048] [--ref-fp32 1]
                       [--dense-out DIR2]
  make_random_w4a16.py --out DIR --hidden 256 --intermediate 512 --layers 2 --heads 4 --kv-heads 2 --vocab 1000

Presets: 8b = Llama-3-8B (hidden 4096, 32 layers, 32/8 heads, intermediate 14336, vocab 128256); 70b =
Llama-3-70B (8192, 80 layers, 64/8, 28672, 128256); 123b = Mistral-Large-2 (12288, 88 layers, 96/8, 28672,
vocab 32768, rope_theta 1e6); 32b = Qwen2.5-32B (Qwen2ForCausalLM: 5120, 64 layers, 40/8 heads, 27648, vocab
152064, rope_theta 1e6, q/k/v biases). Flags given after --preset override its fields (--layers 4 makes a short
model of the same widths; --architecture Qwen2ForCausalLM gives any shape the Qwen2 layout with q/k/v biases).

--dense-out DIR2: also writes the unquantized original, a dense bf16 checkpoint of the same shape and names
(every Linear as `weight` bf16 [out, in], no quantization_config: what the W4A16 was made from), in the same
pass. The drawn fp32 values are rounded to bf16 first and the W4A16 is the quantization of those bf16 weights,
as a quantization tool makes it from a bf16 original (without --dense-out the fp32 draws are quantized directly,
which gives the same checkpoints as before this option; the two differ in the odd rounding tie). The biases,
norms, embedding and lm_head are the same tensors in both. DIR2 gets no ref_windows.bin. It is the reference
model of issue 17's KL-divergence benchmarks (scored --model DIR --reference_model DIR2).

Layout (what llm-compressor + compressed-tensors 0.19 save for W4A16, see scripts/bench/ct_writer.py): every
decoder Linear as weight_packed int32 [out, in/8] + weight_scale bf16 [out, in/128] + weight_shape int64 [2];
embed_tokens, lm_head and the norms dense bf16; config.json with ct_writer.quantization_config("w4a16");
model-0000i-of-0000n.safetensors (--shard-gb each) + model.safetensors.index.json. Each shard's header is
written first (every shape is known up front), then tensors are written at their offsets by a pool of writer
threads as the GPU produces them, one layer at a time, through at most --inflight-gb of pinned host buffers.
Tensors inside a shard are ordered by element size, then name (as safetensors itself does), so every tensor is
aligned to its element size.

Values (well conditioned over 80-88 layers; the rules of make_random_llama.py): q/k/v/gate/up ~ N(0, 0.02),
o/down ~ N(0, 0.02 / sqrt(2 * layers)), quantized by ct_writer.quantize_w4a16 (scale = bf16(amax / 7.5) per
group of 128, q = clamp(round(w / scale), -8, 7)); q/k/v biases (Qwen2) bf16 ~ N(0, BIAS_STD); norms 1;
lm_head ~ N(0, LOGIT_STD / sqrt(hidden)); embedding std calibrated (--calibrate passes of a 256-token probe
through the dense layers) so the final residual keeps a correlation of about EMBED_SHARE with the current token's
embedding. Every tensor has its own seeded generator, so calibration and the final pass see identical values.

DIR/ref_windows.bin: the format of make_random_llama.py (int32 windows, int32 ctx, int32 tokens[windows][ctx],
then float32 [windows][ctx-1] arrays fp32head, bf16logits, fp32model), computed here by a plain Llama forward
(transformers' semantics: bf16 residual, fp32 RMSNorm statistics, q/k/v biases added in the compute dtype,
rotate-half RoPE, SDPA causal attention) on the DEQUANTIZED weights decoded back from the packed words written to
disk: fp32head = bf16 forward with an fp32 lm_head; bf16logits = bf16 forward, bf16 logits; fp32model = the same
weights in fp32, fp32 matmuls without TF32 (--ref-fp32 0 skips it and stores fp32head there). Windows are
chains sampled from the model's bigram part (t[j+1] ~ softmax(lm_head . rmsnorm(embed[t[j]]))), so PPL lands in
the tens to hundreds.
scripts/bench/test_writer.py checks a tiny checkpoint against compressed-tensors' decompression and
transformers' forward.

Runs on CUDA when present (the GPU machine: torch with CUDA), else on the CPU (tiny shapes in tests).
"""
import argparse
import json
import math
import os
import queue
import shutil
import struct
import sys
import time
import zlib
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ct_writer  # noqa: E402

LOGIT_STD = 5.0
EMBED_SHARE = 0.95
# q/k/v bias std (Qwen2): q/k/v entries over a normed input have std 0.02 * sqrt(hidden) (1.3-2.3 for these
# shapes), so 0.1 moves every head a little without dominating the attention scores.
BIAS_STD = 0.1
GROUP = 128
PROBE_TOKENS = 256
WRITE_CHUNK = 256 << 20  # bytes per writer job (pwrite calls are also capped below 2 GiB by Linux)

PRESETS = {
    "8b": dict(architecture="LlamaForCausalLM", model_type="llama", hidden=4096, intermediate=14336, layers=32,
               heads=32, kv_heads=8, head_dim=128, vocab=128256, rope_theta=500000.0, max_pos=8192, bos=128000,
               eos=128001),
    "70b": dict(architecture="LlamaForCausalLM", model_type="llama", hidden=8192, intermediate=28672, layers=80,
                heads=64, kv_heads=8, head_dim=128, vocab=128256, rope_theta=500000.0, max_pos=8192, bos=128000,
                eos=128001),
    "123b": dict(architecture="MistralForCausalLM", model_type="mistral", hidden=12288, intermediate=28672,
                 layers=88, heads=96, kv_heads=8, head_dim=128, vocab=32768, rope_theta=1000000.0, max_pos=131072,
                 bos=1, eos=2),
    "32b": dict(architecture="Qwen2ForCausalLM", model_type="qwen2", hidden=5120, intermediate=27648, layers=64,
                heads=40, kv_heads=8, head_dim=128, vocab=152064, rope_theta=1000000.0, max_pos=131072, bos=151643,
                eos=151643),
}
MODEL_TYPE = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral", "Qwen2ForCausalLM": "qwen2"}
SAFETENSORS_DTYPE = {torch.bfloat16: "BF16", torch.int32: "I32", torch.int64: "I64"}
ITEMSIZE = {"BF16": 2, "I32": 4, "I64": 8}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--preset", choices=sorted(PRESETS))
    for flag in ("hidden", "intermediate", "layers", "heads", "kv-heads", "head-dim", "vocab", "max-pos", "bos",
                 "eos"):
        ap.add_argument(f"--{flag}", type=int)
    ap.add_argument("--rope-theta", type=float)
    ap.add_argument("--architecture", choices=sorted(MODEL_TYPE))
    ap.add_argument("--windows", type=int, default=2, help="reference windows (0: no ref_windows.bin)")
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--ref-fp32", type=int, default=1, help="1: also the fp32 forward (the near-exact answer)")
    ap.add_argument("--calibrate", type=int, default=2, help="probe passes that set the embedding std")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--shard-gb", type=float, default=5.0)
    ap.add_argument("--threads", type=int, default=8, help="writer threads")
    ap.add_argument("--inflight-gb", type=float, default=4.0, help="pinned host buffers for pending writes")
    ap.add_argument("--tokenizer", default="", help="file(s) to copy into DIR, comma-separated (tokenizer.model)")
    ap.add_argument("--dense-out", default="", help="also write the dense bf16 original of the same weights here")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args(argv)
    shape = dict(PRESETS[args.preset]) if args.preset else dict(
        architecture="LlamaForCausalLM", model_type="llama", head_dim=None, rope_theta=500000.0, max_pos=8192,
        bos=1, eos=2)
    for key in ("hidden", "intermediate", "layers", "heads", "kv_heads", "head_dim", "vocab", "max_pos", "bos",
                "eos", "rope_theta", "architecture"):
        value = getattr(args, key)
        if value is not None:
            shape[key] = value
    if args.architecture:
        shape["model_type"] = MODEL_TYPE[args.architecture]
    shape["qkv_bias"] = shape["model_type"] == "qwen2"
    missing = [k for k in ("hidden", "intermediate", "layers", "heads", "kv_heads", "vocab") if k not in shape]
    if missing:
        ap.error(f"give --preset or --{', --'.join(m.replace('_', '-') for m in missing)}")
    if not shape.get("head_dim"):
        shape["head_dim"] = shape["hidden"] // shape["heads"]
    for name, width in (("hidden", shape["hidden"]), ("intermediate", shape["intermediate"]),
                        ("heads * head_dim", shape["heads"] * shape["head_dim"])):
        if width % GROUP:
            ap.error(f"{name} = {width} is not a multiple of the group size {GROUP}")
    if shape["heads"] % shape["kv_heads"]:
        ap.error("heads must be a multiple of kv-heads")
    if args.windows and not 2 <= args.ctx <= shape["max_pos"]:
        ap.error(f"--ctx must be in [2, {shape['max_pos']}]")
    if args.dense_out and os.path.abspath(args.dense_out) == os.path.abspath(args.out):
        ap.error("--dense-out must differ from --out")
    return args, shape


def config_json(s, quantized=True):
    """config.json as transformers writes it for the shape, with llm-compressor's quantization_config when
    `quantized` (the W4A16 checkpoint; the dense original has none)."""
    conf = {
        "architectures": [s["architecture"]], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": s["bos"], "eos_token_id": s["eos"], "head_dim": s["head_dim"], "hidden_act": "silu",
        "hidden_size": s["hidden"], "initializer_range": 0.02, "intermediate_size": s["intermediate"],
        "max_position_embeddings": s["max_pos"], "model_type": s["model_type"],
        "num_attention_heads": s["heads"], "num_hidden_layers": s["layers"], "num_key_value_heads": s["kv_heads"],
        "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": s["rope_theta"], "tie_word_embeddings": False,
        "torch_dtype": "bfloat16", "use_cache": True, "vocab_size": s["vocab"],
    }
    if s["model_type"] == "llama":
        conf.update({"mlp_bias": False, "pretraining_tp": 1})
    elif s["model_type"] == "mistral":
        conf["sliding_window"] = None
    else:  # qwen2: q/k/v biases always (Qwen2Config has no attention_bias field), full attention in every layer
        del conf["attention_bias"]
        conf.update({"max_window_layers": s["layers"], "sliding_window": s["max_pos"], "use_sliding_window": False})
    if quantized:
        conf["quantization_config"] = ct_writer.quantization_config("w4a16")
    return conf


def linears(s):
    """(module suffix, out, in) of one decoder layer, in the order they are generated."""
    h, q, kv, inter = s["hidden"], s["heads"] * s["head_dim"], s["kv_heads"] * s["head_dim"], s["intermediate"]
    return [("self_attn.q_proj", q, h), ("self_attn.k_proj", kv, h), ("self_attn.v_proj", kv, h),
            ("self_attn.o_proj", h, q), ("mlp.gate_proj", inter, h), ("mlp.up_proj", inter, h),
            ("mlp.down_proj", h, inter)]


DENSE_LAYOUT = {"weight": ("BF16", lambda o, i: [o, i])}


def tensor_plan(s, dense=False):
    """[(name, safetensors dtype, shape)] in HF order (embedding, layers, norm, lm_head); `dense`: the bf16
    original's plan (each Linear's `weight`) instead of the W4A16 one."""
    layout = DENSE_LAYOUT if dense else ct_writer.LAYOUT["w4a16"]
    plan = [("model.embed_tokens.weight", "BF16", [s["vocab"], s["hidden"]])]
    for layer in range(s["layers"]):
        p = f"model.layers.{layer}."
        for i, (mod, out_f, in_f) in enumerate(linears(s)):
            if i == 0:
                plan.append((p + "input_layernorm.weight", "BF16", [s["hidden"]]))
            if i == 4:
                plan.append((p + "post_attention_layernorm.weight", "BF16", [s["hidden"]]))
            for suffix, (dtype, shape) in layout.items():
                plan.append((f"{p}{mod}.{suffix}", dtype, shape(out_f, in_f)))
            if s.get("qkv_bias") and i < 3:
                plan.append((f"{p}{mod}.bias", "BF16", [out_f]))
    plan.append(("model.norm.weight", "BF16", [s["hidden"]]))
    plan.append(("lm_head.weight", "BF16", [s["vocab"], s["hidden"]]))
    return plan


class ShardedWriter:
    """Plans the shards, writes their headers, then writes tensors at their offsets from a thread pool."""

    def __init__(self, out_dir, plan, shard_bytes, threads, inflight_bytes):
        shards, cur, cur_bytes = [], [], 0
        for name, dtype, shape in plan:
            nbytes = math.prod(shape) * ITEMSIZE[dtype]
            if cur and cur_bytes + nbytes > shard_bytes:
                shards.append(cur)
                cur, cur_bytes = [], 0
            cur.append((name, dtype, shape, nbytes))
            cur_bytes += nbytes
        shards.append(cur)
        self.entries, self.fds, self.weight_map, self.total = {}, [], {}, 0
        for i, shard in enumerate(shards):
            fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
            header, offset = {"__metadata__": {"format": "pt"}}, 0
            ordered = sorted(shard, key=lambda e: (-ITEMSIZE[e[1]], e[0]))
            for name, dtype, shape, nbytes in ordered:
                header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + nbytes]}
                offset += nbytes
            text = json.dumps(header, separators=(",", ":")).encode()
            text += b" " * (-len(text) % 8)
            base = 8 + len(text)
            for name, dtype, shape, nbytes in ordered:
                self.entries[name] = (i, base + header[name]["data_offsets"][0], dtype, shape, nbytes)
                self.weight_map[name] = fname
            fd = os.open(os.path.join(out_dir, fname), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.write(fd, struct.pack("<Q", len(text)) + text)
            os.ftruncate(fd, base + offset)
            self.fds.append(fd)
            self.total += offset
        with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": self.total}, "weight_map": self.weight_map}, f, indent=1)
        self.pool = ThreadPoolExecutor(max_workers=threads)
        self.futures, self.written = [], set()
        # Device tensors go through a fixed pool of pinned host buffers (fast copies, no page faults, bounded host
        # memory); host tensors are written from their own memory.
        self.free = queue.Queue()
        self.buffers = max(1, inflight_bytes // WRITE_CHUNK)
        self.pinned = torch.cuda.is_available()
        self.copy_s = 0.0

    def _buffer(self):
        """A free pinned (or, without CUDA, plain) host buffer of WRITE_CHUNK bytes; blocks while all are in use."""
        if self.buffers > 0 and self.free.empty():
            self.buffers -= 1
            return torch.empty(WRITE_CHUNK, dtype=torch.uint8, pin_memory=self.pinned)
        return self.free.get()

    def put(self, name, tensor):
        """Queues one tensor (any device) for writing; checks its dtype and shape against the plan."""
        shard, offset, dtype, shape, nbytes = self.entries[name]
        if SAFETENSORS_DTYPE.get(tensor.dtype) != dtype or list(tensor.shape) != shape or name in self.written:
            raise AssertionError(f"{name}: {tensor.dtype} {list(tensor.shape)} is not the planned {dtype} {shape}")
        self.written.add(name)
        flat = tensor.detach().contiguous().reshape(-1).view(torch.uint8)
        for start in range(0, nbytes, WRITE_CHUNK):
            size = min(WRITE_CHUNK, nbytes - start)
            buf = None
            if flat.device.type == "cpu":
                host = flat[start:start + size].numpy()
            else:
                buf = self._buffer()
                t0 = time.time()
                buf[:size].copy_(flat[start:start + size])
                self.copy_s += time.time() - t0
                host = buf[:size].numpy()
            self.futures.append(self.pool.submit(self._write, self.fds[shard], offset + start, host, buf))

    def _write(self, fd, offset, host, buf):
        view, done = memoryview(host), 0
        try:
            while done < len(view):
                done += os.pwrite(fd, view[done:done + (1 << 30)], offset + done)
        finally:
            if buf is not None:
                self.free.put(buf)

    def close(self):
        self.pool.shutdown(wait=True)
        for f in self.futures:
            f.result()
        for fd in self.fds:
            os.close(fd)
        missing = set(self.entries) - self.written
        if missing:
            raise AssertionError(f"tensors never written: {sorted(missing)[:5]}")


def generator(device, seed, *index):
    """A generator per tensor: the same values whichever pass or order asks for them."""
    g = torch.Generator(device=device)
    g.manual_seed((seed * 1000003 + zlib.crc32(repr(index).encode())) & 0x7FFFFFFFFFFFFFFF)
    return g


def dense_weight(s, layer, i, device, seed):
    """The dense fp32 values of linear i of `layer`, before quantization."""
    _, out_f, in_f = linears(s)[i]
    std = 0.02 / math.sqrt(2 * s["layers"]) if i in (3, 6) else 0.02
    g = generator(device, seed, layer, i)
    return torch.randn((out_f, in_f), generator=g, device=device, dtype=torch.float32).mul_(std)


def qkv_bias(s, layer, i, device, seed):
    """The bf16 bias [out] of q/k/v projection i (0, 1, 2) of `layer` (Qwen2)."""
    _, out_f, _ = linears(s)[i]
    g = generator(device, seed, layer, i, "bias")
    return torch.randn((out_f,), generator=g, device=device, dtype=torch.float32).mul_(BIAS_STD).to(torch.bfloat16)


def unit_embedding(s, device, seed):
    """Embedding rows before scaling, fp32 N(0, 1) [vocab, hidden]."""
    return torch.randn((s["vocab"], s["hidden"]), generator=generator(device, seed, "embed"), device=device)


def lm_head(s, device, seed):
    g = generator(device, seed, "lm_head")
    w = torch.randn((s["vocab"], s["hidden"]), generator=g, device=device, dtype=torch.float32)
    return w.mul_(LOGIT_STD / math.sqrt(s["hidden"])).to(torch.bfloat16)


def unpack_w4a16(packed, scale):
    """packed int32 [out, in/8], scale bf16 [out, in/128] -> bf16 [out, in], DESIGN.md §6's decode
    ((u - 8) in bf16 times the scale, rounded to bf16)."""
    out_f, words = packed.shape
    shifts = torch.arange(0, 32, 4, device=packed.device, dtype=torch.int32)
    u = (packed.unsqueeze(-1) >> shifts) & 0xF                                         # [out, in/8, 8]
    q = (u - 8).reshape(out_f, words * 8).to(torch.bfloat16)
    return (q.reshape(out_f, -1, GROUP) * scale.unsqueeze(-1)).reshape(out_f, words * 8)


class Forward:
    """Plain Llama forward of W windows of T tokens, one layer at a time, in one dtype."""

    def __init__(self, s, x, dtype):
        self.s, self.dtype, self.x = s, dtype, x.to(dtype)                         # x: [W, T, hidden]
        hd, t = s["head_dim"], x.shape[1]
        inv_freq = 1.0 / (s["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.int64, device=x.device)
                                              .float() / hd))
        freqs = torch.arange(t, device=x.device).float()[:, None] * inv_freq[None, :]  # [T, hd/2]
        emb = torch.cat((freqs, freqs), dim=-1)
        self.cos, self.sin = emb.cos().to(dtype), emb.sin().to(dtype)

    def norm(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).to(self.dtype)

    def rope(self, x):                                                             # [W, heads, T, hd]
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * self.cos + rotated * self.sin

    def layer(self, w, bias=None):
        """w: the 7 linears' weights ([out, in], any dtype) in linears() order; bias: None or the q/k/v biases."""
        s, x = self.s, self.x
        wq, wk, wv, wo, wg, wu, wd = (t.to(self.dtype) for t in w)
        bq, bk, bv = (None, None, None) if bias is None else (t.to(self.dtype) for t in bias)
        nb, t, hd = x.shape[0], x.shape[1], s["head_dim"]
        h = self.norm(x)
        q = F.linear(h, wq, bq).view(nb, t, s["heads"], hd).transpose(1, 2)
        k = F.linear(h, wk, bk).view(nb, t, s["kv_heads"], hd).transpose(1, 2)
        v = F.linear(h, wv, bv).view(nb, t, s["kv_heads"], hd).transpose(1, 2)
        rep = s["heads"] // s["kv_heads"]
        q, k = self.rope(q), self.rope(k)
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)                # [W, heads, T, hd]
        x = x + F.linear(a.transpose(1, 2).reshape(nb, t, -1), wo)
        h = self.norm(x)
        self.x = x + F.linear(F.silu(F.linear(h, wg)) * F.linear(h, wu), wd)

    def logprobs(self, head, ids, fp32_head):
        """Log P(ids[:, j] | ids[:, <j]) for j >= 1, fp32 [W, T-1]."""
        out = []
        for w in range(ids.shape[0]):
            h = self.norm(self.x[w, :-1])
            logits = F.linear(h.float(), head.float()) if fp32_head else F.linear(h, head.to(self.dtype)).float()
            out.append(torch.log_softmax(logits, -1).gather(-1, ids[w, 1:, None]).squeeze(-1))
        return torch.stack(out)


def calibrate(s, embed_unit, device, seed, passes):
    """Embedding std such that the final residual keeps ~EMBED_SHARE correlation with the token embedding."""
    probe = torch.randint(0, s["vocab"], (1, PROBE_TOKENS), device=device, generator=generator(device, seed, "p"))
    std, layers_rms = 1.0, float("nan")
    for _ in range(passes):
        e = (embed_unit[probe] * std).to(torch.bfloat16)
        fwd = Forward(s, e, torch.bfloat16)
        for layer in range(s["layers"]):
            bias = [qkv_bias(s, layer, i, device, seed) for i in range(3)] if s["qkv_bias"] else None
            fwd.layer([dense_weight(s, layer, i, device, seed).to(torch.bfloat16) for i in range(7)], bias)
        layers_rms = (fwd.x.float() - e.float()).pow(2).mean().sqrt().item()
        std = layers_rms * EMBED_SHARE / math.sqrt(1 - EMBED_SHARE ** 2)
    return std, layers_rms


def sample_windows(s, embed, head, windows, ctx, device, seed):
    """Token chains from the bigram part of the model: t[j+1] ~ softmax(lm_head . rmsnorm(embed[t[j]]))."""
    g = generator(device, seed, "windows")
    ids = torch.empty((windows, ctx), device=device, dtype=torch.int64)
    ids[:, 0] = torch.randint(0, s["vocab"], (windows,), device=device, generator=g)
    head32 = head.float()
    for j in range(1, ctx):
        e = embed[ids[:, j - 1]].float()
        h = e * torch.rsqrt(e.pow(2).mean(-1, keepdim=True) + 1e-5)
        ids[:, j] = torch.multinomial(torch.softmax(h @ head32.t(), -1), 1, generator=g)[:, 0]
    return ids


def main(argv=None):
    args, s = parse_args(argv)
    t0 = time.time()
    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    os.makedirs(args.out, exist_ok=True)
    conf = config_json(s)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(conf, f, indent=1)
    out_dirs = [args.out] + ([args.dense_out] if args.dense_out else [])
    for d in out_dirs[1:]:
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(config_json(s, quantized=False), f, indent=1)
    for path in filter(None, args.tokenizer.split(",")):
        for d in out_dirs:
            shutil.copy(path, d)
    writer = ShardedWriter(args.out, tensor_plan(s), int(args.shard_gb * 2**30), args.threads,
                           int(args.inflight_gb * 2**30))
    # The dense original: every tensor the W4A16 checkpoint holds unquantized is put into both writers.
    dense = ShardedWriter(args.dense_out, tensor_plan(s, dense=True), int(args.shard_gb * 2**30), args.threads,
                          int(args.inflight_gb * 2**30)) if args.dense_out else None
    writers = [w for w in (writer, dense) if w is not None]

    with torch.inference_mode():
        embed_unit = unit_embedding(s, device, args.seed)
        embed_std, layers_rms = calibrate(s, embed_unit, device, args.seed, args.calibrate)
        embed = embed_unit.mul_(embed_std).to(torch.bfloat16)
        del embed_unit
        head = lm_head(s, device, args.seed)
        ones = torch.ones(s["hidden"], dtype=torch.bfloat16, device=device)
        for w in writers:
            w.put("model.embed_tokens.weight", embed)
            w.put("lm_head.weight", head)
            w.put("model.norm.weight", ones)
        ids = sample_windows(s, embed, head, args.windows, args.ctx, device, args.seed) if args.windows else None
        fwd16 = Forward(s, embed[ids], torch.bfloat16) if args.windows else None
        fwd32 = Forward(s, embed[ids], torch.float32) if args.windows and args.ref_fp32 else None
        t_setup = time.time() - t0

        t_quant = t_fwd = 0.0
        for layer in range(s["layers"]):
            p = f"model.layers.{layer}."
            for w in writers:
                w.put(p + "input_layernorm.weight", ones)
                w.put(p + "post_attention_layernorm.weight", ones)
            dequant = []
            bias = [qkv_bias(s, layer, i, device, args.seed) for i in range(3)] if s["qkv_bias"] else None
            for i, (mod, _, _) in enumerate(linears(s)):
                if bias is not None and i < 3:
                    for w in writers:
                        w.put(f"{p}{mod}.bias", bias[i])
                weight = dense_weight(s, layer, i, device, args.seed)
                if dense is not None:
                    # The original is bf16; the W4A16 is made from it, as from a real bf16 checkpoint.
                    weight = weight.to(torch.bfloat16)
                    dense.put(f"{p}{mod}.weight", weight)
                tq = time.time()
                parts = ct_writer.quantize_w4a16(weight)
                if device.type == "cuda":
                    torch.cuda.synchronize()
                t_quant += time.time() - tq
                for suffix, tensor in parts.items():
                    writer.put(f"{p}{mod}.{suffix}", tensor)
                if fwd16 is not None:
                    dequant.append(unpack_w4a16(parts["weight_packed"], parts["weight_scale"]))
                del parts
            tf = time.time()
            for fwd in filter(None, (fwd16, fwd32)):
                fwd.layer(dequant, bias)
            if device.type == "cuda":
                torch.cuda.synchronize()
            t_fwd += time.time() - tf
            del dequant

        if args.windows:
            tf = time.time()
            lp32 = fwd16.logprobs(head, ids, fp32_head=True)
            lp16 = fwd16.logprobs(head, ids, fp32_head=False)
            lpf = fwd32.logprobs(head, ids, fp32_head=True) if fwd32 is not None else lp32
            t_fwd += time.time() - tf
            with open(os.path.join(args.out, "ref_windows.bin"), "wb") as f:
                f.write(struct.pack("<ii", args.windows, args.ctx))
                f.write(ids.to(torch.int32).cpu().numpy().astype("<i4").tobytes())
                for arr in (lp32, lp16, lpf):
                    f.write(arr.float().cpu().numpy().astype("<f4").tobytes())
            ppl = math.exp(-lpf.double().mean().item())
        tw = time.time()
        for w in writers:
            w.close()
        t_drain = time.time() - tw

    biases = s["layers"] * sum(o for _, o, _ in linears(s)[:3]) if s["qkv_bias"] else 0
    n_params = 2 * s["vocab"] * s["hidden"] + (2 * s["layers"] + 1) * s["hidden"] + s["layers"] * sum(
        o * i for _, o, i in linears(s)) + biases
    print(f"make_random_w4a16: {s['architecture']} hidden {s['hidden']}, {s['layers']} layers, heads "
          f"{s['heads']}/{s['kv_heads']}, intermediate {s['intermediate']}, vocab {s['vocab']}"
          f"{', q/k/v biases' if s['qkv_bias'] else ''}: "
          f"{n_params / 1e9:.2f}B params, {len(writer.fds)} shards, {writer.total / 2**30:.2f} GiB")
    if dense is not None:
        print(f"make_random_w4a16: dense bf16 original in {args.dense_out}: {len(dense.fds)} shards, "
              f"{dense.total / 2**30:.2f} GiB (the W4A16 is its quantization)")
    print(f"make_random_w4a16: embed std {embed_std:.3f} (layers' final residual rms {layers_rms:.3f}), lm_head std "
          f"{LOGIT_STD / math.sqrt(s['hidden']):.4f}; ref windows {args.windows} x {args.ctx}"
          + (f", PPL {'fp32' if args.ref_fp32 else 'bf16'} forward {ppl:.1f}" if args.windows else ""))
    print(f"make_random_w4a16: total {time.time() - t0:.1f}s (setup+calibration {t_setup:.1f}s, quantize "
          f"{t_quant:.1f}s, reference forward {t_fwd:.1f}s, device-to-host copies "
          f"{sum(w.copy_s for w in writers):.1f}s, final "
          f"write drain {t_drain:.1f}s) on {device}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
