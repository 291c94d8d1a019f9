#!/usr/bin/env bash
# The README's walk-through ("First steps: a walk-through"), command by command, in its
# order, on a fresh SQLite database with the agent's fake devices; each step's output is
# checked and the first surprise stops the script with the step's output.
#
#   ACCEL_BIN   the accel binary (default target/debug/accel)
#   WALK_PLACEMENT_PORT, WALK_ACCEL_PORT   ports (default 18878, 16667)
set -euo pipefail
ACCEL="${ACCEL_BIN:-target/debug/accel}"
PP="${WALK_PLACEMENT_PORT:-18878}"
AP="${WALK_ACCEL_PORT:-16667}"
WORK="$(mktemp -d)"
SERVE_PID=""
cleanup() {
  [[ -n "$SERVE_PID" ]] && kill "$SERVE_PID" 2>/dev/null && wait "$SERVE_PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
export ACCEL_URL="http://127.0.0.1:$AP" ACCEL_PLACEMENT_URL="http://127.0.0.1:$PP"
PLACEMENT="http://127.0.0.1:$PP"
steps=0

fail() { echo "walk-through: step $steps ($1): $2" >&2; echo "--- output:" >&2; echo "$3" >&2; exit 1; }
# run NAME EXPECTED-REGEX CMD...: runs a README command, which must succeed and print EXPECTED.
run() {
  local name="$1" want="$2"; shift 2
  steps=$((steps + 1))
  local out
  if ! out="$("$@" 2>&1)"; then fail "$name" "exited non-zero" "$out"; fi
  grep -Eq -- "$want" <<<"$out" || fail "$name" "no match for /$want/" "$out"
  echo "ok $steps $name"
  LAST="$out"
}
# refuse NAME EXPECTED-REGEX CMD...: a command the README shows failing.
refuse() {
  local name="$1" want="$2"; shift 2
  steps=$((steps + 1))
  local out
  if out="$("$@" 2>&1)"; then fail "$name" "succeeded, should have failed" "$out"; fi
  grep -Eq -- "$want" <<<"$out" || fail "$name" "no match for /$want/" "$out"
  echo "ok $steps $name"
}
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

# 1. The server, on a fresh database.
"$ACCEL" serve --database "sqlite://$WORK/accel.db" --placement-listen "127.0.0.1:$PP" \
  --accelerator-listen "127.0.0.1:$AP" --metrics-listen "127.0.0.1:0" --console-listen "127.0.0.1:0" >"$WORK/serve.log" 2>&1 &
SERVE_PID=$!
for _ in $(seq 1 100); do curl -sf "$PLACEMENT/" >/dev/null && break; sleep 0.1; done
run "serve answers" '"max_version": ?"1.39"' curl -s "$PLACEMENT/"

# 2. The compute node provider (Nova's, made by hand), with room for an instance.
run "compute node" '"name": ?"compute-1"' curl -s -X POST -H 'x-auth-token: admin' \
  -H 'openstack-api-version: placement 1.39' -H 'content-type: application/json' \
  -d '{"name": "compute-1"}' "$PLACEMENT/resource_providers"
CN="$(json 'd["uuid"]' <<<"$LAST")"
run "compute node inventory" '"VCPU"' curl -s -X PUT -H 'x-auth-token: admin' \
  -H 'openstack-api-version: placement 1.39' -H 'content-type: application/json' \
  -d '{"resource_provider_generation": 0, "inventories": {"VCPU": {"total": 8}}}' \
  "$PLACEMENT/resource_providers/$CN/inventories"

# 3. The agent with fake devices: one FPGA card, one region, two accelerators.
cat >"$WORK/agent.toml" <<TOML
drivers = ["fake"]

[[fake.devices]]
type = "FPGA"
count = 2
regions = 1
TOML
run "agent check" 'FPGA' "$ACCEL" agent check --config "$WORK/agent.toml"
run "agent reports" '^reported: ' "$ACCEL" agent --config "$WORK/agent.toml" \
  --server "$ACCEL_URL" --node compute-1 --once

# 4. A device profile, an ARQ, and its bind to the region provider the agent made.
run "device profile" 'dp1' "$ACCEL" device-profile create dp1 \
  --group resources:CUSTOM_ACCELERATOR_FPGA=1
run "arq create" '"state": ?"Initial"' "$ACCEL" arq create dp1 -f json
ARQ="$(json 'd[0]["uuid"]' <<<"$LAST")"
# The region two levels under the node (grep reads a line at a time: its indent says so).
run "provider tree" '^   └─ compute-1_00fa:00:00.0_region0 \(' \
  "$ACCEL" provider tree compute-1
run "region provider" '"name": "compute-1_00fa:00:00.0_region0"' "$ACCEL" provider list \
  --name compute-1_00fa:00:00.0_region0 -f json
RP="$(json 'd[0]["uuid"]' <<<"$LAST")"
VM=7c9e6679-7425-40de-944b-e07fc1f90ae7
run "arq bind --wait" 'Bound' "$ACCEL" arq bind "$ARQ" --hostname compute-1 \
  --device-rp-uuid "$RP" --instance-uuid "$VM" --wait
run "arq list" 'Bound' "$ACCEL" arq list --instance "$VM" --bind-state resolved
refuse "bind-state needs an instance" 'instance' "$ACCEL" arq list --bind-state resolved

# 5. Nova's workflow without Nova, on the second accelerator.
run "boot" '"state": ?"Bound"' "$ACCEL" boot --device-profile dp1 --resources VCPU=1 \
  --instance 3f2a4c1e-8b7d-4e6f-9a0b-1c2d3e4f5a6b -f json
run "provider usage" 'CUSTOM_ACCELERATOR_FPGA +\| 2 +\| 0 +\| 1\.0 +\| [0-9]+ +\| 1 +\| 1 ' \
  "$ACCEL" provider usage compute-1_00fa:00:00.0_region0
run "unboot" 'released' "$ACCEL" unboot --instance 3f2a4c1e-8b7d-4e6f-9a0b-1c2d3e4f5a6b
refuse "unboot of an unknown instance" 'no such instance' "$ACCEL" unboot \
  --instance 3f2a4c1e-8b7d-4e6f-9a0b-1c2d3e4f5a6b
echo "walk-through: $steps steps passed"
