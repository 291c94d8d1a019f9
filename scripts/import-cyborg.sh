#!/usr/bin/env bash
# `accel import cyborg` against the real upstream Cyborg 17.0.0 (issue 28): upstream runs on MariaDB
# (scripts/upstream-cyborg.sh: API under gunicorn, conductor over RabbitMQ, and one cyborg-agent
# per host with upstream's fake driver, reporting through the conductor to a real Placement:
# `accel serve`'s, on SQLite, holding the compute node providers nova-compute would have made),
# is filled by scripts/cyborg-import-cloud.py (the agents' fake FPGAs, plus the hardware the fake
# driver cannot report seeded in its database; device profiles and ARQs through its API, bound,
# failed, unbound and left BindStarted by its conductor; Deleting, a state upstream never writes,
# set in SQL), and its database is imported into accel on SQLite, PostgreSQL and
# MariaDB, each import followed by `--verify` against the upstream API still running on the old
# database (profiles, ARQs, Nova's per-instance polls, devices, deployables, attributes). Then the
# way back: each accel database is exported (`accel export cyborg`) into a fresh upstream database
# made by upstream's own `cyborg-dbsync upgrade`, upstream is started on it and compared with accel
# again (`accel import verify-cyborg`). The SQLite target goes through docs/migrating.md's Cyborg
# walk-through as written (blocks cyborg-cut-over and cyborg-way-back), against an `accel serve`
# started in maintenance on it: a write is 503 before the cut-over ends the maintenance, 201
# after, 503 again after the way back. Any difference fails. Not run: the export into a
# PostgreSQL upstream database, as Cyborg 17.0.0's `cyborg-dbsync upgrade` fails on PostgreSQL
# (its migration 6c77bd6afea5 adds an unnamed Enum column: "PostgreSQL Enum type requires a name");
# crates/accel-store/tests/import_cyborg.rs covers that path against upstream-shaped tables.
#
# Env: ACCEL_BIN (${CARGO_TARGET_DIR:-target}/debug/accel), IMPORT_CYBORG_PORT (18981; +3 the
#      Placement the conductor and agents use, +5 the fake Nova, +10..+12 the walk-through's
#      accel serve: Placement, accelerator API, metrics), ACCEL_TEST_PG
#      (postgres://postgres@127.0.0.1:5432/postgres), ACCEL_TEST_MYSQL (mysql://root@127.0.0.1:3306),
#      CYBORG_VENV (as upstream-cyborg.sh), IMPORT_SEED (28).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$HERE")"
ACCEL_BIN="${ACCEL_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/debug/accel}"
PORT="${IMPORT_CYBORG_PORT:-18981}"
NOVA_PORT=$((PORT + 5))
SEED="${IMPORT_SEED:-28}"
PG_ADMIN="${ACCEL_TEST_PG:-postgres://postgres@127.0.0.1:5432/postgres}"
MYSQL_ADMIN="${ACCEL_TEST_MYSQL:-mysql://root@127.0.0.1:3306}"
PG_BASE="${PG_ADMIN%/*}"
MYSQL_HOSTPORT="${MYSQL_ADMIN#*@}"; MYSQL_HOSTPORT="${MYSQL_HOSTPORT%%/*}"
MYSQL_USER="${MYSQL_ADMIN#*://}"; MYSQL_USER="${MYSQL_USER%%@*}"
[[ -x "$ACCEL_BIN" ]] || { echo "no accel binary at $ACCEL_BIN (cargo build -p accel-cli)" >&2; exit 2; }
ACCEL_BIN="$(realpath "$ACCEL_BIN")"  # the walk-through's blocks run in $RUN with it on the PATH
TAG="cyimp_$$"
RUN="${TMPDIR:-/tmp}/accel-import-cyborg-$PORT"
rm -rf "$RUN"; mkdir -p "$RUN"
export CYBORG_VENV="${CYBORG_VENV:-${TMPDIR:-/tmp}/accel-cyborg-venv}"
export CYBORG_PORT="$PORT" CYBORG_HOSTS=0 CYBORG_WORKERS=1 CYBORG_THREADS=4
export CYBORG_NOVA_URL="http://127.0.0.1:$NOVA_PORT/v2.1"
UP="$CYBORG_VENV/bin/python"
export CYBORG_PLACEMENT_URL="http://127.0.0.1:$((PORT + 3))"
AGENT_HOSTS="cyimp-host-0 cyimp-host-1 cyimp-host-2"

