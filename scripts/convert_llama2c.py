#!/usr/bin/env python3
"""Converts a llama2.c "legacy" (v0) checkpoint (e.g. Karpathy's stories260K.bin) into a Hugging Face
Llama folder that scored loads: config.json, model.safetensors (F32), tokenizer.model, tokenizer_config.json.

llama2.c rotates interleaved pairs (2i, 2i+1) of each head; HF Llama rotates (i, i + head_dim/2). The q/k
rows of every head are therefore permuted to [0, 2, 4, ..., 1, 3, 5, ...]. Needs only numpy.

usage: convert_llama2c.py CHECKPOINT.bin TOKENIZER.model OUT_DIR
"""
import json
import os
import shutil
import struct
import sys

import numpy as np


def read_checkpoint(path):
    with open(path, "rb") as f:
        raw = f.read()
    dim, hidden, n_layers, n_heads, n_kv_heads, vocab, seq_len = struct.unpack("<7i", raw[:28])
    shared = vocab > 0
    vocab = abs(vocab)
    head_dim = dim // n_heads
    data = np.frombuffer(raw, dtype="<f4", offset=28)
    pos = 0

    def take(*shape):
        nonlocal pos
        n = int(np.prod(shape))
        out = data[pos:pos + n].reshape(shape)
        pos += n
        return out

    t = {"tok": take(vocab, dim), "attn_norm": take(n_layers, dim), "wq": take(n_layers, dim, dim),
         "wk": take(n_layers, n_kv_heads * head_dim, dim), "wv": take(n_layers, n_kv_heads * head_dim, dim),
         "wo": take(n_layers, dim, dim), "ffn_norm": take(n_layers, dim), "w1": take(n_layers, hidden, dim),
         "w2": take(n_layers, dim, hidden), "w3": take(n_layers, hidden, dim), "norm": take(dim)}
    take(seq_len, head_dim // 2)  # freq_cis_real: theta = 10000 reproduces it
    take(seq_len, head_dim // 2)  # freq_cis_imag
    if not shared:
        t["out"] = take(vocab, dim)
    cfg = dict(dim=dim, hidden=hidden, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv_heads, vocab=vocab,
               seq_len=seq_len, head_dim=head_dim, shared=shared)
    return cfg, t


def permute_rows(w, n_heads, head_dim):
    order = list(range(0, head_dim, 2)) + list(range(1, head_dim, 2))
    return w.reshape(n_heads, head_dim, -1)[:, order, :].reshape(n_heads * head_dim, -1)


def write_safetensors(path, tensors):
    header, offset, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for name, arr in tensors.items():
        b = np.ascontiguousarray(arr, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    ckpt, tok, out = sys.argv[1:]
    cfg, t = read_checkpoint(ckpt)
    os.makedirs(out, exist_ok=True)
    tensors = {"model.embed_tokens.weight": t["tok"]}
    for i in range(cfg["n_layers"]):
        p = f"model.layers.{i}."
        tensors[p + "input_layernorm.weight"] = t["attn_norm"][i]
        tensors[p + "self_attn.q_proj.weight"] = permute_rows(t["wq"][i], cfg["n_heads"], cfg["head_dim"])
        tensors[p + "self_attn.k_proj.weight"] = permute_rows(t["wk"][i], cfg["n_kv_heads"], cfg["head_dim"])
        tensors[p + "self_attn.v_proj.weight"] = t["wv"][i]
        tensors[p + "self_attn.o_proj.weight"] = t["wo"][i]
        tensors[p + "post_attention_layernorm.weight"] = t["ffn_norm"][i]
        tensors[p + "mlp.gate_proj.weight"] = t["w1"][i]
        tensors[p + "mlp.down_proj.weight"] = t["w2"][i]
        tensors[p + "mlp.up_proj.weight"] = t["w3"][i]
    tensors["model.norm.weight"] = t["norm"]
    if not cfg["shared"]:
        tensors["lm_head.weight"] = t["out"]
    write_safetensors(os.path.join(out, "model.safetensors"), tensors)
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
        "hidden_size": cfg["dim"], "intermediate_size": cfg["hidden"], "num_hidden_layers": cfg["n_layers"],
        "num_attention_heads": cfg["n_heads"], "num_key_value_heads": cfg["n_kv_heads"],
        "head_dim": cfg["head_dim"], "vocab_size": cfg["vocab"], "max_position_embeddings": cfg["seq_len"],
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "rope_scaling": None,
        "tie_word_embeddings": cfg["shared"], "attention_bias": False, "mlp_bias": False,
        "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32",
    }
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    shutil.copyfile(tok, os.path.join(out, "tokenizer.model"))
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"add_bos_token": True, "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>",
                   "unk_token": "<unk>", "legacy": True, "tokenizer_class": "LlamaTokenizer"}, f, indent=2)


if __name__ == "__main__":
    main()
