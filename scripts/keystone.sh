#!/usr/bin/env bash
# A real Keystone 30.0.0 (PyPI, pins in scripts/keystone.txt) on 127.0.0.1, bootstrapped
# as a cloud is: its own SQLite database, fernet tokens, served by gunicorn.
#
#   scripts/keystone.sh start DIR PORT [OPTIONS]   prints "keystone ready: URL" when it answers
#   scripts/keystone.sh stop DIR
#   scripts/keystone.sh venv                        prints the venv's bin directory (creates it)
#
# start: `keystone-manage db_sync`, `fernet_setup`, `credential_setup` and `bootstrap`
# (admin / ADMIN_PASSWORD in project admin, the roles admin > manager > member > reader and
# service, the identity endpoint, region RegionOne), then one Python process
# (scripts/keystone-bootstrap.py, the REST API) creates the `service` project and the users
# placement, accel, nova, glance and cyborg in it with roles `service` and `admin` (the
# install guides' grant), each with password NAME-secret, the catalog entries and the extra
# users. DIR is emptied first.
#
# DIR/env (source it): OS_* variables for the admin (OS_AUTH_URL, OS_USERNAME, ...),
# KEYSTONE_URL (without /v3), KEYSTONE_PID (gunicorn's master), KEYSTONE_PASSWORD_<USER>
# for every user created here (upper case, '-' as '_'). DIR/clouds.yaml: a cloud per
# user (admin, placement, accel, nova, glance, cyborg and the extra users), for
# OS_CLIENT_CONFIG_FILE=DIR/clouds.yaml OS_CLOUD=NAME. DIR/keystone.log is Keystone's
# log, DIR/access.log gunicorn's (one line per request: method, path, status).
#
# OPTIONS
#   --endpoint NAME TYPE URL   a catalog service and its public, internal and admin
#                              endpoints (repeat), e.g. placement placement http://h:8778,
#                              cyborg accelerator http://h:6666/accelerator/v2
#   --placement-url URL        = --endpoint placement placement URL
#   --accelerator-url URL      = --endpoint cyborg accelerator URL
#   --user NAME PASSWORD PROJECT ROLES
#                              an extra user (repeat); ROLES comma-separated; the project is
#                              created when missing; PROJECT "system" grants the roles on
#                              the system, "domain" on the Default domain
#   --expiration SECONDS       [token] expiration (default 3600)
#   --set SECTION.KEY=VALUE    any other keystone.conf option (repeat)
#   --same-as DIR0             no database or bootstrap of its own: serve DIR0's database
#                              and keys (its users, tokens, catalog), e.g. with a short
#                              --expiration, so its tokens validate on DIR0's Keystone too
#
# Env: KEYSTONE_VENV (${TMPDIR:-/tmp}/accel-keystone-venv; created from
#      scripts/keystone.txt on first use, or when the pins change),
#      ADMIN_PASSWORD (admin-secret), KEYSTONE_WORKERS (1), KEYSTONE_THREADS (1: see below),
#      KEYSTONE_SERVICE_USERS (the service users to create; default "placement accel
#      nova glance cyborg"; empty: none).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${KEYSTONE_VENV:-${TMPDIR:-/tmp}/accel-keystone-venv}"
ADMIN_PASSWORD="${ADMIN_PASSWORD:-admin-secret}"
# KEYSTONE_SERVICE_USERS: the service users to create (empty: none, as a cloud before
# its services are registered; scripts/operating-guide.sh registers accel itself).
read -ra SERVICE_USERS <<<"${KEYSTONE_SERVICE_USERS-placement accel nova glance cyborg}"

die() { echo "keystone.sh: $*" >&2; exit 1; }

# The venv, made from the pins; rebuilt when scripts/keystone.txt changes.
venv() {
  mkdir -p "$(dirname "$VENV")"
  # Scripts running at once (the checks, tempest, the Nova gate) build it once.
  exec {lock}>"$VENV.lock"
  flock "$lock"
  if [[ ! -x "$VENV/bin/keystone-manage" || ! -x "$VENV/bin/gunicorn" ]] \
     || ! cmp -s "$HERE/keystone.txt" "$VENV/keystone.txt"; then
    echo "keystone.sh: installing scripts/keystone.txt into $VENV" >&2
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --upgrade pip >/dev/null
    "$VENV/bin/pip" install -q -r "$HERE/keystone.txt" >&2
    cp "$HERE/keystone.txt" "$VENV/keystone.txt"
  fi
  flock -u "$lock"
}

stop() {
  local dir="$1" pid
  [[ -f "$dir/keystone.pid" ]] || return 0
  pid="$(cat "$dir/keystone.pid")"
  # INT: gunicorn's quick shutdown (TERM waits for its workers' graceful timeout).
  if kill -INT "$pid" 2>/dev/null; then
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$dir/keystone.pid"
}