mysql_q() { mysql -h "${MYSQL_HOSTPORT%:*}" -P "${MYSQL_HOSTPORT#*:}" -u "$MYSQL_USER" -e "$1"; }
upstream() { CYBORG_DIR="$RUN/$1" CYBORG_DB="$2" "$HERE/upstream-cyborg.sh" "$3"; }
cleanup() {
  for d in "$RUN"/up "$RUN"/back-*; do
    [[ -d "$d" ]] && CYBORG_DIR="$d" "$HERE/upstream-cyborg.sh" stop >/dev/null 2>&1 || true
  done
  for pid in "$RUN"/placement.pid "$RUN"/walk.pid; do
    [[ -f "$pid" ]] && kill -TERM "$(cat "$pid")" 2>/dev/null || true
  done
  for db in $(psql "$PG_ADMIN" -Atc "SELECT datname FROM pg_database WHERE datname LIKE '${TAG}_%'" 2>/dev/null); do
    psql "$PG_ADMIN" -qc "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1 || true
  done
  for db in $(mysql_q "SHOW DATABASES LIKE '${TAG}\\_%'" 2>/dev/null | tail -n +2); do
    mysql_q "DROP DATABASE IF EXISTS \`$db\`" >/dev/null 2>&1 || true
  done
}
trap cleanup EXIT

status=0
start=$SECONDS
# Placement for the conductor and the agents: accel's, with the compute node providers that
# nova-compute would have created (the agents look theirs up by name and refuse to start without).
ACCEL_LOG=warn setsid "$ACCEL_BIN" serve --database "sqlite://$RUN/placement.db" \
  --placement-listen "127.0.0.1:$((PORT + 3))" --accelerator-listen 127.0.0.1:0 \
  --metrics-listen 127.0.0.1:0 --no-console >"$RUN/placement.log" 2>&1 </dev/null &
echo $! >"$RUN/placement.pid"
for _ in $(seq 1 200); do curl -fsS -o /dev/null "$CYBORG_PLACEMENT_URL/" 2>/dev/null && break; sleep 0.05; done
for host in $AGENT_HOSTS; do
  curl -fsS -o /dev/null -X POST -H 'x-auth-token: admin' -H 'content-type: application/json' \
    "$CYBORG_PLACEMENT_URL/resource_providers" -d "{\"name\": \"$host\"}"
done
CYBORG_AGENT_HOSTS="$AGENT_HOSTS" upstream up "${TAG}_upstream" start >/dev/null
# The agents' reports are in; stopped, they write nothing while the database is read.
upstream up "${TAG}_upstream" stop-agents
"$UP" "$HERE/cyborg-import-cloud.py" --url "http://127.0.0.1:$PORT" --db "${TAG}_upstream" \
  --nova-port "$NOVA_PORT" --placement "$CYBORG_PLACEMENT_URL" --seed "$SEED" | sed "s/^/upstream: /"
echo "upstream: started and filled in $((SECONDS - start)) s"
SOURCE="$MYSQL_ADMIN/${TAG}_upstream"
accel_db() {
  case "$1" in
    sqlite) echo "sqlite://$RUN/accel.db" ;;
    postgres) echo "$PG_BASE/${TAG}_pg" ;;
    mysql) echo "$MYSQL_ADMIN/${TAG}_accel" ;;
  esac
}
# docs/migrating.md's Cyborg walk-through: `accel serve` in maintenance on the SQLite target.
WALK_API="http://127.0.0.1:$((PORT + 11))"
ACCEL_LOG=warn setsid "$ACCEL_BIN" serve --database "$(accel_db sqlite)" \
  --placement-listen "127.0.0.1:$((PORT + 10))" --accelerator-listen "127.0.0.1:$((PORT + 11))" \
  --metrics-listen "127.0.0.1:$((PORT + 12))" --no-console \
  --maintenance "cut-over from upstream Cyborg" >"$RUN/walk-serve.log" 2>&1 </dev/null &
