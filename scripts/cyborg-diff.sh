#!/usr/bin/env bash
# Differential test of accel's accelerator API against upstream Cyborg 17.0.0 (issue 44). For each
# seed, starts both sides fresh and sends them the same seeded random traffic (scripts/cyborg-diff.py):
#
#   upstream: Placement 16.0.0 (SQLite, noauth2) holding a compute-node provider named $HOST, as
#             nova-compute would create it; Cyborg's API, conductor and one fake-driver agent for
#             $HOST on MariaDB (scripts/upstream-cyborg.sh); Nova is the tester's fake events endpoint;
#   accel:    `accel serve --fake-devices $HOST` (the same device as upstream's fake driver reports)
#             on a fresh SQLite database; Nova is the tester's other fake events endpoint.
#
#   scripts/cyborg-diff.sh [cyborg-diff.py options...]        e.g. --requests 600
#   SELF_TEST=1 scripts/cyborg-diff.sh                         upstream against a second upstream stack:
#                                                              0 differences, and planted faults caught
#
# Env: SEEDS ("1 2 3"), ACCEL_BIN (target/debug/accel), DIFF_PORT (31560: upstream Cyborg; +1 accel's
#      accelerator API, +2 accel's Placement, +4/+5 the fake Novas (upstream/accel), +6 upstream
#      Placement; SELF_TEST's second upstream stack: the same +10), CYBORG_VENV
#      (${TMPDIR:-/tmp}/accel-cyborg-venv; Cyborg and Placement are installed into it when absent),
#      DIFF_DIR (${TMPDIR:-/tmp}/accel-cyborg-diff-$DIFF_PORT), CYBORG_DB (cyborg_diff_$DIFF_PORT).
# Exit status 1 when any seed found a difference that docs/cyborg-compat.md does not list.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$HERE")"
SEEDS="${SEEDS:-1 2 3}"
PORT="${DIFF_PORT:-31560}"
APORT=$((PORT + 1)); PPORT=$((PORT + 2)); UNOVA=$((PORT + 4)); ANOVA=$((PORT + 5)); UPLACE=$((PORT + 6))
DIR="${DIFF_DIR:-${TMPDIR:-/tmp}/accel-cyborg-diff-$PORT}"
DB="${CYBORG_DB:-cyborg_diff_$PORT}"
export CYBORG_VENV="${CYBORG_VENV:-${TMPDIR:-/tmp}/accel-cyborg-venv}"
ACCEL_BIN="${ACCEL_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/debug/accel}"
HOST=diff-host
if [[ "${SELF_TEST:-0}" != 1 && ! -x "$ACCEL_BIN" ]]; then
  echo "no accel binary at $ACCEL_BIN (cargo build -p accel-cli, or set ACCEL_BIN)" >&2; exit 2
fi
if [[ ! -x "$CYBORG_VENV/bin/cyborg-dbsync" || ! -x "$CYBORG_VENV/bin/placement-manage" ]]; then
  python3 -m venv "$CYBORG_VENV"
  "$CYBORG_VENV/bin/pip" install -q -r "$HERE/upstream-cyborg.txt" 'openstack-placement==16.0.0' requests
fi
PY="$CYBORG_VENV/bin/python"
mkdir -p "$DIR"
export CYBORG_HOSTS=0 CYBORG_AGENT_HOSTS="$HOST"
PIDS=()
stop_all() {
  CYBORG_DIR="$DIR/up/cyborg" "$HERE/upstream-cyborg.sh" stop || true
  CYBORG_DIR="$DIR/up2/cyborg" "$HERE/upstream-cyborg.sh" stop || true
  for pid in "${PIDS[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  PIDS=()
}
trap stop_all EXIT
trap 'exit 143' TERM INT

wait_http() {  # URL what
  for _ in $(seq 1 300); do curl -fsS -o /dev/null "$1" 2>/dev/null && return 0; sleep 0.1; done
  echo "$2 did not start" >&2; return 1
}

