#!/usr/bin/env bash
# Builds the whole tree with AddressSanitizer + UndefinedBehaviorSanitizer on host code
# (-DSCORED_SANITIZE=ON, CUDA off) in its own build folder and runs the unit and e2e tests there, all of
# them. Any sanitizer report is fatal: the process stops at the first one with a stack trace, and its test
# fails. LeakSanitizer is on; tests/fuzz/lsan.supp lists the only suppressed leaks (third-party globals).
# Uses the compilers and libraries scripts/install_deps.sh installed (gcc's ASan/UBSan runtimes) and the
# .venv of scripts/setup_python.sh for the Python tests; installs nothing. Prints the time of each stage.
#
# Usage: scripts/sanitize.sh [build-dir]     (default build-asan)
# Environment:
#   SANITIZE_JOBS     build and ctest parallelism (default 2)
#   SANITIZE_LABELS   ctest label regex (default 'unit|e2e')
#   SANITIZE_EXCLUDE  ctest -E regex of tests to skip (default: reference_digest_test, which scores what
#                     reference_fixtures_test scores, on the same code, to compare result bytes: 134 s here;
#                     python_lm_eval_test, python_lm_eval_hf_test and python_openai_test, which check lm-eval's
#                     numbers (the adapter's against HF's, local-completions' against the adapter's; the release
#                     stage runs them) over requests that reach the server as python_client_test's,
#                     scored_e2e_test's and scored_openai_e2e_test's do: 80 to 274 s each here; and
#                     install_e2e_test, which checks the installed tree's layout and runs its binaries on
#                     the requests scored_e2e_test and ppl_e2e_test send (85 s here); '' runs every test of
#                     the labels)
#   SCORED_E2E_MAX_WINDOWS  windows the two whole-WikiText tests score (reference_wikitext_ppl_test,
#                     ppl_e2e_test's BinaryWikiTextChunks), each checked against the float64 golden of
#                     those windows; set at all, it also cuts ppl_e2e_test's ReferenceMethods to 16 windows
#                     per method (default here 16 of 1,584: the full runs take > 15 min and > 12 min under
#                     ASan on 2 cores against ~1 and ~2 min without; '' runs them in full)
#   SCORED_SOAK_SECONDS  load phase of the soak test (default here 30 s instead of 60: under ASan one round
#                     of its 64 clients takes 10 s alone and 27 s on a busy machine, and the test wants
#                     more than one request per client; 10 s failed that check)
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-build-asan}"
case "$build" in /*) ;; *) build="$root/$build" ;; esac
jobs="${SANITIZE_JOBS:-2}"
labels="${SANITIZE_LABELS:-unit|e2e}"
exclude="${SANITIZE_EXCLUDE-^(reference_digest_test|python_lm_eval_test|python_lm_eval_hf_test|python_openai_test|install_e2e_test)$}"

# halt_on_error: the first report ends the process (non-zero exit), so the test fails; abort_on_error
# stays off so a failing child process exits instead of dumping core. A small quarantine: with the
# default 256 MiB the soak test's RSS-growth check fails (174.6 MB vs 156.6 MB warm) from freed memory
# ASan holds back, not from a leak; with 8 MiB it passes.
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:print_stacktrace=1:check_initialization_order=1:strict_init_order=1:detect_stack_use_after_return=1:symbolize=1:quarantine_size_mb=8:thread_local_quarantine_size_kb=64:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:report_error_type=1:${UBSAN_OPTIONS:-}"
export LSAN_OPTIONS="suppressions=$root/tests/fuzz/lsan.supp:print_suppressions=0:${LSAN_OPTIONS:-}"
export SCORED_SOAK_SECONDS="${SCORED_SOAK_SECONDS:-30}"
export SCORED_E2E_MAX_WINDOWS="${SCORED_E2E_MAX_WINDOWS-16}"

start=$SECONDS
stage() { echo "== sanitize [$(( SECONDS - start ))s] $*"; }

stage "configure"
# -O1 (the usual sanitizer level): half the compile time of -O3 under ASan + UBSan (bpe_tokenizer.cc:
# 5.9 s vs 11.4 s CPU), which dominates this script on 2 cores; the top-level CMakeLists.txt lowers code outside
# engine/ to -O0 and raises engine/reference to -O3 (scored_target_flags says why). -g1: line tables for the stack traces of
# reports. -Wno-maybe-uninitialized: with -fsanitize=address,undefined, gcc 12 warns inside libstdc++'s
# own <regex> (std::function moves in regex_automaton.h), a false positive -Werror turns into an error.
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG" \
  "-DCMAKE_CXX_FLAGS=-g1 -Wno-maybe-uninitialized" \
  -DSCORED_SANITIZE=ON -DSCORED_ENABLE_CUDA=OFF > "$build.configure.log" 2>&1 ||
  { cat "$build.configure.log"; exit 1; }

stage "build"
t_build=$SECONDS
cmake --build "$build" -j "$jobs"
t_build=$(( SECONDS - t_build ))

stage "test (labels '$labels', SCORED_E2E_MAX_WINDOWS=${SCORED_E2E_MAX_WINDOWS:-all})"
t_test=$SECONDS
ctest_args=(--test-dir "$build" -L "$labels" -j "$jobs" --output-on-failure --timeout 1800)
[ -n "$exclude" ] && ctest_args+=(-E "$exclude")
rc=0
ctest "${ctest_args[@]}" || rc=$?
t_test=$(( SECONDS - t_test ))

stage "done"
if [ "$rc" -ne 0 ]; then
  echo "sanitize: FAILED (build ${t_build}s, tests ${t_test}s, total $(( SECONDS - start ))s)"
  exit 1
fi
echo "sanitize: clean (build ${t_build}s, tests ${t_test}s, total $(( SECONDS - start ))s)"
