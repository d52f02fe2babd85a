#!/usr/bin/env bash
# The whole test suite: installs dependencies, builds (CUDA sources too where nvcc exists), runs ctest.
# GPU tests skip cleanly without a device. Prints the time of each stage.
# Usage: scripts/test.sh [extra ctest args...]     env: BUILD_DIR (default build), SCORED_DATA, JOBS
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
jobs=${JOBS:-$(nproc)}
stage_start=$SECONDS
stage() { echo "== [$(( SECONDS - stage_start ))s] $*"; }

stage "install dependencies"
scripts/install_deps.sh
stage "python environment"
scripts/setup_python.sh
stage "configure"
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release ${SCORED_CMAKE_ARGS:-}
stage "build"
cmake --build "$build_dir" -j "$jobs"
stage "test"
ctest --test-dir "$build_dir" --output-on-failure -j "$jobs" "$@"
stage "done"
