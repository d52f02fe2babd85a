#!/usr/bin/env bash
# One GPU-machine run: the gpu tests, a random-weight Llama-3-8B-shaped checkpoint (plus compressed-tensors
# W4A16 / NVFP4A16 checkpoints of the same weights), scored_bench on each (agreement with transformers +
# throughput + memory), the transformers peer baseline, then a short table.
#
#   scripts/bench/gpu_bench.sh [STEPS]      STEPS: any of tests,bench,quant,peer,stories,tp,big,soak,ppl,kld,kldppl,
#                                           kldtp,family,moe,moetp,qwen35 (default tests,bench,quant,peer;
#                                           tests/bench/README.md has the details)
#
# Tensor parallelism, large checkpoints and the GPU soak (each step self-contained, each ends with its own table):
#   tp:   8B-shaped W4A16 g128 written by make_random_w4a16.py, scored_bench --tp 1 and --tp TP (8 x 2048 windows):
#         tok/s, speed-up, NCCL share, agreement with the writer's reference forward.
#   big:  a BIG_PRESET (70b; 123b) W4A16 g128 checkpoint written on this machine's disk, scored_bench --tp BIG_TP at
#         BIG_BATCHES windows: write time, load time, memory per GPU, tok/s, FLOP-bound limit. (`70b` = `big`.)
#   soak: the real `scored --backend=cuda` on the 8B W4A16, scored-load with SOAK_CLIENTS clients for SOAK_SECONDS
#         with SOAK_LENGTHS, tok/s under load vs scored_bench alone, p50/p99, errors by code, then SIGTERM under load
#         (drains: exit 0, in-flight requests OK, later ones UNAVAILABLE).
#   ppl:  the real `scored --backend=cuda` on the 8B W4A16: load-to-SERVING (process start -> the port file, which
#         scored writes once health is SERVING); then `scored-ppl` over the full WikiText-2 test file, method exl3, ctx 2048,
#         stride 512 (its wall, the model loaded); PASS/FAIL against PPL_LOAD_TARGET_S and PPL_WALL_TARGET_S; SIGTERM.
# KL divergence against a reference model (issue 17), each step self-contained with its own table:
#   kld:  an 8B-shaped (Llama-3-8B) random bf16 checkpoint and the W4A16 g128 quantization of the same weights
#         (make_random_w4a16.py --dense-out), scored_bench --model W4 --reference_model BF16 --want_reference 1 at
#         KLD_BATCHES x CTX (the pair, then Q alone and R alone in the same process), then the transformers peer
#         `$PEERS kld` (both models in bf16, full log-softmaxes): PASS/FAIL of pair tok/s / peer tok/s >=
#         KLD_PEER_TARGET, pair / (1 / (1/r_Q + 1/r_R)) >= KLD_ALONE_TARGET, GPU memory <= both weights + 6 GiB.
#   kldppl: the real `scored --backend=cuda --model W4 --reference_model BF16` (the kld step's pair, written when
#         absent), then `scored-ppl --kld` over the full WikiText-2 test file as the ppl step runs it (the same code):
#         load-to-SERVING recorded apart, scored-ppl's wall with both models loaded against KLDPPL_WALL_TARGET_S.
#   kldtp: a KLDTP_PRESET (32b: Qwen2.5-32B shape, q/k/v biases) bf16 reference + its W4A16 written here,
#         scored_bench pair at --tp TP, KLDTP_BATCHES x CTX: write and load time, tok/s, GPU memory per GPU.
# Dense families (issue 22):
#   family: for each of FAMILY_ARCHS (make_random_family.py's presets), a random W4A16 g128 checkpoint written under
#         FAMILY_DIR, scored_bench at FAMILY_BATCHES x CTX: tok/s, weights on the GPU, GPU memory, and the share of
#         the same call's FLOP-bound limit (the per-token FLOPs at the sustained plain cuBLASLt GEMM rate over the
#         model's layer shapes): PASS at >= FAMILY_TARGET. Each checkpoint is deleted after its run, except that of
#         FAMILY_PPL_ARCH, on which the ppl step's end-to-end run follows first (scored + scored-ppl over the full
#         WikiText-2 test file, the PPL_* settings; tokenizer FAMILY_PPL_TOKENIZER: any tokenizer whose ids fit the model's
#         vocabulary times the same, random weights have no real tokenizer); load and wall recorded, not judged.
# Mixture-of-experts (issue 20):
#   moe:  random checkpoints written here one at a time (make_random_moe.py, packed layer by layer; each deleted after
#         its run): the Qwen3-30B-A3B shape in W4A16 g128 (48 layers) and in bf16 (MOE_BF16_LAYERS layers), the
#         Mixtral-8x7B shape in W4A16 (32 layers); scored_bench at MOE_BATCHES x CTX on each (MOE_STAGES=1 adds its
#         per-stage profile, --stages 1, in builds that have it); on the Qwen3 W4A16 the ppl step's end-to-end run
#         (scored + scored-ppl over the full WikiText-2 test file, wall against MOE_PPL_WALL_TARGET_S; tokenizer
#         PPL_TOKENIZER: random weights time the same with any tokenizer whose ids fit); then the peer `$PEERS moe`
#         at the same layer counts (Mixtral at MOE_MIXTRAL_PEER_LAYERS). PASS/FAIL per model of the peer's ms per
#         layer over ours against MOE_W4_TARGET (1.9), MOE_BF16_TARGET (2.0), MOE_MIXTRAL_TARGET (1.3), and the
#         Qwen3 W4A16 weights on the GPU against MOE_W4_WEIGHTS_GIB (17).
#   moetp: a MOE_TP_ARCH (qwen3_moe_235b: Qwen3-235B-A22B's shape, ~115 GiB) W4A16 checkpoint written here,
#         scored_bench --tp TP at MOE_TP_BATCHES x CTX: write time, load time, memory per GPU, tok/s; deleted after
#         unless KEEP_BIG=1 (then a later call on the same machine reuses it: MOE_TP_DIR.complete marks a finished one).
# Hybrid Gated DeltaNet models, Qwen3.5 / Qwen3.6 (issue 34):
#   qwen35: random checkpoints written here one at a time (make_random_qwen35.py, layer by layer), each deleted after
#         its run: the Qwen3.6-35B-A3B shape (Qwen3_5MoeForCausalLM) in W4A16 g128 (QWEN35_W4_LAYERS, 40: all) and in
#         bf16 (QWEN35_BF16_LAYERS, 20), the Qwen3.5-27B shape (Qwen3_5ForCausalLM) in W4A16 (QWEN35_27B_LAYERS, 64:
#         all); the W4A16s quantize every decoder Linear but the routers, shared_expert_gate and linear_attn
#         in_proj_a / in_proj_b (QWEN35_LINEAR_ATTN=bf16: no linear_attn projection, as llm-compressor's examples).
#         Per model: scored_bench at QWEN35_BATCHES x CTX; on the 35B-A3B W4A16 the ppl step's end-to-end run
#         (scored + scored-ppl over the full WikiText-2 test file, exl3 2048/512, wall against
#         QWEN35_PPL_WALL_TARGET_S; tokenizer PPL_TOKENIZER); the checkpoint deleted; then the peer `$PEERS any
#         --model_type qwen3_5_moe_text|qwen3_5_text --config <make_random_qwen35.py --peer-config>` at the same
#         layer count. Table: ms per layer ours vs the peer's (transformers bf16), the peer's over ours against
#         QWEN35_W4_TARGET (2.0) and QWEN35_BF16_TARGET (2.0) (the 27B's recorded), weights on the GPU, the share of
#         the FLOP-bound limit (the family step's figure; the 27B W4A16's against QWEN35_27B_TARGET, 0.8), the ppl
#         wall. Every part runs under its own timeout inside QWEN35_BUDGET_S (570: one 10-minute call); what could
#         not run is listed as skipped. QWEN35_MODELS (a3bw4,a3bbf16,27bw4) runs a part.
#   Bundle for these: device-bundle .bundle-X build/tests/bench/cuda/scored_bench build/server/scored
#   build/client/load/scored-load build/client/ppl/scored-ppl (tp/big need scored_bench, soak the first three, ppl
#   scored and scored-ppl plus $BUNDLE/data/wikitext-2-raw/wiki.test.raw and $BUNDLE/data/tokenizers/llama3;
#   kld and kldtp scored_bench (kld also cp ../shared/bench/hf_peers.py .bundle-X/), kldppl what ppl needs; moe and
#   qwen35 scored_bench, hf_peers.py and what ppl needs).
# Run from the repository root with the bundle made on the dev machine:
#   ../shared/tools/device-bundle .bundle-cuda build-cuda/tests/engine/cuda/cuda_*_test build-cuda/tests/bench/cuda/scored_bench
#   cp -r ../shared/data/stories260K-hf .bundle-cuda/data/; cp ../shared/bench/hf_baseline.py .bundle-cuda/
# Environment: BUNDLE (.bundle-cuda), LAYERS (32), CTX (2048), BATCHES (1,2,4,8,16), MODEL_DIR (/tmp/random-llama),
# QUANT (w4a16,nvfp4a16; fp8_dynamic and int8_w8a8 also write and run W8A8 FP8 / INT8), QUANT_BATCHES (1,4,8: the 8 x 2048-token memory target), PROFILE (1), GRAPH (0; 1 adds
# scored_bench's forward-only timings, direct enqueue vs CUDA graph replay), OUT (logs go there when set);
# tp/big/soak: W4_DIR (/tmp/random-w4a16-8b), TP (2), TP_BATCHES (8), BIG_PRESET (70b), BIG_DIR (/tmp/random-w4a16-BIG),
# BIG_TP (2), BIG_BATCHES (1,2,4,8), KEEP_BIG (0: the big checkpoint is deleted after its step), SOAK_SECONDS (60),
# SOAK_CLIENTS (64), SOAK_LENGTHS (256:0.2,1024:0.3,2048:0.5), SOAK_TP (1);
# ppl: PPL_BACKEND (cuda), PPL_MODEL (W4_DIR, written by make_w4 when unset), PPL_TOKENIZER
# ($BUNDLE/data/tokenizers/llama3), PPL_DATA ($BUNDLE/data/wikitext-2-raw/wiki.test.raw), PPL_METHOD (exl3), PPL_CTX
# (2048), PPL_STRIDE (512), PPL_MAX_WINDOWS (0 = all), PPL_TP (1), PPL_INFLIGHT (16), PPL_MAX_BATCH_TOKENS (16384),
# PPL_LOAD_TARGET_S (30), PPL_WALL_TARGET_S (40), PPL_START_LIMIT_S (180), PPL_LIMIT_S (240: scored-ppl's timeout),
# PPL_COLD (0; 1 evicts the checkpoint's files from the page cache before scored starts: a cold-disk load),
# PPL_EXPECT (none; a golden PPL: |ppl / PPL_EXPECT - 1| <= PPL_EXPECT_RTOL (0.001) or FAIL).
# kld: KLD_DIR (/tmp/random-kld-8b: the W4A16 in KLD_DIR/w4a16, its bf16 original in KLD_DIR/bf16), KLD_BATCHES (8),
# KLD_PEER_TARGET (1.2), KLD_ALONE_TARGET (0.95), PEERS ($BUNDLE/hf_peers.py); kldppl: the PPL_* settings above except
# PPL_MODEL, PPL_LOAD_TARGET_S (the load is recorded, not judged), PPL_WALL_TARGET_S and PPL_EXPECT, plus KLDPPL_MODEL
# and KLDPPL_REFERENCE (KLD_DIR's pair, written when unset), KLDPPL_WALL_TARGET_S (70), KLDPPL_EXPECT (none; a golden
# PPL of the model, as PPL_EXPECT); kldtp: KLDTP_PRESET
# (32b), KLDTP_DIR (/tmp/random-kld-KLDTP_PRESET; deleted after the step unless KEEP_BIG=1), KLDTP_BATCHES (8),
# KLDTP_ALONE (0; 1 also loads and times each model alone at tp TP);
# moe: MOE_DIR (/tmp/random-moe), MOE_MODELS (q3w4,q3bf16,mxw4: a part of the step for one call's 10 minutes),
# MOE_BATCHES (8), MOE_BF16_LAYERS (24), MOE_MIXTRAL_PEER_LAYERS (8), MOE_STAGES (0),
# MOE_PPL (1), MOE_PPL_WALL_TARGET_S (40), the four targets above; moetp: MOE_TP_ARCH (qwen3_moe_235b), MOE_TP_DIR
# (/tmp/random-moe-tp), MOE_TP_BATCHES (1,8);
# qwen35: QWEN35_DIR (/tmp/random-qwen35), QWEN35_MODELS (a3bw4,a3bbf16,27bw4), QWEN35_BATCHES (8), QWEN35_W4_LAYERS
# (40), QWEN35_BF16_LAYERS (20), QWEN35_27B_LAYERS (64), QWEN35_LINEAR_ATTN (quantized), QWEN35_PPL (1),
# QWEN35_PPL_WALL_TARGET_S (40), QWEN35_W4_TARGET (2.0), QWEN35_BF16_TARGET (2.0), QWEN35_27B_TARGET (0.8),
# QWEN35_BUDGET_S (570), QWEN35_WRITE_LIMIT_S (300), QWEN35_BENCH_LIMIT_S (300), QWEN35_PEER_LIMIT_S (300), PEERS.
set -uo pipefail
steps=${1:-tests,bench,quant,peer}
bundle=${BUNDLE:-.bundle-cuda}
layers=${LAYERS:-32}
ctx=${CTX:-2048}
batches=${BATCHES:-1,2,4,8,16}
model=${MODEL_DIR:-/tmp/random-llama}
quant=${QUANT:-w4a16,nvfp4a16}
quant_batches=${QUANT_BATCHES:-1,4,8}
[[ ",$steps," == *,quant,* ]] || quant=""
logs=${OUT:-/tmp/gpu_bench_logs}
mkdir -p "$logs"
export SCORED_DATA_DIR=$PWD/$bundle/data SCORED_FIXTURES_DIR=$PWD/tests/fixtures PYTHONUNBUFFERED=1
status=0
w4=${W4_DIR:-/tmp/random-w4a16-8b}
tp=${TP:-2}
tp_batches=${TP_BATCHES:-8}
[[ ",$steps," == *,70b,* ]] && steps="$steps,big"
big_preset=${BIG_PRESET:-70b}
big=${BIG_DIR:-/tmp/random-w4a16-$big_preset}
big_tp=${BIG_TP:-2}
big_batches=${BIG_BATCHES:-1,2,4,8}
soak_seconds=${SOAK_SECONDS:-60}
soak_clients=${SOAK_CLIENTS:-64}
soak_lengths=${SOAK_LENGTHS:-256:0.2,1024:0.3,2048:0.5}
soak_tp=${SOAK_TP:-1}
soak_backend=${SOAK_BACKEND:-cuda}  # cpu: checks the step itself on a machine without a GPU
ppl_backend=${PPL_BACKEND:-cuda}    # cpu: the same for the ppl step (with PPL_MODEL, PPL_TOKENIZER of a small model)
ppl_model=${PPL_MODEL:-}
bundle_abs=$bundle
[[ $bundle == /* ]] || bundle_abs=$PWD/$bundle
ppl_tokenizer=${PPL_TOKENIZER:-$bundle_abs/data/tokenizers/llama3}
ppl_data=${PPL_DATA:-$bundle_abs/data/wikitext-2-raw/wiki.test.raw}
ppl_method=${PPL_METHOD:-exl3}
ppl_ctx=${PPL_CTX:-2048}
ppl_stride=${PPL_STRIDE:-512}
ppl_max_windows=${PPL_MAX_WINDOWS:-0}
ppl_tp=${PPL_TP:-1}
ppl_inflight=${PPL_INFLIGHT:-16}
ppl_max_batch_tokens=${PPL_MAX_BATCH_TOKENS:-16384}
ppl_load_target=${PPL_LOAD_TARGET_S:-30}
ppl_wall_target=${PPL_WALL_TARGET_S:-40}
ppl_start_limit=${PPL_START_LIMIT_S:-180}
ppl_limit=${PPL_LIMIT_S:-240}
ppl_expect=${PPL_EXPECT:-}  # a golden PPL for the run's exact parameters (the CPU check): a mismatch is a FAIL
ppl_expect_rtol=${PPL_EXPECT_RTOL:-0.001}
ppl_cold=${PPL_COLD:-0}  # 1: evict the checkpoint's files from the page cache first (a cold-disk load)
kld_dir=${KLD_DIR:-/tmp/random-kld-8b}
kld_batches=${KLD_BATCHES:-8}
kld_peer_target=${KLD_PEER_TARGET:-1.2}
kld_alone_target=${KLD_ALONE_TARGET:-0.95}
peers=${PEERS:-$bundle/hf_peers.py}
kldppl_model=${KLDPPL_MODEL:-}
kldppl_reference=${KLDPPL_REFERENCE:-}
kldppl_wall_target=${KLDPPL_WALL_TARGET_S:-70}
kldppl_expect=${KLDPPL_EXPECT:-}
kldtp_preset=${KLDTP_PRESET:-32b}
kldtp_dir=${KLDTP_DIR:-/tmp/random-kld-$kldtp_preset}
kldtp_batches=${KLDTP_BATCHES:-8}
kldtp_alone=${KLDTP_ALONE:-0}
family_archs=${FAMILY_ARCHS:-gemma3-27b,gemma3-12b,phi4,phi3.5-mini}
family_dir=${FAMILY_DIR:-/tmp/random-family}
family_batches=${FAMILY_BATCHES:-8}
family_target=${FAMILY_TARGET:-0.8}
family_ppl_arch=${FAMILY_PPL_ARCH:-phi4}
family_ppl_tokenizer=${FAMILY_PPL_TOKENIZER:-$bundle_abs/data/tokenizers/gpt2}
moe_dir=${MOE_DIR:-/tmp/random-moe}
moe_models=${MOE_MODELS:-q3w4,q3bf16,mxw4}
moe_batches=${MOE_BATCHES:-8}
moe_bf16_layers=${MOE_BF16_LAYERS:-24}
moe_mixtral_peer_layers=${MOE_MIXTRAL_PEER_LAYERS:-8}
moe_stages=${MOE_STAGES:-0}
moe_ppl=${MOE_PPL:-1}
moe_ppl_wall_target=${MOE_PPL_WALL_TARGET_S:-40}
moe_w4_target=${MOE_W4_TARGET:-1.9}
moe_bf16_target=${MOE_BF16_TARGET:-2.0}
moe_mixtral_target=${MOE_MIXTRAL_TARGET:-1.3}
moe_w4_weights_gib=${MOE_W4_WEIGHTS_GIB:-17}
moe_tp_arch=${MOE_TP_ARCH:-qwen3_moe_235b}
moe_tp_dir=${MOE_TP_DIR:-/tmp/random-moe-tp}
moe_tp_batches=${MOE_TP_BATCHES:-1,8}
qwen35_dir=${QWEN35_DIR:-/tmp/random-qwen35}
qwen35_models=${QWEN35_MODELS:-a3bw4,a3bbf16,27bw4}
qwen35_batches=${QWEN35_BATCHES:-8}
qwen35_w4_layers=${QWEN35_W4_LAYERS:-40}
qwen35_bf16_layers=${QWEN35_BF16_LAYERS:-20}
qwen35_27b_layers=${QWEN35_27B_LAYERS:-64}
qwen35_linear_attn=${QWEN35_LINEAR_ATTN:-quantized}
qwen35_ppl=${QWEN35_PPL:-1}
qwen35_ppl_wall_target=${QWEN35_PPL_WALL_TARGET_S:-40}
qwen35_w4_target=${QWEN35_W4_TARGET:-2.0}
qwen35_bf16_target=${QWEN35_BF16_TARGET:-2.0}
qwen35_27b_target=${QWEN35_27B_TARGET:-0.8}
qwen35_budget=${QWEN35_BUDGET_S:-570}
qwen35_write_limit=${QWEN35_WRITE_LIMIT_S:-300}
qwen35_bench_limit=${QWEN35_BENCH_LIMIT_S:-300}
qwen35_peer_limit=${QWEN35_PEER_LIMIT_S:-300}

has_step() {  # has_step NAME: NAME is one of the comma-separated STEPS
  [[ ",$steps," == *",$1,"* ]]
}

fail() {  # a clear failure line; the run's exit status becomes 1
  echo "FAIL $*"
  status=1
}

# run_logged NAME LIMIT_S CMD...: CMD under a timeout, stdout+stderr to $logs/NAME.log; a FAIL line on error.
run_logged() {
  local name=$1 limit=$2
  shift 2
  timeout --kill-after=20 "$limit" "$@" > "$logs/$name.log" 2>&1
  local rc=$?
  if [[ $rc == 124 || $rc == 137 ]]; then
    fail "$name: timed out after ${limit}s (last lines follow)"
    tail -n 5 "$logs/$name.log"
  elif [[ $rc != 0 ]]; then
    fail "$name: exit $rc (last lines follow)"
    grep -vE '^\[ +(RUN|OK) ' "$logs/$name.log" | tail -n 8
  fi
  return $rc
}

# free_gib DIR NEED NAME: DIR's file system has NEED GiB free, else a FAIL line (and status 1).
free_gib() {
  local avail
  mkdir -p "$1"
  avail=$(df --output=avail -BG "$1" | tail -n 1 | tr -dc 0-9)
  if (( avail < $2 )); then
    fail "$3: $avail GiB free under $1, needs $2"
    return 1
  fi
}

# make_w4 DIR PRESET LIMIT_S: a random W4A16 g128 checkpoint of PRESET in DIR (kept while the machine lives:
# DIR.complete marks a finished one, so the tp and soak steps of one call share it).
make_w4() {
  local dir=$1 preset=$2 limit=$3 need
  if [[ -f $dir.complete && $(cat "$dir.complete") == "$preset $ctx" ]]; then
    echo "(reusing $dir)"
    return 0
  fi
  rm -rf "$dir" "$dir.complete"
  need=$(case $preset in 8b) echo 8 ;; 70b) echo 42 ;; *) echo 70 ;; esac)
  free_gib "$(dirname "$dir")" "$need" "make_w4 $preset" || return 1
  run_logged "make_w4a16_$preset" "$limit" python3 scripts/bench/make_random_w4a16.py --out "$dir" \
    --preset "$preset" --ctx "$ctx" --windows 2 || return 1
  grep '^make_random_w4a16' "$logs/make_w4a16_$preset.log"
  echo "$preset $ctx" > "$dir.complete"
}

# bench_field LOG B WORD: from scored_bench's "scored B=..." line of batch B, the field before WORD ("tok/s",
# "TFLOP/s"); field_after LOG PATTERN WORD: the field after WORD on the first line matching PATTERN.
bench_field() {
  awk -v b="B=$2" -v w="$3" '$1=="scored" && $2==b {for(i=2;i<=NF;i++) if($i==w) {print $(i-1); exit}}' "$1" 2>/dev/null
}
field_after() {
  awk -v p="$2" -v w="$3" '$0 ~ p {for(i=1;i<NF;i++) if($i==w) {v=$(i+1); sub(/[,;]$/, "", v); print v; exit}}' "$1" \
    2>/dev/null
}
# nccl_share LOG B: the "N%" of scored_bench's "nccl B=..." line.
nccl_share() {
  awk -v b="B=$2" '$1=="nccl" && $2==b {for(i=1;i<=NF;i++) if($i ~ /%$/) {print $i; exit}}' "$1" 2>/dev/null
}
# gpu_mem LOG B: the per-GPU memory of batch B ("9.5 / 9.4").
gpu_mem() {
  awk -v b="B=$2" '$1=="scored" && $2==b {sub(/.*GPU memory used /, ""); sub(/ GiB.*/, ""); print; exit}' "$1" \
    2>/dev/null
}

