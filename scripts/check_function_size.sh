#!/usr/bin/env bash
# Fails when a function in engine/, server/ or client/ (host C++: *.cc) is longer than LINES (default 150)
# lines: clang-tidy's readability-function-size over the build's compile_commands.json. The forward pass, the
# engine's orchestration, the server's start-up and the clients' runs stay readable only while each function
# fits on a screen or two (engine/README.md).
# CUDA sources (*.cu: kernels' device code and their launchers) are not checked: clang-tidy does not
# parse them with the project's nvcc flags.
#   scripts/check_function_size.sh BUILD_DIR [LINES]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: $0 BUILD_DIR [LINES]}
lines=${2:-150}
tidy=${CLANG_TIDY:-clang-tidy}
command -v "$tidy" >/dev/null || { echo "check_function_size: $tidy not found (scripts/install_deps.sh)" >&2; exit 2; }
[ -f "$build/compile_commands.json" ] || { echo "check_function_size: no $build/compile_commands.json" >&2; exit 2; }
# Only the sources this build compiles (a build without CUDA has no engine/cuda in compile_commands.json).
mapfile -t files < <(git ls-files 'engine/*.cc' 'server/*.cc' 'client/*.cc' | while read -r f; do
  grep -q "\"file\": \"$PWD/$f\"" "$build/compile_commands.json" && echo "$f"; done)
config="{CheckOptions: [{key: readability-function-size.LineThreshold, value: $lines}]}"
report=$(printf '%s\n' "${files[@]}" |
  xargs -P "$(nproc)" -n 8 "$tidy" -p "$build" --quiet --checks='-*,readability-function-size' --config="$config" \
    2>/dev/null | grep -A1 'exceeds recommended size' || true)
if [ -n "$report" ]; then
  echo "check_function_size: functions in engine/, server/, client/ over $lines lines:"
  echo "$report"
  exit 1
fi
echo "check_function_size: ${#files[@]} files under engine/, server/, client/, no function over $lines lines"
