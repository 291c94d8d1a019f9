#!/usr/bin/env bash
# `accel explain` against upstream Placement 16.0.0 and against accel on the same data: both
# servers start on empty SQLite databases, the cloud of crates/accel-cli/tests/data/explain_cloud.json
# is loaded into each with the same API calls, and every query below is explained against both.
# The answers must agree: the candidate count, every root's `fits`, and every root's reason codes.
# `accel explain` itself exits 2 when a `fits` contradicts the Placement it asked, so this also checks
# the engine's verdicts against upstream's allocation candidates root by root.
#
#   scripts/explain-upstream.sh
#
# Env: ACCEL_BIN (${CARGO_TARGET_DIR:-target}/debug/accel), EXPLAIN_ACCEL_PORT (18961),
#      EXPLAIN_UPSTREAM_PORT (18962), CONFORMANCE_KIT (../shared/conformance/placement).
# Needs the conformance kit's upstream Placement (WITH_UPSTREAM=1 setup.sh installs it).
# Exit status 1 on any difference.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$HERE")"
KIT="${CONFORMANCE_KIT:-$ROOT/../shared/conformance/placement}"
PY="$(WITH_UPSTREAM=1 "$KIT/setup.sh")"
APORT="${EXPLAIN_ACCEL_PORT:-18961}"
UPORT="${EXPLAIN_UPSTREAM_PORT:-18962}"
export ACCEL_BIN="${ACCEL_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/debug/accel}"
export ACCEL_PORT="$APORT" ACCEL_BACKEND=sqlite ACCEL_RUN_DIR="${TMPDIR:-/tmp}/accel-explain-accel-$APORT"
export PLACEMENT_PORT="$UPORT" PLACEMENT_RUN_DIR="${TMPDIR:-/tmp}/accel-explain-upstream-$UPORT"
export PLACEMENT_PROFILE=api
unset GABBI_FIXTURE
[[ -x "$ACCEL_BIN" ]] || { echo "no accel binary at $ACCEL_BIN (cargo build -p accel-cli, or set ACCEL_BIN)" >&2; exit 2; }
FIXTURE="$ROOT/crates/accel-cli/tests/data/explain_cloud.json"
OUT="$(mktemp -d)"
cleanup() {
  "$HERE/accel-placement.sh" stop || true
  "$KIT/upstream-placement.sh" stop >/dev/null || true
  rm -rf "$OUT"
}
trap cleanup EXIT

"$HERE/accel-placement.sh" start
FRESH=1 "$KIT/upstream-placement.sh" start >/dev/null
declare -A URL=([accel]="http://127.0.0.1:$APORT" [upstream]="http://127.0.0.1:$UPORT")
for side in accel upstream; do
  "$PY" "$HERE/explain-upstream.py" load "${URL[$side]}" "$FIXTURE"
done

# name | microversion | query
QUERIES=(
  "intel-fpga-isolate|1.39|resources=VCPU:1&resources1=CUSTOM_ACCELERATOR_FPGA:1&required1=CUSTOM_FPGA_INTEL&group_policy=isolate"
  "two-fpgas-one-group|1.39|resources=VCPU:1&resources_ACCEL=CUSTOM_ACCELERATOR_FPGA:2&required_ACCEL=CUSTOM_FPGA_INTEL"
  "any-of-traits|1.39|resources1=CUSTOM_ACCELERATOR_FPGA:1&required1=in:CUSTOM_FPGA_XILINX,CUSTOM_GPU_NVIDIA"
  "forbidden-trait|1.39|resources=VCPU:1&resources1=CUSTOM_ACCELERATOR_FPGA:1&required1=!CUSTOM_FPGA_INTEL"
  "shared-disk|1.39|resources=VCPU:1,DISK_GB:10"
  "fpga-and-gpu-isolate|1.39|resources1=CUSTOM_ACCELERATOR_FPGA:1&resources2=PGPU:1&group_policy=isolate"
  "root-required|1.39|resources=VCPU:1&root_required=CUSTOM_FPGA_INTEL"
  "single-tree-1.28|1.28|resources=VCPU:1,CUSTOM_ACCELERATOR_FPGA:1"
  "too-much-vcpu|1.39|resources=VCPU:9"
  "list-form-1.10|1.10|resources=VCPU:1,MEMORY_MB:64&limit=1"
  "same-subtree|1.39|resources_FPGA=CUSTOM_ACCELERATOR_FPGA:1&resources_GPU=PGPU:1&same_subtree=_FPGA,_GPU&group_policy=none"
  "member-of|1.39|resources=VCPU:1&member_of=aaaaaaaa-0000-4000-8000-000000000001"
  "forbidden-aggregate|1.39|resources=VCPU:1&member_of=!aaaaaaaa-0000-4000-8000-000000000001"
  "in-tree|1.39|resources=VCPU:1&resources1=CUSTOM_ACCELERATOR_FPGA:1&in_tree1=00000000-0000-4000-8000-000000000002&group_policy=none"
  # Both Placements answer 400 for a trait they do not know; explain explains it (unknown_trait).
  "unknown-trait|1.39|resources=VCPU:1&resources1=CUSTOM_ACCELERATOR_FPGA:1&required1=CUSTOM_NO_SUCH_TRAIT"
  "unknown-forbidden-trait|1.39|resources=VCPU:1&required=!CUSTOM_NO_SUCH_TRAIT"
)
status=0
for entry in "${QUERIES[@]}"; do
  IFS='|' read -r name version query <<<"$entry"
  for side in accel upstream; do
    if ! "$ACCEL_BIN" explain "$query" --microversion "$version" --placement-url "${URL[$side]}" \
      -f json >"$OUT/$name.$side.json" 2>"$OUT/$name.$side.err"; then
      echo "FAILED $name against $side: $(cat "$OUT/$name.$side.err")"
      status=1
      continue 2
    fi
  done
  "$PY" "$HERE/explain-upstream.py" compare "$name" "$OUT/$name.accel.json" "$OUT/$name.upstream.json" || status=1
done

# A query both Placements refuse: Placement's 400 is the command's error.
bad="resources1=CUSTOM_ACCELERATOR_FPGA:1&resources2=PGPU:1"
for side in accel upstream; do
  if "$ACCEL_BIN" explain "$bad" --placement-url "${URL[$side]}" >/dev/null 2>"$OUT/bad.$side.err"; then
    echo "DIFFERENT bad-query: $side answered it"; status=1
  elif ! grep -q "HTTP 400" "$OUT/bad.$side.err"; then
    echo "DIFFERENT bad-query: $side: $(cat "$OUT/bad.$side.err")"; status=1
  fi
done
[[ $status == 0 ]] && echo "same bad-query: HTTP 400 from both"
exit "$status"
