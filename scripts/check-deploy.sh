#!/usr/bin/env bash
# Checks what deploy/ and packaging/ ship, quickly and without building a release
# (scripts/package.sh does that):
#   - the Prometheus alert rules (`promtool check rules`), their unit tests
#     (`promtool test rules`) and the example Prometheus configuration;
#   - the Grafana dashboard: valid JSON, unique panel ids, panels that do not
#     overlap, and every query valid PromQL (checked by promtool as recording rules);
#   - the systemd units (`systemd-analyze verify`, which must print nothing);
#   - the Debian maintainer scripts (`sh -n`, and the postinst run against stubs);
#   - the Kubernetes manifests of the kustomize base and components: YAML
#     (and the API schemas, with kubernetes-validate from PyPI when installed), the
#     image tag = the workspace version, probes on the metrics port the arguments
#     open, resources, the security contexts; the components and overlays are
#     rendered and validated by scripts/dra-check.sh;
#   - the example configurations, and the agent configurations of the Kubernetes
#     base and overlays, loaded by an accel binary (the first argument, else
#     target/debug/accel when built; skipped without one).
#
# Usage: scripts/check-deploy.sh [ACCEL_BIN]
#        scripts/check-deploy.sh --configs-only ACCEL_BIN ETC_DIR   (scripts/package.sh)
# Needs (Debian): prometheus (promtool), systemd (systemd-analyze), python3-yaml.
set -euo pipefail
cd "$(dirname "$0")/.."
export RUST_BACKTRACE=0
fail() { printf 'check-deploy: %s\n' "$*" >&2; exit 1; }
say() { printf '== %s\n' "$*"; }

tmp="$(mktemp -d)"
server_pid=""
cleanup() {
  if [[ -n "$server_pid" ]]; then kill "$server_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

# The example configurations: serve.toml must start a server (with a scratch SQLite
# database and ports of its own instead of PostgreSQL and the production ports),
# agent.toml must load for `accel agent check` (no server contacted without a node).
check_configs() {
  local bin="$1" etc="$2"
  say "example configurations ($etc) with $bin"
  local extra=()
  if "$bin" serve --help | grep -q -- '--metrics-listen'; then
    extra+=(--metrics-listen 127.0.0.1:0)
  fi
  if "$bin" serve --help | grep -q -- '--console-listen'; then
    extra+=(--console-listen 127.0.0.1:0)
  fi
  # Created before the server starts: the poll below reads it at once.
  : >"$tmp/serve.log"
  "$bin" serve --config "$etc/serve.toml" --database "sqlite://$tmp/serve.db" \
    --placement-listen 127.0.0.1:0 --accelerator-listen 127.0.0.1:0 "${extra[@]}" \
    >"$tmp/serve.log" 2>&1 &
  server_pid=$!
  # Loaded: the server logs its addresses once it serves; then its Placement root
  # answers.
  local placement=""
  for _ in $(seq 1 300); do
    placement="$(sed 's/\x1b\[[0-9;]*m//g' "$tmp/serve.log" | sed -n 's/.*[ ,{]placement=\([0-9.:]*\).*/\1/p' | head -1)"
    [[ -n "$placement" ]] && break
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  if [[ -z "$placement" ]]; then
    cat "$tmp/serve.log" >&2
    fail "accel serve did not start with $etc/serve.toml"
  fi
  curl -fsS "http://$placement/" >/dev/null || fail "accel serve with $etc/serve.toml does not answer on $placement"
  kill "$server_pid"
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
  echo "serve.toml: loaded, the server answers on $placement"
  mkdir -p "$tmp/sys"
  "$bin" agent check --config "$etc/agent.toml" --node "" --sysfs-root "$tmp/sys" >"$tmp/agent.log" 2>&1 \
    || { cat "$tmp/agent.log" >&2; fail "accel agent check failed with $etc/agent.toml"; }
  echo "agent.toml: loaded ($(tail -1 "$tmp/agent.log"))"
}

# The agent configurations the Kubernetes manifests carry: the base's ConfigMap and
# each overlay's agent.toml, each loaded by `accel agent check`.
check_k8s_agent_configs() {
  local bin="$1" n=0
  say "Kubernetes agent configurations with $bin"
  mkdir -p "$tmp/sys" "$tmp/k8s-agent"
  "$PY" - deploy/kubernetes/base/agent.yaml "$tmp/k8s-agent/base.toml" <<'EOF2'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "ConfigMap"]
open(sys.argv[2], "w").write(docs[0]["data"]["agent.toml"])
EOF2
  for f in "$tmp/k8s-agent/base.toml" deploy/kubernetes/overlays/*/agent.toml; do
    "$bin" agent check --config "$f" --node "" --sysfs-root "$tmp/sys" >"$tmp/agent.log" 2>&1 \
      || { cat "$tmp/agent.log" >&2; fail "accel agent check failed with $f"; }
    n=$((n + 1))
  done
  echo "$n agent configurations load (the base's ConfigMap, deploy/kubernetes/overlays/*/agent.toml)"
}