echo "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader)"

if has_step tests; then
  # e2e tests that start the daemon (gpu_fault_e2e_test) take the bundled one when it is there.
  [[ -x $bundle/bin/scored ]] && export SCORED_TEST_SCORED_BINARY=$bundle_abs/bin/scored
  for t in "$bundle"/bin/*_test; do
    name=$(basename "$t")
    echo "== $name"
    if "$bundle/run" "$name" > "$logs/$name.log" 2>&1; then
      grep -E '^\[  (PASSED|SKIPPED) |stories260K|fixtures|bf16: mean' "$logs/$name.log"
    else
      status=1
      grep -vE '^\[ +(RUN|OK) ' "$logs/$name.log" | tail -n 40
    fi
  done
fi

if has_step stories; then
  echo "== transformers on stories260K (the bf16 yardstick)"
  python3 scripts/bench/hf_stories_bf16.py "$SCORED_DATA_DIR/stories260K-hf" 2>&1 | grep -vi warn
fi

if has_step bench || has_step quant; then
  echo "== make_random_llama (layers $layers, quantized: ${quant:--})"
  python3 scripts/bench/make_random_llama.py --out "$model" --layers "$layers" --ctx "$ctx" --quant "$quant" \
    2>&1 | tail -n 4
  df -h "$(dirname "$model")" | tail -n 1
fi

if has_step bench; then
  echo "== scored_bench bf16"
  "$bundle/run" scored_bench --model "$model" --ref "$model/ref_windows.bin" --ctx "$ctx" --batches "$batches" \
    --profile "${PROFILE:-1}" --graph "${GRAPH:-0}" 2>&1 | tee "$logs/scored_bench.log" | grep -vE '^I[0-9].*(loaded|cuda engine)'
  [[ ${PIPESTATUS[0]} == 0 ]] || status=1
fi

for scheme in ${quant//,/ }; do
  echo "== scored_bench $scheme"
  "$bundle/run" scored_bench --model "$model-$scheme" --ref "$model/ref_windows.bin" --gate 0 --ctx "$ctx" \
    --batches "$quant_batches" --profile 0 --graph "${GRAPH:-0}" 2>&1 | tee "$logs/scored_bench_$scheme.log" | grep -vE '^I[0-9].*(loaded|cuda engine)'
  [[ ${PIPESTATUS[0]} == 0 ]] || status=1
  rm -rf "$model-$scheme"
done

if has_step peer; then
  echo "== transformers baseline (layers $layers)"
  python3 "$bundle/hf_baseline.py" "$layers" 2>&1 | tee "$logs/hf_baseline.log" | grep -vi warn
fi

if has_step tp; then
  echo "== tp: 8B-shaped W4A16 g128, scored_bench --tp 1 and --tp $tp, $tp_batches x $ctx"
  if make_w4 "$w4" 8b 180; then
    for t in 1 "$tp"; do
      run_logged "tp$t" 200 "$bundle/run" scored_bench --model "$w4" --tp "$t" --ref "$w4/ref_windows.bin" --gate 1 \
        --ctx "$ctx" --batches "$tp_batches" --profile 0 --nccl 1
      grep -E '^(load|scored B|nccl|gate)' "$logs/tp$t.log"
    done
    echo "== tp summary (8B W4A16 g128, ctx $ctx; tok/s; the reference is make_random_w4a16's forward of the same weights)"
    printf '%-4s %-8s %9s %9s %11s %9s %8s %8s %-13s %s\n' tp windows tok/s speed-up FLOP-limit of-limit NCCL load_s \
      "GPU_GiB" "ours-vs-fp32ref"
    for b in ${tp_batches//,/ }; do
      base=$(bench_field "$logs/tp1.log" "$b" tok/s)
      for t in 1 "$tp"; do
        l=$logs/tp$t.log
        v=$(bench_field "$l" "$b" tok/s)
        up=$(awk -v a="$v" -v b="$base" 'BEGIN {if (a > 0 && b > 0) printf "%.2fx", a / b; else print "-"}')
        printf '%-4s %-8s %9s %9s %11s %9s %8s %8s %-13s %s\n' "$t" "$b" "${v:--}" "$up" \
          "$(field_after "$l" "^scored B=$b " limit)" "$(field_after "$l" "^scored B=$b " ours)" \
          "$(nccl_share "$l" "$b")" "$(field_after "$l" '^load:' "$t,")" "$(gpu_mem "$l" "$b")" \
          "$(field_after "$l" 'vs transformers' ours-vs-fp32model)"
      done
    done
  fi
fi

if has_step big; then
  echo "== big: $big_preset W4A16 g128 written here, scored_bench --tp $big_tp, $big_batches x $ctx"
  df -h "$(dirname "$big")" | tail -n 1
  if make_w4 "$big" "$big_preset" 300; then
    du -sh "$big" | cut -f1 | sed 's/^/checkpoint on disk: /'
    run_logged "big" 300 "$bundle/run" scored_bench --model "$big" --tp "$big_tp" --ref "$big/ref_windows.bin" \
      --gate 0 --ctx "$ctx" --batches "$big_batches" --profile 0 --nccl 1
    grep -E '^(scored_bench|load|host memory|scored B|nccl|vs transformers)' "$logs/big.log"
    echo "== big summary ($big_preset W4A16 g128, tp $big_tp, ctx $ctx)"
    echo "write: $(grep -o 'total [0-9.]*s' "$logs/make_w4a16_$big_preset.log" | head -n 1); load (open -> ready):" \
      "$(field_after "$logs/big.log" '^load:' "$big_tp,") s; after load GiB per GPU:" \
      "$(sed -n 's/.*in use after load \(.*\) GiB.*/\1/p' "$logs/big.log")"
    printf '%-8s %9s %8s %11s %9s %8s %s\n' windows tok/s TFLOP/s FLOP-limit of-limit NCCL "GPU_GiB"
    for b in ${big_batches//,/ }; do
      printf '%-8s %9s %8s %11s %9s %8s %s\n' "$b" "$(bench_field "$logs/big.log" "$b" tok/s)" \
        "$(bench_field "$logs/big.log" "$b" TFLOP/s)" "$(field_after "$logs/big.log" "^scored B=$b " limit)" \
        "$(field_after "$logs/big.log" "^scored B=$b " ours)" "$(nccl_share "$logs/big.log" "$b")" \
        "$(gpu_mem "$logs/big.log" "$b")"
    done
    echo "agreement: ours-vs-fp32ref $(field_after "$logs/big.log" 'vs transformers' ours-vs-fp32model) nats mean" \
      "(PPL $(field_after "$logs/big.log" 'vs transformers' ours) ours)"
  fi
  [[ ${KEEP_BIG:-0} == 1 ]] || rm -rf "$big" "$big.complete"
fi

if has_step soak; then
  echo "== soak: scored --backend=$soak_backend --tp=$soak_tp on the 8B W4A16, $soak_clients clients x ${soak_seconds}s, lengths $soak_lengths"
  if [[ ! -x $bundle/bin/scored || ! -x $bundle/bin/scored-load || ! -x $bundle/bin/scored_bench ]]; then
    fail "soak: $bundle/bin needs scored, scored-load and scored_bench"
  elif make_w4 "$w4" 8b 180; then
    alone=""
    [[ $soak_tp == 1 && -f $logs/tp1.log ]] && alone=$(bench_field "$logs/tp1.log" 8 tok/s)
    if [[ -z $alone ]]; then
      run_logged soak_alone 200 "$bundle/run" scored_bench --model "$w4" --tp "$soak_tp" --ctx "$ctx" --batches 8 \
        --profile 0 --nccl 0
      alone=$(bench_field "$logs/soak_alone.log" 8 tok/s)
    fi
    rm -f "$logs/soak_port.json"
    "$bundle/run" scored --model="$w4" --backend="$soak_backend" --tp="$soak_tp" --tokenizer=none --listen=127.0.0.1:0 \
      --metrics_listen=127.0.0.1:0 --port_file="$logs/soak_port.json" --max_batch_tokens=16384 \
      > "$logs/scored_soak.log" 2>&1 &
    spid=$!
    for _ in $(seq 1 240); do
      [[ -s $logs/soak_port.json ]] && break
      kill -0 "$spid" 2>/dev/null || break
      sleep 0.5
    done
    port=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["grpc"])' "$logs/soak_port.json" 2>/dev/null)
    if [[ -z $port ]]; then
      if kill -0 "$spid" 2>/dev/null; then
        fail "soak: scored did not listen within 120 s (last lines follow)"
      else
        fail "soak: scored exited before listening (last lines follow)"
      fi
      tail -n 8 "$logs/scored_soak.log"
      kill -KILL "$spid" 2>/dev/null
    else
      run_logged soak_load $((soak_seconds + 120)) "$bundle/run" scored-load --server="127.0.0.1:$port" \
        --concurrency="$soak_clients" --duration="$soak_seconds" --lengths="$soak_lengths" --deadline_ms=120000 \
        --json="$logs/soak_load.json"
      cat "$logs/soak_load.log"
      # Drain: SIGTERM while a second load runs; scored must exit 0 and the load must end with OK/UNAVAILABLE only.
      "$bundle/run" scored-load --server="127.0.0.1:$port" --concurrency="$soak_clients" --duration=30 \
        --lengths="$soak_lengths" --deadline_ms=120000 --json="$logs/soak_drain.json" > "$logs/soak_drain.log" 2>&1 &
      lpid=$!
      sleep 8
      t0=$(date +%s.%N)
      kill -TERM "$spid"
      drained=""
      for _ in $(seq 1 120); do
        kill -0 "$spid" 2>/dev/null || { drained=1; break; }
        sleep 0.5
      done
      t1=$(date +%s.%N)
      if [[ -z $drained ]]; then
        fail "soak: scored still running 60 s after SIGTERM; killed"
        kill -KILL "$spid" 2>/dev/null
      fi
      wait "$spid" 2>/dev/null
      src=$?
      for _ in $(seq 1 120); do kill -0 "$lpid" 2>/dev/null || break; sleep 0.5; done
      kill -KILL "$lpid" 2>/dev/null
      wait "$lpid" 2>/dev/null
      drain_codes=$(python3 -c 'import json,sys; print(" ".join(f"{k}={v}" for k,v in json.load(open(sys.argv[1]))["codes"].items()))' \
        "$logs/soak_drain.json" 2>/dev/null)
      [[ $src == 0 ]] || fail "soak: scored exited $src after SIGTERM (last lines follow)"
      [[ $src == 0 ]] || tail -n 8 "$logs/scored_soak.log"
      bad=$(echo "$drain_codes" | tr ' ' '\n' | grep -vE '^(OK|UNAVAILABLE)=' | grep -v '^$')
      [[ -z $bad ]] || fail "soak: during the drain the load saw $bad"
      echo "== soak summary (8B W4A16 g128, tp $soak_tp, $soak_clients clients, ${soak_seconds}s, lengths $soak_lengths)"
      python3 - "$logs/soak_load.json" "$alone" <<'PY' || fail "soak: no load report"
