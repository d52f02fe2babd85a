#!/usr/bin/env bash
# The hostile-client soak as a benchmark (issue 31's latency target): tests/python/test_hostile_soak.py against
# a release build on otherwise idle cores, longer than in the suite, with SCORED_SOAK_LATENCY_TARGET=1 so the
# test also asserts "a normal client's p99 under attack within 2x the idle server's (+ 20 ms)". The suite runs
# the same soak for its correctness, liveness and RSS checks only: its cores are shared with other tests and it
# runs again under AddressSanitizer, where a latency ratio measures the machine, not scored.
#
#   HOSTILE_SOAK_SECONDS=120 scripts/bench/hostile_soak.sh
#
# Environment: SOAK_BUILD (build: its server/scored), SCORED_DATA (../shared/data), HOSTILE_SOAK_SECONDS (120),
# PYTHON (.venv/bin/python), OUT (/tmp/hostile_soak). Ends with a table and a PASS/FAIL row; exit status 0 on PASS.
set -uo pipefail
cd "$(dirname "$0")/../.."
build=$(realpath "${SOAK_BUILD:-build}")
python=${PYTHON:-.venv/bin/python}
out=${OUT:-/tmp/hostile_soak}
seconds=${HOSTILE_SOAK_SECONDS:-120}
mkdir -p "$out"
rm -f "$out/report.json"
[ -x "$build/server/scored" ] || { echo "no $build/server/scored (SOAK_BUILD names the build)" >&2; exit 2; }
(cd tests/python && SCORED_BINARY_DIR="$build" SCORED_DATA="${SCORED_DATA:-$(realpath ../../../shared/data)}" \
  SCORED_SOAK_SECONDS="$seconds" SCORED_SOAK_LATENCY_TARGET=1 SCORED_SOAK_REPORT="$out/report.json" \
  PYTHONDONTWRITEBYTECODE=1 "../../$python" -m pytest -q -s -p no:cacheprovider test_hostile_soak.py) \
  > "$out/pytest.log" 2>&1
rc=$?
if [ ! -s "$out/report.json" ]; then
  tail -30 "$out/pytest.log"
  echo "FAIL  the soak did not finish (pytest exit $rc, $out/pytest.log)"
  exit 1
fi
"$python" - "$out/report.json" "$rc" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
ok = int(sys.argv[2]) == 0
limit = 2 * r["idle_p99_s"] + 0.020
print(f"| soak s | pairs | gRPC retries | idle p99 ms | attacked p99 ms | attacked max ms | limit ms | RSS MiB start -> peak |")
print(f"| {r['seconds']:.0f} | {r['pairs']} | {r['grpc_retries']} | {r['idle_p99_s'] * 1e3:.1f} | "
      f"{r['loaded_p99_s'] * 1e3:.1f} | {r['loaded_max_s'] * 1e3:.1f} | {limit * 1e3:.1f} | "
      f"{r['rss_start_bytes'] >> 20} -> {r['rss_peak_bytes'] >> 20} |")
print(("PASS" if ok else "FAIL") + "  results exact, RSS within budget + overhead, p99 under attack <= 2x idle + 20 ms")
sys.exit(0 if ok else 1)
PY
