#!/usr/bin/env python3
"""Writes the seed corpora of the libFuzzer targets (tests/fuzz/corpus/<target>/) from the offline assets.

Usage: tests/fuzz/make_seeds.py [DATA_DIR]   (default: ../shared/data next to the checkout)

The committed seeds are this script's output, plus regression inputs (named regress-*) that once broke a
contract; rerunning the script rewrites only the seed-* files. Standard library only; deterministic.
"""
import json
import os
import random
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DATA = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(ROOT), "shared", "data")
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
CORPUS = os.path.join(HERE, "corpus")


def write(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def clear(target):
    d = os.path.join(CORPUS, target)
    if os.path.isdir(d):
        for n in os.listdir(d):
            if n.startswith("seed-"):
                os.remove(os.path.join(d, n))


def read(path):
    with open(path, "rb") as f:
        return f.read()


# --- safetensors_fuzzer: real headers (truncated to the header plus 16 data bytes) and small valid files.
def safetensors_file(tensors, metadata=None):
    header, body = {}, b""
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(body), len(body) + len(data)]}
        body += data
    if metadata is not None:
        header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(h)) + h + body


def safetensors_seeds():
    t = "safetensors_fuzzer"
    clear(t)
    for label, path in [("stories260k", os.path.join(DATA, "stories260K-hf", "model.safetensors")),
                        ("w4a16-actorder", os.path.join(FIXTURES, "llama-w4a16-g128-actorder", "model.safetensors")),
                        ("nvfp4", os.path.join(FIXTURES, "llama-nvfp4", "model.safetensors")),
                        ("fp8-block", os.path.join(FIXTURES, "llama-fp8-block", "model.safetensors"))]:
        raw = read(path)
        n = struct.unpack("<Q", raw[:8])[0]
        write(t, "header-" + label, raw[:8 + n + 16])
    write(t, "valid-two", safetensors_file(
        [("a", "F32", [2], struct.pack("<2f", 1.0, -2.0)), ("b.weight", "BF16", [1, 2], b"\x80\x3f\x00\x40")],
        {"format": "pt"}))
    write(t, "valid-all-dtypes", safetensors_file(
        [("f16", "F16", [1], b"\x00\x3c"), ("f8", "F8_E4M3", [2], b"\x38\xb8"), ("i8", "I8", [1], b"\xff"),
         ("u8", "U8", [1], b"\x07"), ("i32", "I32", [1], struct.pack("<i", -7)),
         ("i64", "I64", [2], struct.pack("<2q", 3, 5)), ("scalar", "F32", [], struct.pack("<f", 0.5)),
         ("empty", "F32", [0, 4], b"")]))
    write(t, "empty-header", struct.pack("<Q", 2) + b"{}")


# --- model_config_fuzzer / quant_config_fuzzer: real config.json files and their quantization_config.
def config_paths():
    paths = [os.path.join(DATA, "stories260K-hf", "config.json")]
    mc = os.path.join(DATA, "models-configs")
    for d in sorted(os.listdir(mc)):
        for root, _, files in os.walk(os.path.join(mc, d)):
            for f in sorted(files):
                if f.endswith(".json") and ("config" in f) and "tokenizer" not in f and "generation" not in f:
                    paths.append(os.path.join(root, f))
    for d in sorted(os.listdir(FIXTURES)):
        p = os.path.join(FIXTURES, d, "config.json")
        if os.path.exists(p):
            paths.append(p)
    return paths


def config_seeds():
    clear("model_config_fuzzer")
    clear("quant_config_fuzzer")
    seen_q = set()
    for p in config_paths():
        label = os.path.basename(os.path.dirname(p)) + "-" + os.path.basename(p)[:-5]
        raw = read(p)
        write("model_config_fuzzer", label, raw)
        c = json.loads(raw)
        q = c.get("quantization_config") or c.get("compression_config")
        if q is not None:
            text = json.dumps(q, separators=(",", ":"))
            if text not in seen_q:
                seen_q.add(text)
                write("quant_config_fuzzer", label, text)
    # Hand-made groups the fixtures lack: mixed precision, regex targets and ignore, int-quantized asym.
    write("quant_config_fuzzer", "mixed-precision", json.dumps({
        "quant_method": "compressed-tensors", "format": "mixed-precision", "quantization_status": "compressed",
        "ignore": ["lm_head", "re:.*gate_proj"],
        "config_groups": {
            "attn": {"targets": ["re:.*self_attn.*"], "format": "pack-quantized",
                     "weights": {"type": "int", "num_bits": 4, "strategy": "group", "group_size": 32,
                                 "symmetric": False}},
            "mlp": {"targets": ["model.layers.0.mlp.down_proj", "Linear"], "format": "int-quantized",
                    "weights": {"type": "int", "num_bits": 8, "strategy": "channel", "symmetric": False}}}}))
    write("quant_config_fuzzer", "fp8-block-w8a8-group", json.dumps({
        "quant_method": "compressed-tensors", "format": "float-quantized", "quantization_status": "compressed",
        "config_groups": {"g": {"targets": ["Linear"],
                                "weights": {"type": "float", "num_bits": 8, "strategy": "block",
                                            "block_structure": "128x128"},
                                "input_activations": {"type": "float", "num_bits": 8, "strategy": "group",
                                                      "group_size": 128, "dynamic": True}}}}))


