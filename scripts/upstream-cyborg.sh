#!/usr/bin/env bash
# Upstream Cyborg (openstack-cyborg from PyPI, scripts/upstream-cyborg.txt) on this
# machine, for side-by-side benchmarks with accel (scripts/bench-accelerator.sh):
#
#   upstream-cyborg.sh start         fresh database, hardware seeded, API + conductor up
#   upstream-cyborg.sh seed-arqs N   N resolved ARQs (the list benchmark's seed)
#   upstream-cyborg.sh stop-agents   the cyborg-agents only (their report stays in the database)
#   upstream-cyborg.sh stop
#
# What runs, and what stands in for the rest of a cloud:
# - cyborg-api under gunicorn (2 workers x 8 threads; oslo.service's own WSGI server
#   refuses to start with the threading backend), with upstream's paste pipeline minus
#   keystonemiddleware's authtoken: the identity comes from the X-User-Id,
#   X-Project-Id and X-Roles headers that authtoken would have set;
# - cyborg-conductor over RabbitMQ (127.0.0.1:5672, guest), which performs the ARQ
#   creates and binds (the API calls it over RPC);
# - MariaDB (root@127.0.0.1, database cyborg_bench), Cyborg's usual database;
# - Nova: arq-load's fake events endpoint (CYBORG_NOVA_URL), reached through
#   openstacksdk with keystoneauth's `none` plugin and an endpoint override;
# - Placement: a version-document stub (the conductor discovers Placement at start;
#   the benchmark's paths never call it), or CYBORG_PLACEMENT_URL, a real Placement in
#   noauth2 mode (accel serve's or upstream's), reached with keystoneauth's admin_token
#   plugin (token `admin`): what the agents and the conductor's report need;
# - agents: CYBORG_AGENT_HOSTS (a space-separated list; needs CYBORG_PLACEMENT_URL holding a
#   provider named after each, as nova-compute creates it) starts one cyborg-agent per host
#   with upstream's fake driver ([agent] enabled_drivers = fake_driver, [DEFAULT] host and
#   [agent] resource_provider_name the host); `start` returns once the conductor has written
#   every host's report (a fake FPGA device with one deployable of 16 TEST_PCI handles whose
#   resource provider it created in Placement);
# - hardware (besides the agents): `start` writes CYBORG_HOSTS hosts `arq-bench-N`, each with one
#   fake FPGA deployable of 16 TEST_PCI attach handles (what the fake driver reports),
#   straight into the database, and leaves arq-load's `--target HOST=RP` arguments in
#   $CYBORG_DIR/targets.
#
# Env: CYBORG_VENV (${TMPDIR:-/tmp}/accel-cyborg-venv, created when absent),
#      CYBORG_PORT (19560; +3 the Placement stub), CYBORG_PLACEMENT_URL (unset: the stub),
#      CYBORG_AGENT_HOSTS (none), CYBORG_NOVA_URL
#      (http://127.0.0.1:19542/v2.1), CYBORG_DIR (${TMPDIR:-/tmp}/accel-cyborg),
#      CYBORG_HOSTS (16), CYBORG_WORKERS (2), CYBORG_THREADS (8), CYBORG_DB (cyborg_bench: the
#      MariaDB database, dropped and created by `start`), CYBORG_EXCHANGE (unset: oslo.messaging's
#      default; a name of its own keeps this Cyborg's RPC apart from another one on the same
#      RabbitMQ), CYBORG_RPC_VHOST (none: RabbitMQ's `/`; created with rabbitmqctl when given.
#      Queues are named by topic alone, so two stacks on one vhost share `cyborg-conductor` and
#      each conductor takes the other's calls: give each stack its own).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${CYBORG_VENV:-${TMPDIR:-/tmp}/accel-cyborg-venv}"
PORT="${CYBORG_PORT:-19560}"
STUB_PORT=$((PORT + 3))
NOVA_URL="${CYBORG_NOVA_URL:-http://127.0.0.1:19542/v2.1}"
DIR="${CYBORG_DIR:-${TMPDIR:-/tmp}/accel-cyborg}"
HOSTS="${CYBORG_HOSTS:-16}"
DB="${CYBORG_DB:-cyborg_bench}"
NOVA_PROJECT=5eed900000004000800000000000000a   # arq-load's NOVA_PROJECT

stop_pids() {
  for f in "$@"; do
    [[ -f "$DIR/$f.pid" ]] || continue
    pid="$(cat "$DIR/$f.pid")"
    # Each was started with setsid: its process group holds it and its children
    # (gunicorn's workers), which must not outlive it.
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 -- "-$pid" 2>/dev/null || break; sleep 0.05; done
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    rm -f "$DIR/$f.pid"
  done
}
agent_pids() { (cd "$DIR" 2>/dev/null && ls agent-*.pid 2>/dev/null | sed 's/\.pid$//') || true; }
stop() { stop_pids $(agent_pids) api conductor stub; }

