#!/usr/bin/env bash
# The operator's guide (docs/operating.md) run as written: each fenced block marked
# `<!-- run: NAME -->` is extracted and run by bash, its example assignments
# (`NAME=value` lines) replaced by this script's values.
#
#   keystone          against a real Keystone 30.0.0 that has only its admin and roles
#                     (scripts/keystone.sh with KEYSTONE_SERVICE_USERS=""); then accel in
#                     keystone mode with the user the block made, found through the
#                     catalog by OSC (`openstack accelerator ...`, `openstack resource
#                     provider ...`) and by accel's own client commands (OS_* variables)
#   backup-postgres   accel filled on PostgreSQL, the block run, accel started on the
#   backup-mariadb    restored database answers the same providers, inventories and
#   backup-sqlite     device profiles (MariaDB and SQLite alike; sqlite3 backs up a
#                     running server's file)
#
# Env: ACCEL_BIN (target/debug/accel), CONFORMANCE_PY (the Python whose bin/ holds
#      `openstack` with python-cyborgclient and osc-placement: scripts/cyborg-clients.txt),
#      GUIDE_PORT (19850: Keystone; +1 Placement, +2 accelerator API, +3 metrics),
#      GUIDE_DIR (${TMPDIR:-/tmp}/accel-operating-guide),
#      ACCEL_TEST_PG (postgres://postgres@127.0.0.1:5432/postgres),
#      ACCEL_TEST_MYSQL (mysql://root@127.0.0.1:3306; empty: MariaDB left out).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$HERE")"
ACCEL="${ACCEL_BIN:-$ROOT/target/debug/accel}"
PY="${CONFORMANCE_PY:?CONFORMANCE_PY: the Python with the OpenStack clients (scripts/cyborg-clients.txt)}"
OSC_BIN="$(dirname "$PY")"
PORT="${GUIDE_PORT:-19850}"
PPORT=$((PORT + 1)); APORT=$((PORT + 2)); MPORT=$((PORT + 3))
DIR="${GUIDE_DIR:-${TMPDIR:-/tmp}/accel-operating-guide}"
PG_ADMIN="${ACCEL_TEST_PG:-postgres://postgres@127.0.0.1:5432/postgres}"
MYSQL="${ACCEL_TEST_MYSQL-mysql://root@127.0.0.1:3306}"
[[ -x "$ACCEL" ]] || { echo "$ACCEL is missing: cargo build -p accel-cli" >&2; exit 2; }
[[ -x "$OSC_BIN/openstack" ]] || { echo "no openstack in $OSC_BIN: pip install -r scripts/cyborg-clients.txt" >&2; exit 2; }

rm -rf "$DIR"; mkdir -p "$DIR"
SERVER_PID=""
stop_server() {
  if [[ -n "$SERVER_PID" ]]; then
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=""
  fi
}
cleanup() {
  stop_server
  "$HERE/keystone.sh" stop "$DIR/keystone" 2>/dev/null || true
}
trap cleanup EXIT
fail() { echo "operating-guide: FAIL: $*" >&2; exit 1; }
pass() { echo "ok: $*"; }

# The block NAME of docs/operating.md, without its example assignments.
block() {
  python3 - "$ROOT/docs/operating.md" "$1" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
m = re.search(r"<!-- run: %s -->\n```sh\n(.*?)```" % re.escape(sys.argv[2]), text, re.S)
if not m:
    sys.exit(f"docs/operating.md has no block marked run: {sys.argv[2]}")
print("\n".join(l for l in m.group(1).splitlines() if not re.match(r"^[A-Z_]+=", l)))
EOF
}
# Runs block NAME in $DIR with bash -eu: any failing command fails the guide.
run_block() {
  block "$1" >"$DIR/$1.sh"
  (cd "$DIR" && PATH="$OSC_BIN:$PATH" bash -euo pipefail "$DIR/$1.sh") >"$DIR/$1.log" 2>&1 \
    || { cat "$DIR/$1.log" >&2; fail "block $1"; }
  pass "block $1 ($(grep -cvE '^\s*(#|$)' "$DIR/$1.sh") lines)"
}

