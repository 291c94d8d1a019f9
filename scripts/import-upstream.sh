#!/usr/bin/env bash
# `accel import placement` against the real upstream Placement 16.0.0 (issue 28): upstream runs on
# SQLite and on MariaDB (the conformance kit's upstream-placement.sh), is filled through its own API
# with a seeded random cloud (scripts/placement-import-cloud.py, two providers left over capacity
# as upstream's API allows), and its database is imported into accel on SQLite, PostgreSQL and
# MariaDB, each import followed by `--verify` against the upstream service still running on the old
# database: every provider, inventory, usage, trait, aggregate, allocation and consumer, and a
# sample of allocation-candidate queries; each import must warn about both over-capacity
# providers, and a second import without --force must be refused leaving the target's dump
# identical. Then the way back: each accel database is exported (`accel export placement
# --dry-run`, then `--verify`) into a fresh upstream database of the same backend as the source,
# made by upstream's own `placement-manage db sync` and served by upstream during the export, and
# compared with accel again. With the SQLite upstream, docs/migrating.md's cut-over and way-back
# blocks are run as written against `accel serve` in maintenance (`walkthrough`). Any difference
# fails.
#
#   scripts/import-upstream.sh [sqlite] [mysql]      (default: both upstream backends)
#
# Env: ACCEL_BIN (${CARGO_TARGET_DIR:-target}/debug/accel), IMPORT_UPSTREAM_PORT (18971),
#      ACCEL_TEST_PG (postgres://postgres@127.0.0.1:5432/postgres),
#      ACCEL_TEST_MYSQL (mysql://root@127.0.0.1:3306), CONFORMANCE_KIT, IMPORT_SEED (28).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$HERE")"
KIT="${CONFORMANCE_KIT:-$ROOT/../shared/conformance/placement}"
PY="$(WITH_UPSTREAM=1 "$KIT/setup.sh")"
VENV="$(dirname "$(dirname "$PY")")"
ACCEL_BIN="${ACCEL_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/debug/accel}"
PORT="${IMPORT_UPSTREAM_PORT:-18971}"
SEED="${IMPORT_SEED:-28}"
PG_ADMIN="${ACCEL_TEST_PG:-postgres://postgres@127.0.0.1:5432/postgres}"
MYSQL_ADMIN="${ACCEL_TEST_MYSQL:-mysql://root@127.0.0.1:3306}"
PG_BASE="${PG_ADMIN%/*}"
MYSQL_HOSTPORT="${MYSQL_ADMIN#*@}"; MYSQL_HOSTPORT="${MYSQL_HOSTPORT%%/*}"
MYSQL_USER="${MYSQL_ADMIN#*://}"; MYSQL_USER="${MYSQL_USER%%@*}"
[[ -x "$ACCEL_BIN" ]] || { echo "no accel binary at $ACCEL_BIN (cargo build -p accel-cli)" >&2; exit 2; }
ACCEL_BIN="$(cd "$(dirname "$ACCEL_BIN")" && pwd)/$(basename "$ACCEL_BIN")"
BACKENDS=("$@"); [[ ${#BACKENDS[@]} -gt 0 ]] || BACKENDS=(sqlite mysql)
TAG="accel_import_$$"
RUN="${TMPDIR:-/tmp}/accel-import-upstream-$PORT"
rm -rf "$RUN"; mkdir -p "$RUN"
export PLACEMENT_PORT="$PORT" PLACEMENT_PROFILE=api
unset GABBI_FIXTURE

# An empty upstream database at SQLAlchemy URL $1, by upstream's own `placement-manage db sync`.
db_sync() {
  local etc="$RUN/sync-etc"; mkdir -p "$etc"
  printf '[placement_database]\nconnection = %s\n' "$1" >"$etc/placement.conf"
  "$VENV/bin/placement-manage" --config-dir "$etc" db sync >>"$RUN/db-sync.log" 2>&1
}
mysql_q() { mysql -h "${MYSQL_HOSTPORT%:*}" -P "${MYSQL_HOSTPORT#*:}" -u "$MYSQL_USER" -e "$1"; }
# The accel database at URL $1, as SQL text (pg_dump's per-run \restrict key left out).
dump() {
  case "$1" in
    sqlite://*) sqlite3 "${1#sqlite://}" .dump ;;
    postgres://*) pg_dump --no-owner "$1" | grep -v '^\\\(un\)\?restrict' ;;
    mysql://*) mysqldump --skip-dump-date -h "${MYSQL_HOSTPORT%:*}" -P "${MYSQL_HOSTPORT#*:}" \
                 -u "$MYSQL_USER" "${1##*/}" ;;
  esac
}
WALK_PID=""
cleanup() {
  [[ -n "$WALK_PID" ]] && { kill -TERM "$WALK_PID" 2>/dev/null; wait "$WALK_PID" 2>/dev/null; } || true
  PLACEMENT_RUN_DIR="$RUN/walk/back" "$KIT/upstream-placement.sh" stop >/dev/null 2>&1 || true
  PLACEMENT_RUN_DIR="$RUN/upstream" "$KIT/upstream-placement.sh" stop >/dev/null 2>&1 || true
  for d in "$RUN"/back-*; do
    [[ -d "$d" ]] && PLACEMENT_RUN_DIR="$d" "$KIT/upstream-placement.sh" stop >/dev/null 2>&1 || true
  done
  for db in $(psql "$PG_ADMIN" -Atc "SELECT datname FROM pg_database WHERE datname LIKE '${TAG}_%'" 2>/dev/null); do
    psql "$PG_ADMIN" -qc "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1 || true
  done
  for db in $(mysql_q "SHOW DATABASES LIKE '${TAG}\\_%'" 2>/dev/null | tail -n +2); do
    mysql_q "DROP DATABASE IF EXISTS \`$db\`" >/dev/null 2>&1 || true
  done
}
trap cleanup EXIT

# Runs block NAME in $RUN/walk with bash -eu, `accel` on the PATH.
run_block() {
  "$HERE/migrating-block.sh" "$1" >"$RUN/walk/$1.sh"
  (cd "$RUN/walk" && PATH="$(dirname "$ACCEL_BIN"):$PATH" bash -euo pipefail "$RUN/walk/$1.sh") \
    >"$RUN/walk/$1.log" 2>&1
}
# The status of a provider create on the walk-through's accel serve (201 at Placement 1.0).
accel_write() {
  curl -s -o /dev/null -w '%{http_code}' -X POST -H 'x-auth-token: admin' \
    -H 'content-type: application/json' -d "{\"name\": \"$1\"}" "http://127.0.0.1:$((PORT + 10))/resource_providers"
}
# docs/migrating.md's cut-over and way back, as written: `accel serve` (the binary) started in
# maintenance on an empty SQLite database, the cut-over block run against the upstream filled
# above, writes refused before it ends the maintenance and accepted after; then an empty
# upstream database served by a second upstream, and the way-back block (switch on, export
# --dry-run, export --verify), writes refused again after it.
walkthrough() {
  local walk="$RUN/walk" ap=$((PORT + 10)) aa=$((PORT + 11)) am=$((PORT + 12)) bp=$((PORT + 13))
  mkdir -p "$walk/back"
  "$ACCEL_BIN" serve --database "sqlite://$walk/accel.db" --placement-listen "127.0.0.1:$ap" \
    --accelerator-listen "127.0.0.1:$aa" --metrics-listen "127.0.0.1:$am" --no-console \
    --maintenance "cut-over from upstream" >"$walk/serve.log" 2>&1 &
  WALK_PID=$!
  for _ in $(seq 1 120); do curl -sf "http://127.0.0.1:$am/readyz" >/dev/null 2>&1 && break; sleep 0.5; done
  local before; before=$(accel_write before-cut-over)
  export UPSTREAM_DB="$SOURCE" UPSTREAM_URL="http://127.0.0.1:$PORT" ACCEL_DB="sqlite://$walk/accel.db" \
    ACCEL_API="http://127.0.0.1:$aa" OS_TOKEN=admin
  run_block cut-over || { echo "FAILED walk-through cut-over:"; cat "$walk/cut-over.log" "$walk/serve.log"; return 1; }
  local after; after=$(accel_write after-cut-over)
  [[ $before == 503 && $after == 201 ]] \
    || { echo "FAILED walk-through: a write answered $before in maintenance, $after after it"; return 1; }
  echo "walk-through cut-over: ok (a write 503 in maintenance, 201 after; $(tail -1 "$walk/cut-over.log"))"
  db_sync "sqlite:///$walk/back/placement.db"
  PLACEMENT_PORT=$bp PLACEMENT_RUN_DIR="$walk/back" PLACEMENT_DB_URL="sqlite:///$walk/back/placement.db" \
    "$KIT/upstream-placement.sh" start >/dev/null
  BACK_DB="sqlite://$walk/back/placement.db" BACK_URL="http://127.0.0.1:$bp" run_block way-back \
    || { echo "FAILED walk-through way back:"; cat "$walk/way-back.log"; return 1; }
  local late; late=$(accel_write after-way-back)
  [[ $late == 503 ]] || { echo "FAILED walk-through: a write answered $late after the way back"; return 1; }
  echo "walk-through way back: ok (a write 503 again; $(tail -1 "$walk/way-back.log"))"
}

status=0
for ub in "${BACKENDS[@]}"; do
  export PLACEMENT_RUN_DIR="$RUN/upstream"
  case "$ub" in
    sqlite)
      export PLACEMENT_DB_URL="sqlite:///$RUN/upstream/placement.db"
      SOURCE="sqlite://$RUN/upstream/placement.db" ;;
    mysql)
      "$PY" -c 'import pymysql' 2>/dev/null || "$VENV/bin/pip" install -q 'PyMySQL==1.1.1' >&2
      mysql_q "CREATE DATABASE ${TAG}_upstream CHARACTER SET utf8mb4"
      export PLACEMENT_DB_URL="mysql+pymysql://$MYSQL_USER@$MYSQL_HOSTPORT/${TAG}_upstream?charset=utf8mb4"
      SOURCE="$MYSQL_ADMIN/${TAG}_upstream" ;;
    *) echo "unknown upstream backend $ub (sqlite or mysql)" >&2; exit 2 ;;
  esac
  start=$SECONDS
  FRESH=1 "$KIT/upstream-placement.sh" start >/dev/null
  "$PY" "$HERE/placement-import-cloud.py" --url "http://127.0.0.1:$PORT" --seed "$SEED" | sed "s/^/upstream on $ub: /"
  echo "upstream on $ub: started and filled in $((SECONDS - start)) s"
  for target in sqlite postgres mysql; do
    case "$target" in
      sqlite) DB="sqlite://$RUN/accel-$ub.db" ;;
      postgres) psql "$PG_ADMIN" -qc "CREATE DATABASE ${TAG}_${ub}_pg" >/dev/null; DB="$PG_BASE/${TAG}_${ub}_pg" ;;
      mysql) mysql_q "CREATE DATABASE ${TAG}_${ub}_accel CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"; DB="$MYSQL_ADMIN/${TAG}_${ub}_accel" ;;
    esac
    t0=$SECONDS
    if "$ACCEL_BIN" import placement --from "$SOURCE" --database "$DB" --verify "http://127.0.0.1:$PORT" \
        >"$RUN/import-$ub-$target.txt" 2>&1; then
      echo "upstream $ub -> accel $target: $(tail -1 "$RUN/import-$ub-$target.txt") ($((SECONDS - t0)) s)"
    else
      echo "FAILED upstream $ub -> accel $target:"; cat "$RUN/import-$ub-$target.txt"; status=1
    fi
    # The over-capacity providers the cloud left are imported, each said in a warning.
    warned=$(grep -c '^warning: provider .* over its capacity' "$RUN/import-$ub-$target.txt" || true)
    if [[ $warned -lt 2 ]]; then
      echo "FAILED upstream $ub -> accel $target: $warned over-capacity warning(s), 2 expected"; status=1
    fi
    # A second import without --force is refused and writes nothing, change log included.
    dump "$DB" >"$RUN/dump-$ub-$target.before"
    if "$ACCEL_BIN" import placement --from "$SOURCE" --database "$DB" >"$RUN/again-$ub-$target.txt" 2>&1 \
        || ! grep -q "refused: the target database is not empty" "$RUN/again-$ub-$target.txt"; then
      echo "FAILED upstream $ub -> accel $target: a second import was not refused"; cat "$RUN/again-$ub-$target.txt"; status=1
    fi
    dump "$DB" >"$RUN/dump-$ub-$target.after"
    if cmp -s "$RUN/dump-$ub-$target.before" "$RUN/dump-$ub-$target.after"; then
      echo "upstream $ub -> accel $target: $warned over-capacity warnings; a refused second import left the dump identical"
    else
      echo "FAILED upstream $ub -> accel $target: a refused import changed the target:"
      diff "$RUN/dump-$ub-$target.before" "$RUN/dump-$ub-$target.after" | head -20; status=1
    fi
  done
  if [[ $ub == sqlite ]]; then
    walkthrough || status=1
  fi
  "$KIT/upstream-placement.sh" stop >/dev/null
  # The way back, from each accel database into a fresh upstream one of the source's backend.
  for target in sqlite postgres mysql; do
    case "$target" in
      sqlite) DB="sqlite://$RUN/accel-$ub.db" ;;
      postgres) DB="$PG_BASE/${TAG}_${ub}_pg" ;;
      mysql) DB="$MYSQL_ADMIN/${TAG}_${ub}_accel" ;;
    esac
    back="$RUN/back-$ub-$target"; mkdir -p "$back"
    case "$ub" in
      sqlite)
        export PLACEMENT_DB_URL="sqlite:///$back/placement.db"; TO="sqlite://$back/placement.db" ;;
      mysql)
        mysql_q "CREATE DATABASE ${TAG}_back_$target CHARACTER SET utf8mb4"
        export PLACEMENT_DB_URL="mysql+pymysql://$MYSQL_USER@$MYSQL_HOSTPORT/${TAG}_back_$target?charset=utf8mb4"
        TO="$MYSQL_ADMIN/${TAG}_back_$target" ;;
    esac
    t0=$SECONDS
    db_sync "$PLACEMENT_DB_URL"
    # Upstream serves the empty database first; the dry run checks it, the export writes
    # into it and --verify compares upstream's answers with accel's.
    PLACEMENT_RUN_DIR="$back" "$KIT/upstream-placement.sh" start >/dev/null
    if ! "$ACCEL_BIN" export placement --database "$DB" --to "$TO" --dry-run >"$back/dry-run.txt" 2>&1; then
      echo "FAILED accel $target -> upstream $ub (export --dry-run):"; cat "$back/dry-run.txt"; status=1
    fi
    if "$ACCEL_BIN" export placement --database "$DB" --to "$TO" --verify "http://127.0.0.1:$PORT" \
        >"$back/export.txt" 2>&1; then
      echo "accel $target -> upstream $ub: exported, $(tail -1 "$back/export.txt") ($((SECONDS - t0)) s)"
    else
      echo "FAILED accel $target -> upstream $ub:"; cat "$back/dry-run.txt" "$back/export.txt"; status=1
    fi
    PLACEMENT_RUN_DIR="$back" "$KIT/upstream-placement.sh" stop >/dev/null
  done
done
[[ $status == 0 ]] && echo "import-upstream: 0 differences"
exit "$status"
