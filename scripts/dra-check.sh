#!/usr/bin/env bash
# Issue 30's checks that need Python: the DRA driver's registration socket asked by a
# gRPC C-core client with each :authority, every one of which must answer (accel-k8s
# tests/dra.rs runs scripts/dra-authority.py when ACCEL_DRA_PYTHON is set), and the
# kustomize base and every overlay of deploy/kubernetes rendered and validated,
# strictly, against the Kubernetes 1.34 and 1.37 schemas, with the objects the
# documented `kubectl create` commands make for the overlays that do not ship them. Rendering: `kubectl
# kustomize` where installed, scripts/kustomize-lite.py where not; where both are,
# their outputs must hold the same objects. The claim examples of
# deploy/kubernetes/examples are validated too, and their CEL selectors evaluated
# (scripts/dra-cel.py) against the ResourceSlices the tests published.
# The Python packages are pinned in scripts/dra-check.txt and installed into
# target/dra-venv (made once, reused until the pins change).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/dra-venv
# Installed again when the pins change (the venv keeps the list it was made from).
if ! cmp -s scripts/dra-check.txt "$venv/dra-check.txt"; then
  [[ -x "$venv/bin/python" ]] || python3 -m venv "$venv"
  "$venv/bin/pip" install -q -r scripts/dra-check.txt
  cp scripts/dra-check.txt "$venv/dra-check.txt"
fi
ACCEL_DRA_PYTHON="$PWD/$venv/bin/python" cargo test -q -p accel-k8s --test dra -- --nocapture 2>&1 \
  | grep -E '"case"|^test result|panicked|error' || { echo "dra-check: the DRA socket test failed" >&2; exit 1; }
out=target/dra-manifests
rm -rf "$out"
mkdir -p "$out"
for dir in deploy/kubernetes/base deploy/kubernetes/overlays/*; do
  name="$(basename "$dir")"
  "$venv/bin/python" scripts/kustomize-lite.py "$dir" >"$out/$name.lite"
  if command -v kubectl >/dev/null; then
    kubectl kustomize "$dir" >"$out/$name.yaml"
    "$venv/bin/python" scripts/kustomize-lite.py --same "$out/$name.yaml" "$out/$name.lite"
  else
    cp "$out/$name.lite" "$out/$name.yaml"
  fi
done
# The objects the overlays do not ship, made by the documented commands: each
# `kubectl create` of docs/deployment.md's marked blocks run as written with
# `--dry-run=client -o yaml` (scripts/kube-secrets.py), into $out/made/<overlay>.yaml.
"$venv/bin/python" scripts/kube-secrets.py docs/deployment.md "$out/made"
# Every object an overlay names (Namespace, Secret with each key read, ConfigMap,
# ServiceAccount, PVC, ClusterRole) is in it or made by those commands.
for f in "$out"/*.yaml; do
  name="$(basename "$f" .yaml)"
  made=()
  [[ -f "$out/made/$name.yaml" ]] && made=("$out/made/$name.yaml")
  "$venv/bin/python" scripts/kustomize-lite.py --refs "$f" "${made[@]}"
done
echo "every object the overlays name is in them or made by docs/deployment.md's commands ($(cd "$out/made" && ls -- *.yaml | tr '\n' ' '))"
rendered="$(command -v kubectl >/dev/null && echo "kubectl kustomize, and kustomize-lite.py agrees" || echo "kustomize-lite.py (no kubectl)")"
for k in 1.34.0 1.37.0; do
  "$venv/bin/kubernetes-validate" -k "$k" --strict --quiet "$out"/*.yaml
  echo "kubernetes-validate $k --strict: $(cd "$out" && ls -- *.yaml | tr '\n' ' ')pass (rendered by $rendered)"
  "$venv/bin/kubernetes-validate" -k "$k" --strict --quiet "$out"/made/*.yaml
  echo "kubernetes-validate $k --strict: the documented commands' objects pass"
  # The claim examples users copy (docs/kubernetes.md), as they are written.
  "$venv/bin/kubernetes-validate" -k "$k" --strict --quiet deploy/kubernetes/examples/*.yaml
  echo "kubernetes-validate $k --strict: deploy/kubernetes/examples/*.yaml pass"
done
# The ResourceSlices the DRA driver sent to the stand-in API server during the cargo
# tests (scripts/test.sh sets ACCEL_DRA_SLICES_OUT for them), against the same schemas.
slices="${ACCEL_DRA_SLICES_OUT:-}"
if [[ -n "$slices" ]]; then
  n=$(find "$slices" -name '*.yaml' ! -name 'slice-examples-node.yaml' 2>/dev/null | wc -l)
  [[ $n -gt 0 ]] || { echo "dra-check: no ResourceSlice was written to $slices by the tests" >&2; exit 1; }
  # The examples' node (crates/accel-k8s/tests/examples.rs) joins them.
  ACCEL_DRA_SLICES_OUT="$slices" cargo test -q -p accel-k8s --test examples >/dev/null
  n=$((n + 1))
  # Device taints (issue 43): the tests publish tainted slices too; the check must see
  # some, or it says nothing of the taints' fields.
  tainted=$(grep -l '"taints"' "$slices"/*.yaml | wc -l)
  [[ $tainted -gt 0 ]] || { echo "dra-check: no ResourceSlice with device taints was written to $slices by the tests" >&2; exit 1; }
  # Partitionable GPUs (issue 45): counter slices and devices consuming them, which
  # 1.36 is the first release to serve by default; so 1.36 is checked too.
  counters=$(grep -l '"sharedCounters"' "$slices"/*.yaml | wc -l)
  consuming=$(grep -l '"consumesCounters"' "$slices"/*.yaml | wc -l)
  [[ $counters -gt 0 && $consuming -gt 0 ]] || { echo "dra-check: no ResourceSlice with sharedCounters and consumesCounters was written to $slices by the tests" >&2; exit 1; }
  for k in 1.34.0 1.36.0 1.37.0; do
    "$venv/bin/kubernetes-validate" -k "$k" --strict --quiet "$slices"/*.yaml
    echo "kubernetes-validate $k --strict: the $n ResourceSlices the driver sent in the tests pass ($tainted with device taints, $counters with shared counters, $consuming with devices consuming them)"
  done
  # The examples' CEL selectors against those slices.
  "$venv/bin/python" scripts/dra-cel.py deploy/kubernetes/examples \
    deploy/kubernetes/components/dra/dra.yaml "$slices"
fi
