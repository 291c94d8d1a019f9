#!/usr/bin/env bash
# Run upstream Placement's gabbi suite (../shared/conformance/placement) against accel.
#   scripts/gabbi.sh [sqlite|postgres|mysql] [gabbit files...]
# mysql: MariaDB/MySQL at ACCEL_MYSQL_URL (default mysql://root@127.0.0.1:3306).
# Prints the runner's per-file table and its closing "N passed, N failed" line.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$HERE")"
KIT="${CONFORMANCE_KIT:-$ROOT/../shared/conformance/placement}"
export ACCEL_BACKEND="${1:-sqlite}"; shift || true
export ACCEL_PORT="${ACCEL_PORT:-18780}"
export LOG_DIR="${LOG_DIR:-${TMPDIR:-/tmp}/accel-gabbi-logs-$ACCEL_BACKEND}"
export RESET_CMD="$HERE/accel-placement.sh start"
trap '"$HERE/accel-placement.sh" stop' EXIT
"$KIT/run-gabbits.sh" "127.0.0.1:$ACCEL_PORT" "$@"