if [[ "${1:-}" == --configs-only ]]; then
  check_configs "$2" "$3"
  exit 0
fi

PY=""
for p in python3 /usr/bin/python3; do
  if command -v "$p" >/dev/null && "$p" -c 'import yaml' 2>/dev/null; then PY="$p"; break; fi
done
[[ -n "$PY" ]] || fail "needs a python3 with PyYAML (Debian: apt-get install python3-yaml)"
command -v promtool >/dev/null || fail "needs promtool (Debian: apt-get install prometheus)"
command -v systemd-analyze >/dev/null || fail "needs systemd-analyze (Debian: apt-get install systemd)"

say "promtool: alert rules, their unit tests, the example configuration"
promtool check rules deploy/prometheus/accel-rules.yml
(cd deploy/prometheus && promtool test rules accel-rules.test.yml)
(cd deploy/prometheus && promtool check config prometheus.yml)

say "Grafana dashboard"
"$PY" - deploy/grafana/accel-dashboard.json "$tmp/dashboard-rules.yml" <<'EOF'
import json, sys
path, out = sys.argv[1], sys.argv[2]
d = json.load(open(path))
for key in ("title", "uid", "panels", "schemaVersion", "templating"):
    assert key in d, f"{path}: no {key}"
ids, cells, exprs = set(), {}, []
for p in d["panels"]:
    pid = p["id"]
    assert pid not in ids, f"panel id {pid} twice"
    ids.add(pid)
    g = p["gridPos"]
    assert g["x"] >= 0 and g["w"] > 0 and g["x"] + g["w"] <= 24, f"panel {pid} outside the grid"
    for x in range(g["x"], g["x"] + g["w"]):
        for y in range(g["y"], g["y"] + g["h"]):
            assert (x, y) not in cells, f"panel {pid} overlaps panel {cells[(x, y)]}"
            cells[(x, y)] = pid
    if p["type"] == "row":
        continue
    assert p.get("targets"), f"panel {pid} ({p['title']}) has no query"
    assert p["datasource"]["uid"] == "${datasource}", f"panel {pid}: datasource"
    for t in p["targets"]:
        e = t["expr"]
        for var, val in (("$__rate_interval", "5m"), ("$instance", ".*"), ("$node", ".*")):
            e = e.replace(var, val)
        assert "$" not in e, f"panel {pid}: unknown variable in {t['expr']}"
        exprs.append((pid, t["refId"], e))
with open(out, "w") as f:
    f.write("groups:\n  - name: dashboard\n    rules:\n")
    for pid, ref, e in exprs:
        f.write(f"      - record: dashboard:panel_{pid}_{ref}\n        expr: {json.dumps(e)}\n")
print(f"{len(d['panels'])} panels, {len(exprs)} queries")
EOF
promtool check rules "$tmp/dashboard-rules.yml" >/dev/null || {
  promtool check rules "$tmp/dashboard-rules.yml"; fail "a dashboard query is not valid PromQL"; }
echo "every query parses"

say "systemd-analyze verify"
for unit in accel-serve accel-agent; do
  # The binary is not installed here; /bin/true stands in for it.
  sed 's|^ExecStart=/usr/bin/accel |ExecStart=/bin/true |' "packaging/systemd/$unit.service" > "$tmp/$unit.service"
done
said="$(systemd-analyze verify "$tmp/accel-serve.service" "$tmp/accel-agent.service" 2>&1)" || {
  echo "$said" >&2; fail "systemd-analyze verify failed"; }
[[ -z "$said" ]] || { echo "$said" >&2; fail "systemd-analyze verify printed warnings"; }
echo "accel-serve.service, accel-agent.service: clean"

say "Debian maintainer scripts"
for s in postinst prerm postrm; do sh -n "packaging/debian/$s"; done
# postinst configure on a host without the user: it must create it and hand serve.toml
# to its group. Every command it runs is a stub that records its arguments.
mkdir -p "$tmp/stubs"
for c in useradd chown chmod systemctl; do
  printf '#!/bin/sh\necho "%s $*" >> "%s/calls"\n' "$c" "$tmp" > "$tmp/stubs/$c"
