#!/usr/bin/env bash
# Memory and error soak of the real `scored` (issue 18): SOAK_CLIENTS scored-load clients for SOAK_SECONDS with
# mixed lengths, a fraction of requests cancelled by the client and a fraction malformed on purpose, while the
# daemon's RSS (/proc/PID/status VmRSS) and, with the cuda backend, the GPU memory in use (nvidia-smi memory.used,
# summed over the GPUs) are sampled every SOAK_INTERVAL_S into $OUT/soak_memory.csv. Then SIGTERM: scored must
# exit 0. Ends with a table and PASS/FAIL lines; exit status 0 when every check passed, 1 otherwise.
#
#   CPU (this machine, stories260K):
#     SOAK_SECONDS=1800 nice -n 10 scripts/bench/soak.sh
#   GPU (the 8B W4A16 that gpu_bench.sh's tp/soak steps write to /tmp/random-w4a16-8b; bundle with
#   build/server/scored and build/client/load/scored-load):
#     BUNDLE=.bundle-X SOAK_BACKEND=cuda SOAK_MODEL=/tmp/random-w4a16-8b SOAK_SECONDS=480 scripts/bench/soak.sh
#
# Checks:
#   flat after warm-up (RSS; GPU memory too with cuda): warm-up is the first SOAK_WARMUP_PCT % of the run; the
#     warm-up value is the largest sample taken up to its end; every later sample must stay
#     <= warm-up value + max(SOAK_SLACK_MB MB, SOAK_SLACK_PCT % of it). Allocator caches, gRPC buffer pools and
#     (GPU) the activation arena settle during warm-up; a leak keeps growing after it.
#   zero unexpected errors: scored-load's `unexpected` count (a normal request failing, a malformed one not
#     refused with INVALID_ARGUMENT, a cancelled one ending with a code other than CANCELLED or OK) is 0, and
#     some requests succeeded.
#   clean exit: scored exits 0 within 60 s of SIGTERM.
#
# Environment: SOAK_MODEL (cpu: $SCORED_DATA/stories260K-hf, SCORED_DATA defaulting to ../shared/data),
# SOAK_BACKEND (cpu | cuda), SOAK_SECONDS (60), SOAK_CLIENTS (64), SOAK_MODE (unary | stream), SOAK_INFLIGHT (4,
# stream mode), SOAK_LENGTHS (cpu: 16:0.3,64:0.3,256:0.25,512:0.15, up to stories260K's max_seq_len 512; cuda:
# 256:0.2,1024:0.3,2048:0.5), SOAK_CANCEL (0.05), SOAK_MALFORMED (0.05), SOAK_SEED (1), SOAK_INTERVAL_S (10),
# SOAK_WARMUP_PCT (20), SOAK_SLACK_MB (64), SOAK_SLACK_PCT (5), SOAK_SCORED_FLAGS (extra flags for scored; cuda
# default: --tokenizer=none --max_batch_tokens=16384), OUT (/tmp/soak_logs). Binaries: BUNDLE set ->
# $BUNDLE/run scored / scored-load (a device bundle); else SOAK_BUILD (build)/server/scored and
# SOAK_BUILD/client/load/scored-load.
set -uo pipefail
backend=${SOAK_BACKEND:-cpu}
seconds=${SOAK_SECONDS:-60}
clients=${SOAK_CLIENTS:-64}
mode=${SOAK_MODE:-unary}
inflight=${SOAK_INFLIGHT:-4}
cancel=${SOAK_CANCEL:-0.05}
malformed=${SOAK_MALFORMED:-0.05}
seed=${SOAK_SEED:-1}
interval=${SOAK_INTERVAL_S:-10}
warmup_pct=${SOAK_WARMUP_PCT:-20}
slack_mb=${SOAK_SLACK_MB:-64}
slack_pct=${SOAK_SLACK_PCT:-5}
logs=${OUT:-/tmp/soak_logs}
if [[ $backend == cpu ]]; then
  model=${SOAK_MODEL:-${SCORED_DATA:-../shared/data}/stories260K-hf}
  lengths=${SOAK_LENGTHS:-16:0.3,64:0.3,256:0.25,512:0.15}
  scored_flags=${SOAK_SCORED_FLAGS:-}
