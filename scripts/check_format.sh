#!/usr/bin/env bash
# Fails when any C++/CUDA source differs from what clang-format makes of it with the repository's
# .clang-format (Google style, 110 columns). The reference formatter is Debian 12's clang-format (14), the
# one scripts/install_deps.sh installs and CI runs: other major versions break some lines differently, so
# the check refuses to judge with one (set SCORED_FORMAT_ANY_VERSION=1 to try anyway).
#   scripts/check_format.sh          report drift (file names and a diff excerpt), exit 1 on any
#   scripts/check_format.sh --fix    rewrite the drifting files in place
set -euo pipefail
cd "$(dirname "$0")/.."
clang_format=${CLANG_FORMAT:-clang-format}
if ! command -v "$clang_format" >/dev/null; then
  echo "check_format: $clang_format not found (scripts/install_deps.sh installs it)" >&2
  exit 2
fi
version=$("$clang_format" --version | sed -n 's/.*version \([0-9]*\)\..*/\1/p')
if [ "$version" != 14 ] && [ "${SCORED_FORMAT_ANY_VERSION:-0}" != 1 ]; then
  echo "check_format: clang-format $version; the reference is 14 (Debian 12). SCORED_FORMAT_ANY_VERSION=1 to run anyway" >&2
  exit 2
fi
mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cu' '*.cuh' | grep -v '^tests/fuzz/corpus/')
if [ "${1:-}" = --fix ]; then
  "$clang_format" -i "${files[@]}"
  echo "check_format: formatted ${#files[@]} files"
  exit 0
fi
drift=()
for f in "${files[@]}"; do
  if ! "$clang_format" "$f" | cmp -s - "$f"; then drift+=("$f"); fi
done
if [ "${#drift[@]}" -ne 0 ]; then
  echo "check_format: ${#drift[@]} of ${#files[@]} files differ from clang-format $version (fix: scripts/check_format.sh --fix):"
  for f in "${drift[@]}"; do
    echo "  $f"
    "$clang_format" "$f" | diff -u "$f" - | sed -n '3,14p' | sed 's/^/    /'
  done
  exit 1
fi
echo "check_format: ${#files[@]} files match clang-format $version"
