#!/usr/bin/env bash
# Real Nova 34.0.0 around accel (issue 29, item 2): Keystone, Glance 33.0.0, nova-api
# (gunicorn), nova-conductor, nova-scheduler and two nova-compute hosts (compute-a,
# compute-b; the fake virt driver, subclassed in scripts/nova_gate_driver.py to record the
# ARQs Nova hands it), with accel (`accel serve`, keystone mode) as Placement and as the
# accelerator API, and one `accel agent` per compute host reporting fake devices under
# Nova's compute node providers. No Neutron: servers are booted with `networks: none`,
# and an empty network service (scripts/nova-gate.py --neutron-stub) answers Nova's port
# and security group lookups.
# Then scripts/nova-gate.py drives Nova's API as a user would and checks, after every
# step, accel's ARQs and Placement allocations (see docs/testing.md).
#
# Needs MariaDB (root, no password, 127.0.0.1:3306: Nova's databases, fresh per run) and
# RabbitMQ (guest, 127.0.0.1:5672: a vhost of its own per run when rabbitmqctl works).
# Builds nothing: cargo build -p accel-cli first.
#
# Env: ACCEL_BIN (target/debug/accel),
#      NOVA_GATE_VENV (${TMPDIR:-/tmp}/accel-nova-venv; made from scripts/nova-gate.txt
#        when absent or when the pins change),
#      NOVA_GATE_PORT (19700: +0 Keystone, +1 Placement, +2 accelerator API, +3 accel
#        metrics, +4 nova-api, +5 Glance, +6/+7 the agents' metrics, +8 the empty
#        network service),
#      NOVA_GATE_DIR (${TMPDIR:-/tmp}/accel-nova-gate: logs and configurations, emptied
#        first),
#      NOVA_GATE_STEPS (a regex: only the checker's steps whose names match),
#      NOVA_GATE_PROGRAM_INTERVAL_MS (2000: the agents' look for programming requests),
#      NOVA_GATE_KEEP=1 (leave everything running at the end, for a look; each pid in
#        $NOVA_GATE_DIR/pids leads a process group: kill -- -PID).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$HERE")"
ACCEL="${ACCEL_BIN:-$ROOT/target/debug/accel}"
VENV="${NOVA_GATE_VENV:-${TMPDIR:-/tmp}/accel-nova-venv}"
PORT="${NOVA_GATE_PORT:-19700}"
KPORT=$PORT; PPORT=$((PORT + 1)); APORT=$((PORT + 2)); MPORT=$((PORT + 3))
NPORT=$((PORT + 4)); GPORT=$((PORT + 5)); QPORT=$((PORT + 8))
DIR="${NOVA_GATE_DIR:-${TMPDIR:-/tmp}/accel-nova-gate}"
DBP="nova_gate_$PORT"          # database name prefix
START=$SECONDS

[[ -x "$ACCEL" ]] || { echo "$ACCEL is missing: cargo build -p accel-cli" >&2; exit 2; }
# The virtual environment, made from the pins; remade when scripts/nova-gate.txt changes.
if [[ ! -x "$VENV/bin/nova-compute" ]] || ! cmp -s "$HERE/nova-gate.txt" "$VENV/nova-gate.txt"; then
  echo "nova-gate: installing scripts/nova-gate.txt into $VENV" >&2
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q -r "$HERE/nova-gate.txt"
  cp "$HERE/nova-gate.txt" "$VENV/nova-gate.txt"