import json, sys
r = json.load(open(sys.argv[1]))
alone = float(sys.argv[2]) if sys.argv[2] else 0.0
l = r["latency_ms"]
print(f"under load {r['tokens_per_s']:.0f} tok/s, {r['requests_per_s']:.1f} req/s ({r['requests_ok']} ok of "
      f"{r['requests']}); scored_bench alone (8 x 2048) {alone:.0f} tok/s; ratio "
      + (f"{r['tokens_per_s'] / alone:.2f}" if alone else "-"))
print(f"latency ms p50 {l['p50']:.0f}  p90 {l['p90']:.0f}  p99 {l['p99']:.0f}  max {l['max']:.0f}")
print("codes: " + " ".join(f"{k}={v}" for k, v in r["codes"].items()))
PY
      echo "SIGTERM under load: scored exit $src after $(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}') s;" \
        "drain load codes: ${drain_codes:-none}"
    fi
  fi
fi

# verdict NAME VALUE LIMIT: one row of a ppl-style table; VALUE <= LIMIT passes, a miss (or no value) is a FAIL;
# LIMIT "-" records the value without a target.
verdict() {
  if [[ $3 == - ]]; then
    printf '%-16s %9s %7s  %s\n' "$1" "${2:--}" - recorded
  elif awk -v v="$2" -v l="$3" 'BEGIN {exit !(v != "" && v + 0 <= l + 0)}'; then
    printf '%-16s %9s %7s  %s\n' "$1" "$2" "$3" PASS
  else
    printf '%-16s %9s %7s  %s\n' "$1" "${2:--}" "$3" FAIL
    status=1
  fi
}

