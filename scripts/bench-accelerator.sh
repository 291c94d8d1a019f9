#!/usr/bin/env bash
# Accelerator API benchmarks over HTTP: `accel serve` on a fresh SQLite, PostgreSQL or
# MariaDB/MySQL database, or upstream Cyborg on MariaDB (scripts/upstream-cyborg.sh), driven by
# target/release/arq-load; prints its tables.
#
#   scripts/bench-accelerator.sh accel sqlite|postgres|mysql cycle [arq-load args]
#   scripts/bench-accelerator.sh accel sqlite|postgres list N [arq-load args]
#   scripts/bench-accelerator.sh upstream mysql cycle|list N [arq-load args]
#
# cycle: Nova's create ARQs -> PATCH bind -> wait for the Nova events -> GET
#        ?bind_state=resolved -> delete, for a 4-accelerator profile on 16 clients
#        (arq-load reports its own fake hosts through the agent endpoint and serves the
#        fake Nova that receives the events).
# list:  inserts N ARQs (N/4 instances of arq-load's Nova project, BindFailed) straight
#        into the database with one INSERT .. SELECT (the seed step below; the server
#        is running, its migrations applied), prints the database's plan for the list
#        query (accel), then times GET /accelerator_requests?instance=X over seeded
#        instances.
#
# Env: ACCEL_BIN (target/release/accel; copy it elsewhere so a rebuild cannot replace
#      it mid-run), ARQ_LOAD (target/release/arq-load), BENCH_PORT (19540: Placement;
#      +1 accelerator API or upstream's API, +2 fake Nova, +4 upstream's Placement
#      stub), CYBORG_VENV and CYBORG_DIR (upstream-cyborg.sh), BENCH_PG_ADMIN
#      (postgres://postgres@127.0.0.1:5432/postgres), BENCH_DIR ($TMPDIR/accel-arq-bench),
#      BENCH_MYSQL_ADMIN (mysql://root@127.0.0.1:3306: accel's MariaDB/MySQL server; the
#      `mysql` client creates the database there), BENCH_PG_ANALYZE (1: ANALYZE the table after seeding, as autovacuum soon would;
#      0: measure with the planner's pre-statistics guesses).
# Build first: cargo build --release -p accel-cli -p accel-bench
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$HERE")"
TARGET="${1:?accel|upstream}"; BACKEND="${2:?sqlite|postgres|mysql}"; WHAT="${3:?cycle|list}"; shift 3
SEED=0
if [[ "$WHAT" == list ]]; then SEED="${1:?list needs the number of ARQs to seed}"; shift; fi
BIN="${ACCEL_BIN:-$ROOT/target/release/accel}"
LOAD="${ARQ_LOAD:-$ROOT/target/release/arq-load}"
PORT="${BENCH_PORT:-19540}"
APORT=$((PORT + 1)); NPORT=$((PORT + 2))
PG_ADMIN="${BENCH_PG_ADMIN:-postgres://postgres@127.0.0.1:5432/postgres}"
DIR="${BENCH_DIR:-${TMPDIR:-/tmp}/accel-arq-bench}"
DB_NAME="accel_arq_bench_$PORT"
mkdir -p "$DIR"

if [[ "$TARGET" == upstream ]]; then
  [[ "$BACKEND" == mysql ]] || { echo "upstream runs on MariaDB here: give mysql" >&2; exit 2; }
  trap '"$HERE/upstream-cyborg.sh" stop' EXIT
  CYBORG_NOVA_URL="http://127.0.0.1:$NPORT/v2.1" CYBORG_PORT="$APORT" "$HERE/upstream-cyborg.sh" start
  CDIR="${CYBORG_DIR:-${TMPDIR:-/tmp}/accel-cyborg}"
  if [[ "$SEED" -gt 0 ]]; then
    t0=$(date +%s.%N)
    "$HERE/upstream-cyborg.sh" seed-arqs "$SEED"
    echo "# seeded $SEED ARQs in $(awk "BEGIN {printf \"%.2f\", $(date +%s.%N) - $t0}") s (MariaDB)"
  fi
  echo "# upstream Cyborg on MariaDB, $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
  # Upstream reads the service check from the user's roles when no
  # keystonemiddleware sets X-Service-Roles.
  case "$WHAT" in
    cycle)
      # shellcheck disable=SC2046
      "$LOAD" --url "http://127.0.0.1:$APORT" --nova-listen "127.0.0.1:$NPORT" \
        --nova-roles member,reader,service $(cat "$CDIR/targets") "$@"
      ;;
    list)
      "$LOAD" --url "http://127.0.0.1:$APORT" --cycles 0 --seeded "$SEED" \
        --nova-roles member,reader,service "$@"
      ;;
    *) echo "what: cycle or list" >&2; exit 2 ;;
  esac
  echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg); cyborg processes' resident memory (kB): $(ps -o rss= -p "$(cat "$CDIR/api.pid")","$(cat "$CDIR/conductor.pid")" --ppid "$(cat "$CDIR/api.pid")" | paste -sd+ | bc)"
  exit 0
