#!/usr/bin/env bash
# accel in keystone mode against a real Keystone 30.0.0 (issue 29, item 1):
# scripts/keystone.sh starts Keystone A (the cloud's) and Keystone B (A's database and
# keys, [token] expiration of a few seconds: tokens that expire on cue), then
# scripts/keystone-real-check.py starts two accels on fresh SQLite databases
# (enforce_new_defaults true and false) validating against A and checks token
# validation, the policy matrix, service tokens, scopes, application credentials,
# revocation, disabled users and expiry; then accel's own credentials refused, at
# start-up and after a password rotation. Exits non-zero on any failed check.
#
# Env: ACCEL_BIN (target/debug/accel), KEYSTONE_REAL_PORT (19610: Keystone A; +1 B;
#      +2..+10 the accels), KEYSTONE_REAL_DIR (${TMPDIR:-/tmp}/accel-keystone-real),
#      KEYSTONE_VENV (see scripts/keystone.sh).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$HERE")"
ACCEL="${ACCEL_BIN:-$ROOT/target/debug/accel}"
PORT="${KEYSTONE_REAL_PORT:-19610}"
DIR="${KEYSTONE_REAL_DIR:-${TMPDIR:-/tmp}/accel-keystone-real}"
[[ -x "$ACCEL" ]] || { echo "$ACCEL is missing: cargo build -p accel-cli" >&2; exit 2; }
started=$(date +%s)

rm -rf "$DIR"; mkdir -p "$DIR"
cleanup() {
  "$HERE/keystone.sh" stop "$DIR/keystone-b" &
  "$HERE/keystone.sh" stop "$DIR/keystone-a" || true
  wait || true
}
trap cleanup EXIT

# The personas: project demo's manager, member and reader (Keystone adds the implied
# roles: manager > member > reader), a member of another project, a user whose only
# role is `service`, a system-scoped and a domain-scoped admin, and accel-rot, a second
# service user for accel whose password the checks change, and lockme. An account
# lockout policy is on (6 failed passwords lock a user for 30 minutes), as operators set
# one: accel retrying a refused password once per request would lock its own user.
"$HERE/keystone.sh" start "$DIR/keystone-a" "$PORT" \
  --user manager manager-pw demo manager \
  --user member member-pw demo member \
  --user reader reader-pw demo reader \
  --user other other-pw other member \
  --user svc svc-pw service service \
  --user sysadmin sysadmin-pw system admin \
  --user domadmin domadmin-pw domain admin \
  --user accel-rot accel-rot-pw service service,admin \
  --user lockme lockme-pw demo member \
  --set security_compliance.lockout_failure_attempts=6 \
  --set security_compliance.lockout_duration=1800
"$HERE/keystone.sh" start "$DIR/keystone-b" "$((PORT + 1))" --same-as "$DIR/keystone-a" --expiration 4
PY="$("$HERE/keystone.sh" venv)/python"

rc=0
"$PY" "$HERE/keystone-real-check.py" "$ACCEL" "http://127.0.0.1:$PORT" "http://127.0.0.1:$((PORT + 1))" \
  "$DIR" "$((PORT + 2))" || rc=$?
echo "keystone-real: $(( $(date +%s) - started )) s; logs under $DIR"
exit "$rc"