start() {
  [[ $# -ge 2 ]] || die "usage: keystone.sh start DIR PORT [OPTIONS]"
  local dir port
  dir="$(mkdir -p "$1" && cd "$1" && pwd)"; port="$2"; shift 2
  local expiration=3600 same_as="" sets=() endpoints=() users=()
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --endpoint) [[ $# -ge 4 ]] || die "--endpoint NAME TYPE URL"
        endpoints+=("$2" "$3" "$4"); shift 4 ;;
      --placement-url) endpoints+=(placement placement "$2"); shift 2 ;;
      --accelerator-url) endpoints+=(cyborg accelerator "$2"); shift 2 ;;
      --user) [[ $# -ge 5 ]] || die "--user NAME PASSWORD PROJECT ROLES"
        users+=("$2" "$3" "$4" "$5"); shift 5 ;;
      --expiration) expiration="$2"; shift 2 ;;
      --set) sets+=("$2"); shift 2 ;;
      --same-as) same_as="$(cd "$2" && pwd)"; shift 2 ;;
      *) die "unknown option $1" ;;
    esac
  done
  if curl -fsS -o /dev/null --max-time 2 "http://127.0.0.1:$port/" 2>/dev/null; then
    die "port $port already answers HTTP"
  fi
  venv
  stop "$dir"
  rm -rf "$dir"; mkdir -p "$dir"
  local data="$dir"
  if [[ -n "$same_as" ]]; then
    [[ -f "$same_as/keystone.db" ]] || die "--same-as $same_as: no keystone.db there"
    data="$same_as"
  fi
  local url="http://127.0.0.1:$port"
  {
    echo "[DEFAULT]"
    echo "log_file = $dir/keystone.log"
    echo "[database]"
    echo "connection = sqlite:///$data/keystone.db"
    echo "[token]"
    echo "provider = fernet"
    echo "expiration = $expiration"
    echo "[fernet_tokens]"
    echo "key_repository = $data/fernet-keys"
    echo "[fernet_receipts]"
    echo "key_repository = $data/fernet-keys"
    echo "[credential]"
    echo "key_repository = $data/credential-keys"
    # bcrypt's cheapest cost: each password check is a few ms instead of 250 ms of CPU.
    echo "[identity]"
    echo "password_hash_rounds = 4"
  } >"$dir/keystone.conf"
  local kv section key value
  for kv in "${sets[@]}"; do
    [[ "$kv" == *.*=* ]] || die "--set SECTION.KEY=VALUE, not $kv"
    section="${kv%%.*}"; key="${kv#*.}"; value="${key#*=}"; key="${key%%=*}"
    # A later section of the same name adds to (or overrides) the earlier one.
    printf '[%s]\n%s = %s\n' "$section" "$key" "$value" >>"$dir/keystone.conf"
  done

  local manage=("$VENV/bin/keystone-manage" --config-file "$dir/keystone.conf")
  if [[ -z "$same_as" ]]; then
    # The three are independent: run at once (each is mostly Python's start-up).
    local owner=(--keystone-user "$(id -un)" --keystone-group "$(id -gn)") p1 p2 p3
    "${manage[@]}" db_sync >"$dir/manage-db_sync.log" 2>&1 & p1=$!
    "${manage[@]}" fernet_setup "${owner[@]}" >"$dir/manage-fernet_setup.log" 2>&1 & p2=$!
    "${manage[@]}" credential_setup "${owner[@]}" >"$dir/manage-credential_setup.log" 2>&1 & p3=$!
    wait "$p1" || die "db_sync failed: $dir/manage-db_sync.log"
    wait "$p2" || die "fernet_setup failed: $dir/manage-fernet_setup.log"
    wait "$p3" || die "credential_setup failed: $dir/manage-credential_setup.log"
  fi
  # bootstrap runs while gunicorn loads Keystone (neither needs the other).
  local pb=""
  if [[ -z "$same_as" ]]; then
    "${manage[@]}" bootstrap --bootstrap-password "$ADMIN_PASSWORD" \
      --bootstrap-region-id RegionOne --bootstrap-public-url "$url/v3" \
      --bootstrap-internal-url "$url/v3" --bootstrap-admin-url "$url/v3" >>"$dir/manage.log" 2>&1 &
    pb=$!
  fi

  # One request at a time by default: Keystone writes user.last_active_at on each user's
  # first sign-in of the (UTC) day, and on SQLite two such writes from two threads at once
  # fail the second with "database is locked" (its read lock cannot be upgraded while the
  # other holds the write lock; no busy wait helps), a 500 to the client. Services that
  # start together (the Nova gate's) sign in together; one of them died of it (CI, stop
  # 50). Keystone's requests are short and Python's GIL serialises them anyway.
  # keystone's WSGI entry point parses sys.argv with oslo.config, which would read
  # gunicorn's own arguments: a wrapper hands it none.
  cat >"$dir/keystone_wsgi.py" <<'EOF'