fi
[[ "$TARGET" == accel ]] || { echo "target: accel or upstream" >&2; exit 2; }

PID=""
stop() {
  if [[ -n "$PID" ]] && kill -0 "$PID" 2>/dev/null; then
    kill -TERM "$PID" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$PID" 2>/dev/null || break; sleep 0.05; done
    kill -KILL "$PID" 2>/dev/null || true
  fi
}
trap stop EXIT

for p in "$PORT" "$APORT"; do
  if curl -fsS -o /dev/null "http://127.0.0.1:$p/" 2>/dev/null; then
    echo "port $p already answers HTTP; choose BENCH_PORT" >&2; exit 1
  fi
done

MY_ADMIN="${BENCH_MYSQL_ADMIN:-mysql://root@127.0.0.1:3306}"
my() { # the mysql client on MY_ADMIN's server: mysql://USER[:PASSWORD]@HOST[:PORT]
  local rest="${MY_ADMIN#*://}"; rest="${rest%%/*}"
  local cred="${rest%@*}" hp="${rest##*@}"
  local host="${hp%:*}" port=3306
  [[ "$hp" == *:* ]] && port="${hp##*:}"
  MYSQL_PWD="$([[ "$cred" == *:* ]] && echo "${cred#*:}")" \
    mysql --protocol=tcp -h "$host" -P "$port" -u "${cred%%:*}" "$@"
}
if [[ "$BACKEND" == postgres ]]; then
  psql "$PG_ADMIN" -qAtc "DROP DATABASE IF EXISTS $DB_NAME WITH (FORCE)" >/dev/null
  psql "$PG_ADMIN" -qAtc "CREATE DATABASE $DB_NAME" >/dev/null
  URL="${PG_ADMIN%/*}/$DB_NAME"
elif [[ "$BACKEND" == mysql ]]; then
  [[ "$WHAT" == cycle ]] || { echo "accel on mysql: only cycle is scripted" >&2; exit 2; }
  my -e "DROP DATABASE IF EXISTS $DB_NAME; CREATE DATABASE $DB_NAME CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
  URL="${MY_ADMIN%/}/$DB_NAME"
else
  rm -f "$DIR"/accel.db*
  URL="sqlite://$DIR/accel.db"
fi
: > "$DIR/accel.log"
ACCEL_LOG="${ACCEL_LOG:-warn}" setsid "$BIN" serve --database "$URL" \
  --placement-listen "127.0.0.1:$PORT" --accelerator-listen "127.0.0.1:$APORT" \
  --metrics-listen "127.0.0.1:0" --console-listen "127.0.0.1:0" --nova-url "http://127.0.0.1:$NPORT/v2.1" >>"$DIR/accel.log" 2>&1 </dev/null &
PID=$!
for _ in $(seq 1 200); do
  curl -fsS -o /dev/null "http://127.0.0.1:$APORT/" 2>/dev/null && break
  kill -0 "$PID" 2>/dev/null || { echo "accel failed to start; see $DIR/accel.log" >&2; exit 1; }
  sleep 0.05
done

# The seed: one profile `arq-seed` and N ARQs; ARQ j belongs to instance j/4, whose
# uuid is the pattern arq-load's list phase asks for. Resolved (BindFailed), so they
# hold no attach handles and the bind worker ignores them.
LIST_SQL="SELECT a.id, a.uuid, a.state, p.name, ah.uuid FROM extended_accelerator_requests a JOIN device_profiles p ON p.id = a.device_profile_id LEFT JOIN attach_handles ah ON ah.id = a.attach_handle_id WHERE a.project_id = '5eed900000004000800000000000000a' AND a.instance_uuid = '5eed0000-0000-4000-8000-000000012345' ORDER BY a.id"
if [[ "$SEED" -gt 0 ]]; then
  t0=$(date +%s.%N)
  if [[ "$BACKEND" == postgres ]]; then
    psql "$URL" -qAt -v ON_ERROR_STOP=1 >/dev/null <<SQL
INSERT INTO device_profiles (uuid, name, description, groups, created_at)
VALUES ('5eed2000-0000-4000-8000-000000000000', 'arq-seed', NULL, '[{"resources:FPGA":"4"}]', extract(epoch FROM now())::bigint);
INSERT INTO extended_accelerator_requests
  (uuid, project_id, state, device_profile_id, device_profile_group_id, hostname, device_rp_uuid, instance_uuid, created_at)
SELECT '5eed1000-0000-4000-8000-' || lpad(i::text, 12, '0'), '5eed900000004000800000000000000a', 'BindFailed',
       (SELECT id FROM device_profiles WHERE name = 'arq-seed'), 0, 'seed-host',
       '5eed3000-0000-4000-8000-000000000000', '5eed0000-0000-4000-8000-' || lpad((i / 4)::text, 12, '0'),
       extract(epoch FROM now())::bigint
FROM generate_series(0, $SEED - 1) AS i;
$([[ "${BENCH_PG_ANALYZE:-1}" == 1 ]] && echo "ANALYZE extended_accelerator_requests;")
SQL
    t1=$(date +%s.%N)
    echo "# seeded $SEED ARQs in $(awk "BEGIN {printf \"%.2f\", $t1 - $t0}") s (PostgreSQL$([[ "${BENCH_PG_ANALYZE:-1}" == 1 ]] && echo ", then ANALYZE"))"
    echo '```text'
    psql "$URL" -qAt -c "EXPLAIN $LIST_SQL"
    echo '```'
  else
    sqlite3 "$DIR/accel.db" <<SQL
.timeout 10000
BEGIN IMMEDIATE;
INSERT INTO device_profiles (uuid, name, description, groups, created_at)
VALUES ('5eed2000-0000-4000-8000-000000000000', 'arq-seed', NULL, '[{"resources:FPGA":"4"}]', CAST(strftime('%s', 'now') AS INTEGER));
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < $SEED)
INSERT INTO extended_accelerator_requests
  (uuid, project_id, state, device_profile_id, device_profile_group_id, hostname, device_rp_uuid, instance_uuid, created_at)
