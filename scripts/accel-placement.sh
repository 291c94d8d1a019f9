#!/usr/bin/env bash
# (Re)start `accel serve` on an empty database with the profile a gabbi fixture needs.
# Used as RESET_CMD by the upstream conformance runner:
#
#   accel-placement.sh start|stop
#
# Env: ACCEL_BIN (default target/release/accel), ACCEL_PORT (default 8778),
#      ACCEL_BACKEND sqlite|postgres|mysql (default sqlite), ACCEL_PG_URL (admin URL of
#      the PostgreSQL server, default postgres://postgres@127.0.0.1:5432/postgres),
#      ACCEL_MYSQL_URL (the MariaDB/MySQL server, default mysql://root@127.0.0.1:3306),
#      ACCEL_RUN_DIR (default $TMPDIR/accel-gabbi-run), GABBI_FIXTURE (from the runner).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$HERE")"
BIN="${ACCEL_BIN:-$ROOT/target/release/accel}"
PORT="${ACCEL_PORT:-8778}"
BACKEND="${ACCEL_BACKEND:-sqlite}"
PG_URL="${ACCEL_PG_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
MYSQL_URL="${ACCEL_MYSQL_URL:-mysql://root@127.0.0.1:3306}"
RUN_DIR="${ACCEL_RUN_DIR:-${TMPDIR:-/tmp}/accel-gabbi-run-$PORT}"
PIDFILE="$RUN_DIR/accel.pid"
mkdir -p "$RUN_DIR"

stop() {
  if [[ -f "$PIDFILE" ]]; then
    local pid; pid="$(cat "$PIDFILE")"
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
      kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$PIDFILE"
  fi
}

case "${1:-start}" in
  stop) stop; exit 0 ;;
  start) ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
stop
if curl -fsS -o /dev/null "http://127.0.0.1:$PORT/" 2>/dev/null; then
  echo "port $PORT already answers HTTP: another server is running there; choose ACCEL_PORT" >&2
  exit 1
fi

args=(serve --placement-listen "127.0.0.1:$PORT" --accelerator-listen "127.0.0.1:0" --metrics-listen "127.0.0.1:0" --console-listen "127.0.0.1:0")
case "${GABBI_FIXTURE:-}" in
  SecureRBACPolicyFixture) args+=(--enforce-new-defaults) ;;
  OpenPolicyFixture) args+=(--policy-file "$ROOT/../shared/conformance/placement/open-policy.yaml") ;;
  CORSFixture) args+=(--cors-allowed-origin http://valid.example.com) ;;
esac
if [[ "$BACKEND" == postgres ]]; then
  db="accel_gabbi_$PORT"
  psql "$PG_URL" -qAtc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null
  psql "$PG_URL" -qAtc "CREATE DATABASE $db" >/dev/null
  url="${PG_URL%/*}/$db"
elif [[ "$BACKEND" == mysql ]]; then
  db="accel_gabbi_$PORT"
  # mysql://USER[:PASSWORD]@HOST:PORT[/DB] -> the client's flags.
  rest="${MYSQL_URL#*://}"; rest="${rest%%/*}"
  creds="${rest%@*}"; hostport="${rest##*@}"
  my_user="${creds%%:*}"; my_pass=""; [[ "$creds" == *:* ]] && my_pass="${creds#*:}"
  my_host="${hostport%%:*}"; my_port=3306; [[ "$hostport" == *:* ]] && my_port="${hostport##*:}"
  MYSQL_PWD="$my_pass" mariadb -h "$my_host" -P "$my_port" -u "$my_user" \
    -e "DROP DATABASE IF EXISTS $db; CREATE DATABASE $db CHARACTER SET utf8mb4"
  url="mysql://$rest/$db"
else
  rm -f "$RUN_DIR"/accel.db*
  url="sqlite://$RUN_DIR/accel.db"
fi
args+=(--database "$url")
ACCEL_LOG="${ACCEL_LOG:-warn}" setsid "$BIN" "${args[@]}" >>"$RUN_DIR/accel.log" 2>&1 < /dev/null &
echo $! > "$PIDFILE"
for _ in $(seq 1 200); do
  if curl -fsS -o /dev/null "http://127.0.0.1:$PORT/" 2>/dev/null; then exit 0; fi
  kill -0 "$(cat "$PIDFILE")" 2>/dev/null || { echo "accel failed to start; see $RUN_DIR/accel.log" >&2; tail -5 "$RUN_DIR/accel.log" >&2; exit 1; }
  sleep 0.05
done
echo "accel not ready after 10s" >&2
exit 1