# serve_ppl NAME MODEL REFERENCE LOAD_TARGET WALL_TARGET EXPECT CACHE_NOTE: the real scored on MODEL (with
# --reference_model REFERENCE unless it is empty; scored-ppl then runs with --kld), load-to-SERVING (process start ->
# the port file), scored-ppl over $ppl_data with the PPL_* settings, SIGTERM, then NAME's summary table. Logs:
# $logs/scored_NAME.log, NAME_client.log, NAME.json. The steps ppl and kldppl.
serve_ppl() {
  local name=$1 model=$2 reference=$3 load_target=$4 wall_target=$5 expect=$6 cache_note=$7
  local ref_flags=() kld_flags=() dir spid port t_start t_serving t0 t1 t2 t3 load_s engine_load prc wall_s stopped src
  if [[ -n $reference ]]; then
    ref_flags=(--reference_model="$reference")
    kld_flags=(--kld)
  fi
  if [[ $ppl_cold == 1 ]]; then
    cache_note=" (cold: the checkpoint's files were evicted from the page cache first)"
    for dir in "$model" ${reference:+"$reference"}; do
      # posix_fadvise DONTNEED drops a file's clean cached pages without privileges.
      if python3 - "$dir" <<'PY'; then
import os, sys
os.sync()
for name in os.listdir(sys.argv[1]):
    path = os.path.join(sys.argv[1], name)
    if os.path.isfile(path):
        fd = os.open(path, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
PY
        [[ $(stat -f -c %T "$dir") == tmpfs ]] && cache_note=" (not cold: the checkpoint lies on tmpfs, in memory)"
      else
        fail "$name: could not evict $dir from the page cache"
      fi
    done
  fi
  rm -f "$logs/${name}_port.json" "$logs/$name.json"
  t_start=$(date +%s.%N)
  "$bundle/run" scored --model="$model" ${ref_flags[@]+"${ref_flags[@]}"} --tokenizer="$ppl_tokenizer" \
    --backend="$ppl_backend" --tp="$ppl_tp" --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 \
    --port_file="$logs/${name}_port.json" --max_batch_tokens="$ppl_max_batch_tokens" > "$logs/scored_$name.log" 2>&1 &
  spid=$!
  # scored writes the port file after it marks health SERVING (server/server.h): its appearance is SERVING.
  for _ in $(seq 1 $((ppl_start_limit * 20))); do
    [[ -s $logs/${name}_port.json ]] && break
    kill -0 "$spid" 2>/dev/null || break
    sleep 0.05
  done
  t_serving=$(date +%s.%N)
  port=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["grpc"])' "$logs/${name}_port.json" 2>/dev/null)
  if [[ -z $port ]]; then
    if kill -0 "$spid" 2>/dev/null; then
      fail "$name: scored not SERVING within ${ppl_start_limit} s (last lines follow)"
    else
      fail "$name: scored exited before SERVING (last lines follow)"
    fi
    tail -n 8 "$logs/scored_$name.log"
    kill -KILL "$spid" 2>/dev/null
    wait "$spid" 2>/dev/null
    return 1
  fi
  load_s=$(awk -v a="$t_start" -v b="$t_serving" 'BEGIN {printf "%.1f", b - a}')
  engine_load=$(grep -m 1 -o 'model loaded in [0-9.]* s' "$logs/scored_$name.log" | awk '{print $4}')
  grep -m 1 'model loaded in' "$logs/scored_$name.log" | sed 's/, fingerprint .*//'
  [[ -n $reference ]] && grep -m 1 'reference model ' "$logs/scored_$name.log" | sed 's/, fingerprint .*//'
  t0=$(date +%s.%N)
  run_logged "${name}_client" "$ppl_limit" "$bundle/run" scored-ppl --server="127.0.0.1:$port" --data="$ppl_data" \
    --method="$ppl_method" --ctx="$ppl_ctx" --stride="$ppl_stride" --max_windows="$ppl_max_windows" \
    --inflight="$ppl_inflight" ${kld_flags[@]+"${kld_flags[@]}"} --json="$logs/$name.json" --quiet
  prc=$?
  t1=$(date +%s.%N)
  wall_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}')
  [[ $prc == 0 ]] && grep -E '^(data|ppl|num_scored|wall_seconds) |^Mean +(PPL|KLD|ln)|^Same top' \
    "$logs/${name}_client.log"
  # SIGTERM with no traffic left: scored must exit 0.
  t2=$(date +%s.%N)
  kill -TERM "$spid" 2>/dev/null
  stopped=""
  for _ in $(seq 1 120); do
    kill -0 "$spid" 2>/dev/null || { stopped=1; break; }
    sleep 0.5
  done
  if [[ -z $stopped ]]; then
    fail "$name: scored still running 60 s after SIGTERM; killed"
    kill -KILL "$spid" 2>/dev/null
  fi
  wait "$spid" 2>/dev/null
  src=$?
  t3=$(date +%s.%N)
  if [[ $src != 0 ]]; then
    fail "$name: scored exited $src after SIGTERM (last lines follow)"
    tail -n 8 "$logs/scored_$name.log"
  fi
  echo "== $name summary ($(basename "$model")${reference:+ vs reference $(basename "$reference")}, backend" \
    "$ppl_backend, tp $ppl_tp; $ppl_method ctx $ppl_ctx stride $ppl_stride over $(basename "$ppl_data"))"
  if [[ $prc == 0 ]]; then
    python3 - "$logs/$name.json" "$wall_s" "$expect" "$ppl_expect_rtol" "${reference:+kld}" <<'PY' ||