seed_arqs() {
  local n="$1"
  mysql -uroot -h127.0.0.1 "$DB" <<SQL
SET SESSION max_recursive_iterations = 100000000;
INSERT INTO device_profiles (uuid, name, profile_json, created_at)
VALUES ('5eed2000-0000-4000-8000-000000000000', 'arq-seed', '{"groups": [{"resources:FPGA": "4"}]}', NOW());
INSERT INTO extended_accelerator_requests
  (uuid, project_id, state, device_profile_id, device_profile_group_id, hostname, device_rp_uuid, instance_uuid, created_at)
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < $n)
SELECT CONCAT('5eed1000-0000-4000-8000-', LPAD(i, 12, '0')), '$NOVA_PROJECT', 'BindFailed',
       (SELECT id FROM device_profiles WHERE name = 'arq-seed'), 0, 'seed-host',
       '5eed3000-0000-4000-8000-000000000000', CONCAT('5eed0000-0000-4000-8000-', LPAD(i DIV 4, 12, '0')),
       NOW()
FROM n;
SQL
}

case "${1:-}" in
  stop) stop; exit 0 ;;
  stop-agents) stop_pids $(agent_pids); exit 0 ;;
  seed-arqs) seed_arqs "${2:?seed-arqs N}"; exit 0 ;;
  start) ;;
  *) echo "usage: $0 start|seed-arqs N|stop" >&2; exit 2 ;;
esac

stop
mkdir -p "$DIR/locks"
if [[ ! -x "$VENV/bin/cyborg-dbsync" ]]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q -r "$HERE/upstream-cyborg.txt"
fi
if curl -fsS -o /dev/null "http://127.0.0.1:$PORT/" 2>/dev/null; then
  echo "port $PORT already answers HTTP; choose CYBORG_PORT" >&2; exit 1
fi

cat > "$DIR/api-paste.ini" <<'EOF'
[pipeline:main]
pipeline = request_id api_v2

[app:api_v2]
paste.app_factory = cyborg.api.app:app_factory

[filter:request_id]
paste.filter_factory = oslo_middleware:RequestId.factory
EOF
cat > "$DIR/cyborg.conf" <<EOF
[DEFAULT]
transport_url = rabbit://guest:guest@127.0.0.1:5672/${CYBORG_RPC_VHOST:-}
$(if [[ -n "${CYBORG_EXCHANGE:-}" ]]; then printf 'control_exchange = %s' "$CYBORG_EXCHANGE"; fi)
log_file = $DIR/cyborg.log
[api]
api_paste_config = $DIR/api-paste.ini
[database]
connection = mysql+pymysql://root@127.0.0.1/$DB
[nova]
auth_type = none
endpoint_override = $NOVA_URL
[placement]
$(if [[ -n "${CYBORG_PLACEMENT_URL:-}" ]]; then
  printf 'auth_type = admin_token\nendpoint = %s\ntoken = admin\nendpoint_override = %s' \
    "$CYBORG_PLACEMENT_URL" "$CYBORG_PLACEMENT_URL"
else
  printf 'auth_type = none\nendpoint_override = http://127.0.0.1:%s' "$STUB_PORT"
fi)
[oslo_concurrency]
lock_path = $DIR/locks
EOF
cat > "$DIR/wsgi_bench.py" <<EOF
import sys
sys.argv = ["cyborg-api", "--config-file", "$DIR/cyborg.conf"]
from cyborg.wsgi.api import application  # noqa: E402,F401
EOF
cat > "$DIR/placement_stub.py" <<EOF
import http.server, json
DOC = json.dumps({"versions": [{"id": "v1.0", "min_version": "1.0", "max_version": "1.39",
    "status": "CURRENT", "links": [{"rel": "self", "href": ""}]}]}).encode()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(DOC)))
        self.end_headers()
        self.wfile.write(DOC)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", $STUB_PORT), H).serve_forever()
EOF

if [[ -n "${CYBORG_RPC_VHOST:-}" ]]; then
  rabbitmqctl add_vhost "$CYBORG_RPC_VHOST" >/dev/null 2>&1 || true
  rabbitmqctl set_permissions -p "$CYBORG_RPC_VHOST" guest '.*' '.*' '.*' >/dev/null
