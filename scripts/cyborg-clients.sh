#!/usr/bin/env bash
# The real OpenStack clients against accel's accelerator API (issue 4, "Compatibility,
# checked in CI with the real clients from PyPI"):
#   - python-openstackclient + python-cyborgclient: `openstack accelerator device
#     profile create|list|show|delete` and `openstack accelerator arq
#     create|list|show|delete`, through keystoneauth's admin_token plugin (a fixed
#     endpoint and token, no Keystone);
#   - openstacksdk's accelerator proxy (scripts/cyborg-sdk-check.py).
# Starts `accel serve --fake-devices compute-1` on free ports with a fresh SQLite
# database and stops it at the end. Any mismatch fails the script.
#   ACCEL_BIN        the accel binary (default target/debug/accel, built when absent)
#   CONFORMANCE_PY   the conformance venv's python (default: ../shared/conformance/placement/setup.sh)
set -euo pipefail
cd "$(dirname "$0")/.."

PY="${CONFORMANCE_PY:-$(../shared/conformance/placement/setup.sh)}"
VENV_BIN="$(dirname "$PY")"
# The pinned clients (scripts/cyborg-clients.txt; .ci/run installs them too).
if ! "$PY" -c 'import cyborgclient, openstackclient, openstack' 2>/dev/null; then
  echo "installing the clients of scripts/cyborg-clients.txt into $(dirname "$VENV_BIN")"
  "$PY" -m pip install -q -r scripts/cyborg-clients.txt
fi
OPENSTACK="$VENV_BIN/openstack"

ACCEL_BIN="${ACCEL_BIN:-target/debug/accel}"
[[ -x "$ACCEL_BIN" ]] || cargo build -q -p accel-cli

WORK="$(mktemp -d)"
read -r P_PORT A_PORT < <("$PY" - <<'EOF'
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
EOF
)
"$ACCEL_BIN" serve --database "sqlite://$WORK/accel.db" \
  --placement-listen "127.0.0.1:$P_PORT" --accelerator-listen "127.0.0.1:$A_PORT" \
  --metrics-listen "127.0.0.1:0" --console-listen "127.0.0.1:0" --fake-devices compute-1 >"$WORK/server.log" 2>&1 &
SERVER=$!
cleanup() {
  kill "$SERVER" 2>/dev/null || true
  wait "$SERVER" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
for _ in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$A_PORT/" >/dev/null && break
  kill -0 "$SERVER" 2>/dev/null || { cat "$WORK/server.log" >&2; exit 1; }
  sleep 0.1
done
ENDPOINT="http://127.0.0.1:$A_PORT/accelerator"
echo "accel serve on $ENDPOINT (pid $SERVER)"

FAILED=0
# osc ARGS...: runs the OpenStack client through the admin_token plugin.
osc() {
  "$OPENSTACK" --os-auth-type admin_token --os-endpoint "$ENDPOINT" --os-token admin "$@"
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

echo "== openstack accelerator (python-cyborgclient) via admin_token"
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

echo "== openstacksdk accelerator proxy via admin_token"
if "$PY" scripts/cyborg-sdk-check.py "$ENDPOINT"; then :; else FAILED=1; fi

if [[ $FAILED != 0 ]]; then
  echo "cyborg clients: mismatches (server log: see above)" >&2
  tail -20 "$WORK/server.log" >&2
  exit 1
fi
echo "cyborg clients: all checks passed"