import json, math, sys
r = json.load(open(sys.argv[1]))
wall = float(sys.argv[2])
if not (r["num_scored"] > 0 and r["ppl"] is not None and math.isfinite(r["ppl"])):
    sys.exit(f"ppl {r['ppl']} over {r['num_scored']} tokens")
if sys.argv[3]:
    want, rtol = float(sys.argv[3]), float(sys.argv[4])
    ok = abs(r["ppl"] / want - 1) <= rtol
    print(f"ppl {r['ppl']:.4f} vs expected {want:.4f} (rtol {rtol:g}): {'PASS' if ok else 'FAIL'}")
    if not ok:
        sys.exit("ppl differs from PPL_EXPECT")
print(f"ppl {r['ppl']:.4f}  windows {r['num_windows']}  tokens scored {r['num_scored']}  tokens processed "
      f"{r['num_tokens_sent']} (data {r['data']['num_input_tokens']} tokens)")
print(f"wall {wall:.1f} s (scored-ppl process; its own report {r['wall_seconds']:.1f} s, of it scoring "
      f"{r['score_seconds']:.1f} s)  {r['num_tokens_sent'] / wall:.0f} tok/s processed  "
      f"{r['num_scored'] / wall:.0f} tok/s scored")
if sys.argv[5]:
    k = r.get("kld")
    if not k or k.get("kld_mean") is None or not k.get("count"):
        sys.exit("the --kld report has no KL-divergence statistics")
    print(f"kld over {k['count']} tokens: PPL(Q) {k['ppl_q']:.4f}  PPL(R) {k['ppl_r']:.4f}  ln(PPL(Q)/PPL(R)) "
          f"{k['ln_ppl_ratio']:.6f} +- {k['ln_ppl_ratio_error']:.6f}  mean KLD {k['kld_mean']:.6f} +- "
          f"{k['kld_error']:.6f}  same top {100 * k['same_top']:.3f}%  (reference {k['reference']['format']})")
PY
      { fail "$name: no usable scored-ppl report, or not the expected PPL ($logs/$name.json)"; status=1; }
  fi
  printf '%-16s %9s %7s  %s\n' target seconds limit result
  verdict load-to-SERVING "$load_s" "$load_target"
  [[ $prc == 0 ]] || wall_s=""
  verdict "$name-wall" "$wall_s" "$wall_target"
  serve_ppl_wall=$wall_s  # for a step's own closing table (qwen35)
  echo "load-to-SERVING is process start -> health SERVING; the engine's own line says" \
    "${engine_load:--} s$cache_note"
  echo "SIGTERM: scored exit $src after $(awk -v a="$t2" -v b="$t3" 'BEGIN {printf "%.1f", b - a}') s"
}

if has_step ppl; then
  echo "== ppl: scored --backend=$ppl_backend --tp=$ppl_tp, scored-ppl --method=$ppl_method --ctx=$ppl_ctx" \
    "--stride=$ppl_stride over $(basename "$ppl_data") (max_windows $ppl_max_windows)"
  if [[ ! -x $bundle/bin/scored || ! -x $bundle/bin/scored-ppl ]]; then
    fail "ppl: $bundle/bin needs scored and scored-ppl"
  elif [[ ! -f $ppl_data || ! -d $ppl_tokenizer ]]; then
    fail "ppl: missing $ppl_data or $ppl_tokenizer (copy them into $bundle/data)"
  elif [[ -n $ppl_model ]]; then
    serve_ppl ppl "$ppl_model" "" "$ppl_load_target" "$ppl_wall_target" "$ppl_expect" ""
  elif make_w4 "$w4" 8b 180; then
    serve_ppl ppl "$w4" "" "$ppl_load_target" "$ppl_wall_target" "$ppl_expect" \
      " (the checkpoint's files are in the page cache: written or used earlier on this machine)"
  fi
fi

# make_pair DIR PRESET LIMIT_S: a random PRESET checkpoint pair, the bf16 original in DIR/bf16 and the W4A16 g128
# quantization of the same weights in DIR/w4a16 (make_random_w4a16.py --dense-out; no reference windows), kept
# while the machine lives (DIR.complete marks a finished pair: kld and kldppl share it).
make_pair() {
  local dir=$1 preset=$2 limit=$3 need
  if [[ -f $dir.complete && $(cat "$dir.complete") == "pair $preset" ]]; then
    echo "(reusing $dir)"
    return 0
  fi
  rm -rf "$dir" "$dir.complete"
  # GiB on disk of both: 8b 5.3 + 15.0, 32b 17.9 + 61.0, 70b 36.8 + 131.
  need=$(case $preset in 8b) echo 22 ;; 32b) echo 81 ;; *) echo 170 ;; esac)
  free_gib "$(dirname "$dir")" "$need" "make_pair $preset" || return 1
  run_logged "make_pair_$preset" "$limit" python3 scripts/bench/make_random_w4a16.py --out "$dir/w4a16" \
    --dense-out "$dir/bf16" --preset "$preset" --windows 0 || return 1
  grep '^make_random_w4a16' "$logs/make_pair_$preset.log"
  echo "pair $preset" > "$dir.complete"
}

# prefixed_field LOG PREFIX B WORD: the field before WORD on the line of LOG whose first two fields are PREFIX and
# B=<B> (scored_bench's "pair B=8 ..." lines, hf_peers.py's "kld B=8 ..." lines).
prefixed_field() {
  awk -v p="$2" -v b="B=$3" -v w="$4" '$1==p && $2==b {for(i=3;i<=NF;i++) if($i==w) {print $(i-1); exit}}' "$1" \
    2>/dev/null
}
# kld_row TARGET WINDOWS OURS REFERENCE OP LIMIT: one row of the kld table, ratio OURS / REFERENCE against LIMIT
# (OP >= or <=); a miss or a missing value is a FAIL.
kld_row() {
  local ratio result
  ratio=$(awk -v a="$3" -v b="$4" 'BEGIN {if (a != "" && b + 0 > 0) printf "%.3f", a / b}')
  if [[ -n $ratio ]] && awk -v r="$ratio" -v op="$5" -v l="$6" 'BEGIN {exit !(op == ">=" ? r >= l : r <= l)}'; then
    result=PASS
  else
    result=FAIL
    status=1
  fi
  printf '%-14s %7s %11s %11s %7s %8s  %s\n' "$1" "$2" "${3:--}" "${4:--}" "${ratio:--}" "$5$6" "$result"
}