# accel serve with the given extra config lines, ready on the metrics port.
serve() {
  local config="$DIR/serve.toml"
  {
    echo "placement_listen = \"127.0.0.1:$PPORT\""
    echo "accelerator_listen = \"127.0.0.1:$APORT\""
    echo "metrics_listen = \"127.0.0.1:$MPORT\""
    echo "console = false"
    printf '%s\n' "$@"
  } >"$config"
  # The file says which database; ACCEL_DATABASE (the backup blocks' variable) would win.
  env -u ACCEL_DATABASE "$ACCEL" serve --config "$config" >>"$DIR/serve.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 300); do
    curl -fsS -o /dev/null "http://127.0.0.1:$MPORT/readyz" 2>/dev/null && return 0
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.1
  done
  tail -20 "$DIR/serve.log" >&2
  fail "accel serve did not become ready"
}

# ---- keystone: the guide's registration on a Keystone that has only its admin ----
KEYSTONE_SERVICE_USERS="" "$HERE/keystone.sh" start "$DIR/keystone" "$PORT" >/dev/null
# shellcheck disable=SC1091
source "$DIR/keystone/env"
export PLACEMENT_URL="http://127.0.0.1:$PPORT"
export ACCELERATOR_URL="http://127.0.0.1:$APORT/accelerator/v2"
export ACCEL_PASSWORD="guide-accel-secret"
run_block keystone
serve "database = \"sqlite://$DIR/keystone-mode.db\"" \
  'auth_strategy = "keystone"' 'enforce_new_defaults = true' \
  '[keystone_authtoken]' "auth_url = \"$OS_AUTH_URL\"" 'username = "accel"' \
  "password = \"$ACCEL_PASSWORD\"" 'project_name = "service"'
pass "accel serve ready with the user the guide made (Keystone accepted its credentials)"
osc() { "$OSC_BIN/openstack" "$@"; }
# Each output is read whole before it is searched: `grep -q` closing the pipe early
# would fail the command under pipefail.
has() { grep -q -- "$2" <<<"$1" || fail "$3"; }
has "$(osc catalog show accelerator -f json)" "$ACCELERATOR_URL" "catalog: accelerator endpoint"
osc accelerator device profile create guide-dp --group resources:CUSTOM_ACCELERATOR_FPGA=1 >/dev/null
has "$(osc accelerator device profile list -f value -c name)" '^guide-dp$' "OSC: device profile list"
osc resource provider create guide-rp >/dev/null
has "$(osc resource provider list -f value -c name)" '^guide-rp$' "OSC: resource provider list"
pass "OSC (cyborgclient, osc-placement) found both APIs in the catalog, admin by password"
has "$("$ACCEL" provider list -f json)" '"guide-rp"' "accel provider list with OS_*"
has "$("$ACCEL" device-profile list -f json)" '"guide-dp"' "accel device-profile list with OS_*"
pass "accel's client commands found both APIs in the catalog (OS_* variables)"
stop_server
"$HERE/keystone.sh" stop "$DIR/keystone"
unset OS_AUTH_URL OS_USERNAME OS_PASSWORD OS_PROJECT_NAME OS_CLOUD