else
  model=${SOAK_MODEL:-/tmp/random-w4a16-8b}
  lengths=${SOAK_LENGTHS:-256:0.2,1024:0.3,2048:0.5}
  scored_flags=${SOAK_SCORED_FLAGS:---tokenizer=none --max_batch_tokens=16384}
fi
if [[ -n ${BUNDLE:-} ]]; then
  scored_cmd=("$BUNDLE/run" scored)
  load_cmd=("$BUNDLE/run" scored-load)
else
  build=${SOAK_BUILD:-build}
  scored_cmd=("$build/server/scored")
  load_cmd=("$build/client/load/scored-load")
fi
mkdir -p "$logs"
csv=$logs/soak_memory.csv
status=0

fail() {  # a clear failure line; the exit status becomes 1
  echo "FAIL $*"
  status=1
}

if [[ ! -d $model ]]; then
  echo "FAIL soak: no model directory $model (set SOAK_MODEL)"
  exit 1
fi

echo "== soak: scored --backend=$backend on $model, $clients $mode clients x ${seconds}s, lengths $lengths," \
  "cancel $cancel, malformed $malformed; memory every ${interval}s -> $csv"
rm -f "$logs/soak_port.json"
# shellcheck disable=SC2086  # scored_flags is a list of flags
"${scored_cmd[@]}" --model="$model" --backend="$backend" --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 \
  --port_file="$logs/soak_port.json" $scored_flags > "$logs/scored_soak.log" 2>&1 &
spid=$!
for _ in $(seq 1 360); do  # up to 180 s: an 8B checkpoint loads from a cold disk
  [[ -s $logs/soak_port.json ]] && break
  kill -0 "$spid" 2>/dev/null || break
  sleep 0.5
done
port=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["grpc"])' "$logs/soak_port.json" 2>/dev/null)
if [[ -z $port ]]; then
  fail "soak: scored did not start listening (last lines follow)"
  tail -n 8 "$logs/scored_soak.log"
  kill -KILL "$spid" 2>/dev/null
  exit 1
fi

# The sampler: one row per SOAK_INTERVAL_S, t_s from the start of the load.
echo "t_s,rss_kb,gpu_mib" > "$csv"
sample() {
  local t0=$1 rss gpu
  while kill -0 "$spid" 2>/dev/null; do
    rss=$(awk '$1 == "VmRSS:" {print $2}' "/proc/$spid/status" 2>/dev/null)
    gpu=""
    if [[ $backend == cuda ]]; then
      gpu=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | awk '{s += $1} END {print s}')
    fi
    [[ -n $rss ]] && echo "$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}'),$rss,$gpu" >> "$csv"
    sleep "$interval"
  done
}
t_load=$(date +%s.%N)
sample "$t_load" &
sampler=$!

timeout --kill-after=20 $((seconds + 300)) "${load_cmd[@]}" --server="127.0.0.1:$port" --mode="$mode" \
  --concurrency="$clients" --inflight="$inflight" --duration="$seconds" --lengths="$lengths" --seed="$seed" \
  --cancel_fraction="$cancel" --malformed_fraction="$malformed" --deadline_ms=120000 \
  --json="$logs/soak_load.json" > "$logs/soak_load.log" 2>&1
lrc=$?
cat "$logs/soak_load.log"
# 3 = some unexpected outcomes (judged below from the JSON); anything else means the run itself failed.
[[ $lrc == 0 || $lrc == 3 ]] || fail "soak: scored-load exit $lrc"

# One last sample after the load, then SIGTERM.
kill "$sampler" 2>/dev/null
wait "$sampler" 2>/dev/null
rss=$(awk '$1 == "VmRSS:" {print $2}' "/proc/$spid/status" 2>/dev/null)
gpu=""
[[ $backend == cuda ]] &&
  gpu=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | awk '{s += $1} END {print s}')
[[ -n $rss ]] && echo "$(awk -v a="$t_load" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}'),$rss,$gpu" >> "$csv"
t0=$(date +%s.%N)
kill -TERM "$spid"
stopped=""
for _ in $(seq 1 120); do
  kill -0 "$spid" 2>/dev/null || { stopped=1; break; }
  sleep 0.5