# One upstream stack: Placement (SQLite) with the compute node's provider, then Cyborg on it.
start_upstream() {  # CYBORG_PORT PLACEMENT_PORT NOVA_PORT DIR DB
  local cport="$1" pport="$2" nport="$3" d="$4" db="$5"
  rm -rf "$d"; mkdir -p "$d/placement"
  printf '[DEFAULT]\nlog_file = %s\n[api]\nauth_strategy = noauth2\n[placement_database]\nconnection = %s\n' \
    "$d/placement/placement.log" "sqlite:///$d/placement/placement.db" > "$d/placement/placement.conf"
  printf 'import os\nos.environ["OS_PLACEMENT_CONFIG_DIR"] = "%s"\nfrom placement.wsgi.api import application  # noqa\n' \
    "$d/placement" > "$d/placement/wsgi_diff.py"
  "$CYBORG_VENV/bin/placement-manage" --config-file "$d/placement/placement.conf" db sync
  setsid "$CYBORG_VENV/bin/gunicorn" --chdir "$d/placement" -b "127.0.0.1:$pport" -w 1 wsgi_diff:application \
    >"$d/placement/gunicorn.log" 2>&1 </dev/null &
  PIDS+=($!)
  wait_http "http://127.0.0.1:$pport/" "upstream Placement"
  # The compute node's provider, as nova-compute creates it: the fake agent's device goes under it.
  curl -fsS -o /dev/null -H 'x-auth-token: admin' -H 'content-type: application/json' \
    -d "{\"name\": \"$HOST\"}" "http://127.0.0.1:$pport/resource_providers"
  CYBORG_PORT="$cport" CYBORG_DIR="$d/cyborg" CYBORG_DB="$db" CYBORG_RPC_VHOST="$db" CYBORG_PLACEMENT_URL="http://127.0.0.1:$pport" \
    CYBORG_NOVA_URL="http://127.0.0.1:$nport/v2.1" "$HERE/upstream-cyborg.sh" start >"$d/start.log" 2>&1 \
    || { cat "$d/start.log" >&2; return 1; }
  # Its report is in; stopped, the agent's periodic report cannot put the deployable's
  # attributes back to the driver's between two requests (accel's fake devices report once).
  CYBORG_DIR="$d/cyborg" "$HERE/upstream-cyborg.sh" stop-agents >>"$d/start.log" 2>&1
}

start_accel() {
  rm -rf "$DIR/accel"; mkdir -p "$DIR/accel"
  ACCEL_LOG="${ACCEL_LOG:-warn}" setsid "$ACCEL_BIN" serve --database "sqlite://$DIR/accel/accel.db" \
    --placement-listen "127.0.0.1:$PPORT" --accelerator-listen "127.0.0.1:$APORT" \
    --metrics-listen 127.0.0.1:0 --console-listen 127.0.0.1:0 \
    --nova-url "http://127.0.0.1:$ANOVA/v2.1" --fake-devices "$HOST" >"$DIR/accel/accel.log" 2>&1 </dev/null &
  PIDS+=($!)
  wait_http "http://127.0.0.1:$APORT/" "accel"
}

status=0
summary=()
for seed in $SEEDS; do
  stop_all
  start_upstream "$PORT" "$UPLACE" "$UNOVA" "$DIR/up" "$DB"
  if [[ "${SELF_TEST:-0}" == 1 ]]; then
    start_upstream $((PORT + 10)) $((UPLACE + 10)) $((ANOVA + 10)) "$DIR/up2" "${DB}_2"
    target=(--accel "http://127.0.0.1:$((PORT + 10))" --accel-nova-port $((ANOVA + 10)) --self-test)
  else
    start_accel
    target=(--accel "http://127.0.0.1:$APORT" --accel-nova-port "$ANOVA")
  fi
  # In the background and waited for, so that a TERM stops the stacks at once (bash runs its
  # traps only between foreground commands); follow it with `tail -f $DIR/diff-SEED.txt`.
  "$PY" -u "$HERE/cyborg-diff.py" --upstream "http://127.0.0.1:$PORT" --upstream-nova-port "$UNOVA" \
    "${target[@]}" --allow "$ROOT/docs/cyborg-compat.md" --seed "$seed" "$@" >"$DIR/diff-$seed.txt" 2>&1 &
  PIDS+=($!)
  rc=0; wait "$!" || rc=$?
  cat "$DIR/diff-$seed.txt"
  summary+=("$(tail -1 "$DIR/diff-$seed.txt")")
  [[ $rc == 0 ]] || status=1
done
printf '%s\n' "${summary[@]}"
exit "$status"
