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
"""
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ct_writer  # noqa: E402

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures")
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


def main():
    failures = []
    counts = {f: check_fixture(f, s, failures) for f, s in (("llama-w4a16-g128", "w4a16"),
                                                             ("llama-nvfp4a16", "nvfp4a16"),
                                                             ("llama-fp8-dynamic", "fp8_dynamic"))}
    for f in failures:
        print("FAIL", f)
    print(f"test_writer: {counts} linears re-packed; {'FAILED' if failures else 'passed'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