if has_step kld; then
  echo "== kld: 8B-shaped bf16 original + its W4A16 g128 on one GPU, scored_bench pair and each model alone," \
    "$kld_batches x $ctx; peer $(basename "$peers") kld"
  if [[ ! -x $bundle/bin/scored_bench ]]; then
    fail "kld: $bundle/bin needs scored_bench"
  elif make_pair "$kld_dir" 8b 300; then
    run_logged kld_bench 420 "$bundle/run" scored_bench --model "$kld_dir/w4a16" --reference_model "$kld_dir/bf16" \
      --want_reference 1 --alone 1 --ctx "$ctx" --batches "$kld_batches" --profile 0 --nccl 0
    grep -E '^(scored_bench|reference|load|host memory|pair|memory|alone|ratio)' "$logs/kld_bench.log"
    if [[ -f $peers ]]; then
      run_logged kld_peer 420 python3 "$peers" kld --batches "$kld_batches" --ctx "$ctx"
      grep -viE 'warn|^ *$' "$logs/kld_peer.log"
    else
      fail "kld: no peer script $peers (cp ../shared/bench/hf_peers.py into the bundle, or set PEERS)"
    fi
    l=$logs/kld_bench.log
    echo "== kld summary (8B W4A16 g128 vs its bf16 original, one GPU, ctx $ctx; tok/s = the windows' tokens per" \
      "second, each token through both models)"
    printf '%-14s %7s %11s %11s %7s %8s  %s\n' target windows ours reference ratio limit result
    for b in ${kld_batches//,/ }; do
      pair=$(prefixed_field "$l" pair "$b" tok/s)
      kld_row vs-peer "$b" "$pair" "$(prefixed_field "$logs/kld_peer.log" kld "$b" tok/s)" '>=' "$kld_peer_target"
      kld_row vs-alone "$b" "$pair" "$(field_after "$l" "^ratio B=$b " implied)" '>=' "$kld_alone_target"
    done
    kld_row memory-GiB - "$(field_after "$l" '^memory:' use)" "$(field_after "$l" '^memory:' =)" '<=' 1
    echo "vs-peer: transformers with both models in bf16 ($(basename "$peers") kld, the same windows' shape); vs-alone:" \
      "reference = 1 / (1/r_Q + 1/r_R) of Q alone and R alone, each its own engine in the same process; memory:" \
      "GPU memory in use vs both models' weights (resident bytes) + 6 GiB"
    for b in ${kld_batches//,/ }; do
      echo "B=$b: Q alone $(field_after "$l" "^ratio B=$b " alone) tok/s, R alone" \
        "$(awk -v b="B=$b" '$1=="ratio" && $2==b {for(i=1;i<NF;i++) if($i=="R" && $(i+1)=="alone") {print $(i+2); exit}}' "$l")" \
        "tok/s, pair-Q-only $(prefixed_field "$l" pair-Q-only "$b" tok/s) tok/s; $(grep -m 1 "^pair B=$b " "$l" |
          sed -n 's/.*| \(mean KLD .*positions\) |.*/\1/p') (random windows: a sanity figure)"
    done
  fi
fi

if has_step kldppl; then
  echo "== kldppl: scored --backend=$ppl_backend --tp=$ppl_tp --reference_model, scored-ppl --kld" \
    "--method=$ppl_method --ctx=$ppl_ctx --stride=$ppl_stride over $(basename "$ppl_data") (max_windows $ppl_max_windows)"
  if [[ ! -x $bundle/bin/scored || ! -x $bundle/bin/scored-ppl ]]; then
    fail "kldppl: $bundle/bin needs scored and scored-ppl"
  elif [[ ! -f $ppl_data || ! -d $ppl_tokenizer ]]; then
    fail "kldppl: missing $ppl_data or $ppl_tokenizer (copy them into $bundle/data)"
  elif [[ -n $kldppl_model && -n $kldppl_reference ]]; then
    serve_ppl kldppl "$kldppl_model" "$kldppl_reference" - "$kldppl_wall_target" "$kldppl_expect" ""
  elif [[ -n $kldppl_model || -n $kldppl_reference ]]; then
    fail "kldppl: set both KLDPPL_MODEL and KLDPPL_REFERENCE, or neither"
  elif make_pair "$kld_dir" 8b 300; then
    serve_ppl kldppl "$kld_dir/w4a16" "$kld_dir/bf16" - "$kldppl_wall_target" "$kldppl_expect" \
      " (the checkpoints' files are in the page cache: written or used earlier on this machine)"
  fi
fi

if has_step kldtp; then
  echo "== kldtp: $kldtp_preset bf16 original + its W4A16 g128 written here, scored_bench pair --tp $tp," \
    "$kldtp_batches x $ctx"
  df -h "$(dirname "$kldtp_dir")" | tail -n 1
  if [[ ! -x $bundle/bin/scored_bench ]]; then
    fail "kldtp: $bundle/bin needs scored_bench"
  elif make_pair "$kldtp_dir" "$kldtp_preset" 420; then
    du -sh "$kldtp_dir/w4a16" "$kldtp_dir/bf16" | awk '{printf "%s %s  ", $2, $1} END {print ""}' |
      sed 's/^/checkpoints on disk: /'
    run_logged kldtp 420 "$bundle/run" scored_bench --model "$kldtp_dir/w4a16" --reference_model "$kldtp_dir/bf16" \
      --want_reference 1 --alone "$kldtp_alone" --tp "$tp" --ctx "$ctx" --batches "$kldtp_batches" --profile 0 --nccl 0
    grep -E '^(scored_bench|reference|load|host memory|pair|memory|alone|ratio)' "$logs/kldtp.log"
    l=$logs/kldtp.log
    echo "== kldtp summary ($kldtp_preset W4A16 g128 + its bf16 original, tp $tp, ctx $ctx)"
    echo "write: $(grep -o 'total [0-9.]*s' "$logs/make_pair_$kldtp_preset.log" 2>/dev/null | head -n 1 || true);" \
      "load (open -> ready, both models): $(field_after "$l" '^load:' "$tp,") s; after load GiB per GPU:" \
      "$(sed -n 's/.*in use after load \(.*\) GiB.*/\1/p' "$l" | head -n 1)"
    printf '%-8s %9s %-62s %s\n' windows tok/s "reference statistics (random windows)" "GPU_GiB"
    for b in ${kldtp_batches//,/ }; do
      printf '%-8s %9s %-62s %s\n' "$b" "$(prefixed_field "$l" pair "$b" tok/s)" \
        "$(grep -m 1 "^pair B=$b " "$l" | sed -n 's/.*| \(mean KLD .*positions\) |.*/\1/p')" \
        "$(awk -v b="B=$b" '$1=="pair" && $2==b {sub(/.*GPU memory used /, ""); sub(/ GiB.*/, ""); print; exit}' "$l")"
    done
    sed -n 's/^memory: /memory (all GPUs): /p' "$l"
    [[ -n $(prefixed_field "$l" pair "${kldtp_batches##*,}" tok/s) ]] || fail "kldtp: no pair tok/s in $l"
  fi
  [[ ${KEEP_BIG:-0} == 1 ]] || rm -rf "$kldtp_dir" "$kldtp_dir.complete"
fi

# at_least NAME VALUE TARGET: a PASS / FAIL line for VALUE >= TARGET.
at_least() {
  if awk -v v="$2" -v t="$3" 'BEGIN {exit !(v != "" && v + 0 >= t + 0)}'; then
    printf '%-22s %6s >= %s  PASS\n' "$1" "$2" "$3"
  else
    printf '%-22s %6s >= %s  FAIL\n' "$1" "${2:--}" "$3"
    status=1
  fi
}

if has_step family; then
  echo "== family: random W4A16 g128 ($family_archs) written here, scored_bench $family_batches x $ctx"
  rows=()
  for arch in ${family_archs//,/ }; do
    dir=$family_dir-$arch
    rm -rf "$dir"
    if ! run_logged "make_family_$arch" 900 python3 scripts/bench/make_random_family.py --out "$dir" --arch "$arch"; then
      continue
    fi
    grep '^make_random_family' "$logs/make_family_$arch.log"
    l=$logs/family_$arch.log
    if run_logged "family_$arch" 600 "$bundle/run" scored_bench --model "$dir" --ctx "$ctx" \
      --batches "$family_batches" --profile 0; then
      grep -E '^(scored_bench|load|scored B=)' "$l"
      b=${family_batches##*,}
      share=$(awk -v b="B=$b" '$1=="scored" && $2==b {for(i=1;i<=NF;i++) if($i=="ours") {print $(i+1); exit}}' "$l")
      rows+=("$(printf '%-12s %9s %8s %10s %6s' "$arch" "$(bench_field "$l" "$b" tok/s)" \
        "$(sed -n 's/.*weights \([0-9.]*\) GiB on the GPU.*/\1/p' "$l" | head -n 1)" \
        "$(field_after "$l" "^scored B=$b " GEMMs)" "$share")")
      at_least "family-$arch-bound" "$share" "$family_target"
    fi
    if [[ $arch == "$family_ppl_arch" ]]; then
      echo "== family ppl: scored + scored-ppl over $(basename "$ppl_data") on the $arch shape" \
        "(tokenizer $(basename "$family_ppl_tokenizer"))"
      if [[ ! -x $bundle/bin/scored || ! -x $bundle/bin/scored-ppl || ! -d $family_ppl_tokenizer ]]; then
        fail "family ppl: $bundle needs bin/scored, bin/scored-ppl and $family_ppl_tokenizer"
      else
        ppl_tokenizer=$family_ppl_tokenizer serve_ppl "ppl-$arch" "$dir" "" - - "" \
          " (the checkpoint's files are in the page cache: written just before)"
      fi
    fi
    rm -rf "$dir"
  done
  echo "== family summary ($family_batches x $ctx, W4A16 g128; bound = the FLOP-bound limit at the sustained plain" \
    "cuBLASLt rate)"
  printf '%-12s %9s %8s %10s %6s\n' arch tok/s weights GEMM_TF/s share
  for r in "${rows[@]}"; do echo "$r"; done
fi

# moe_run NAME ARCH QUANT LAYERS NEED_GIB: make_random_moe.py's ARCH in QUANT (LAYERS, or the shape's own when
# empty) into $moe_dir-NAME (NEED_GIB free on its disk, else a FAIL), scored_bench on it (log $logs/moe_NAME.log),
# the end-to-end ppl run on the Qwen3 W4A16 (MOE_PPL), the checkpoint deleted.
moe_run() {
  local name=$1 arch=$2 quant=$3 layers=$4 need=$5 dir=$moe_dir-$1 stage_flags=()
  [[ $moe_stages == 1 ]] && stage_flags=(--stages 1)
  rm -rf "$dir"
  free_gib "$(dirname "$dir")" "$need" "moe $name" || return 1
  if run_logged "make_moe_$name" 900 python3 scripts/bench/make_random_moe.py --out "$dir" --arch "$arch" \
    --quant "$quant" ${layers:+--layers "$layers"}; then
    grep '^make_random_moe' "$logs/make_moe_$name.log"
    run_logged "moe_$name" 600 "$bundle/run" scored_bench --model "$dir" --ctx "$ctx" --batches "$moe_batches" \
      --reps 3 --profile 0 ${stage_flags[@]+"${stage_flags[@]}"} &&
      grep -E '^(scored_bench|load|scored B=|stages B=|  [a-z])' "$logs/moe_$name.log"
    if [[ $name == q3w4 && $moe_ppl == 1 ]]; then
      echo "== moe ppl: scored + scored-ppl over $(basename "$ppl_data") on the Qwen3-30B-A3B W4A16 shape" \
        "(tokenizer $(basename "$ppl_tokenizer"))"
      if [[ ! -x $bundle/bin/scored || ! -x $bundle/bin/scored-ppl || ! -f $ppl_data || ! -d $ppl_tokenizer ]]; then
        fail "moe ppl: $bundle needs bin/scored, bin/scored-ppl, $ppl_data and $ppl_tokenizer"
      else
        serve_ppl ppl-moe "$dir" "" - "$moe_ppl_wall_target" "" \
          " (the checkpoint's files are in the page cache: written just before)"
      fi
    fi
  fi
  rm -rf "$dir"
}

# has_moe NAME: NAME (q3w4, q3bf16, mxw4) is one of the comma-separated MOE_MODELS.
has_moe() {
  [[ ",$moe_models," == *",$1,"* ]]
}

# moe_row MODEL LAYERS OURS_LOG PEER_LAYERS PEER_LOG TARGET: one row of the moe table, the peer's ms per layer over
# ours at batch ${moe_batches##*,} against TARGET; a miss or a missing value is a FAIL.
moe_row() {
  local b=${moe_batches##*,} ours peer ratio result
  ours=$(bench_field "$3" "$b" ms/step)
  peer=$(prefixed_field "$5" logprobs "$b" ms/step)
  ratio=$(awk -v o="$ours" -v l="$2" -v p="$peer" -v pl="$4" \
    'BEGIN {if (o + 0 > 0 && p + 0 > 0) printf "%.3f", (p / pl) / (o / l)}')
  if [[ -n $ratio ]] && awk -v r="$ratio" -v t="$6" 'BEGIN {exit !(r >= t)}'; then
    result=PASS
  else
    result=FAIL
    status=1
  fi
  printf '%-20s %6s %10s %11s %12s %7s %7s  %s\n' "$1" "$2" "${ours:--}" "$4" "${peer:--}" "${ratio:--}" ">=$6" \
    "$result"
}

if has_step moe; then
  echo "== moe: Qwen3-30B-A3B-shaped W4A16 (48 layers) and bf16 ($moe_bf16_layers layers), Mixtral-8x7B-shaped W4A16" \
    "(32 layers), written here one at a time; scored_bench $moe_batches x $ctx; peer $(basename "$peers") moe"
  if [[ ! -x $bundle/bin/scored_bench ]]; then
    fail "moe: $bundle/bin needs scored_bench"
  else
    has_moe q3w4 && moe_run q3w4 qwen3_moe w4a16 "" 20  # 16 GiB
    has_moe q3bf16 && moe_run q3bf16 qwen3_moe bf16 "$moe_bf16_layers" 34  # 29 GiB at 24 layers
    has_moe mxw4 && moe_run mxw4 mixtral w4a16 "" 28  # 24 GiB
    if [[ -f $peers ]]; then
      has_moe q3w4 && run_logged moe_peer_q3w4 600 python3 "$peers" moe --arch qwen3_moe --batches "$moe_batches" &&
        grep -E '^(moe|logprobs)' "$logs/moe_peer_q3w4.log"
      has_moe q3bf16 && run_logged moe_peer_q3bf16 600 python3 "$peers" moe --arch qwen3_moe \
        --layers "$moe_bf16_layers" --batches "$moe_batches" && grep -E '^(moe|logprobs)' "$logs/moe_peer_q3bf16.log"
      has_moe mxw4 && run_logged moe_peer_mxw4 600 python3 "$peers" moe --arch mixtral \
        --layers "$moe_mixtral_peer_layers" --batches "$moe_batches" &&
        grep -E '^(moe|logprobs)' "$logs/moe_peer_mxw4.log"
    else
      fail "moe: no peer script $peers (cp ../shared/bench/hf_peers.py into the bundle, or set PEERS)"
    fi
    echo "== moe summary (${moe_batches##*,} x $ctx windows; ratio = the peer's (transformers bf16) ms per layer over" \
      "ours, each at its own layer count, same call)"
    printf '%-20s %6s %10s %11s %12s %7s %7s  %s\n' model layers ms/step peer_layers peer_ms/step ratio target result
    has_moe q3w4 && moe_row qwen3-30b-a3b-w4a16 48 "$logs/moe_q3w4.log" 48 "$logs/moe_peer_q3w4.log" "$moe_w4_target"
    has_moe q3bf16 && moe_row qwen3-30b-a3b-bf16 "$moe_bf16_layers" "$logs/moe_q3bf16.log" "$moe_bf16_layers" \
      "$logs/moe_peer_q3bf16.log" "$moe_bf16_target"
    has_moe mxw4 && moe_row mixtral-8x7b-w4a16 32 "$logs/moe_mxw4.log" "$moe_mixtral_peer_layers" \
      "$logs/moe_peer_mxw4.log" "$moe_mixtral_target"
    if has_moe q3w4; then
      weights=$(sed -n 's/.*weights \([0-9.]*\) GiB on the GPU.*/\1/p' "$logs/moe_q3w4.log" 2>/dev/null | head -n 1)
      if awk -v w="$weights" -v l="$moe_w4_weights_gib" 'BEGIN {exit !(w != "" && w + 0 <= l + 0)}'; then
        echo "qwen3-30b-a3b-w4a16 weights on the GPU $weights GiB <= $moe_w4_weights_gib: PASS"
      else
        echo "qwen3-30b-a3b-w4a16 weights on the GPU ${weights:--} GiB <= $moe_w4_weights_gib: FAIL"
        status=1
      fi
    fi
  fi
fi

if has_step moetp; then
  echo "== moetp: $moe_tp_arch W4A16 g128 written here, scored_bench --tp $tp, $moe_tp_batches x $ctx"
  if [[ ! -x $bundle/bin/scored_bench ]]; then
    fail "moetp: $bundle/bin needs scored_bench"
  elif [[ -f $moe_tp_dir.complete && $(cat "$moe_tp_dir.complete") == "$moe_tp_arch" ]] ||
    { rm -rf "$moe_tp_dir" "$moe_tp_dir.complete" && free_gib "$(dirname "$moe_tp_dir")" 120 "moetp $moe_tp_arch" &&
      run_logged make_moe_tp 1800 python3 scripts/bench/make_random_moe.py --out "$moe_tp_dir" \
        --arch "$moe_tp_arch" --quant w4a16 && echo "$moe_tp_arch" > "$moe_tp_dir.complete"; }; then
    grep -h '^make_random_moe' "$logs/make_moe_tp.log" 2>/dev/null || echo "(reusing $moe_tp_dir)"
    du -sh "$moe_tp_dir" | awk '{print "checkpoint on disk: " $1}'
    l=$logs/moetp.log
    run_logged moetp 900 "$bundle/run" scored_bench --model "$moe_tp_dir" --tp "$tp" --ctx "$ctx" \
      --batches "$moe_tp_batches" --reps 3 --profile 0 --nccl 0 &&
      grep -E '^(scored_bench|load|host memory|scored B=)' "$l"
    echo "== moetp summary ($moe_tp_arch W4A16 g128, tp $tp, ctx $ctx)"
    echo "write: $(grep -o 'in [0-9.]*s' "$logs/make_moe_tp.log" 2>/dev/null | tail -n 1 || true); weights on the" \
      "GPUs $(sed -n 's/.*weights \([0-9.]*\) GiB on the GPU.*/\1/p' "$l" | head -n 1) GiB; load (open -> ready):" \
      "$(field_after "$l" '^load:' "$tp,") s; after load GiB per GPU: $(sed -n 's/.*in use after load \(.*\) GiB.*/\1/p' \
        "$l" | head -n 1)"
    printf '%-8s %9s %10s %s\n' windows tok/s ms/step GPU_GiB
    for b in ${moe_tp_batches//,/ }; do
      printf '%-8s %9s %10s %s\n' "$b" "$(bench_field "$l" "$b" tok/s)" "$(bench_field "$l" "$b" ms/step)" \
        "$(gpu_mem "$l" "$b")"
    done
    [[ -n $(bench_field "$l" "${moe_tp_batches##*,}" tok/s) ]] || fail "moetp: no tok/s in $l"
  fi
  [[ ${KEEP_BIG:-0} == 1 ]] || rm -rf "$moe_tp_dir" "$moe_tp_dir.complete"
fi

# Qwen3.5 / Qwen3.6 (issue 34). qwen35_info NAME: "ARCH QUANT LAYERS MODEL_TYPE LABEL TARGET" of a QWEN35_MODELS part.
qwen35_info() {
  case $1 in
    a3bw4) echo "qwen36-35b-a3b w4a16 $qwen35_w4_layers qwen3_5_moe_text qwen36-35b-a3b-w4a16 $qwen35_w4_target" ;;
    a3bbf16) echo "qwen36-35b-a3b bf16 $qwen35_bf16_layers qwen3_5_moe_text qwen36-35b-a3b-bf16 $qwen35_bf16_target" ;;
    27bw4) echo "qwen35-27b w4a16 $qwen35_27b_layers qwen3_5_text qwen35-27b-w4a16 -" ;;
  esac
}

# qwen35_need NAME LAYERS: GiB of free disk its checkpoint needs (make_random_qwen35.py's sizes: 35B-A3B 1.89 GiB of
# embedding + lm_head and 0.405 GiB a layer in W4A16, 1.567 in bf16; 27B 4.74 + 0.183 a layer in W4A16) + 4.
qwen35_need() {
  awk -v n="$1" -v l="$2" 'BEGIN {
    if (n == "a3bw4") g = 1.89 + 0.405 * l; else if (n == "a3bbf16") g = 1.89 + 1.567 * l; else g = 4.74 + 0.183 * l
    printf "%d", g + 4.999 }'
}

# qwen35_limit PART WANT_S: sets qwen35_lim to WANT_S capped by what QWEN35_BUDGET_S leaves (10 s kept for the
# tables), or to 0 (PART listed in qwen35_skipped) when less than 30 s is left.
qwen35_limit() {
  local left=$((qwen35_budget - (SECONDS - qwen35_t0) - 10))
  if ((left < 30)); then
    qwen35_skipped+=("$1 (${left} s of QWEN35_BUDGET_S=$qwen35_budget left)")
    qwen35_lim=0
  elif ((left < $2)); then
    qwen35_lim=$left
  else
    qwen35_lim=$2
  fi
}

# qwen35_run NAME: one QWEN35_MODELS part: its checkpoint written into $qwen35_dir-NAME, scored_bench on it (log
# $logs/qwen35_NAME.log), on a3bw4 the end-to-end ppl run (QWEN35_PPL), the checkpoint deleted, then the peer
# ($logs/qwen35_peer_NAME.log) at the same layer count. A part that cannot run is listed in qwen35_skipped.
qwen35_run() {
  local name=$1 arch quant layers model_type label target dir=$qwen35_dir-$1 config bench_ok="" ppl_part=""
  local ppl_start ppl_wall
  read -r arch quant layers model_type label target <<< "$(qwen35_info "$name")"
  [[ $name == a3bw4 && $qwen35_ppl == 1 ]] && ppl_part=" and the ppl run"
  echo "== qwen35 $label: $layers layers, scored_bench $qwen35_batches x $ctx, peer $(basename "$peers") any" \
    "--model_type $model_type"
  rm -rf "$dir"
  qwen35_limit "$label checkpoint, scored_bench$ppl_part" "$qwen35_write_limit"
  if ((qwen35_lim == 0)); then
    :
  elif ! free_gib "$(dirname "$dir")" "$(qwen35_need "$name" "$layers")" "qwen35 $label"; then
    qwen35_skipped+=("$label scored_bench$ppl_part (no room for its checkpoint)")
  elif ! run_logged "make_qwen35_$name" "$qwen35_lim" python3 scripts/bench/make_random_qwen35.py --out "$dir" \
    --arch "$arch" --quant "$quant" --linear-attn "$qwen35_linear_attn" --layers "$layers"; then
    qwen35_skipped+=("$label scored_bench$ppl_part (no checkpoint)")
  else
    grep '^make_random_qwen35' "$logs/make_qwen35_$name.log"
    qwen35_limit "$label scored_bench$ppl_part" "$qwen35_bench_limit"
    if ((qwen35_lim > 0)) && run_logged "qwen35_$name" "$qwen35_lim" "$bundle/run" scored_bench --model "$dir" \
      --ctx "$ctx" --batches "$qwen35_batches" --reps 3 --profile 0; then
      bench_ok=1
      grep -E '^(scored_bench|load|scored B=)' "$logs/qwen35_$name.log"
    fi
    if [[ -n $ppl_part ]]; then
      echo "== qwen35 ppl: scored + scored-ppl over $(basename "$ppl_data") on the $label shape" \
        "(tokenizer $(basename "$ppl_tokenizer"))"
      if [[ -z $bench_ok ]]; then
        qwen35_skipped+=("$label ppl run (no scored_bench result on the checkpoint)")
      elif [[ ! -x $bundle/bin/scored || ! -x $bundle/bin/scored-ppl || ! -f $ppl_data || ! -d $ppl_tokenizer ]]; then
        fail "qwen35 ppl: $bundle needs bin/scored, bin/scored-ppl, $ppl_data and $ppl_tokenizer"
        qwen35_skipped+=("$label ppl run (missing files)")
      else
        # scored's start (PPL_START_LIMIT_S) and scored-ppl (PPL_LIMIT_S) must both fit in what the budget leaves.
        qwen35_limit "$label ppl run" $((ppl_start_limit + ppl_limit))
        if ((qwen35_lim > 0)); then
          ppl_start=$ppl_start_limit
          ppl_wall=$ppl_limit
          if ((ppl_start + ppl_wall > qwen35_lim)); then
            ppl_start=$((qwen35_lim / 3))
            ppl_wall=$((qwen35_lim - ppl_start))
          fi
          ppl_start_limit=$ppl_start ppl_limit=$ppl_wall serve_ppl ppl-qwen35 "$dir" "" - "$qwen35_ppl_wall_target" "" \
            " (the checkpoint's files are in the page cache: written just before)"
          qwen35_ppl_wall=${serve_ppl_wall:-}
        fi
      fi
    fi
  fi
  rm -rf "$dir"
  if [[ ! -f $peers ]]; then
    fail "qwen35: no peer script $peers (cp ../shared/bench/hf_peers.py into the bundle, or set PEERS)"
    qwen35_skipped+=("$label peer (no $peers)")
    return
  fi
  qwen35_limit "$label peer" "$qwen35_peer_limit"
  ((qwen35_lim > 0)) || return
  if ! config=$(timeout 120 python3 scripts/bench/make_random_qwen35.py --arch "$arch" --layers "$layers" \
    --peer-config 2> "$logs/qwen35_peer_config_$name.log"); then
    fail "qwen35 $label: make_random_qwen35.py --peer-config failed (last lines follow)"
    tail -n 5 "$logs/qwen35_peer_config_$name.log"
    qwen35_skipped+=("$label peer (no config)")
    return
  fi
  run_logged "qwen35_peer_$name" "$qwen35_lim" python3 "$peers" any --model_type "$model_type" --config "$config" \
    --layers "$layers" --batches "$qwen35_batches" --ctx "$ctx" &&
    grep -E '^(any|logprobs)' "$logs/qwen35_peer_$name.log"
}

# qwen35_row NAME: one row of the qwen35 table at batch ${qwen35_batches##*,}: ms per layer ours and the peer's, the
# peer's over ours against the part's target (a miss or a missing value is a FAIL; "-": recorded), weights on the
# GPU and the share of the FLOP-bound limit.
qwen35_row() {
  local b=${qwen35_batches##*,} arch quant layers model_type label target l ours peer ours_l peer_l ratio result
  local shown=-
  read -r arch quant layers model_type label target <<< "$(qwen35_info "$1")"
  l=$logs/qwen35_$1.log
  ours=$(bench_field "$l" "$b" ms/step)
  peer=$(prefixed_field "$logs/qwen35_peer_$1.log" logprobs "$b" ms/step)
  ours_l=$(awk -v o="$ours" -v n="$layers" 'BEGIN {if (o + 0 > 0) printf "%.2f", o / n}')
  peer_l=$(awk -v p="$peer" -v n="$layers" 'BEGIN {if (p + 0 > 0) printf "%.2f", p / n}')
  ratio=$(awk -v o="$ours_l" -v p="$peer_l" 'BEGIN {if (o + 0 > 0 && p + 0 > 0) printf "%.3f", p / o}')
  [[ $target == - ]] || shown=">=$target"
  if [[ $target == - ]]; then
    result=recorded
  elif [[ -n $ratio ]] && awk -v r="$ratio" -v t="$target" 'BEGIN {exit !(r >= t)}'; then
    result=PASS
  else
    result=FAIL
    status=1
  fi
  printf '%-21s %6s %9s %8s %9s %8s %7s %7s %-8s %7s %5s\n' "$label" "$layers" "${ours:--}" "${ours_l:--}" \
    "${peer:--}" "${peer_l:--}" "${ratio:--}" "$shown" "$result" \
    "$(sed -n 's/.*weights \([0-9.]*\) GiB on the GPU.*/\1/p' "$l" 2>/dev/null | head -n 1)" \
    "$(field_after "$l" "^scored B=$b " ours)"
}

if has_step qwen35; then
  qwen35_t0=$SECONDS
  qwen35_skipped=()
  qwen35_ppl_wall=""
  echo "== qwen35: Qwen3.6-35B-A3B-shaped W4A16 ($qwen35_w4_layers layers) and bf16 ($qwen35_bf16_layers layers)," \
    "Qwen3.5-27B-shaped W4A16 ($qwen35_27b_layers layers), written here one at a time (linear_attn" \
    "$qwen35_linear_attn); scored_bench $qwen35_batches x $ctx; peer $(basename "$peers") any; budget ${qwen35_budget}s"
  df -h "$(dirname "$qwen35_dir")" | tail -n 1
  if [[ ! -x $bundle/bin/scored_bench ]]; then
    fail "qwen35: $bundle/bin needs scored_bench"
  else
    for name in a3bw4 a3bbf16 27bw4; do
      if [[ ",$qwen35_models," == *",$name,"* ]]; then
        qwen35_run "$name"
      else
        qwen35_skipped+=("$(qwen35_info "$name" | awk '{print $5}') (not in QWEN35_MODELS)")
      fi
    done
    echo "== qwen35 summary (${qwen35_batches##*,} x $ctx windows; ratio = the peer's (transformers bf16) ms per" \
      "layer over ours, both at the same layer count, same call; share = ours / the FLOP-bound limit)"
    printf '%-21s %6s %9s %8s %9s %8s %7s %7s %-8s %7s %5s\n' model layers ms/step ms/layer peer_ms peer_ms/l \
      ratio target result weights share
    for name in a3bw4 a3bbf16 27bw4; do
      [[ ",$qwen35_models," == *",$name,"* ]] && qwen35_row "$name"
    done
    if [[ ",$qwen35_models," == *,27bw4,* ]]; then
      at_least qwen35-27b-w4a16-bound "$(field_after "$logs/qwen35_27bw4.log" "^scored B=${qwen35_batches##*,} " ours)" \
        "$qwen35_27b_target"
    fi
    if [[ ",$qwen35_models," == *,a3bw4,* && $qwen35_ppl == 1 ]]; then
      if awk -v v="$qwen35_ppl_wall" -v l="$qwen35_ppl_wall_target" 'BEGIN {exit !(v != "" && v + 0 <= l + 0)}'; then
        result=PASS
      else
        result=FAIL
        status=1
      fi
      echo "qwen36-35b-a3b-w4a16 WikiText-2 $ppl_method $ppl_ctx/$ppl_stride end to end: wall ${qwen35_ppl_wall:--} s" \
        "<= $qwen35_ppl_wall_target: $result"
    fi
  fi
  if ((${#qwen35_skipped[@]})); then
    printf 'qwen35 skipped: %s\n' "${qwen35_skipped[@]}"
  fi
  echo "qwen35: $((SECONDS - qwen35_t0)) s of the ${qwen35_budget} s budget"
fi

if has_step tests || has_step bench || has_step quant || has_step peer || has_step stories; then
echo "== summary (tok/s at ctx $ctx; same device, same call)"
tps() {  # tok/s of batch $2 in log $1 (scored_bench or hf_baseline format)
  awk -v b="B=$2" '($1=="scored" || $1=="batched_chunked") && $2==b {for(i=1;i<=NF;i++) if($i=="tok/s") {print $(i-1); exit}}' "$1" 2>/dev/null
}
schemes=${quant//,/ }
printf '%-10s %10s' "windows" "scored"; for q in $schemes; do printf ' %12s' "$q"; done; printf ' %12s\n' "transformers"
for b in $(echo "${batches//,/ } ${quant_batches//,/ }" | tr ' ' '\n' | sort -n -u); do
  printf '%-10s %10s' "$b" "$(tps "$logs/scored_bench.log" "$b")"
  for q in $schemes; do printf ' %12s' "$(tps "$logs/scored_bench_$q.log" "$b")"; done
  printf ' %12s\n' "$(tps "$logs/hf_baseline.log" "$b")"
done
grep -h 'vs transformers\|^gate:' "$logs"/scored_bench*.log 2>/dev/null
grep -h 'weights .* GiB on the GPU' "$logs"/scored_bench*.log 2>/dev/null
grep -h 'B=8 ' "$logs"/scored_bench*.log 2>/dev/null | sed 's/.*\(ratio [0-9.]* (to the burst [0-9.]*)\).*GPU memory/\1, GPU memory/' 
grep -h 'full_logits_window' "$logs/hf_baseline.log" 2>/dev/null
fi
exit $status