done
printf '#!/bin/sh\nexit 2\n' > "$tmp/stubs/getent"
printf '#!/bin/sh\nexit 0\n' > "$tmp/stubs/dpkg-statoverride"
chmod +x "$tmp/stubs/"*
PATH="$tmp/stubs:$PATH" sh packaging/debian/postinst configure ""
grep -q '^useradd --system --user-group --home-dir /var/lib/accel .* accel$' "$tmp/calls" || fail "postinst did not create the accel user"
grep -q '^chown root:accel /etc/accel/serve.toml$' "$tmp/calls" || fail "postinst did not give serve.toml to the accel group"
grep -q '^chmod 0640 /etc/accel/serve.toml$' "$tmp/calls" || fail "postinst did not set serve.toml's mode"
echo "postinst creates the accel user and hands it serve.toml"

say "Kubernetes manifests"
version="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)"
# Every manifest of the base and the components; kustomization.yaml files are
# kustomize's, not the API's.
mapfile -t manifests < <(find deploy/kubernetes -name '*.yaml' ! -name kustomization.yaml | sort)
"$PY" - "$version" "${manifests[@]}" <<'EOF'
import sys, yaml
version, files = sys.argv[1], sys.argv[2:]
image = f"localhost/accel:{version}"
workloads = {}
for f in files:
    for doc in yaml.safe_load_all(open(f)):
        if doc is None:
            continue
        for key in ("apiVersion", "kind", "metadata"):
            assert key in doc, f"{f}: a document without {key}"
        assert doc["metadata"].get("name"), f"{f}: a {doc['kind']} without a name"
        if doc["kind"] in ("Deployment", "DaemonSet"):
            workloads[doc["metadata"]["name"]] = (f, doc)

def check(name, metrics_port, root):
    assert name in workloads, f"no workload {name}"
    f, w = workloads[name]
    spec = w["spec"]["template"]["spec"]
    assert spec.get("automountServiceAccountToken") is False, f"{name}: mounts a service account token"
    assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault", f"{name}: seccomp"
    (c,) = spec["containers"]
    where = f"{f}: {name}"
    assert c["image"] == image, f"{where}: image {c['image']}, not {image}"
    assert f"--metrics-listen=0.0.0.0:{metrics_port}" in c["args"], f"{where}: metrics not on the pod address"
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports.get("metrics") == metrics_port, f"{where}: metrics port"
    for probe, path in (("livenessProbe", "/livez"), ("readinessProbe", "/readyz")):
        get = c[probe]["httpGet"]
        assert get["path"] == path and get["port"] == "metrics", f"{where}: {probe}"
    for kind in ("requests", "limits"):
        for res in ("cpu", "memory"):
            assert c["resources"][kind][res], f"{where}: no {kind}.{res}"
    sc = c["securityContext"]
    assert not sc.get("privileged"), f"{where}: privileged"
    assert sc["allowPrivilegeEscalation"] is False, f"{where}: privilege escalation"
    assert sc["readOnlyRootFilesystem"] is True, f"{where}: writable root filesystem"
    assert sc["capabilities"]["drop"] == ["ALL"] and not sc["capabilities"].get("add"), f"{where}: capabilities"
    user = sc.get("runAsUser", spec["securityContext"].get("runAsUser"))
    assert (user == 0) == root, f"{where}: runs as {user}"
    return w, c

w, c = check("accel-serve", 9778, root=False)
assert w["spec"]["replicas"] == 2, "accel-serve: not two replicas"
env = {e["name"]: e for e in c["env"]}
assert "secretKeyRef" in env["ACCEL_DATABASE"]["valueFrom"], "accel-serve: database URL not from a Secret"
w, c = check("accel-agent", 9779, root=True)
print(f"{len(files)} files; accel-serve and accel-agent use {image}, probes, resources, security contexts")
EOF

# Against Kubernetes' own schemas too, where kubernetes-validate (PyPI) is installed.
if command -v kubernetes-validate >/dev/null; then
  kubernetes-validate --strict --quiet "${manifests[@]}"
  echo "kubernetes-validate --strict: the manifests match the API schemas"
fi

BIN="${1:-target/debug/accel}"
if [[ -x "$BIN" ]]; then
  check_configs "$BIN" packaging/etc
  check_k8s_agent_configs "$BIN"
else
  echo "(no accel binary at $BIN: example configurations not loaded)"
fi
echo "check-deploy: all checks passed"