fi
for p in $(seq "$PORT" $((PORT + 8))); do
  if (echo > "/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
    echo "port $p is taken; choose NOVA_GATE_PORT" >&2; exit 1
  fi
done
mariadb-admin -uroot -h 127.0.0.1 ping >/dev/null || { echo "MariaDB is not up on 127.0.0.1:3306" >&2; exit 1; }
(echo > /dev/tcp/127.0.0.1/5672) 2>/dev/null || { echo "RabbitMQ is not up on 127.0.0.1:5672" >&2; exit 1; }

rm -rf "$DIR"; mkdir -p "$DIR"/{keystone,glance/images,nova,locks,sysfs-a,sysfs-b}
: > "$DIR/pids"
VHOST=""
cleanup() {
  local rc=$?
  if [[ "${NOVA_GATE_KEEP:-0}" == 1 ]]; then
    echo "nova-gate: left running (NOVA_GATE_KEEP=1); logs in $DIR" >&2; exit "$rc"
  fi
  # Each service runs in a session of its own (setsid): its process group is its pid,
  # and takes its workers (gunicorn's, oslo.service's) with it.
  while read -r pid; do kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true; done < "$DIR/pids"
  while read -r pid; do
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
  done < "$DIR/pids"
  for db in api cell0 cell1 glance; do
    mariadb -uroot -h 127.0.0.1 -e "DROP DATABASE IF EXISTS ${DBP}_$db" 2>/dev/null || true
  done
  [[ -n "$VHOST" ]] && rabbitmqctl -q delete_vhost "$VHOST" >/dev/null 2>&1 || true
  exit "$rc"
}
trap cleanup EXIT
# bg NAME CMD...: start a service in its own session, log to $DIR/NAME.log.
bg() {
  local name="$1"; shift
  setsid "$@" >"$DIR/$name.log" 2>&1 </dev/null &
  disown  # stopped by cleanup, without bash's job notices
  echo $! >> "$DIR/pids"
  echo $! > "$DIR/$name.pid"
}
wait_http() {  # URL SECONDS NAME
  for _ in $(seq 1 $(($2 * 10))); do
    curl -s -o /dev/null --max-time 2 "$1" && return 0
    sleep 0.1
  done
  echo "$3 did not answer $1 within $2 s; log: $DIR/$3.log" >&2; tail -20 "$DIR/$3.log" >&2; exit 1
}
step() { echo "nova-gate: [$((SECONDS - START)) s] $*"; }
# What a stalled start looks like from each service (printed before the gate fails, so the
# test command's output says why without the logs at hand).
stall_report() {
  local f
  for f in nova-compute-a nova-compute-b nova-conductor nova-scheduler accel; do
    echo "--- $f.log: its last errors and warnings" >&2
    grep -E " (ERROR|WARNING|CRITICAL) |Traceback|^ERROR|^WARN" "$DIR/$f.log" 2>/dev/null | tail -8 | cut -c1-400 >&2 || true
    echo "--- $f.log: its last lines" >&2
    tail -3 "$DIR/$f.log" 2>/dev/null | cut -c1-400 >&2 || true
  done
  echo "--- services no longer running" >&2
  for f in nova-api nova-conductor nova-scheduler nova-compute-a nova-compute-b glance accel; do
    [[ -f "$DIR/$f.pid" ]] && ! kill -0 "$(cat "$DIR/$f.pid")" 2>/dev/null && echo "$f" >&2
  done
  echo "--- Keystone: requests it failed (5xx) and its last errors" >&2
  grep -E " 5[0-9][0-9]$" "$DIR/keystone/access.log" 2>/dev/null | tail -5 >&2 || true
  grep -E "Error|ERROR" "$DIR/keystone/gunicorn.log" 2>/dev/null | tail -5 | cut -c1-400 >&2 || true
  if [[ -n "$VHOST" ]]; then
    echo "--- RabbitMQ vhost $VHOST: queues (name, consumers, messages)" >&2
    rabbitmqctl -q list_queues -p "$VHOST" name consumers messages 2>&1 | head -20 >&2 || true
  else
    echo "--- RabbitMQ: the default vhost (rabbitmqctl unavailable or add_vhost failed)" >&2
  fi
}

# --- databases and the message bus ------------------------------------------------
for db in api cell0 cell1 glance; do
  mariadb -uroot -h 127.0.0.1 -e "DROP DATABASE IF EXISTS ${DBP}_$db; CREATE DATABASE ${DBP}_$db CHARACTER SET utf8mb4"
done
TRANSPORT="rabbit://guest:guest@127.0.0.1:5672/"
if command -v rabbitmqctl >/dev/null && rabbitmqctl -q add_vhost "nova_gate_$PORT" >/dev/null 2>&1; then
  VHOST="nova_gate_$PORT"
  rabbitmqctl -q set_permissions -p "$VHOST" guest '.*' '.*' '.*' >/dev/null
  TRANSPORT="rabbit://guest:guest@127.0.0.1:5672/$VHOST"
elif command -v rabbitmqctl >/dev/null && rabbitmqctl -q list_vhosts 2>/dev/null | grep -qx "nova_gate_$PORT"; then
  VHOST="nova_gate_$PORT"; TRANSPORT="rabbit://guest:guest@127.0.0.1:5672/$VHOST"
fi

# --- Keystone -----------------------------------------------------------------------
# scripts/keystone.sh: admin, the service project, the users accel, nova, glance (password
# NAME-secret, roles admin and service), the catalog, and demo, a member of project demo
# who boots the servers.
step "Keystone"
"$HERE/keystone.sh" start "$DIR/keystone" "$KPORT" \
  --placement-url "http://127.0.0.1:$PPORT" \
  --accelerator-url "http://127.0.0.1:$APORT/accelerator/v2" \
  --endpoint nova compute "http://127.0.0.1:$NPORT/v2.1" \
  --endpoint glance image "http://127.0.0.1:$GPORT" \
  --endpoint neutron network "http://127.0.0.1:$QPORT" \
  --user demo demo-secret demo member >"$DIR/keystone.out" 2>&1 \
  || { cat "$DIR/keystone.out" >&2; exit 1; }
cat "$DIR/keystone/keystone.pid" >> "$DIR/pids"
KS_URL="http://127.0.0.1:$KPORT/v3"

# --- accel: Placement and the accelerator API ---------------------------------------
step "accel serve"
cat > "$DIR/accel.toml" <<EOF
database = "sqlite://$DIR/accel.db"
placement_listen = "127.0.0.1:$PPORT"
accelerator_listen = "127.0.0.1:$APORT"
metrics_listen = "127.0.0.1:$MPORT"
console = false
auth_strategy = "keystone"
enforce_new_defaults = true
bind_timeout_seconds = 30

[keystone_authtoken]
auth_url = "$KS_URL"
username = "accel"
password = "accel-secret"
project_name = "service"

[nova]
auth_url = "$KS_URL"
username = "accel"
password = "accel-secret"
project_name = "service"
EOF
ACCEL_LOG="${ACCEL_LOG:-info}" bg accel "$ACCEL" serve --config "$DIR/accel.toml"
wait_http "http://127.0.0.1:$APORT/" 30 accel

# --- Glance -------------------------------------------------------------------------
step "Glance"
authtoken() {  # USER: its [keystone_authtoken]
  cat <<EOF
[keystone_authtoken]
www_authenticate_uri = $KS_URL
auth_url = $KS_URL
auth_type = password
username = $1
password = $1-secret
project_name = service
user_domain_name = Default
project_domain_name = Default
service_token_roles_required = true
EOF
}
cp "$VENV/etc/glance/glance-api-paste.ini" "$DIR/glance/"
cat > "$DIR/glance/glance-api.conf" <<EOF
[DEFAULT]
log_file = $DIR/glance/glance-api.log
worker_self_reference_url = http://127.0.0.1:$GPORT
enabled_backends = file:file
[database]
connection = mysql+pymysql://root@127.0.0.1/${DBP}_glance
[glance_store]
default_backend = file
[file]
filesystem_store_datadir = $DIR/glance/images
[os_glance_staging_store]
filesystem_store_datadir = $DIR/glance/staging
[os_glance_tasks_store]
filesystem_store_datadir = $DIR/glance/tasks
[paste_deploy]
flavor = keystone
config_file = $DIR/glance/glance-api-paste.ini
[oslo_concurrency]
lock_path = $DIR/locks
$(authtoken glance)
EOF
"$VENV/bin/glance-manage" --config-file "$DIR/glance/glance-api.conf" db_sync >"$DIR/glance-dbsync.log" 2>&1
OS_GLANCE_CONFIG_DIR="$DIR/glance" bg glance "$VENV/bin/gunicorn" -b "127.0.0.1:$GPORT" -w 1 \
  --threads 4 -k gthread --no-control-socket --timeout 120 glance.wsgi.api:application

# --- Nova ---------------------------------------------------------------------------
step "Nova: configuration and databases"
nova_conf() {  # HOST
  cat <<EOF
[DEFAULT]
host = $1
transport_url = $TRANSPORT
state_path = $DIR/nova/$1
instances_path = $DIR/nova/$1/instances
compute_driver = nova_gate_driver.RecordingFakeDriver
shelved_offload_time = -1
arq_binding_timeout = 30
my_ip = 127.0.0.1
use_rootwrap_daemon = false
heal_instance_info_cache_interval = -1
instance_usage_audit = false
[api]
auth_strategy = keystone
[wsgi]
api_paste_config = $VENV/etc/nova/api-paste.ini
[api_database]
connection = mysql+pymysql://root@127.0.0.1/${DBP}_api
[database]
connection = mysql+pymysql://root@127.0.0.1/${DBP}_cell1
[conductor]
workers = 1
[scheduler]
workers = 1
discover_hosts_in_cells_interval = -1
[filter_scheduler]
enabled_filters = ComputeFilter,ComputeCapabilitiesFilter,ImagePropertiesFilter
[oslo_concurrency]
lock_path = $DIR/locks/$1
[oslo_messaging_notifications]
driver = noop
[vnc]
enabled = false
[placement]
auth_type = password
auth_url = $KS_URL
username = nova
password = nova-secret
project_name = service
user_domain_name = Default
project_domain_name = Default
region_name = RegionOne
valid_interfaces = public
[cyborg]
region_name = RegionOne
valid_interfaces = public
[glance]
region_name = RegionOne
valid_interfaces = public
[neutron]
auth_type = password
auth_url = $KS_URL
username = nova
password = nova-secret
project_name = service
user_domain_name = Default
project_domain_name = Default
region_name = RegionOne
[service_user]
send_service_user_token = true
auth_type = password
auth_url = $KS_URL
username = nova
password = nova-secret
project_name = service
user_domain_name = Default
project_domain_name = Default
$(authtoken nova)
EOF
}
nova_conf controller > "$DIR/nova/nova.conf"
nova_conf compute-a > "$DIR/nova/compute-a.conf"
nova_conf compute-b > "$DIR/nova/compute-b.conf"
mkdir -p "$DIR/locks/controller" "$DIR/locks/compute-a" "$DIR/locks/compute-b" \
  "$DIR/nova/controller" "$DIR/nova/compute-a" "$DIR/nova/compute-b"
NOVA_MANAGE=("$VENV/bin/nova-manage" --config-file "$DIR/nova/nova.conf")
{
  "${NOVA_MANAGE[@]}" api_db sync
  "${NOVA_MANAGE[@]}" cell_v2 map_cell0 --database_connection "mysql+pymysql://root@127.0.0.1/${DBP}_cell0"
  "${NOVA_MANAGE[@]}" cell_v2 create_cell --name cell1
  "${NOVA_MANAGE[@]}" db sync
} >"$DIR/nova-manage.log" 2>&1 || { tail -20 "$DIR/nova-manage.log" >&2; exit 1; }

step "Nova: services"
# No Neutron: an empty network service (no ports, no security groups) answers Nova's
# questions about the servers' (absent) networks.
bg neutron-stub "$VENV/bin/python" "$HERE/nova-gate.py" --neutron-stub "$QPORT"
export PYTHONPATH="$HERE${PYTHONPATH:+:$PYTHONPATH}" PYTHONDONTWRITEBYTECODE=1
export NOVA_GATE_RECORD="$DIR/driver-record.jsonl"
: > "$NOVA_GATE_RECORD"
# nova-api's WSGI module parses sys.argv (gunicorn's arguments): a wrapper hands it none.
printf '%s\n' 'import sys' 'sys.argv = sys.argv[:1]' \
  'from nova.wsgi.osapi_compute import application  # noqa: E402,F401' > "$DIR/nova/nova_api_wsgi.py"
cp "$VENV/etc/nova/api-paste.ini" "$DIR/nova/"
OS_NOVA_CONFIG_DIR="$DIR/nova" OS_NOVA_CONFIG_FILES="api-paste.ini;nova.conf" bg nova-api "$VENV/bin/gunicorn" \
  -b "127.0.0.1:$NPORT" -w 1 --threads 8 -k gthread --no-control-socket --timeout 300 \
  --pythonpath "$DIR/nova" nova_api_wsgi:application
bg nova-conductor "$VENV/bin/nova-conductor" --config-file "$DIR/nova/nova.conf"
bg nova-scheduler "$VENV/bin/nova-scheduler" --config-file "$DIR/nova/nova.conf"
# Nova loads compute_driver from nova.virt only: the launcher puts the recording driver there.
printf '%s\n' 'import sys' 'from nova.cmd.compute import main' 'import nova_gate_driver' \
  'sys.modules["nova.virt.nova_gate_driver"] = nova_gate_driver' 'sys.exit(main())' > "$DIR/nova/nova_compute.py"
bg nova-compute-a "$VENV/bin/python" "$DIR/nova/nova_compute.py" --config-file "$DIR/nova/compute-a.conf"
bg nova-compute-b "$VENV/bin/python" "$DIR/nova/nova_compute.py" --config-file "$DIR/nova/compute-b.conf"
wait_http "http://127.0.0.1:$GPORT/" 60 glance
wait_http "http://127.0.0.1:$NPORT/" 120 nova-api

# The compute nodes' providers in accel's Placement, created by nova-compute.
step "waiting for compute-a and compute-b in Placement"
"$VENV/bin/python" - "$KS_URL" admin-secret "$PPORT" <<'EOF' || { stall_report; exit 1; }
import sys, time
from keystoneauth1 import session
from keystoneauth1.identity import v3
auth = v3.Password(auth_url=sys.argv[1], username="admin", password=sys.argv[2],
                   project_name="admin", user_domain_name="Default", project_domain_name="Default")
s = session.Session(auth=auth)
deadline = time.time() + 300
names = set()
while time.time() < deadline:
    r = s.get(f"http://127.0.0.1:{sys.argv[3]}/resource_providers",
              headers={"OpenStack-API-Version": "placement 1.39"}, raise_exc=False)
    names = {p["name"] for p in r.json().get("resource_providers", [])} if r.ok else set()
    if {"compute-a", "compute-b"} <= names:
        sys.exit(0)
    time.sleep(0.5)
sys.exit(f"compute-a and compute-b did not appear in Placement within 300 s (there: {sorted(names)})")
EOF
"${NOVA_MANAGE[@]}" cell_v2 discover_hosts >>"$DIR/nova-manage.log" 2>&1

# --- the agents -------------------------------------------------------------------
step "agents"
# compute-a also has two NVIDIA H100s in MIG mode (issue 45: one ledger per GPU for VMs
# and pods), found by the agent's real nvidia driver in a fake sysfs, through NVML as
# accel-fake-nvml (real H100 MIG geometry) answers it.
FAKE_NVML="${NOVA_GATE_FAKE_NVML:-$ROOT/target/fake-nvml/debug/libaccel_fake_nvml.so}"
if [[ ! -f "$FAKE_NVML" ]]; then
  (cd "$ROOT" && cargo build -q -p accel-fake-nvml --target-dir target/fake-nvml) \
    || { echo "building accel-fake-nvml failed" >&2; exit 2; }
fi
mkdir -p "$DIR/nvml"
cp "$FAKE_NVML" "$DIR/nvml/libnvidia-ml.so.1"
echo boot-1 > "$DIR/nvml/boot_id"
cat > "$DIR/nvml/accel-fake-nvml.conf" <<EOF
gpu bus=0000:3b:00.0 model=h100 mig=on
gpu bus=0000:5e:00.0 model=h100 mig=on
state_file $DIR/nvml/fake-nvml.state
boot_id_file $DIR/nvml/boot_id
EOF
for bdf in 0000:3b:00.0 0000:5e:00.0; do   # as the kernel shows an H100 PCIe (10de:2331)
  d="$DIR/sysfs-a/bus/pci/devices/$bdf"
  mkdir -p "$d" "$DIR/sysfs-a/bus/pci/drivers/nvidia"
  echo 0x10de > "$d/vendor"; echo 0x2331 > "$d/device"; echo 0x030200 > "$d/class"
  echo 0x10de > "$d/subsystem_vendor"; echo 0x0000 > "$d/subsystem_device"; echo 0 > "$d/numa_node"
  ln -sfn ../../../bus/pci/drivers/nvidia "$d/driver"
done

agent_conf() {  # HOST
  local drivers='"fake"' nvml=""
  if [[ "$1" == compute-a ]]; then
    drivers='"fake", "nvidia"'
    nvml="nvml_library = \"$DIR/nvml/libnvidia-ml.so.1\"
state_dir = \"$DIR/state-a\"
boot_id_file = \"$DIR/nvml/boot_id\""
  fi
  cat <<EOF
server = "http://127.0.0.1:$APORT"
node = "$1"
node_provider = "nova"
drivers = [$drivers]
$nvml
sysfs_root = "$DIR/sysfs-${1#compute-}"
interval_seconds = 5
program_interval_ms = ${NOVA_GATE_PROGRAM_INTERVAL_MS:-2000}
program_dir = "$DIR/bitstreams-$1"
metrics_listen = "127.0.0.1:$2"

[keystone]
auth_url = "$KS_URL"
username = "accel"
password = "accel-secret"
project_name = "service"

# Two GPUs of four accelerators each.
[[fake.devices]]
type = "GPU"
count = 4
model = "gate"

[[fake.devices]]
type = "GPU"
count = 4
model = "gate"

# One FPGA card, one region: programmed from Glance.
[[fake.devices]]
type = "FPGA"
count = 1
vendor = "abcd"
interface_id = "6e4c8e2e-4c4a-4b0e-9a8a-1b2c3d4e5f60"

# One AI chip of one accelerator: its handle is taken behind Nova's back.
[[fake.devices]]
type = "AICHIP"
count = 1

# One QAT device cleaned on release (issue 41): the cleaner waits while the gate holds
# the file hold-cleaning in the gate's directory.
[[fake.devices]]
type = "QAT"
count = 1

[[cleaning]]
method = "command"
command = ["sh", "$DIR/cleaner.sh", "{address}"]
timeout_seconds = 120
[cleaning.selector]
device_type = "QAT"
EOF
}
cat > "$DIR/cleaner.sh" <<'EOF'
d=$(dirname "$0")
echo start >> "$d/cleaned.log"
while [ -f "$d/hold-cleaning" ]; do sleep 0.1; done
echo end >> "$d/cleaned.log"
EOF
agent_conf compute-a $((PORT + 6)) > "$DIR/agent-a.toml"
agent_conf compute-b $((PORT + 7)) > "$DIR/agent-b.toml"
ACCEL_LOG=info bg agent-a "$ACCEL" agent --config "$DIR/agent-a.toml"
ACCEL_LOG=info bg agent-b "$ACCEL" agent --config "$DIR/agent-b.toml"

step "checks (scripts/nova-gate.py)"
rc=0
NOVA_GATE_DIR="$DIR" NOVA_GATE_KS="$KS_URL" "$VENV/bin/python" "$HERE/nova-gate.py" || rc=$?
step "done (status $rc); logs in $DIR"
exit "$rc"
