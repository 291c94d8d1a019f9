#!/usr/bin/env bash
# The real OpenStack clients against accel's accelerator and Placement APIs (issue 4,
# "Compatibility, checked in CI with the real clients from PyPI"; issue 29: as users
# run them, with passwords and the catalog of a real Keystone):
#   - python-openstackclient + python-cyborgclient: `openstack accelerator device
#     profile create|list|show|delete` and `openstack accelerator arq
#     create|list|show|delete`;
#   - osc-placement: `openstack resource provider|inventory|class ...`;
#   - openstacksdk's accelerator proxy (scripts/cyborg-sdk-check.py);
#   - accel's own client commands finding the cloud the same way (`--os-cloud`,
#     `OS_CLOUD`, the `OS_AUTH_URL` variables).
# Each authenticates with a password against Keystone 30.0.0 (scripts/keystone.sh,
# clouds.yaml: the admin, and `demo-member`, a member of project demo) and finds accel
# through the catalog (placement at http://127.0.0.1:P, accelerator at
# http://127.0.0.1:A/accelerator/v2, as devstack registers Cyborg). Starts
# `accel serve --auth-strategy keystone --fake-devices compute-1` on free ports with a
# fresh SQLite database and stops both at the end. Any mismatch fails the script.
#   ACCEL_BIN        the accel binary (default target/debug/accel, built when absent)
#   CONFORMANCE_PY   the conformance venv's python (default: ../shared/conformance/placement/setup.sh)
#   KEYSTONE_VENV    see scripts/keystone.sh
set -euo pipefail
cd "$(dirname "$0")/.."

PY="${CONFORMANCE_PY:-$(../shared/conformance/placement/setup.sh)}"
VENV_BIN="$(dirname "$PY")"
# The pinned clients (scripts/cyborg-clients.txt; .ci/run installs them too).
if ! "$PY" -c 'import cyborgclient, openstackclient, openstack, osc_placement' 2>/dev/null; then
  echo "installing the clients of scripts/cyborg-clients.txt into $(dirname "$VENV_BIN")"
  "$PY" -m pip install -q -r scripts/cyborg-clients.txt
fi
OPENSTACK="$VENV_BIN/openstack"

ACCEL_BIN="${ACCEL_BIN:-target/debug/accel}"
[[ -x "$ACCEL_BIN" ]] || cargo build -q -p accel-cli