# --- dequantize_fuzzer: FuzzedDataProvider takes the parameters from the END of the input, one byte each
# (in the order of dequantize_fuzzer.cc), and the tensor bytes from the front.
def dequant_seeds():
    t = "dequantize_fuzzer"
    clear(t)
    rng = random.Random(1234)
    # format, bits-2, strategy, group idx, sym, actorder, raw_g_idx, scale dtype idx, zp idx, block r, block c,
    # activations, quantize_head, hidden idx, head_dim idx, intermediate idx, vocab idx, perturb, perturb_at,
    # extreme (7: integer tensors hold edge values only)
    cases = {
        "pack-w4-group16-sym": [0, 2, 2, 1, 1, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        "pack-w3-group8-asym-oddshapes": [0, 1, 2, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1, 0, 0, 0],
        "pack-w4-actorder": [0, 2, 2, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 2, 0, 0, 0, 0],
        "pack-w8-channel-asym": [0, 6, 1, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0],
        "pack-w2-tensor": [0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0],
        "int8-group-asym-i32zp": [1, 0, 2, 0, 0, 0, 0, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        "int8-channel-asym-i8zp": [1, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 1, 0, 1, 1, 0, 0, 0],
        "nvfp4a16": [2, 2, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        "nvfp4-w4a4": [2, 2, 0, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 0, 1, 0, 0, 0],
        "fp8-block3x8-w8a8-token": [3, 6, 2, 0, 1, 0, 0, 2, 0, 0, 1, 1, 0, 1, 0, 2, 1, 0, 0, 0],
        "fp8-channel-w8a8-group": [3, 6, 1, 0, 1, 0, 0, 0, 0, 0, 0, 2, 1, 0, 0, 0, 0, 0, 0, 0],
        "pack-w4-shape-perturbed": [0, 2, 2, 1, 1, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 9, 0],
    }
    for name, params in cases.items():
        pool = bytes(rng.randrange(256) for _ in range(rng.choice([200, 700, 1500])))
        write(t, name, pool + bytes(reversed(params)))


# --- tokenizer fuzzers: sample texts.
def text_seeds():
    golden = json.loads(read(os.path.join(DATA, "tokenizer-golden", "tokenizer_golden.json")))
    stories = read(os.path.join(DATA, "tinystories-sample", "tinystories_sample.txt")).decode("utf-8")
    wiki = read(os.path.join(DATA, "wikitext-2-raw", "wiki.test.raw")).decode("utf-8")
    texts = {}
    for i, c in enumerate(golden["cases"]):
        texts["golden-%02d" % i] = c[:2000]
    texts["tinystories"] = stories[:1500]
    texts["wiki-head"] = wiki[:1500]
    texts["wiki-mid"] = wiki[200000:201500]
    texts["specials"] = ("<|endoftext|>a<|begin_of_text|> <s>x</s><unk> <|reserved_special_token_5|>"
                         "<|eot_id|>\n\n")
    texts["unicode-mix"] = "naïve café — 東京 😀 Ωμέγα \u200b\ufeff \t\r\n 1234567 'll 's"
    texts["spaces-digits"] = "   \n\n\t  x  9999999999 ,,,!!! ..."
    for target in ["tokenizer_spm_fuzzer", "tokenizer_gpt2_fuzzer", "tokenizer_tiktoken_fuzzer",
                   "tokenizer_hf_json_fuzzer"]:
        clear(target)
        for name, text in texts.items():
            write(target, name, text)
        write(target, "invalid-utf8", b"abc\xff\xfe\xc3(\xed\xa0\x80 \xf4\x90\x80\x80")


# --- request_validation_fuzzer: serialized scored.v1.ScoreRequest messages (hand-encoded proto3).
def varint(v):
    if v < 0:
        v += 1 << 64
    out = b""
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def field_varint(num, v):
    return varint(num << 3) + varint(v)


def field_bytes(num, data):
    return varint((num << 3) | 2) + varint(len(data)) + data


def tokens_msg(ids):
    return field_bytes(1, b"".join(varint(i) for i in ids))  # packed repeated int32


def text_msg(text, add_bos=None):
    m = field_bytes(1, text.encode())
    if add_bos is not None:
        m += field_varint(2, 1 if add_bos else 0)
    return m


def request(rid=0, tokens=None, text=None, score_from=None, top_k=None, rank=False, entropy=False):
    m = field_varint(1, rid) if rid else b""
    if tokens is not None:
        m += field_bytes(2, tokens_msg(tokens))
    if text is not None:
        m += field_bytes(3, text)
    if score_from is not None:
        m += field_varint(4, score_from)
    if top_k is not None:
        m += field_varint(5, top_k)
    if rank:
        m += field_varint(6, 1)
    if entropy:
        m += field_varint(7, 1)
    return m


def request_seeds():
    t = "request_validation_fuzzer"
    clear(t)
    seeds = {
        "tokens-basic": request(tokens=[1, 403, 407, 261, 378]),
        "tokens-all-options": request(rid=42, tokens=[1, 5, 9, 100, 511, 0], score_from=3, top_k=5, rank=True,
                                      entropy=True),
        "tokens-too-long": request(tokens=list(range(1, 60))),
        "tokens-bad-id": request(tokens=[1, 512, 3]),
        "tokens-negative-id": request(tokens=[1, -1, 3]),
        "tokens-one": request(tokens=[1]),
        "score-from-negative": request(tokens=[1, 2, 3], score_from=-5),
        "score-from-too-big": request(tokens=[1, 2, 3], score_from=3),
        "top-k-65": request(tokens=[1, 2, 3], top_k=65),
        "text-default-bos": request(rid=2, text=text_msg("Once upon a time, there was a dog.")),
        "text-no-bos": request(rid=4, text=text_msg("Lily and Tom", add_bos=False), top_k=64),
        "text-bos-no-tokenizer": request(rid=3, text=text_msg("hello", add_bos=True)),
        "text-invalid-utf8": request(rid=6, text=field_bytes(1, b"a\xffb")),
        "text-long": request(rid=8, text=text_msg("The cat sat on the mat. " * 20)),
        "neither": request(rid=10, score_from=1),
        "both-last-wins": request(tokens=[1, 2, 3]) + field_bytes(3, text_msg("hi there friend")),
    }
    for name, data in seeds.items():
        write(t, name, data)


# --- tokenizer_spm_model_fuzzer: SentencePiece .model files (real, truncated real, and a tiny synthetic
# BPE model with byte fallback written field by field).
def piece_msg(piece, score, ptype):
    return field_bytes(1, piece.encode()) + varint((2 << 3) | 5) + struct.pack("<f", score) + field_varint(3, ptype)


def spm_model_seeds():
    t = "tokenizer_spm_model_fuzzer"
    clear(t)
    write(t, "stories260k", read(os.path.join(DATA, "stories260K-hf", "tokenizer.model")))
    write(t, "llama2-head-4k", read(os.path.join(DATA, "tokenizers", "llama2", "tokenizer.model"))[:4096])
    pieces = [("<unk>", 0.0, 2), ("<s>", 0.0, 3), ("</s>", 0.0, 3)]
    pieces += [("<0x%02X>" % b, 0.0, 6) for b in range(256)]
    pieces += [("\u2581", -1.0, 1), ("a", -2.0, 1), ("b", -3.0, 1), ("\u2581a", -4.0, 1), ("ab", -5.0, 1)]
    model = b"".join(field_bytes(1, piece_msg(p, s, ty)) for p, s, ty in pieces)
    model += field_bytes(2, field_varint(3, 2) + field_varint(35, 1))  # trainer_spec: BPE, byte_fallback
    model += field_bytes(3, field_bytes(1, b"identity") + field_varint(3, 1) + field_varint(4, 0))
    write(t, "tiny-bpe-byte-fallback", model)


if __name__ == "__main__":
    spm_model_seeds()
    safetensors_seeds()
    config_seeds()
    dequant_seeds()
    text_seeds()
    request_seeds()
