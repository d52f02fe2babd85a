#!/usr/bin/env bash
# One GPU-machine run: the gpu tests, a random-weight Llama-3-8B-shaped checkpoint (plus compressed-tensors
# W4A16 / NVFP4A16 checkpoints of the same weights), scored_bench on each (agreement with transformers +
# throughput + memory), the transformers peer baseline, then a short table.
#
#   scripts/bench/gpu_bench.sh [STEPS]      STEPS: any of tests,bench,quant,peer (default tests,bench,quant,peer)
#
# Run from the repository root with the bundle made on the dev machine:
#   ../shared/tools/device-bundle .bundle-cuda build-cuda/tests/engine/cuda/cuda_*_test build-cuda/tests/bench/cuda/scored_bench
#   cp -r ../shared/data/stories260K-hf .bundle-cuda/data/; cp ../shared/bench/hf_baseline.py .bundle-cuda/
# Environment: BUNDLE (.bundle-cuda), LAYERS (32), CTX (2048), BATCHES (1,2,4,8,16), MODEL_DIR (/tmp/random-llama),
# QUANT (w4a16,nvfp4a16; fp8_dynamic also writes and runs W8A8), QUANT_BATCHES (1,4,8: the 8 x 2048-token memory target), PROFILE (1), GRAPH (0; 1 adds
# scored_bench's forward-only timings, direct enqueue vs CUDA graph replay), OUT (logs go there when set).
set -uo pipefail
steps=${1:-tests,bench,quant,peer}
bundle=${BUNDLE:-.bundle-cuda}
layers=${LAYERS:-32}
ctx=${CTX:-2048}
batches=${BATCHES:-1,2,4,8,16}
model=${MODEL_DIR:-/tmp/random-llama}
quant=${QUANT:-w4a16,nvfp4a16}
quant_batches=${QUANT_BATCHES:-1,4,8}
[[ $steps == *quant* ]] || quant=""
logs=${OUT:-/tmp/gpu_bench_logs}
mkdir -p "$logs"
export SCORED_DATA_DIR=$PWD/$bundle/data SCORED_FIXTURES_DIR=$PWD/tests/fixtures PYTHONUNBUFFERED=1
status=0

echo "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader)"

if [[ $steps == *tests* ]]; then
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

if [[ $steps == *stories* ]]; then
  echo "== transformers on stories260K (the bf16 yardstick)"
  python3 scripts/bench/hf_stories_bf16.py "$SCORED_DATA_DIR/stories260K-hf" 2>&1 | grep -vi warn
fi

if [[ $steps == *bench* || $steps == *quant* ]]; then
  echo "== make_random_llama (layers $layers, quantized: ${quant:--})"
  python3 scripts/bench/make_random_llama.py --out "$model" --layers "$layers" --ctx "$ctx" --quant "$quant" \
    2>&1 | tail -n 4
  df -h "$(dirname "$model")" | tail -n 1
fi

if [[ $steps == *bench* ]]; then
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

if [[ $steps == *peer* ]]; then
  echo "== transformers baseline (layers $layers)"
  python3 "$bundle/hf_baseline.py" "$layers" 2>&1 | tee "$logs/hf_baseline.log" | grep -vi warn
fi

echo "== summary (tok/s at ctx $ctx; same device, same call)"
tps() {  # tok/s of batch $2 in log $1 (scored_bench or hf_baseline format)
  awk -v b="B=$2" '($1=="scored" || $1=="batched_chunked") && $2==b {for(i=1;i<=NF;i++) if($i=="tok/s") print $(i-1)}' "$1" 2>/dev/null
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
grep -h 'B=8 ' "$logs"/scored_bench*.log 2>/dev/null | sed 's/.*GPU memory/GPU memory/' 
grep -h 'full_logits_window' "$logs/hf_baseline.log" 2>/dev/null
exit $status