WORK="$(mktemp -d)"
read -r P_PORT A_PORT K_PORT < <("$PY" - <<'EOF'
import socket
socks = [socket.socket() for _ in range(3)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
EOF
)
SERVER=""
cleanup() {
  [[ -n "$SERVER" ]] && kill "$SERVER" 2>/dev/null || true
  [[ -n "$SERVER" ]] && wait "$SERVER" 2>/dev/null || true
  scripts/keystone.sh stop "$WORK/keystone" || true
  rm -rf "$WORK"
}
trap cleanup EXIT
scripts/keystone.sh start "$WORK/keystone" "$K_PORT" \
  --placement-url "http://127.0.0.1:$P_PORT" \
  --accelerator-url "http://127.0.0.1:$A_PORT/accelerator/v2" \
  --user demo-member demo-secret demo member
cat >"$WORK/accel.toml" <<EOF
database = "sqlite://$WORK/accel.db"
placement_listen = "127.0.0.1:$P_PORT"
accelerator_listen = "127.0.0.1:$A_PORT"
metrics_listen = "127.0.0.1:0"
console_listen = "127.0.0.1:0"
fake_devices = "compute-1"
auth_strategy = "keystone"
enforce_new_defaults = true

[keystone_authtoken]
auth_url = "http://127.0.0.1:$K_PORT/v3"
username = "accel"
password = "accel-secret"
project_name = "service"
EOF
"$ACCEL_BIN" serve --config "$WORK/accel.toml" >"$WORK/server.log" 2>&1 &
SERVER=$!
for _ in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$A_PORT/" >/dev/null && break
  kill -0 "$SERVER" 2>/dev/null || { cat "$WORK/server.log" >&2; exit 1; }
  sleep 0.1
done
echo "accel serve in keystone mode: accelerator http://127.0.0.1:$A_PORT, placement http://127.0.0.1:$P_PORT (pid $SERVER)"
# The clients read the clouds of scripts/keystone.sh's clouds.yaml; no OS_* variable
# from the caller's environment may point them elsewhere.
unset OS_CLOUD OS_AUTH_URL OS_TOKEN OS_ENDPOINT OS_URL OS_AUTH_TYPE OS_USERNAME OS_PASSWORD OS_PROJECT_NAME
export OS_CLIENT_CONFIG_FILE="$WORK/keystone/clouds.yaml"
CLOUD=admin

FAILED=0
# osc ARGS...: runs the OpenStack client as $CLOUD (a password, the catalog).
osc() {
  "$OPENSTACK" --os-cloud "$CLOUD" "$@"
}
# expect DESCRIPTION PYTHON-EXPR JSON: checks EXPR over `d` (the parsed JSON).
expect() {
  if "$PY" -c 'import json,sys; d = json.loads(sys.argv[2]); sys.exit(0 if eval(sys.argv[1]) else 1)' "$2" "$3"; then
    echo "ok   $1"
  else
    echo "FAIL $1: expected $2 in: $3" >&2
    FAILED=1
  fi
}
# succeeds DESCRIPTION ARGS...: the osc command must succeed.
succeeds() {
  local what="$1"; shift
  local out
  if out="$(osc "$@" 2>&1)"; then
    echo "ok   $what"
  else
    echo "FAIL $what: $out" >&2; FAILED=1
  fi
}
# fails DESCRIPTION PATTERN ARGS...: the osc command must fail with PATTERN in its output.
fails() {
  local what="$1" pattern="$2"; shift 2
  local out
  if out="$(osc "$@" 2>&1)"; then
    echo "FAIL $what: succeeded: $out" >&2; FAILED=1
  elif grep -q -- "$pattern" <<<"$out"; then
    echo "ok   $what"
  else
    echo "FAIL $what: no '$pattern' in: $out" >&2; FAILED=1
  fi
}

echo "== openstack accelerator (python-cyborgclient) as the admin, through Keystone's catalog"
dp="$(osc accelerator device profile create osc-dp \
  --group 'resources:FPGA=1,trait:CUSTOM_FAKE_DEVICE=required' --description 'from osc' -f json)"
expect "device profile create" \
  'd["name"] == "osc-dp" and d["description"] == "from osc" and d["groups"] == [{"resources:FPGA": "1", "trait:CUSTOM_FAKE_DEVICE": "required"}] and len(d["uuid"]) == 36' "$dp"
DP_UUID="$("$PY" -c 'import json,sys; print(json.loads(sys.argv[1])["uuid"])' "$dp")"
expect "device profile list" \
  "[p['name'] for p in d] == ['osc-dp'] and d[0]['uuid'] == '$DP_UUID'" \
  "$(osc accelerator device profile list -f json)"
expect "device profile list --long" "d[0]['uuid'] == '$DP_UUID'" \
  "$(osc accelerator device profile list --long -f json)"
expect "device profile show <uuid>" "d['name'] == 'osc-dp' and d['uuid'] == '$DP_UUID'" \
  "$(osc accelerator device profile show "$DP_UUID" -f json)"
# Lookup by name needs microversion 2.2; the plugin's own 2.3 default does not reach
# the request through OSC 10 (it goes at 2.0, where upstream also answers 406).
expect "device profile show <name> (2.3)" "d['uuid'] == '$DP_UUID'" \
  "$(osc --os-accelerator-api-version 2.3 accelerator device profile show osc-dp -f json)"
fails "device profile show <unknown uuid>" "not found" \
  accelerator device profile show 9a0a3d1b-0b8e-4a5e-9c2e-1d2e3f4a5b6c

arq="$(osc accelerator arq create osc-dp -f json)"
expect "arq create" 'd["device_profile_name"] == "osc-dp" and d["state"] == "Initial" and len(d["uuid"]) == 36' "$arq"
ARQ_UUID="$("$PY" -c 'import json,sys; print(json.loads(sys.argv[1])["uuid"])' "$arq")"
expect "arq list" "[a['uuid'] for a in d] == ['$ARQ_UUID'] and d[0]['state'] == 'Initial'" \
  "$(osc accelerator arq list -f json)"
expect "arq list --long" "d[0]['uuid'] == '$ARQ_UUID' and d[0]['device_profile_name'] == 'osc-dp'" \
  "$(osc accelerator arq list --long -f json)"
expect "arq show" "d['uuid'] == '$ARQ_UUID' and d['device_profile_name'] == 'osc-dp' and d['instance_uuid'] is None" \
  "$(osc accelerator arq show "$ARQ_UUID" -f json)"
fails "device profile delete while an ARQ uses it" "ConflictException: 409" \
  accelerator device profile delete osc-dp
succeeds "arq delete" accelerator arq delete "$ARQ_UUID"
expect "arq list after delete" "d == []" "$(osc accelerator arq list -f json)"
fails "arq show after delete" "not found" accelerator arq show "$ARQ_UUID"
succeeds "device profile delete" accelerator device profile delete osc-dp
expect "device profile list after delete" "d == []" "$(osc accelerator device profile list -f json)"

echo "== openstack accelerator as a project member (demo)"
succeeds "admin: device profile create osc-dp2" accelerator device profile create osc-dp2 --group 'resources:FPGA=1'
CLOUD=demo-member
arq="$(osc accelerator arq create osc-dp2 -f json)"
expect "member: arq create" 'd["device_profile_name"] == "osc-dp2" and d["state"] == "Initial"' "$arq"
MEMBER_ARQ="$("$PY" -c 'import json,sys; print(json.loads(sys.argv[1])["uuid"])' "$arq")"
expect "member: arq list shows the project's ARQ" "[a['uuid'] for a in d] == ['$MEMBER_ARQ']" \
  "$(osc accelerator arq list -f json)"
fails "member: device profile create refused by policy" "cyborg:device_profile:create" \
  accelerator device profile create osc-dp3 --group 'resources:FPGA=1'
fails "member: resource provider list refused by Placement's policy" "placement:resource_providers:list" \
  resource provider list
succeeds "member: arq delete" accelerator arq delete "$MEMBER_ARQ"
CLOUD=admin
succeeds "device profile delete osc-dp2" accelerator device profile delete osc-dp2

echo "== openstack resource provider ... (osc-placement) as the admin"
# The fake source's compute node and its device provider under it.
expect "resource provider list: the fake host's tree" \
  "sorted(p['name'] for p in d) == ['compute-1', 'compute-1_FakeDevice'] and all(len(p['uuid']) == 36 for p in d)" \
  "$(osc --os-placement-api-version 1.39 resource provider list -f json)"
rp="$(osc --os-placement-api-version 1.39 resource provider create osc-rp -f json)"
expect "resource provider create" 'd["name"] == "osc-rp" and d["generation"] == 0' "$rp"
RP_UUID="$("$PY" -c 'import json,sys; print(json.loads(sys.argv[1])["uuid"])' "$rp")"
succeeds "resource class create" --os-placement-api-version 1.39 resource class create CUSTOM_OSC
expect "resource provider inventory set" \
  "{i['resource_class']: i['total'] for i in d} == {'VCPU': 8, 'CUSTOM_OSC': 2}" \
  "$(osc --os-placement-api-version 1.39 resource provider inventory set "$RP_UUID" \
       --resource VCPU=8 --resource CUSTOM_OSC=2 -f json 2>&1 || true)"
expect "resource class list has CUSTOM_OSC" "'CUSTOM_OSC' in [c['name'] for c in d]" \
  "$(osc --os-placement-api-version 1.39 resource class list -f json)"
expect "resource provider show" "d['uuid'] == '$RP_UUID' and d['generation'] == 1" \
  "$(osc --os-placement-api-version 1.39 resource provider show "$RP_UUID" -f json)"
succeeds "resource provider delete" --os-placement-api-version 1.39 resource provider delete "$RP_UUID"
expect "resource provider list after delete" "sorted(p['name'] for p in d) == ['compute-1', 'compute-1_FakeDevice']" \
  "$(osc --os-placement-api-version 1.39 resource provider list -f json)"

echo "== accel's own client commands: --os-cloud, OS_CLOUD and the OS_AUTH_URL variables"
# accel ARGS...: accel's client commands, finding the cloud as the OpenStack clients do.
accel_cli() { "$ACCEL_BIN" "$@"; }
expect "accel provider list --os-cloud admin" \
  "sorted(p['name'] for p in d) == ['compute-1', 'compute-1_FakeDevice']" \
  "$(accel_cli provider list --os-cloud admin -f json)"
expect "accel device-profile create --os-cloud admin" 'd["name"] == "cli-dp" and d["groups"] == [{"resources:FPGA": "1"}]' \
  "$(accel_cli device-profile create cli-dp --group resources:FPGA=1 --os-cloud admin -f json)"
arq="$(OS_CLOUD=demo-member accel_cli arq create cli-dp -f json)"
expect "OS_CLOUD=demo-member accel arq create" 'len(d) == 1 and d[0]["state"] == "Initial" and d[0]["device_profile_name"] == "cli-dp"' "$arq"
CLI_ARQ="$("$PY" -c 'import json,sys; print(json.loads(sys.argv[1])[0]["uuid"])' "$arq")"
# The admin through OS_AUTH_URL, OS_USERNAME, ... (keystone.sh's env file), no cloud named.
expect "accel arq list with the admin's OS_* variables" "'$CLI_ARQ' in [a['uuid'] for a in d]" \
  "$(set -a; . "$WORK/keystone/env"; unset OS_CLIENT_CONFIG_FILE; accel_cli arq list -f json)"
if out="$(OS_CLOUD=demo-member accel_cli device-profile create cli-dp2 --group resources:FPGA=1 2>&1)"; then
  echo "FAIL accel device-profile create as a member: succeeded: $out" >&2; FAILED=1
elif grep -q "HTTP 403: Access was denied to the following resource: cyborg:device_profile:create" <<<"$out"; then
  echo "ok   accel device-profile create as a member: 403 naming the rule"
else
  echo "FAIL accel device-profile create as a member: $out" >&2; FAILED=1
fi
if OS_CLOUD=demo-member accel_cli arq delete "$CLI_ARQ" >/dev/null && accel_cli device-profile delete cli-dp --os-cloud admin >/dev/null; then
  echo "ok   accel arq delete (member), device-profile delete (admin)"
else
  echo "FAIL accel arq delete / device-profile delete" >&2; FAILED=1
fi

echo "== openstacksdk accelerator proxy as the admin, through the catalog"
if "$PY" scripts/cyborg-sdk-check.py admin; then :; else FAILED=1; fi

if [[ $FAILED != 0 ]]; then
  echo "cyborg clients: mismatches (server log: see above)" >&2
  tail -20 "$WORK/server.log" >&2
  exit 1
fi
echo "cyborg clients: all checks passed"
