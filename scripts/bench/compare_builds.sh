#!/usr/bin/env bash
# Two builds of scored_bench on the same checkpoints in one GPU-machine call: are their results bit for bit the
# same, and is their throughput the same within run-to-run noise? For refactors that must not change a bit.
#
#   BUNDLE_A=.bundle-before BUNDLE_B=.bundle-after OUT=$OUT bash scripts/bench/compare_builds.sh [STEPS]
#
# STEPS (comma-separated, default dense,tp; also moe, family):
#   dense: make_random_llama.py (LAYERS, default 32; bf16 + QUANT copies, default w4a16,nvfp4a16,fp8_dynamic),
#          then for each checkpoint scored_bench of A, then B, ROUNDS times (default 2: ABAB, so drift of the
#          card's clock shows as a difference between rounds, not between builds) at BATCHES (default 8) x CTX
#          (2048) windows.
#   tp:    make_random_w4a16.py 8b, scored_bench --tp 1 and --tp TP (default 2) of A and B.
#   moe:   make_random_moe.py's MOE_ARCHS (default qwen3_moe:w4a16,qwen3_moe:bf16,mixtral:w4a16) at MOE_LAYERS
#          (default 8) layers, scored_bench of A and B on digest-only windows (below).
#   family: make_random_family.py's FAMILY_ARCHS (default gemma3-12b,phi4: sandwich norms, GeGLU, local RoPE,
#          soft-caps / fused q|k|v, partial rotary) at FAMILY_LAYERS (default 8), likewise.
# Digest-only windows (moe, family): those generators write no transformers reference, so a windows file of
# BATCHES x CTX random ids below the model's vocabulary (seed 0) with zero reference log-probs stands in: the
# digests compare A with B as for dense; the agreement column is then meaningless (shown, not judged).
# Each run's logprob digest (scored_bench --ref: SHA-256 of the logprobs' bytes) and agreement line are compared
# between A and B; a differing digest is a FAIL line and exit 1. The table last: checkpoint, tp, build, tok/s
# per run, ours-vs-fp32 agreement, digest.
set -uo pipefail
steps=${1:-dense,tp}
a=${BUNDLE_A:?BUNDLE_A: the first bundle (device-bundle output with bin/scored_bench)}
b=${BUNDLE_B:?BUNDLE_B: the second bundle}
layers=${LAYERS:-32}
ctx=${CTX:-2048}
batches=${BATCHES:-8}
quant=${QUANT:-w4a16,nvfp4a16,fp8_dynamic,int8_w8a8}
moe_archs=${MOE_ARCHS:-qwen3_moe:w4a16,qwen3_moe:bf16,mixtral:w4a16}
moe_layers=${MOE_LAYERS:-8}
family_archs=${FAMILY_ARCHS:-gemma3-12b,phi4}
family_layers=${FAMILY_LAYERS:-8}
scratch=${SCRATCH_DIR:-/tmp/cmp-scratch}
tp=${TP:-2}
rounds=${ROUNDS:-2}
model=${MODEL_DIR:-/tmp/cmp-llama}
w4=${W4_DIR:-/tmp/cmp-w4a16-8b}
logs=${OUT:-/tmp/compare_builds_logs}
mkdir -p "$logs"
export PYTHONUNBUFFERED=1
status=0
rows=()