echo $! >"$RUN/walk.pid"
for _ in $(seq 1 200); do curl -fsS -o /dev/null "http://127.0.0.1:$((PORT + 12))/readyz" 2>/dev/null && break; sleep 0.1; done
# The status of a device profile create on the walk-through's accel serve.
walk_write() {
  curl -s -o /dev/null -w '%{http_code}' -X POST -H 'x-auth-token: admin' \
    -H 'content-type: application/json' \
    -d "[{\"name\": \"$1\", \"groups\": [{\"resources:FPGA\": \"1\"}]}]" "$WALK_API/v2/device_profiles"
}
# Runs docs/migrating.md's block NAME with bash -eu, `accel` on the PATH, output in $RUN/NAME.log.
run_block() {
  "$HERE/migrating-block.sh" "$1" >"$RUN/$1.sh"
  (cd "$RUN" && PATH="$(dirname "$ACCEL_BIN"):$PATH" ACCEL_DB="$(accel_db sqlite)" ACCEL_API="$WALK_API" \
    OS_TOKEN=admin bash -euo pipefail "$RUN/$1.sh") >"$RUN/$1.log" 2>&1
}
walk_cut_over() {
  local before after
  before=$(walk_write before-cut-over)
  UPSTREAM_CYBORG_DB="$SOURCE" UPSTREAM_CYBORG_URL="http://127.0.0.1:$PORT" run_block cyborg-cut-over \
    || { echo "FAILED walk-through cyborg-cut-over:"; cat "$RUN/cyborg-cut-over.log" "$RUN/walk-serve.log"; return 1; }
  after=$(walk_write after-cut-over)
  [[ $before == 503 && $after == 201 ]] \
    || { echo "FAILED walk-through: a write answered $before in maintenance, $after after it"; return 1; }
  echo "upstream -> accel sqlite (walk-through, a write 503 in maintenance, 201 after): $(grep -m1 '^verify:' "$RUN/cyborg-cut-over.log")"
}
walk_way_back() {
  local late
  BACK_CYBORG_DB="$MYSQL_ADMIN/${TAG}_back_sqlite" BACK_CYBORG_URL="http://127.0.0.1:$PORT" \
    run_block cyborg-way-back \
    || { echo "FAILED walk-through cyborg-way-back:"; cat "$RUN/cyborg-way-back.log"; return 1; }
  late=$(walk_write after-way-back)
  [[ $late == 503 ]] || { echo "FAILED walk-through: a write answered $late after the way back"; return 1; }
  echo "accel sqlite -> upstream (walk-through, a write 503 again): exported, $(grep -m1 '^verify:' "$RUN/cyborg-way-back.log")"
}
for target in sqlite postgres mysql; do
  if [[ $target == sqlite ]]; then
    walk_cut_over || status=1
    continue
  fi
  case "$target" in
    postgres) psql "$PG_ADMIN" -qc "CREATE DATABASE ${TAG}_pg" >/dev/null ;;
    mysql) mysql_q "CREATE DATABASE ${TAG}_accel CHARACTER SET utf8mb4 COLLATE utf8mb4_bin" ;;
  esac
  DB="$(accel_db "$target")"
  t0=$SECONDS
  if "$ACCEL_BIN" import cyborg --from "$SOURCE" --database "$DB" --verify "http://127.0.0.1:$PORT" \
      >"$RUN/import-$target.txt" 2>&1; then
    echo "upstream -> accel $target: $(tail -1 "$RUN/import-$target.txt") ($((SECONDS - t0)) s)"
  else
    echo "FAILED upstream -> accel $target:"; cat "$RUN/import-$target.txt"; status=1
  fi
done
# A second import into a database that now holds accelerator data is refused, naming what it holds.
if "$ACCEL_BIN" import cyborg --from "$SOURCE" --database "$(accel_db sqlite)" >"$RUN/again.txt" 2>&1; then
  echo "FAILED: a second import into a non-empty database was accepted"; status=1
elif ! grep -q "refused: the target database holds accelerator data" "$RUN/again.txt"; then
  echo "FAILED: the second import's refusal:"; cat "$RUN/again.txt"; status=1
fi
upstream up "${TAG}_upstream" stop >/dev/null
# The way back: each accel database exported into a fresh upstream database, upstream started on it.
for target in sqlite postgres mysql; do
  DB="$(accel_db "$target")"
  t0=$SECONDS
  upstream "back-$target" "${TAG}_back_$target" start >/dev/null
  if [[ $target == sqlite ]]; then
    walk_way_back || status=1
  elif ! "$ACCEL_BIN" export cyborg --database "$DB" --to "$MYSQL_ADMIN/${TAG}_back_$target" \
      >"$RUN/export-$target.txt" 2>&1; then
    echo "FAILED accel $target -> upstream (export):"; cat "$RUN/export-$target.txt"; status=1
  elif "$ACCEL_BIN" import verify-cyborg "http://127.0.0.1:$PORT" --database "$DB" \
      >"$RUN/verify-$target.txt" 2>&1; then
    echo "accel $target -> upstream: exported, $(tail -1 "$RUN/verify-$target.txt") ($((SECONDS - t0)) s)"
  else
    echo "FAILED accel $target -> upstream:"; cat "$RUN/export-$target.txt" "$RUN/verify-$target.txt"; status=1
  fi
  upstream "back-$target" "${TAG}_back_$target" stop >/dev/null
done
[[ $status == 0 ]] && echo "import-cyborg: 0 differences ($((SECONDS - start)) s)"
exit "$status"
