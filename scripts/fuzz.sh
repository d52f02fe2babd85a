#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz, cmake/Fuzz.cmake: clang, ASan + UBSan, CUDA off) in their own
# build folder and runs each one for FUZZ_SECONDS, starting from its committed seed corpus. Fails if any
# target crashes, trips a sanitizer, breaks a contract check (FUZZ_CHECK), times out on one input or runs
# out of memory; the input that did it is kept under <build>/fuzz-artifacts/<target>/.
#
# Usage: scripts/fuzz.sh [build-dir]          (default build-fuzz)
# Environment:
#   FUZZ_SECONDS   seconds of fuzzing per target (default 60); 0 only replays the seed corpora
#   FUZZ_TARGETS   space-separated subset of targets (default: all)
#   FUZZ_PARALLEL  targets run at once (default: number of CPUs)
#   FUZZ_JOBS      build parallelism (default 2)
#   FUZZ_CC / FUZZ_CXX  clang to use (default clang / clang++, else clang-14 / clang++-14)
# New inputs found are kept in <build>/fuzz-corpus/<target>/ (not in the checkout) and reused next time.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-build-fuzz}"
case "$build" in /*) ;; *) build="$root/$build" ;; esac
seconds="${FUZZ_SECONDS:-60}"
parallel="${FUZZ_PARALLEL:-$(nproc)}"
jobs="${FUZZ_JOBS:-2}"
all_targets=(safetensors_fuzzer model_config_fuzzer quant_config_fuzzer dequantize_fuzzer
             request_validation_fuzzer tokenizer_spm_fuzzer tokenizer_spm_model_fuzzer tokenizer_gpt2_fuzzer
             tokenizer_tiktoken_fuzzer tokenizer_hf_json_fuzzer)
read -r -a targets <<< "${FUZZ_TARGETS:-${all_targets[*]}}"

cc="${FUZZ_CC:-}"
cxx="${FUZZ_CXX:-}"
if [ -z "$cc" ]; then
  if command -v clang > /dev/null; then cc=clang; cxx="${cxx:-clang++}"; else cc=clang-14; cxx="${cxx:-clang++-14}"; fi
fi
cxx="${cxx:-clang++}"

t0=$(date +%s)
# The top-level CMakeLists.txt may not include cmake/Fuzz.cmake yet: inject it after project().
extra=()
if ! grep -q 'cmake/Fuzz.cmake' "$root/CMakeLists.txt"; then
  extra+=("-DCMAKE_PROJECT_INCLUDE=$root/cmake/Fuzz.cmake")
fi
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" \
    -DSCORED_ENABLE_CUDA=OFF -DSCORED_BUILD_FUZZERS=ON "${extra[@]}" > "$build.configure.log" 2>&1 ||
    { cat "$build.configure.log"; exit 1; }
fi
cmake --build "$build" --target "${targets[@]}" -j "$jobs"
t_build=$(( $(date +%s) - t0 ))
echo "fuzz: built ${#targets[@]} targets in ${t_build}s"

mkdir -p "$build/fuzz-corpus" "$build/fuzz-artifacts" "$build/fuzz-logs"
# One target: prints "<target> OK|FAIL ..." as its last line in its log.
run_one() {
  local t="$1" corpus="$build/fuzz-corpus/$1" art="$build/fuzz-artifacts/$1/" log="$build/fuzz-logs/$1.log"
  local seeds="$root/tests/fuzz/corpus/$t" dict="$root/tests/fuzz/dict/$t.dict"
  mkdir -p "$corpus" "$art"
  local args=(-timeout=10 -rss_limit_mb=2048 -artifact_prefix="$art" -print_final_stats=1)
  [ -f "$dict" ] && args+=(-dict="$dict")
  local start rc=0
  start=$(date +%s)
  if [ "$seconds" -eq 0 ]; then
    "$build/$t" "${args[@]}" -runs=0 "$seeds" > "$log" 2>&1 || rc=$?
  else
    "$build/$t" "${args[@]}" -max_total_time="$seconds" "$corpus" "$seeds" > "$log" 2>&1 || rc=$?
  fi
  local took=$(( $(date +%s) - start ))
  local runs cov
  runs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | grep -o '[0-9]*$' || true)
  cov=$(grep -oE '^#[0-9]+.*cov: [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+$' || true)
  if [ "$rc" -eq 0 ]; then
    printf '%-28s OK    %4ss  %9s runs  cov %s\n' "$t" "$took" "${runs:-?}" "${cov:-?}" >> "$log"
  else
    printf '%-28s FAIL  %4ss  exit %s, input kept in %s (log %s)\n' "$t" "$took" "$rc" "$art" "$log" >> "$log"
  fi
  return "$rc"
}

# Up to $parallel targets at once; each one's verdict is the last line of its log.
running=0
for t in "${targets[@]}"; do
  run_one "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$parallel" ]; then
    wait -n || true
    running=$((running - 1))
  fi
done
wait || true
failed=0
num_failed=0
for t in "${targets[@]}"; do
  tail -n 1 "$build/fuzz-logs/$t.log"
  if ! tail -n 1 "$build/fuzz-logs/$t.log" | grep -q ' OK '; then
    failed=1
    num_failed=$((num_failed + 1))
  fi
done
if [ "$failed" -ne 0 ]; then
  for t in "${targets[@]}"; do
    if ! tail -n 1 "$build/fuzz-logs/$t.log" | grep -q ' OK '; then
      echo "---- $t: the report"
      grep -v '^#[0-9]' "$build/fuzz-logs/$t.log" | grep -E -A40 'ERROR|runtime error|contract broken|Test unit written' | head -60
    fi
  done
fi
total=$(( $(date +%s) - t0 ))
echo "fuzz targets ${seconds}s each (build ${t_build}s, total ${total}s)"
echo "fuzz: $(( ${#targets[@]} - num_failed )) passed, ${num_failed} failed"
[ "$failed" -eq 0 ] || exit 1
