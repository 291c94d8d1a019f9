#!/usr/bin/env bash
# Profiles `accel serve` answering the fpga200 allocation-candidates query, one new
# connection per request (wrk, `Connection: close`), as docs/benchmarks.md's "The
# physical limit" section does:
#
#   cargo build --profile profiling -p accel-cli
#   scripts/profile-fpga200.sh [OUT_DIR]      (default /tmp/perf-fpga200)
#
# Writes OUT_DIR/perf.data, flat.txt (self time) and children.txt (inclusive).
# Env: ACCEL_BIN (target/profiling/accel), PROFILE_PORT (18795). Needs perf and wrk.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$HERE")"
KIT="$ROOT/../shared/conformance/placement"
BIN="${ACCEL_BIN:-$ROOT/target/profiling/accel}"
OUT="${1:-/tmp/perf-fpga200}"
PORT="${PROFILE_PORT:-18795}"
mkdir -p "$OUT"
stop() { ACCEL_PORT="$PORT" ACCEL_RUN_DIR="$OUT/run" "$HERE/accel-placement.sh" stop >/dev/null 2>&1 || true; }
trap stop EXIT
ACCEL_BIN="$BIN" ACCEL_PORT="$PORT" ACCEL_BACKEND=sqlite ACCEL_RUN_DIR="$OUT/run" \
  "$HERE/accel-placement.sh" start >/dev/null
python3 "$KIT/perfload.py" --url "http://127.0.0.1:$PORT" --scenario fpga200 --repeat 0 >"$OUT/load.txt"
PID="$(cat "$OUT/run/accel.pid")"
Q='/allocation_candidates?resources=VCPU:1&resources1=CUSTOM_ACCELERATOR_FPGA:1&required1=CUSTOM_FPGA_INTEL_ARRIA10'
wrk -t1 -c1 -d25s --latency -H 'Connection: close' -H 'x-auth-token: admin' \
  -H 'openstack-api-version: placement 1.39' "http://127.0.0.1:$PORT$Q" >"$OUT/wrk.txt" &
sleep 3
perf record -F 999 --call-graph dwarf,16384 -p "$PID" -o "$OUT/perf.data" -- sleep 12 2>/dev/null
wait
report() { perf report -i "$OUT/perf.data" "$@" --sort symbol --stdio -g none 2>/dev/null | grep -v '^#' | grep -v '^$'; }
report --no-children | head -60 >"$OUT/flat.txt"
report --children | head -150 >"$OUT/children.txt"
head -12 "$OUT/wrk.txt"
echo "profile in $OUT (flat.txt, children.txt)"