# ---- backups: fill, run the block, serve the restored database, compare ----
P="http://127.0.0.1:$PPORT"; A="http://127.0.0.1:$APORT"
H=(-H 'x-auth-token: admin' -H 'openstack-api-version: placement latest' -H 'content-type: application/json')
fill() {
  local rp
  rp="$(curl -fsS "${H[@]}" -d '{"name": "guide-node"}' "$P/resource_providers" | python3 -c 'import json,sys; print(json.load(sys.stdin)["uuid"])')"
  curl -fsS "${H[@]}" -X PUT -d '{"resource_provider_generation": 0, "inventories": {"VCPU": {"total": 8, "allocation_ratio": 4.0}, "MEMORY_MB": {"total": 4096}}}' \
    "$P/resource_providers/$rp/inventories" >/dev/null
  curl -fsS "${H[@]}" -X PUT -d "{\"allocations\": {\"$rp\": {\"resources\": {\"VCPU\": 2}}}, \"project_id\": \"p1\", \"user_id\": \"u1\", \"consumer_generation\": null, \"consumer_type\": \"INSTANCE\"}" \
    "$P/allocations/5a8b1c2d-3e4f-4a5b-8c6d-7e8f9a0b1c2d" >/dev/null
  curl -fsS -H 'x-auth-token: admin' -H 'content-type: application/json' \
    -d '[{"name": "guide-dp", "groups": [{"resources:CUSTOM_ACCELERATOR_FPGA": "1"}]}]' "$A/v2/device_profiles" >/dev/null
}
snapshot() {
  local rp
  rp="$(curl -fsS "${H[@]}" "$P/resource_providers?name=guide-node" | python3 -c 'import json,sys; print(json.load(sys.stdin)["resource_providers"][0]["uuid"])')"
  curl -fsS "${H[@]}" "$P/resource_providers"
  curl -fsS "${H[@]}" "$P/resource_providers/$rp/inventories"
  curl -fsS "${H[@]}" "$P/resource_providers/$rp/usages"
  curl -fsS "${H[@]}" "$P/allocations/5a8b1c2d-3e4f-4a5b-8c6d-7e8f9a0b1c2d"
  curl -fsS -H 'x-auth-token: admin' "$A/v2/device_profiles"
}
# backup NAME DATABASE_URL RESTORED_URL: serve DATABASE_URL, fill it, run the block while
# it serves, then serve RESTORED_URL and compare.
backup() {
  local name="$1" db="$2" restored="$3"
  serve "database = \"$db\""
  fill
  snapshot >"$DIR/$name.before"
  run_block "backup-$name"
  stop_server
  serve "database = \"$restored\""
  snapshot >"$DIR/$name.after"
  stop_server
  cmp -s "$DIR/$name.before" "$DIR/$name.after" \
    || { diff "$DIR/$name.before" "$DIR/$name.after" >&2 || true; fail "backup-$name: the restored database answers differently"; }
  pass "backup-$name: accel on the restored database answers as before ($(wc -c <"$DIR/$name.after") bytes compared)"
}

PG_BASE="${PG_ADMIN%/*}"
PGOPTIONS="-c client_min_messages=warning" psql "$PG_ADMIN" -qAtc "DROP DATABASE IF EXISTS accel_guide WITH (FORCE)" -c "DROP DATABASE IF EXISTS accel_restored WITH (FORCE)" -c "CREATE DATABASE accel_guide" >/dev/null
export ACCEL_DATABASE="$PG_BASE/accel_guide" RESTORED_DATABASE="$PG_BASE/accel_restored"
export PGHOST=127.0.0.1 PGUSER=postgres
backup postgres "$ACCEL_DATABASE" "$RESTORED_DATABASE"
PGOPTIONS="-c client_min_messages=warning" psql "$PG_ADMIN" -qAtc "DROP DATABASE IF EXISTS accel_guide WITH (FORCE)" -c "DROP DATABASE IF EXISTS accel_restored WITH (FORCE)" >/dev/null

if [[ -n "$MYSQL" ]]; then
  mysql_q() { mariadb -h 127.0.0.1 -u root -e "$1"; }
  mysql_q "DROP DATABASE IF EXISTS accel_guide; DROP DATABASE IF EXISTS accel_restored; CREATE DATABASE accel_guide"
  export ACCEL_DB_NAME=accel_guide
  export MYSQL_HOST=127.0.0.1
  backup mariadb "$MYSQL/accel_guide" "$MYSQL/accel_restored"
  mysql_q "DROP DATABASE IF EXISTS accel_guide; DROP DATABASE IF EXISTS accel_restored"
fi

export ACCEL_SQLITE_FILE="$DIR/accel.db" RESTORED_SQLITE_FILE="$DIR/restored.db"
backup sqlite "sqlite://$ACCEL_SQLITE_FILE" "sqlite://$RESTORED_SQLITE_FILE"
echo "operating-guide: all blocks ran"