# run_pair NAME MODEL REF TP GATE: scored_bench of A and B (twice each, ABAB), digests compared.
run_pair() {
  local name=$1 dir=$2 ref=$3 t=$4 gate=$5 digest_a="" digest_b="" agree_a="" agree_b="" toks_a="" toks_b=""
  for round in $(seq 1 "$rounds"); do
    for side in A B; do
      local bundle=$a
      [[ $side == B ]] && bundle=$b
      local log=$logs/${name}_tp${t}_${side}${round}.log
      timeout 240 "$bundle/run" scored_bench --model "$dir" --ref "$ref" --gate "$gate" --tp "$t" --ctx "$ctx" \
        --batches "$batches" --profile 0 --nccl 0 > "$log" 2>&1
      local rc=$?
      [[ $rc == 0 ]] || { echo "FAIL $name tp $t build $side: scored_bench exit $rc"; tail -n 5 "$log"; status=1; }
      local d agree tok
      d=$(sed -n 's/^logprob digest: sha256 \([0-9a-f]*\).*/\1/p' "$log")
      agree=$(awk '/vs transformers/ {for(i=1;i<NF;i++) if($i=="ours-vs-fp32model") {v=$(i+1); sub(/,$/,"",v); print v}}' "$log")
      tok=$(awk -v b="B=${batches##*,}" '$1=="scored" && $2==b {for(i=2;i<=NF;i++) if($i=="tok/s") {print $(i-1); exit}}' "$log")
      if [[ $side == A ]]; then
        [[ -z $digest_a ]] && digest_a=$d
        [[ $d == "$digest_a" ]] || { echo "FAIL $name tp $t: build A's two runs differ"; status=1; }
        agree_a=$agree toks_a="$toks_a ${tok:--}"
      else
        [[ -z $digest_b ]] && digest_b=$d
        [[ $d == "$digest_b" ]] || { echo "FAIL $name tp $t: build B's two runs differ"; status=1; }
        agree_b=$agree toks_b="$toks_b ${tok:--}"
      fi
    done
  done
  local verdict=identical
  if [[ -z $digest_a || $digest_a != "$digest_b" ]]; then
    verdict=DIFFER
    echo "FAIL $name tp $t: logprob digests differ (A ${digest_a:-none}, B ${digest_b:-none})"
    status=1
  fi
  rows+=("$(printf '%-12s %-3s %-2s %-14s %-10s %-17s %s' "$name" "$t" A "${toks_a# }" "${agree_a:--}" "${digest_a:0:16}" "$verdict")")
  rows+=("$(printf '%-12s %-3s %-2s %-14s %-10s %-17s %s' "$name" "$t" B "${toks_b# }" "${agree_b:--}" "${digest_b:0:16}" "$verdict")")
}

# digest_windows DIR: DIR/digest_windows.bin in scored_bench --ref's layout (int32 windows, int32 ctx, the ids,
# three float arrays of reference log-probs, here zeros), ids below DIR/config.json's vocabulary.
digest_windows() {
  python3 - "$1" "$batches" "$ctx" <<'PY'
import json, struct, sys, random
d, windows, ctx = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
c = json.load(open(d + "/config.json"))
vocab = c.get("text_config", c)["vocab_size"]
rng = random.Random(0)
with open(d + "/digest_windows.bin", "wb") as f:
    f.write(struct.pack("<ii", windows, ctx))
    f.write(struct.pack("<%di" % (windows * ctx), *[rng.randrange(vocab) for _ in range(windows * ctx)]))
    f.write(b"\0" * (3 * windows * (ctx - 1) * 4))
PY
}

echo "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c | xargs)"
echo "A: $a ($(cat "$a/COMMIT" 2>/dev/null || echo '?'))  B: $b ($(cat "$b/COMMIT" 2>/dev/null || echo '?'))"

if [[ ",$steps," == *,dense,* ]]; then
  echo "== make_random_llama (layers $layers, quantized: $quant)"
  python3 scripts/bench/make_random_llama.py --out "$model" --layers "$layers" --ctx "$ctx" --quant "$quant" \
    > "$logs/make_random_llama.log" 2>&1 || { echo "FAIL make_random_llama"; tail -n 5 "$logs/make_random_llama.log"; status=1; }
  run_pair bf16 "$model" "$model/ref_windows.bin" 1 0
  for scheme in ${quant//,/ }; do
    run_pair "$scheme" "$model-$scheme" "$model/ref_windows.bin" 1 0
  done
fi

if [[ ",$steps," == *,tp,* ]]; then
  echo "== make_random_w4a16 8b"
  if [[ ! -f $w4.complete ]]; then
    python3 scripts/bench/make_random_w4a16.py --out "$w4" --preset 8b --ctx "$ctx" --windows 2 \
      > "$logs/make_w4.log" 2>&1 && touch "$w4.complete" || { echo "FAIL make_random_w4a16"; tail -n 5 "$logs/make_w4.log"; status=1; }
  fi
  run_pair w4a16-8b "$w4" "$w4/ref_windows.bin" 1 0
  run_pair w4a16-8b "$w4" "$w4/ref_windows.bin" "$tp" 0
fi

# generated_pair NAME DIR GENERATOR ARGS...: GENERATOR (a scripts/bench writer) writes DIR, digest windows
# for it, run_pair on them, DIR deleted.
generated_pair() {
  local name=$1 dir=$2 log=$logs/make_$1.log
  shift 2
  echo "== $1 $name"
  rm -rf "$dir"
  if python3 "$@" --out "$dir" > "$log" 2>&1 && digest_windows "$dir"; then
    run_pair "$name" "$dir" "$dir/digest_windows.bin" 1 0
  else
    echo "FAIL $1 $name"; tail -n 5 "$log"; status=1
  fi
  rm -rf "$dir"
}

if [[ ",$steps," == *,moe,* ]]; then
  for spec in ${moe_archs//,/ }; do
    arch=${spec%%:*} q=${spec#*:}
    generated_pair "$arch-$q" "$scratch/moe-$arch-$q" scripts/bench/make_random_moe.py --arch "$arch" --quant "$q" \
      --layers "$moe_layers"
  done
fi

if [[ ",$steps," == *,family,* ]]; then
  for arch in ${family_archs//,/ }; do
    generated_pair "$arch" "$scratch/family-$arch" scripts/bench/make_random_family.py --arch "$arch" \
      --layers "$family_layers"
  done
fi

echo "== compare_builds summary (ctx $ctx, windows $batches; tok/s of each round; agreement = ours-vs-fp32model, nats)"
printf '%-12s %-3s %-2s %-14s %-10s %-17s %s\n' checkpoint tp bd tok/s agreement digest A-vs-B
for r in "${rows[@]}"; do echo "$r"; done
exit $status
