#!/usr/bin/env bash
# `accel-bench cloud` against upstream Placement 16.0.0 + Cyborg 17.0.0 on MariaDB, the
# same scenario and seed as accel's runs (docs/benchmarks.md, "A 10,000-node cloud"):
#
#   scripts/cloud-upstream.sh --nodes 1000 --devices 4 --boot-rate 5 --duration 300 --json
#
# What runs (each API with as many WSGI workers as the machine has cores):
# - upstream Placement under gunicorn (the conformance kit's upstream-placement.sh,
#   noauth2), database accel_cloud_placement;
# - upstream Cyborg: cyborg-api under gunicorn and cyborg-conductor over RabbitMQ
#   (scripts/upstream-cyborg.sh, database cyborg_bench), pointed at that Placement
#   and at the simulator's fake Nova (--nova-listen);
# - the nodes' cyborg-agents: scripts/cloud-cyborg-relay.py, one process making each
#   node's `report_data` RPC to the conductor (a thousand agent processes do not fit
#   on one machine); the first report of each node is the setup of its cards.
# The simulator reports the CPU seconds and summed peak RSS of every upstream process
# (Placement's and cyborg-api's gunicorn masters and workers, the conductor; not the
# relay, which stands in for the agents on the compute nodes, nor MariaDB).
#
# Env: ACCEL_BENCH (target/release/accel-bench), UPSTREAM_WORKERS (nproc),
#      CLOUD_PLACEMENT_PORT (18778), CYBORG_PORT (19560), CLOUD_RELAY_PORT (19570),
#      CLOUD_NOVA_PORT (19542), BENCH_MYSQL (mysql://root@127.0.0.1:3306).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$HERE")"
KIT="$ROOT/../shared/conformance/placement"
BENCH="${ACCEL_BENCH:-$ROOT/target/release/accel-bench}"
WORKERS="${UPSTREAM_WORKERS:-$(nproc)}"
PPORT="${CLOUD_PLACEMENT_PORT:-18778}"
CPORT="${CYBORG_PORT:-19560}"
RPORT="${CLOUD_RELAY_PORT:-19570}"
NPORT="${CLOUD_NOVA_PORT:-19542}"
MYSQL="${BENCH_MYSQL:-mysql://root@127.0.0.1:3306}"; MYSQL="${MYSQL%/}"
PDIR="${TMPDIR:-/tmp}/accel-cloud-placement"
CDIR="${CYBORG_DIR:-${TMPDIR:-/tmp}/accel-cyborg}"
export CYBORG_DIR="$CDIR"
[[ -x "$BENCH" ]] || { echo "no $BENCH: cargo build --release -p accel-bench" >&2; exit 1; }

RELAY_PID=""
cleanup() {
  [[ -n "$RELAY_PID" ]] && kill "$RELAY_PID" 2>/dev/null || true
  "$HERE/upstream-cyborg.sh" stop || true
  PLACEMENT_RUN_DIR="$PDIR" "$KIT/upstream-placement.sh" stop >/dev/null 2>&1 || true
}
trap cleanup EXIT

# Placement on a fresh MariaDB database.
PY="$(WITH_UPSTREAM=1 "$KIT/setup.sh")"
"$PY" -c 'import pymysql' 2>/dev/null || "$(dirname "$PY")/pip" install -q PyMySQL >&2
mariadb -uroot -h127.0.0.1 -e 'DROP DATABASE IF EXISTS accel_cloud_placement;
  CREATE DATABASE accel_cloud_placement CHARACTER SET utf8mb4'
PLACEMENT_RUN_DIR="$PDIR" PLACEMENT_PORT="$PPORT" PLACEMENT_WORKERS="$WORKERS" FRESH=0 \
  PLACEMENT_DB_URL="mysql+pymysql://${MYSQL#*://}/accel_cloud_placement" \
  "$KIT/upstream-placement.sh" start >/dev/null
PLACEMENT_URL="http://127.0.0.1:$PPORT"

# Cyborg with no hardware of its own: the relay's first reports bring it.
CYBORG_HOSTS=0 CYBORG_PORT="$CPORT" CYBORG_WORKERS="$WORKERS" \
  CYBORG_PLACEMENT_URL="$PLACEMENT_URL" CYBORG_NOVA_URL="http://127.0.0.1:$NPORT/v2.1" \
  "$HERE/upstream-cyborg.sh" start >&2
VENV="${CYBORG_VENV:-${TMPDIR:-/tmp}/accel-cyborg-venv}"
"$VENV/bin/python" "$HERE/cloud-cyborg-relay.py" --config-file "$CDIR/cyborg.conf" \
  --relay-port "$RPORT" >"$CDIR/relay.log" 2>&1 &
RELAY_PID=$!
for _ in $(seq 1 300); do
  curl -fsS -o /dev/null "http://127.0.0.1:$RPORT/" 2>/dev/null && break
  sleep 0.1
done
curl -fsS -o /dev/null "http://127.0.0.1:$RPORT/" || { echo "relay did not start; see $CDIR/relay.log" >&2; exit 1; }

# Every upstream server process: each gunicorn's process group and the conductor.
pids() {
  { pgrep -g "$(cat "$PDIR/placement.pid")" || true
    pgrep -g "$(cat "$CDIR/api.pid")" || true
    pgrep -g "$(cat "$CDIR/conductor.pid")" || true; } | sort -u | paste -sd,
}
echo "# upstream Placement + Cyborg on MariaDB, $WORKERS workers each, $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
"$BENCH" cloud --placement-url "$PLACEMENT_URL" --accelerator-url "http://127.0.0.1:$CPORT" \
  --cyborg-relay "http://127.0.0.1:$RPORT" --nova-listen "127.0.0.1:$NPORT" \
  --server-pids "$(pids)" "$@"
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg); relay reports: $(curl -fsS "http://127.0.0.1:$RPORT/")" >&2