fi
mysql -uroot -h127.0.0.1 -e "DROP DATABASE IF EXISTS $DB; CREATE DATABASE $DB CHARACTER SET utf8mb4;"
"$VENV/bin/cyborg-dbsync" --config-file "$DIR/cyborg.conf" upgrade >"$DIR/dbsync.log" 2>&1
"$VENV/bin/python" - "$HOSTS" "$DB" > "$DIR/targets" <<'EOF'
import json, sys, uuid
import pymysql
db = pymysql.connect(host="127.0.0.1", user="root", database=sys.argv[2])
c = db.cursor()
out = []
for h in range(int(sys.argv[1])):
    host = f"arq-bench-{h}"
    c.execute("INSERT INTO devices (uuid, type, vendor, model, std_board_info, vendor_board_info, hostname, status, created_at) VALUES (%s, 'FPGA', '0xABCD', 'miss model info', '{}', 'fake_vendor_info', %s, 'enabled', NOW())", (str(uuid.uuid4()), host))
    dev = c.lastrowid
    c.execute("INSERT INTO controlpath_ids (uuid, device_id, cpid_type, cpid_info, created_at) VALUES (%s, %s, 'PCI', %s, NOW())", (str(uuid.uuid4()), dev, json.dumps({"domain": "0000", "bus": "0c", "device": "00", "function": "0"})))
    cpid = c.lastrowid
    rp = str(uuid.uuid4())
    c.execute("INSERT INTO deployables (uuid, name, num_accelerators, device_id, rp_uuid, driver_name, created_at) VALUES (%s, %s, 16, %s, %s, 'fake', NOW())", (str(uuid.uuid4()), f"{host}_FakeDevice", dev, rp))
    dep = c.lastrowid
    for n in range(1, 17):
        c.execute("INSERT INTO attach_handles (uuid, deployable_id, cpid_id, in_use, attach_type, attach_info, created_at) VALUES (%s, %s, %s, 0, 'TEST_PCI', %s, NOW())", (str(uuid.uuid4()), dep, cpid, json.dumps({"domain": "0000", "bus": "0c", "device": str(n // 8), "function": str(n % 8)})))
    out.append(f"--target {host}={rp}")
db.commit()
print(" ".join(out))
EOF

if [[ -z "${CYBORG_PLACEMENT_URL:-}" ]]; then
  setsid "$VENV/bin/python" "$DIR/placement_stub.py" >"$DIR/stub.log" 2>&1 </dev/null &
  echo $! > "$DIR/stub.pid"
fi
setsid "$VENV/bin/cyborg-conductor" --config-file "$DIR/cyborg.conf" >"$DIR/conductor.log" 2>&1 </dev/null &
echo $! > "$DIR/conductor.pid"
setsid "$VENV/bin/gunicorn" --chdir "$DIR" -b "127.0.0.1:$PORT" -k gthread \
  -w "${CYBORG_WORKERS:-2}" --threads "${CYBORG_THREADS:-8}" wsgi_bench:application \
  >"$DIR/api.log" 2>&1 </dev/null &
echo $! > "$DIR/api.pid"
for _ in $(seq 1 600); do
  if curl -fsS -o /dev/null "http://127.0.0.1:$PORT/v2" 2>/dev/null; then break; fi
  sleep 0.1
done
curl -fsS -o /dev/null "http://127.0.0.1:$PORT/v2" || { echo "cyborg-api did not start; see $DIR/api.log" >&2; exit 1; }
# The conductor must be listening on RPC before the first create.
for _ in $(seq 1 300); do
  grep -q "Started\|started\|Connected to AMQP" "$DIR/cyborg.log" 2>/dev/null && break
  sleep 0.1
done
# Upstream registers its policy rules lazily, and concurrent first requests in one
# worker can see "Policy cyborg:arq:create has not been registered" (403): warm every
# worker up with sequential requests first.
for _ in $(seq 1 "$(( ${CYBORG_WORKERS:-2} * 8 ))"); do
  for path in accelerator_requests device_profiles deployables; do
    curl -fsS -o /dev/null -H 'x-roles: admin,member,reader' -H 'x-project-id: admin' \
      -H 'x-user-id: admin' "http://127.0.0.1:$PORT/v2/$path" || true
  done
done
# The agents, once the conductor listens: each reports its fake device on start-up, and the
# conductor writes the rows and the device's resource provider (under the host's) in Placement.
AGENTS=(${CYBORG_AGENT_HOSTS:-})
for host in "${AGENTS[@]}"; do
  printf '[DEFAULT]\nhost = %s\nlog_file = %s\n[agent]\nenabled_drivers = fake_driver\nresource_provider_name = %s\n' \
    "$host" "$DIR/agent-$host.log" "$host" > "$DIR/agent-$host.conf"
  setsid "$VENV/bin/cyborg-agent" --config-file "$DIR/cyborg.conf" --config-file "$DIR/agent-$host.conf" \
    >"$DIR/agent-$host.out" 2>&1 </dev/null &
  echo $! > "$DIR/agent-$host.pid"
done
if (( ${#AGENTS[@]} )); then
  hosts_sql="'$(IFS=,; echo "${AGENTS[*]}" | sed "s/,/','/g")'"
  reported=0
  for _ in $(seq 1 600); do
    reported="$(mysql -uroot -h127.0.0.1 -N "$DB" -e "SELECT COUNT(DISTINCT v.hostname) FROM devices v
      JOIN deployables d ON d.device_id = v.id JOIN attach_handles h ON h.deployable_id = d.id
      WHERE v.hostname IN ($hosts_sql) AND d.rp_uuid IS NOT NULL")"
    (( reported == ${#AGENTS[@]} )) && break
    sleep 0.1
  done
  if (( reported != ${#AGENTS[@]} )); then
    echo "only $reported of ${#AGENTS[@]} agents' reports landed; see $DIR/agent-*.log, $DIR/cyborg.log" >&2
    exit 1
  fi
fi
echo "upstream Cyborg on http://127.0.0.1:$PORT ($HOSTS hosts seeded; arq-load targets in $DIR/targets)"
