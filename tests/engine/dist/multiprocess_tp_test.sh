#!/usr/bin/env bash
# Multi-process tensor parallelism of the real `scored` on one host with 2 GPUs (label multi_gpu): runs
# dist_multiprocess_scored_test (tests/engine/dist/multiprocess_scored_test.cc) out of a device bundle:
# follower (CUDA_VISIBLE_DEVICES=1) + leader (CUDA_VISIBLE_DEVICES=0), `--tp 2 --nnodes 2`, against one
# `scored --tp 2`: bitwise-equal results, clean shutdown, SIGKILLed follower / leader detected within 60 s.
#
# Dev machine, after building the CUDA tree BUILD (targets scored and dist_multiprocess_scored_test):
#   tests/engine/dist/multiprocess_tp_test.sh bundle BUILD [BUNDLE]
# GPU machine, from the repository root (the bundle travels with the tree):
#   tests/engine/dist/multiprocess_tp_test.sh run [BUNDLE]
# BUNDLE defaults to .bundle-mp. The last line is the summary: "multiprocess_tp: PASS|FAIL|SKIP ...".
set -uo pipefail
mode=${1:-}
here=$(cd "$(dirname "$0")/../../.." && pwd)
case $mode in
  bundle)
    build=${2:?usage: $0 bundle BUILD [BUNDLE]}
    bundle=${3:-.bundle-mp}
    data=${SCORED_DATA:-$here/../shared/data}
    set -e
    rm -rf "$bundle"
    "$here/../shared/tools/device-bundle" "$bundle" "$build/tests/engine/dist/dist_multiprocess_scored_test" \
      "$build/server/scored"
    mkdir -p "$bundle/data/wikitext-2-raw"
    cp -r "$data/stories260K-hf" "$bundle/data/"
    cp "$data/wikitext-2-raw/wiki.test.raw" "$bundle/data/wikitext-2-raw/"
    echo "multiprocess_tp: bundle ready in $bundle ($(du -sh "$bundle" | cut -f1))"
    ;;
  run)
    bundle=${2:-.bundle-mp}
    [[ -x $bundle/run && -x $bundle/bin/scored ]] || { echo "multiprocess_tp: FAIL no bundle in $bundle"; exit 1; }
    bundle=$(cd "$bundle" && pwd)
    export SCORED_DATA_DIR=$bundle/data SCORED_TEST_SCORED_BINARY=$bundle/bin/scored
    log=$(mktemp)
    start=$(date +%s)
    timeout --kill-after=20 600 "$bundle/run" dist_multiprocess_scored_test > "$log" 2>&1
    rc=$?
    grep -E '^\[ *(OK|FAILED|SKIPPED) *\] .* \([0-9]+ ms\)$|^\[ timing \]' "$log"
    if [[ $rc != 0 ]]; then
      grep -vE '^\[ +(RUN|OK) ' "$log" | tail -n 40
      echo "multiprocess_tp: FAIL (exit $rc, $(( $(date +%s) - start )) s)"
      exit 1
    fi
    if grep -q '^\[  SKIPPED \]' "$log"; then
      grep -m1 'needs 2 GPUs' "$log"
      echo "multiprocess_tp: SKIP (fewer than 2 GPUs)"
      exit 0
    fi
    echo "multiprocess_tp: PASS ($(grep -c '^\[       OK \]' "$log") tests, $(( $(date +%s) - start )) s)"
    ;;
  *)
    echo "usage: $0 bundle BUILD [BUNDLE] | run [BUNDLE]" >&2
    exit 2
    ;;
esac