import sys
sys.argv = sys.argv[:1]
from keystone.server import wsgi  # noqa: E402
application = wsgi.initialize_public_application()
EOF
  OS_KEYSTONE_CONFIG_FILES="$dir/keystone.conf" PYTHONWARNINGS=ignore \
    "$VENV/bin/gunicorn" --bind "127.0.0.1:$port" --workers "${KEYSTONE_WORKERS:-1}" \
    -k gthread --threads "${KEYSTONE_THREADS:-1}" \
    --chdir "$dir" --pythonpath "$dir" --pid "$dir/keystone.pid" --no-control-socket \
    --access-logfile "$dir/access.log" --access-logformat '%(m)s %(U)s %(s)s' \
    --error-logfile "$dir/gunicorn.log" keystone_wsgi:application >>"$dir/gunicorn.log" 2>&1 &
  local pid=$!
  echo "$pid" >"$dir/keystone.pid"
  local ready=""
  for _ in $(seq 1 300); do
    if curl -fsS -o /dev/null --max-time 2 "$url/v3" 2>/dev/null; then ready=1; break; fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  if [[ -n "$pb" ]] && ! wait "$pb"; then
    stop "$dir"; die "bootstrap failed: $dir/manage.log"
  fi
  [[ -n "$ready" ]] || { tail -20 "$dir/gunicorn.log" >&2; stop "$dir"; die "Keystone on $url did not start: $dir/gunicorn.log"; }

  # Passwords: the admin's, NAME-secret for the service users, the given ones for extras.
  local -A passwords=([admin]="$ADMIN_PASSWORD")
  local -A projects=([admin]=admin)
  local u i
  for u in "${SERVICE_USERS[@]}"; do passwords[$u]="$u-secret"; projects[$u]=service; done
  for ((i = 0; i < ${#users[@]}; i += 4)); do
    passwords[${users[i]}]="${users[i + 1]}"; projects[${users[i]}]="${users[i + 2]}"
  done
  if [[ -z "$same_as" ]]; then
    "$VENV/bin/python" - "$url/v3" "$ADMIN_PASSWORD" "${SERVICE_USERS[*]}" \
        "${users[@]+"${users[@]}"}" -- "${endpoints[@]+"${endpoints[@]}"}" \
        >"$dir/bootstrap.json" 2>>"$dir/manage.log" <<'EOF' || die "bootstrap of users and catalog failed: $dir/manage.log"
import json, subprocess, sys
url, admin_pw, service_users, *rest = sys.argv[1:]
sep = rest.index("--")
users, endpoints = rest[:sep], rest[sep + 1:]
spec = {
    "auth_url": url, "admin_password": admin_pw, "region": "RegionOne",
    "roles": ["admin", "manager", "member", "reader", "service"],
    "service_users": [{"name": n, "password": f"{n}-secret"} for n in service_users.split()],
    "users": [{"name": users[i], "password": users[i + 1], "project": users[i + 2],
               "roles": [r for r in users[i + 3].split(",") if r]} for i in range(0, len(users), 4)],
    "endpoints": [{"name": endpoints[i], "type": endpoints[i + 1], "url": endpoints[i + 2]}
                  for i in range(0, len(endpoints), 3)],
}
import os
here = os.environ["KEYSTONE_SH_HERE"]
sys.exit(subprocess.run([sys.executable, f"{here}/keystone-bootstrap.py"],
                        input=json.dumps(spec), text=True).returncode)
EOF
  else
    cp "$same_as/bootstrap.json" "$dir/bootstrap.json"
  fi

  {
    echo "export OS_AUTH_URL=$url/v3 OS_IDENTITY_API_VERSION=3 OS_REGION_NAME=RegionOne OS_INTERFACE=public"
    echo "export OS_USERNAME=admin OS_PASSWORD=$ADMIN_PASSWORD OS_PROJECT_NAME=admin"
    echo "export OS_USER_DOMAIN_NAME=Default OS_PROJECT_DOMAIN_NAME=Default"
    echo "export KEYSTONE_URL=$url KEYSTONE_PID=$pid KEYSTONE_DIR=$dir"
    for u in "${!passwords[@]}"; do
      local var="KEYSTONE_PASSWORD_${u^^}"
      echo "export ${var//-/_}=${passwords[$u]}"
    done
  } >"$dir/env"
  {
    echo "clouds:"
    for u in "${!passwords[@]}"; do
      echo "  $u:"
      echo "    region_name: RegionOne"
      echo "    interface: public"
      echo "    identity_api_version: 3"
      echo "    auth:"
      echo "      auth_url: $url/v3"
      echo "      username: \"$u\""
      echo "      password: \"${passwords[$u]}\""
      echo "      user_domain_name: Default"
      if [[ "${projects[$u]}" == system ]]; then
        echo "      system_scope: all"
      elif [[ "${projects[$u]}" == domain ]]; then
        echo "      domain_name: Default"
      else
        echo "      project_name: \"${projects[$u]}\""
        echo "      project_domain_name: Default"
      fi
    done
  } >"$dir/clouds.yaml"
  echo "keystone ready: $url/v3 (pid $pid, $dir/env)"
}

export KEYSTONE_SH_HERE="$HERE"
case "${1:-}" in
  start) shift; start "$@" ;;
  stop) [[ $# -eq 2 ]] || die "usage: keystone.sh stop DIR"; stop "$2" ;;
  venv) venv; echo "$VENV/bin" ;;
  *) die "usage: keystone.sh start DIR PORT [OPTIONS] | stop DIR | venv" ;;
esac
