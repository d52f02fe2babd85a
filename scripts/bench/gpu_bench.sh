#!/usr/bin/env bash
# One GPU-machine run: the gpu tests, a random-weight Llama-3-8B-shaped checkpoint, scored_bench on it
# (agreement with transformers + throughput), the transformers peer baseline, then a short table.
#
#   scripts/bench/gpu_bench.sh [STEPS]      STEPS: any of tests,bench,peer (default tests,bench,peer)
#
# Run from the repository root with the bundle made on the dev machine:
#   ../shared/tools/device-bundle .bundle-cuda build-cuda/tests/engine/cuda/cuda_*_test build-cuda/tests/bench/cuda/scored_bench
#   cp -r ../shared/data/stories260K-hf .bundle-cuda/data/; cp ../shared/bench/hf_baseline.py .bundle-cuda/
# Environment: BUNDLE (.bundle-cuda), LAYERS (32), CTX (2048), BATCHES (1,2,4,8,16), MODEL_DIR (/tmp/random-llama),
# OUT (logs are written there when set).
set -uo pipefail
steps=${1:-tests,bench,peer}
bundle=${BUNDLE:-.bundle-cuda}
layers=${LAYERS:-32}
ctx=${CTX:-2048}
batches=${BATCHES:-1,2,4,8,16}
model=${MODEL_DIR:-/tmp/random-llama}
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

if [[ $steps == *tests* ]]; then
  echo "== transformers on stories260K (the bf16 yardstick)"
  python3 scripts/bench/hf_stories_bf16.py "$SCORED_DATA_DIR/stories260K-hf" 2>&1 | grep -vi warn
fi

if [[ $steps == *bench* ]]; then
  echo "== make_random_llama (layers $layers)"
  python3 scripts/bench/make_random_llama.py --out "$model" --layers "$layers" --ctx "$ctx" 2>&1 | tail -n 3
  echo "== scored_bench"
  "$bundle/run" scored_bench --model "$model" --ref "$model/ref_windows.bin" --ctx "$ctx" --batches "$batches" \
    --profile "${PROFILE:-1}" 2>&1 | tee "$logs/scored_bench.log" | grep -v '^I[0-9]'
  [[ ${PIPESTATUS[0]} == 0 ]] || status=1
fi

if [[ $steps == *peer* ]]; then
  echo "== transformers baseline (layers $layers)"
  python3 "$bundle/hf_baseline.py" "$layers" 2>&1 | tee "$logs/hf_baseline.log" | grep -vi warn
fi

echo "== summary (tok/s at ctx $ctx; same device, same call)"
printf '%-22s %12s %12s\n' "batch (windows)" "scored" "transformers"
for b in ${batches//,/ }; do
  ours=$(awk -v b="B=$b" '$1=="scored" && $2==b {for(i=1;i<=NF;i++) if($i=="tok/s") print $(i-1)}' "$logs/scored_bench.log" 2>/dev/null)
  peer=$(awk -v b="B=$b" '$1=="batched_chunked" && $2==b {for(i=1;i<=NF;i++) if($i=="tok/s") print $(i-1)}' "$logs/hf_baseline.log" 2>/dev/null)
  printf '%-22s %12s %12s\n' "$b" "${ours:--}" "${peer:--}"
done
grep -h 'vs transformers' "$logs/scored_bench.log" 2>/dev/null
grep -h 'full_logits_window' "$logs/hf_baseline.log" 2>/dev/null
exit $status
