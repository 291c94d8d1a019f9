#!/usr/bin/env bash
# The physical limit (issue 32 item 3): accel's fpga200 allocation-candidates answer
# against nginx serving the same bytes from memory, both timed with a new TCP
# connection per request, in alternating pairs (accel, nginx, accel, nginx, ...).
#
#   scripts/physical-limit.sh [pairs]        (default 3 pairs)
#
# Two clients time each target:
# - perfload.py from the conformance kit (the method of the issue-3 numbers: Python,
#   one new connection per query, --repeat queries after a warm-up);
# - wrk, one connection at a time with `Connection: close` for 5 s (a C client whose
#   own cost per request is smaller, so the servers' difference shows more).
# accel runs with its defaults on a fresh SQLite file (scripts/accel-placement.sh);
# nginx (Debian's nginx-light) with `worker_processes auto`, the answer in a file the
# page cache holds, `open_file_cache` on, access log off.
#
# Env: ACCEL_BIN (target/release/accel), LIMIT_PORT (18791; nginx on +1),
#      REPEAT (perfload.py's timed queries per run, 300).
# Build first: cargo build --release -p accel-cli
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$HERE")"
KIT="$ROOT/../shared/conformance/placement"
PAIRS="${1:-3}"
PORT="${LIMIT_PORT:-18791}"
NGINX_PORT=$((PORT + 1))
REPEAT="${REPEAT:-300}"
RUN="${TMPDIR:-/tmp}/accel-physical-limit-$PORT"
command -v nginx >/dev/null || { echo "nginx is not installed (apt-get install nginx-light)" >&2; exit 2; }
command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install wrk)" >&2; exit 2; }
rm -rf "$RUN"; mkdir -p "$RUN/www"

cleanup() {
  ACCEL_PORT="$PORT" ACCEL_RUN_DIR="$RUN/accel" "$HERE/accel-placement.sh" stop >/dev/null 2>&1 || true
  [[ -f "$RUN/nginx.pid" ]] && kill "$(cat "$RUN/nginx.pid")" 2>/dev/null || true
}
trap cleanup EXIT

ACCEL_PORT="$PORT" ACCEL_BACKEND=sqlite ACCEL_RUN_DIR="$RUN/accel" "$HERE/accel-placement.sh" start >/dev/null
python3 "$KIT/perfload.py" --url "http://127.0.0.1:$PORT" --scenario fpga200 --repeat 0 >"$RUN/load.txt"

# The query perfload.py times, and accel's answer to it: nginx serves these bytes.
QUERY='/allocation_candidates?resources=VCPU:1&resources1=CUSTOM_ACCELERATOR_FPGA:1&required1=CUSTOM_FPGA_INTEL_ARRIA10'
HDR=(-H 'x-auth-token: admin' -H 'openstack-api-version: placement 1.39')
curl -sf "${HDR[@]}" "http://127.0.0.1:$PORT$QUERY" -o "$RUN/www/answer.json"
BYTES=$(stat -c %s "$RUN/www/answer.json")
cat >"$RUN/nginx.conf" <<EOF
worker_processes auto;
pid $RUN/nginx.pid;
error_log $RUN/nginx-error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  open_file_cache max=16;
  default_type application/json;
  client_body_temp_path $RUN/tmp; proxy_temp_path $RUN/tmp; fastcgi_temp_path $RUN/tmp;
  uwsgi_temp_path $RUN/tmp; scgi_temp_path $RUN/tmp;
  server {
    listen 127.0.0.1:$NGINX_PORT;
    root $RUN/www;
    location / { try_files /answer.json =404; }
  }
}
EOF
mkdir -p "$RUN/tmp"
nginx -c "$RUN/nginx.conf" -p "$RUN"
for _ in $(seq 1 50); do curl -sf "http://127.0.0.1:$NGINX_PORT$QUERY" -o /dev/null && break; sleep 0.1; done
cmp -s <(curl -sf "http://127.0.0.1:$NGINX_PORT$QUERY") "$RUN/www/answer.json" \
  || { echo "nginx does not serve the answer's bytes" >&2; exit 1; }

echo "answer: $BYTES bytes; load average before the runs: $(cut -d' ' -f1-3 /proc/loadavg)"
perfload() { # url -> median ms
  python3 "$KIT/perfload.py" --url "$1" --skip-load --repeat "$REPEAT" --warmup 5 \
    | sed -n 's/^RESULT //p' | python3 -c 'import json,sys; print(json.load(sys.stdin)["median_ms"])'
}
wrk_ms() { # url -> "p50 mean" in ms, one connection at a time, a new one per request
  wrk -t1 -c1 -d5s --latency -H 'Connection: close' -H 'x-auth-token: admin' \
    -H 'openstack-api-version: placement 1.39' "$1" >"$RUN/wrk.txt"
  python3 - "$RUN/wrk.txt" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
def ms(v):
    n, u = re.match(r"([\d.]+)(us|ms|s)", v).groups()
    return float(n) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[u]
p50 = ms(re.search(r"50%\s+(\S+)", t).group(1))
mean = ms(re.search(r"Latency\s+(\S+)", t).group(1))
reqs = re.search(r"(\d+) requests in", t).group(1)
errs = re.search(r"Non-2xx or 3xx responses: (\d+)", t)
if errs:
    sys.exit(f"wrk saw {errs.group(1)} non-2xx answers")
print(f"{p50:.3f} {mean:.3f} {reqs}")
PY
}
printf '%-5s %-6s %14s %12s %12s %8s\n' pair target perfload_p50 wrk_p50 wrk_mean wrk_n
for i in $(seq 1 "$PAIRS"); do
  for target in accel nginx; do
    port=$PORT; [[ $target == nginx ]] && port=$NGINX_PORT
    p=$(perfload "http://127.0.0.1:$port")
    read -r w50 wmean wn < <(wrk_ms "http://127.0.0.1:$port$QUERY")
    printf '%-5s %-6s %14s %12s %12s %8s\n' "$i" "$target" "$p" "$w50" "$wmean" "$wn"
    echo "$i $target $p $w50 $wmean" >>"$RUN/results.txt"
  done
done
python3 - "$RUN/results.txt" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
for col, name in ((2, "perfload.py median"), (3, "wrk p50"), (4, "wrk mean")):
    a = statistics.median(float(r[col]) for r in rows if r[1] == "accel")
    n = statistics.median(float(r[col]) for r in rows if r[1] == "nginx")
    print(f"{name}: accel {a:.3f} ms, nginx {n:.3f} ms, ratio {a / n:.2f}x")
PY
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
