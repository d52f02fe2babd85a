#!/usr/bin/env python3
"""Adds llm-compressor QuIP-style input rotations (transform_config scheme "v": an online random-Hadamard
rotation of every decoder Linear's input, the lm_head ignored) to an existing checkpoint, for the speed of
scored's online rotations (engine/kernels/hadamard_rotate.h) against the same checkpoint without them.

  add_rotation.py --model DIR --out DIR2 [--block N]

DIR2 gets symlinks to DIR's safetensors shards, one more shard holding the F64 rotation matrices (one per input
width, stored once under the first module using it and found by size, as compressed-tensors ties them:
"<module>.v_input.weight"), DIR's index with those entries, and DIR's config.json with the transform_config.
--block N: block-diagonal rotations of N elements (QuIPModifier's transform_block_size; the config's head_dim).

The matrices have compressed-tensors' random-hadamard form T = D . (A (x) H_L)^T (engine/model/hadamard_factors.h)
with K = n / L chosen as its table does (the largest of 1, 2, 4, 8, 12, ..., 256 with n / K a power of two),
but A is a random +-1 matrix, not the table's Hadamard matrix of order K (which this script does not carry), and
the stored weights are not rotated: the cost of the rotations is what is measured; log-probs of such a
checkpoint mean nothing.
"""
import argparse
import json
import os
import struct

import numpy as np


def core_size(n):
    for k in sorted([1, 2] + list(range(4, 257, 4)), reverse=True):
        q = n // k
        if n % k == 0 and q & (q - 1) == 0:
            return k
    raise SystemExit(f"no Hadamard construction of size {n}")


def sylvester(n):
    h = np.ones((1, 1), dtype=np.int8)
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return h


def matrix(n, rng):
    k = core_size(n)
    chunk = n // k
    core = np.where(rng.integers(0, 2, size=(k, k)) == 1, 1, -1).astype(np.int8)
    if k & (k - 1) == 0:
        core = sylvester(k)  # powers of two: compressed-tensors' table is Sylvester's
    signs = np.where(rng.integers(0, 2, size=n) == 1, 1.0, -1.0)
    # T[i][j] = signs[i] core[j_hi][i_hi] H_L[j_lo][i_lo] = signs[i] kron(core^T, H_L)[i][j]
    return signs[:, None] * np.kron(core.T.astype(np.float64), sylvester(chunk).astype(np.float64)), k


def write_safetensors(path, tensors):
    header, offset = {}, 0
    for name, a in tensors.items():
        header[name] = {"dtype": "F64", "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for a in tensors.values():
            f.write(np.ascontiguousarray(a, dtype="<f8").tobytes())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--block", type=int, default=0)
    args = ap.parse_args()
    with open(os.path.join(args.model, "config.json")) as f:
        config = json.load(f)
    with open(os.path.join(args.model, "model.safetensors.index.json")) as f:
        index = json.load(f)
    os.makedirs(args.out, exist_ok=True)
    for shard in sorted(set(index["weight_map"].values())):
        dst = os.path.join(args.out, shard)
        if not os.path.lexists(dst):
            os.symlink(os.path.abspath(os.path.join(args.model, shard)), dst)

    hidden, inter = config["hidden_size"], config["intermediate_size"]
    q_dim = config["num_attention_heads"] * config.get("head_dim", hidden // config["num_attention_heads"])
    first = {}  # input width -> first module using it
    for name, width in [("self_attn.q_proj", hidden), ("self_attn.o_proj", q_dim), ("mlp.down_proj", inter)]:
        n = args.block or width
        first.setdefault(n, f"model.layers.0.{name}")
    rng = np.random.default_rng(0)
    tensors = {}
    for n, module in first.items():
        t, k = matrix(n, rng)
        tensors[f"{module}.v_input.weight"] = t
        print(f"rotation of size {n}: core {k} x {k}, chunk {n // k}, {t.nbytes / 2**20:.0f} MiB")
    shard = "model-rotations.safetensors"
    write_safetensors(os.path.join(args.out, shard), tensors)
    for name in tensors:
        index["weight_map"][name] = shard
    with open(os.path.join(args.out, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)

    apply = [{"targets": ["Linear"], "ignore": ["lm_head"], "location": "input", "inverse": False},
             {"targets": ["Linear"], "ignore": ["lm_head"], "location": "weight_input", "inverse": True}]
    config["quantization_config"]["transform_config"] = {"config_groups": {"v": {
        "type": "random-hadamard", "apply": apply, "head_dim": args.block or None, "randomize": False,
        "requires_grad": False, "precision": "torch.float64"}}}
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    for extra in os.listdir(args.model):
        if extra.endswith(".json") and extra not in ("config.json", "model.safetensors.index.json"):
            dst = os.path.join(args.out, extra)
            if not os.path.lexists(dst):
                os.symlink(os.path.abspath(os.path.join(args.model, extra)), dst)


if __name__ == "__main__":
    main()
