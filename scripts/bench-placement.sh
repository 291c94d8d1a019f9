#!/usr/bin/env bash
# Side-by-side Placement benchmarks over HTTP: accel or upstream Placement 16.0.0, on a
# fresh SQLite, PostgreSQL or MariaDB/MySQL database, driven by a load tool; prints the
# tool's table.
#
#   scripts/bench-placement.sh accel|upstream sqlite|postgres|mysql writes [placement-load args]
#   scripts/bench-placement.sh accel|upstream sqlite|postgres|mysql candidates [perfload.py args]
#
# writes:     target/release/placement-load (create provider, PUT inventories,
#             PUT allocations, GET usages, GET resource_providers)
# candidates: ../shared/conformance/placement/perfload.py (load a scenario, time
#             GET /allocation_candidates)
# Env: BENCH_PORT (18790), UPSTREAM_WORKERS (1 on SQLite, 2 on PostgreSQL and MariaDB),
#      BENCH_PG_ADMIN (postgres://postgres@127.0.0.1:5432/postgres),
#      BENCH_MYSQL (mysql://root@127.0.0.1:3306: the MariaDB/MySQL server, no database),
#      ACCEL_BIN (target/release/accel), PLACEMENT_LOAD (target/release/placement-load).
# Build first: cargo build --release -p accel-cli -p accel-bench
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$HERE")"
KIT="$ROOT/../shared/conformance/placement"
TARGET="${1:?accel|upstream}"; BACKEND="${2:?sqlite|postgres|mysql}"; WHAT="${3:?writes|candidates}"
shift 3
PORT="${BENCH_PORT:-18790}"
PG_ADMIN="${BENCH_PG_ADMIN:-postgres://postgres@127.0.0.1:5432/postgres}"
PG_BASE="${PG_ADMIN%/*}"
MYSQL="${BENCH_MYSQL:-mysql://root@127.0.0.1:3306}"
MYSQL="${MYSQL%/}"
LOAD="${PLACEMENT_LOAD:-$ROOT/target/release/placement-load}"

# Each target gets its own run directory per port, and only the server this run
# started is stopped at exit (runs on other ports are left alone).
ACCEL_DIR="${TMPDIR:-/tmp}/accel-bench-run-$PORT"
UPSTREAM_DIR="${TMPDIR:-/tmp}/accel-bench-upstream-$PORT"
stop_started() {
  case "$TARGET" in
    accel) ACCEL_PORT="$PORT" ACCEL_RUN_DIR="$ACCEL_DIR" "$HERE/accel-placement.sh" stop >/dev/null 2>&1 || true ;;
    upstream) PLACEMENT_RUN_DIR="$UPSTREAM_DIR" "$KIT/upstream-placement.sh" stop >/dev/null 2>&1 || true ;;
  esac
}
trap stop_started EXIT

case "$TARGET" in
  accel)
    ACCEL_PORT="$PORT" ACCEL_BACKEND="$BACKEND" ACCEL_PG_URL="$PG_ADMIN" ACCEL_MYSQL_URL="$MYSQL" \
      ACCEL_RUN_DIR="$ACCEL_DIR" "$HERE/accel-placement.sh" start >/dev/null
    ;;
  upstream)
    export PLACEMENT_PORT="$PORT" FRESH=1 PLACEMENT_RUN_DIR="$UPSTREAM_DIR"
    if [[ "$BACKEND" == postgres ]]; then
      PY="$(WITH_UPSTREAM=1 "$KIT/setup.sh")"
      "$PY" -c 'import psycopg2' 2>/dev/null || "$(dirname "$PY")/pip" install -q psycopg2-binary >&2
      export PLACEMENT_DB_URL="postgresql+psycopg2://${PG_BASE#postgres://}/accel_bench_upstream_$PORT"
      export PLACEMENT_WORKERS="${UPSTREAM_WORKERS:-2}"
    elif [[ "$BACKEND" == mysql ]]; then
      PY="$(WITH_UPSTREAM=1 "$KIT/setup.sh")"
      "$PY" -c 'import pymysql' 2>/dev/null || "$(dirname "$PY")/pip" install -q PyMySQL >&2
      # A fresh database made here: the kit's FRESH=1 reset connects to the database it
      # is about to create (SQLAlchemy 2.1's URL.set(database=None) keeps the name).
      db="accel_bench_upstream_$PORT"
      "$PY" - "mysql+pymysql://${MYSQL#*://}" "$db" <<'PY'
import sys
import pymysql
import sqlalchemy as sa
url = sa.engine.make_url(sys.argv[1])
c = pymysql.connect(host=url.host, port=url.port or 3306, user=url.username,
                    password=url.password or "", autocommit=True)
c.cursor().execute("DROP DATABASE IF EXISTS `%s`" % sys.argv[2])
c.cursor().execute("CREATE DATABASE `%s` CHARACTER SET utf8mb4" % sys.argv[2])
PY
      export FRESH=0
      export PLACEMENT_DB_URL="mysql+pymysql://${MYSQL#*://}/$db"
      export PLACEMENT_WORKERS="${UPSTREAM_WORKERS:-2}"
    else
      export PLACEMENT_WORKERS="${UPSTREAM_WORKERS:-1}"
    fi
    "$KIT/upstream-placement.sh" start >/dev/null
    ;;
  *) echo "target: accel or upstream" >&2; exit 2 ;;
esac

echo "# $TARGET on $BACKEND, $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
case "$WHAT" in
  writes) "$LOAD" --url "http://127.0.0.1:$PORT" "$@" ;;
  candidates)
    PY="$("$KIT/setup.sh")"
    "$PY" "$KIT/perfload.py" --url "http://127.0.0.1:$PORT" "$@"
    ;;
  *) echo "what: writes or candidates" >&2; exit 2 ;;
esac
if [[ "$TARGET" == accel ]]; then
  pid="$(cat "$ACCEL_DIR/accel.pid" 2>/dev/null || true)"
  [[ -n "$pid" ]] && echo "# accel resident memory: $(awk '/VmRSS|VmHWM/ {printf "%s %s %s; ", $1, $2, $3}' "/proc/$pid/status")"
fi