SELECT printf('5eed1000-0000-4000-8000-%012d', i), '5eed900000004000800000000000000a', 'BindFailed',
       (SELECT id FROM device_profiles WHERE name = 'arq-seed'), 0, 'seed-host',
       '5eed3000-0000-4000-8000-000000000000', printf('5eed0000-0000-4000-8000-%012d', i / 4),
       CAST(strftime('%s', 'now') AS INTEGER)
FROM n;
COMMIT;
SQL
    t1=$(date +%s.%N)
    echo "# seeded $SEED ARQs in $(awk "BEGIN {printf \"%.2f\", $t1 - $t0}") s (SQLite, no ANALYZE)"
    echo '```text'
    sqlite3 "$DIR/accel.db" "EXPLAIN QUERY PLAN $LIST_SQL"
    echo '```'
  fi
fi

echo "# accel on $BACKEND, $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
case "$WHAT" in
  cycle)
    "$LOAD" --url "http://127.0.0.1:$APORT" --placement-url "http://127.0.0.1:$PORT" \
      --nova-listen "127.0.0.1:$NPORT" "$@"
    ;;
  list)
    "$LOAD" --url "http://127.0.0.1:$APORT" --placement-url "http://127.0.0.1:$PORT" \
      --cycles 0 --seeded "$SEED" "$@"
    ;;
  *) echo "what: cycle or list" >&2; exit 2 ;;
esac
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg); accel resident memory: $(awk '/VmRSS|VmHWM/ {printf "%s %s %s; ", $1, $2, $3}' "/proc/$PID/status")"
if [[ "$BACKEND" == postgres ]]; then
  stop; PID=""
  psql "$PG_ADMIN" -qAtc "DROP DATABASE IF EXISTS $DB_NAME WITH (FORCE)" >/dev/null
elif [[ "$BACKEND" == mysql ]]; then
  stop; PID=""
  my -e "DROP DATABASE IF EXISTS $DB_NAME"
fi