done
if [[ -z $stopped ]]; then
  fail "soak: scored still running 60 s after SIGTERM; killed"
  kill -KILL "$spid" 2>/dev/null
fi
wait "$spid" 2>/dev/null
src=$?
stop_s=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')

echo "== soak summary ($backend, $(basename "$model"), $clients $mode clients, ${seconds}s, lengths $lengths)"
python3 - "$logs/soak_load.json" "$csv" "$seconds" "$warmup_pct" "$slack_mb" "$slack_pct" "$src" "$stop_s" \
  > "$logs/soak_summary.txt" <<'PY'
import csv, json, sys
load_json, csv_path, seconds, warmup_pct, slack_mb, slack_pct, src, stop_s = sys.argv[1:]
seconds, warmup_pct, slack_mb, slack_pct = float(seconds), float(warmup_pct), float(slack_mb), float(slack_pct)
ok = True
def verdict(name, passed, detail):
    global ok
    ok &= passed
    print(f"{name:<26} {'PASS' if passed else 'FAIL'}  {detail}")
try:
    r = json.load(open(load_json))
except (OSError, ValueError) as e:
    r = None
    print(f"no load report: {e}")
rows = [row for row in csv.DictReader(open(csv_path))]
warm_end = seconds * warmup_pct / 100.0
if r:
    o, k, l = r["outcomes"], r["kinds"], r["latency_ms"]
    print(f"duration                   {r['wall_s']:.1f} s (warm-up: the first {warm_end:.0f} s)")
    print(f"requests                   {r['requests']}: ok {o['ok']}, cancelled {o['cancelled']} (expected), "
          f"refused {o['refused']} (expected), unexpected {o['unexpected']}")
    print("requests by kind           " + ", ".join(f"{name} {n}" for name, n in k.items()))
    print(f"throughput                 {r['tokens_per_s']:.0f} tok/s, {r['requests_per_s']:.1f} req/s (ok requests)")
    print(f"latency ms (ok)            p50 {l['p50']:.1f}  p90 {l['p90']:.1f}  p99 {l['p99']:.1f}  max {l['max']:.1f}")
    print("codes                      " + " ".join(f"{c}={n}" for c, n in r["codes"].items()))
    if o["unexpected"]:
        print(f"first unexpected           {r['first_unexpected']}")
def series(column, scale, unit, label):
    pts = [(float(x["t_s"]), float(x[column]) * scale) for x in rows if x.get(column)]
    warm = [v for t, v in pts if t <= warm_end]
    after = [v for t, v in pts if t > warm_end]
    if not warm or not after:
        verdict(f"flat after warm-up ({label})", False, f"too few samples ({len(pts)}): run longer than the interval")
        return
    w, m, last = max(warm), max(after), after[-1]
    limit = w + max(slack_mb, w * slack_pct / 100.0)
    print(f"{label + ' ' + unit:<26} warm-up {w:.1f}, max after {m:.1f}, last {last:.1f}; growth after warm-up "
          f"{m - w:+.1f} MB ({(m - w) / w * 100.0 if w else 0.0:+.1f}%); {len(pts)} samples")
    verdict(f"flat after warm-up ({label})", m <= limit,
            f"max after {m:.1f} <= {limit:.1f} (warm-up + max({slack_mb:.0f} MB, {slack_pct:.0f}%))")
series("rss_kb", 1.0 / 1024.0, "MB", "RSS")
if any(x.get("gpu_mib") for x in rows):
    series("gpu_mib", 1.0, "MiB", "GPU memory")
verdict("zero unexpected errors", bool(r) and r["unexpected"] == 0 and r["requests_ok"] > 0,
        f"unexpected {r['unexpected']}, ok {r['requests_ok']}" if r else "no report")
verdict("exit 0 after SIGTERM", src == "0", f"exit {src} after {stop_s} s")
sys.exit(0 if ok else 1)
PY
prc=$?
cat "$logs/soak_summary.txt"
[[ $prc == 0 ]] || status=1
[[ $src == 0 ]] || tail -n 8 "$logs/scored_soak.log"
echo "== soak $([[ $status == 0 ]] && echo PASS || echo FAIL); logs in $logs"
exit $status
