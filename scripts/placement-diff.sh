#!/usr/bin/env bash
# Differential test of accel's Placement API against upstream Placement 16.0.0 (docs/conformance.md,
# "Differential test"). For each seed, starts both servers on empty SQLite databases, sends the same
# seeded random traffic to both (scripts/placement-diff.py) and prints every difference.
#
#   scripts/placement-diff.sh [placement-diff.py options...]      e.g. --requests 600 --microversion 1.20-1.39
#
# Env: SEEDS ("1 2 3"), ACCEL_BIN (target/debug/accel), DIFF_ACCEL_PORT (18951), DIFF_UPSTREAM_PORT (18952),
#      CONFORMANCE_KIT (../shared/conformance/placement). Exit status 1 when any seed found a difference.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$HERE")"
KIT="${CONFORMANCE_KIT:-$ROOT/../shared/conformance/placement}"
PY="$(WITH_UPSTREAM=1 "$KIT/setup.sh")"
SEEDS="${SEEDS:-1 2 3}"
APORT="${DIFF_ACCEL_PORT:-18951}"
UPORT="${DIFF_UPSTREAM_PORT:-18952}"
export ACCEL_BIN="${ACCEL_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/debug/accel}"
export ACCEL_PORT="$APORT" ACCEL_BACKEND=sqlite ACCEL_RUN_DIR="${TMPDIR:-/tmp}/accel-diff-accel-$APORT"
export PLACEMENT_PORT="$UPORT" PLACEMENT_RUN_DIR="${TMPDIR:-/tmp}/accel-diff-upstream-$UPORT"
export PLACEMENT_PROFILE=api
unset GABBI_FIXTURE
[[ -x "$ACCEL_BIN" ]] || { echo "no accel binary at $ACCEL_BIN (cargo build -p accel-cli, or set ACCEL_BIN)" >&2; exit 2; }
cleanup() {
  "$HERE/accel-placement.sh" stop || true
  "$KIT/upstream-placement.sh" stop >/dev/null || true
}
trap cleanup EXIT
status=0
summary=()
for seed in $SEEDS; do
  "$HERE/accel-placement.sh" start
  FRESH=1 "$KIT/upstream-placement.sh" start >/dev/null
  set +e
  "$PY" "$HERE/placement-diff.py" --upstream "http://127.0.0.1:$UPORT" --accel "http://127.0.0.1:$APORT" \
    --seed "$seed" "$@" | tee "${TMPDIR:-/tmp}/accel-placement-diff-$seed.txt"
  rc=${PIPESTATUS[0]}
  set -e
  summary+=("$(tail -1 "${TMPDIR:-/tmp}/accel-placement-diff-$seed.txt")")
  [[ $rc == 0 ]] || status=1
done
printf '%s\n' "${summary[@]}"
exit "$status"
