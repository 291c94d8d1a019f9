#!/usr/bin/env bash
# The console at estate scale (issue 16): a fresh `accel serve` (release build, noauth,
# its console on), filled and timed by console-load; prints console-load's tables.
#
#   scripts/bench-console.sh sqlite|postgres [console-load args]
#
# Env: ACCEL_BIN, CONSOLE_LOAD (default target/release/{accel,console-load}),
#      BENCH_PORT (18800: Placement; +1 the accelerator API, +2 the console),
#      BENCH_PG_ADMIN (postgres://postgres@127.0.0.1:5432/postgres).
# Build first: cargo build --release -p accel-cli -p accel-bench
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$HERE")"
BIN="${ACCEL_BIN:-$ROOT/target/release/accel}"
LOAD="${CONSOLE_LOAD:-$ROOT/target/release/console-load}"
BACKEND="${1:?sqlite|postgres}"; shift
PORT="${BENCH_PORT:-18800}"
PG_ADMIN="${BENCH_PG_ADMIN:-postgres://postgres@127.0.0.1:5432/postgres}"
RUN_DIR="${TMPDIR:-/tmp}/accel-bench-console-$PORT"
mkdir -p "$RUN_DIR"

case "$BACKEND" in
  sqlite) rm -f "$RUN_DIR"/accel.db*; url="sqlite://$RUN_DIR/accel.db" ;;
  postgres)
    db="accel_bench_console_$PORT"
    psql "$PG_ADMIN" -qAtc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null
    psql "$PG_ADMIN" -qAtc "CREATE DATABASE $db" >/dev/null
    url="${PG_ADMIN%/*}/$db"
    ;;
  *) echo "backend: sqlite or postgres" >&2; exit 2 ;;
esac

ACCEL_LOG="${ACCEL_LOG:-warn}" "$BIN" serve --database "$url" --no-access-log \
  --placement-listen "127.0.0.1:$PORT" --accelerator-listen "127.0.0.1:$((PORT + 1))" \
  --console-listen "127.0.0.1:$((PORT + 2))" --metrics-listen 127.0.0.1:0 \
  >"$RUN_DIR/accel.log" 2>&1 </dev/null &
pid=$!
trap 'kill -TERM $pid 2>/dev/null || true; wait $pid 2>/dev/null || true' EXIT
for _ in $(seq 1 200); do
  curl -fsS -o /dev/null "http://127.0.0.1:$PORT/" 2>/dev/null && break
  kill -0 "$pid" 2>/dev/null || { echo "accel failed to start:" >&2; tail -5 "$RUN_DIR/accel.log" >&2; exit 1; }
  sleep 0.05
done

echo "# accel on $BACKEND, $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs"
urls=(--placement-url "http://127.0.0.1:$PORT" --accel-url "http://127.0.0.1:$((PORT + 1))"
      --console-url "http://127.0.0.1:$((PORT + 2))")
if [[ "$BACKEND" == postgres ]]; then
  # A bulk load leaves PostgreSQL without statistics until autovacuum analyzes the
  # tables (this machine's server runs with autovacuum off): analyze once, as a
  # server that has been up for a minute would have, then time.
  "$LOAD" "${urls[@]}" --fill-only "$@"
  psql "${PG_ADMIN%/*}/$db" -qAtc ANALYZE
  "$LOAD" "${urls[@]}" --no-fill "$@"
else
  "$LOAD" "${urls[@]}" "$@"
fi
echo "# accel resident memory: $(awk '/VmRSS|VmHWM/ {printf "%s %s %s; ", $1, $2, $3}' "/proc/$pid/status")"
