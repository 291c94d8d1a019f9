"""accel in keystone mode against a real Keystone 30.0.0 (scripts/keystone-real.sh starts
the Keystones and runs this).

Starts two accels on fresh SQLite databases, both validating tokens against Keystone A:
  new:    enforce_new_defaults = true,  service_token_roles_required = true
  legacy: enforce_new_defaults = false, service_token_roles_required = false
and checks, with tokens Keystone issued by password, application credential and
scope: token validation (401 and its body and WWW-Authenticate), the role matrix of
Cyborg 17 and Placement 16 in both policy modes for project-scoped admin, manager,
member and reader and a user whose only role is `service`, ARQ project isolation,
service tokens (X-Service-Token) with roles required and not, system- and
domain-scoped tokens (403 on every API), application credentials (their role subset
applies), revoked tokens and disabled users (still served from the validation cache,
401 once `token_cache_time` has passed) and expired tokens (Keystone B, with a short
[token] expiration, shares A's database and keys: 401 alone, accepted beside a
service token, as keystonemiddleware's allow_expired).

Every check asserts a status and the body's shape. Prints one line per check; exits 1
when any fails.

argv: ACCEL_BIN KEYSTONE_A_URL KEYSTONE_B_URL WORKDIR BASE_PORT
"""

import json
import os
import subprocess
import sys
import time
import uuid

import requests

ACCEL, KS_A, KS_B, WORK, BASE_PORT = sys.argv[1:6]
BASE_PORT = int(BASE_PORT)
CACHE_TIME = 3  # token_cache_time of both accels, seconds
HOST = "ks-compute"
PLACEMENT_LATEST = {"openstack-api-version": "placement latest"}
FAILED = []
PASSED = [0]


def check(what, cond, detail=""):
    if cond:
        PASSED[0] += 1
        print(f"ok   {what}")
    else:
        FAILED.append(what)
        print(f"FAIL {what}: {detail}")
    return cond


# ---- Keystone -----------------------------------------------------------------------


def password_token(user, password, scope, ks=KS_A):
    """A token by password; scope: ("project", NAME) | ("system",) | ("domain",) | None."""
    auth = {
        "identity": {
            "methods": ["password"],
            "password": {"user": {"name": user, "domain": {"id": "default"}, "password": password}},
        }
    }
    if scope and scope[0] == "project":
        auth["scope"] = {"project": {"name": scope[1], "domain": {"id": "default"}}}
    elif scope and scope[0] == "system":
        auth["scope"] = {"system": {"all": True}}
    elif scope and scope[0] == "domain":
        auth["scope"] = {"domain": {"id": "default"}}
    r = requests.post(f"{ks}/v3/auth/tokens?nocatalog", json={"auth": auth})
    if r.status_code != 201:
        raise SystemExit(f"keystone refused {user}: {r.status_code} {r.text}")
    return r.headers["X-Subject-Token"], r.json()["token"]


def token(user, scope=("project", "demo"), ks=KS_A):
    return password_token(user, f"{user}-pw", scope, ks)[0]


ADMIN_TOKEN = password_token("admin", os.environ.get("ADMIN_PASSWORD", "admin-secret"), ("project", "admin"))[0]


def ks_admin(method, path, body=None, ok=(200, 201, 204)):
    r = requests.request(method, f"{KS_A}/v3{path}", json=body, headers={"X-Auth-Token": ADMIN_TOKEN})
    if r.status_code not in ok:
        raise SystemExit(f"keystone {method} {path}: {r.status_code} {r.text}")
    return r.json() if r.content else None


def user_id(name):
    return ks_admin("GET", f"/users?name={name}")["users"][0]["id"]


def project_id(name):
    return ks_admin("GET", f"/projects?name={name}")["projects"][0]["id"]


# ---- accel --------------------------------------------------------------------------


class Accel:
    def __init__(self, name, port, new_defaults, roles_required, user="accel", password="accel-secret"):
        self.name = name
        self.dir = os.path.join(WORK, name)
        os.makedirs(self.dir, exist_ok=True)
        self.placement = f"http://127.0.0.1:{port}"
        self.accel = f"http://127.0.0.1:{port + 1}"
        self.metrics = f"http://127.0.0.1:{port + 2}"
        with open(os.path.join(self.dir, "accel.toml"), "w") as f:
            f.write(
                f"""database = "sqlite://{self.dir}/accel.db"
placement_listen = "127.0.0.1:{port}"
accelerator_listen = "127.0.0.1:{port + 1}"
metrics_listen = "127.0.0.1:{port + 2}"
console_listen = "127.0.0.1:0"
fake_devices = "{HOST}"
auth_strategy = "keystone"
enforce_new_defaults = {str(new_defaults).lower()}

[keystone_authtoken]
auth_url = "{KS_A}/v3"
username = "{user}"
password = "{password}"
project_name = "service"
token_cache_time = {CACHE_TIME}
service_token_roles_required = {str(roles_required).lower()}
"""
            )
        self.log = open(os.path.join(self.dir, "accel.log"), "w")
        self.proc = subprocess.Popen(
            [ACCEL, "serve", "--config", os.path.join(self.dir, "accel.toml")],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "ACCEL_LOG": os.environ.get("ACCEL_LOG", "info")},
        )

    def wait_ready(self):
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"accel {self.name} exited {self.proc.returncode}: {self.dir}/accel.log")
            try:
                if requests.get(f"{self.accel}/", timeout=1).status_code == 200:
                    return
            except requests.ConnectionError:
                pass
            time.sleep(0.1)
        raise SystemExit(f"accel {self.name} did not answer: {self.dir}/accel.log")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    def call(self, api, method, path, tok=None, service=None, body=None, headers=None):
        h = dict(headers or {})
        if tok:
            h["X-Auth-Token"] = tok
        if service:
            h["X-Service-Token"] = service
        base = self.accel + "/accelerator" if api == "accel" else self.placement
        if api == "placement":
            h.update(PLACEMENT_LATEST)
        r = requests.request(method, base + path, json=body, headers=h, timeout=30)
        try:
            r.body = r.json()
        except ValueError:
            r.body = None
        return r


def fault(r):
    """Cyborg's error envelope: the faultstring, or None when the body is not one."""
    try:
        inner = json.loads(r.body["error_message"])
        return inner["faultstring"] if inner["faultcode"] == "Client" else None
    except (TypeError, KeyError, ValueError):
        return None


def placement_error(r):
    try:
        e = r.body["errors"][0]
        return e["detail"] if e["status"] == r.status_code and e["request_id"].startswith("req-") else None
    except (TypeError, KeyError, IndexError):
        return None


def expect(what, r, status, shape):
    """status and a predicate over the parsed body."""
    ok = r.status_code == status
    try:
        ok = ok and bool(shape(r.body))
    except (TypeError, KeyError, IndexError, AttributeError):
        ok = False
    check(what, ok, f"{r.status_code} {r.text[:300]}")


def expect_denied(what, r, rule):
    """Cyborg's 403: the envelope names the rule."""
    expect(what, r, 403, lambda b: fault(r) == f"Access was denied to the following resource: {rule}")


def expect_placement_denied(what, r, rule):
    # Upstream's wording: webob's 403 page text around oslo.policy's message.
    detail = f"Access was denied to this resource.\n\n Policy does not allow {rule} to be performed.  "
    expect(what, r, 403, lambda b: placement_error(r) == detail and b["errors"][0]["title"] == "Forbidden")


def expect_401(what, r, api):
    www = r.headers.get("WWW-Authenticate")
    if api == "accel":
        shape = lambda b: b == {
            "error": {
                "code": 401,
                "title": "Unauthorized",
                "message": "The request you have made requires authentication.",
            }
        }
    else:
        shape = lambda b: placement_error(r) == "The request you have made requires authentication."
    expect(what, r, 401, lambda b: shape(b) and www == f'Keystone uri="{KS_A}/v3"')


# ---- the checks -----------------------------------------------------------------------


def setup(app, admin):
    """A device profile (admin) and the fake host's device provider."""
    r = app.call(
        "accel",
        "POST",
        "/v2/device_profiles",
        admin,
        body=[{"name": "dp1", "groups": [{"resources:FPGA": "1", "trait:CUSTOM_FAKE_DEVICE": "required"}]}],
    )
    expect(f"[{app.name}] admin creates a device profile", r, 201, lambda b: b["name"] == "dp1")
    r = app.call("placement", "GET", f"/resource_providers?name={HOST}_FakeDevice", admin)
    expect(f"[{app.name}] admin finds the fake device provider", r, 200, lambda b: len(b["resource_providers"]) == 1)
    return r.body["resource_providers"][0]["uuid"]


def role_matrix(app, new, tokens, demo_id):
    """Cyborg 17's and Placement 16's rules for each project-scoped persona.

    Keystone's implied roles apply: admin > manager > member > reader. `svc` has only the
    `service` role, in project `service`."""
    n = app.name
    # Device profiles: reader of the project or admin; legacy ORs admin_or_owner (any
    # project-scoped caller), so the service-only user reads them only in legacy mode.
    for who in ("admin", "manager", "member", "reader"):
        r = app.call("accel", "GET", "/v2/device_profiles", tokens[who])
        expect(f"[{n}] {who}: GET device_profiles 200", r, 200, lambda b: [p["name"] for p in b["device_profiles"]] == ["dp1"])
    r = app.call("accel", "GET", "/v2/device_profiles", tokens["svc"])
    if new:
        expect_denied(f"[{n}] service-only: GET device_profiles 403", r, "cyborg:device_profile:get_all")
    else:
        expect(f"[{n}] service-only: GET device_profiles 200 (admin_or_owner)", r, 200, lambda b: len(b["device_profiles"]) == 1)
    # Profile writes: admin only, in both modes.
    for who in ("manager", "member", "reader", "svc"):
        r = app.call("accel", "POST", "/v2/device_profiles", tokens[who], body=[{"name": f"x-{who}", "groups": [{"resources:FPGA": "1"}]}])
        expect_denied(f"[{n}] {who}: POST device_profiles 403", r, "cyborg:device_profile:create")
    # ARQs: members of the project (or the service role); legacy admits any
    # project-scoped caller, the reader included.
    arqs = {}
    for who in ("member", "manager", "reader"):
        r = app.call("accel", "POST", "/v2/accelerator_requests", tokens[who], body={"device_profile_name": "dp1"})
        if who == "reader" and new:
            expect_denied(f"[{n}] reader: POST accelerator_requests 403", r, "cyborg:arq:create")
            continue
        expect(
            f"[{n}] {who}: POST accelerator_requests 201",
            r,
            201,
            lambda b: b["arqs"][0]["state"] == "Initial" and b["arqs"][0]["device_profile_name"] == "dp1",
        )
        arqs[who] = r.body["arqs"][0]["uuid"]
    r = app.call("accel", "GET", "/v2/accelerator_requests", tokens["reader"])
    expect(
        f"[{n}] reader lists the project's ARQs",
        r,
        200,
        lambda b: sorted(a["uuid"] for a in b["arqs"]) == sorted(arqs.values()),
    )
    # Another project's member sees none of them, and cannot read or delete one.
    r = app.call("accel", "GET", "/v2/accelerator_requests", tokens["other"])
    expect(f"[{n}] other project's member lists no ARQ of demo", r, 200, lambda b: b["arqs"] == [])
    r = app.call("accel", "GET", f"/v2/accelerator_requests/{arqs['member']}", tokens["other"])
    expect(f"[{n}] other project's member: GET demo's ARQ 404", r, 404, lambda b: "not found" in fault(r).lower() or "could not be found" in fault(r))
    # Identity headers are keystonemiddleware's to set: a client's own are ignored.
    spoof = {"X-Roles": "admin", "X-Project-Id": demo_id, "X-Service-Roles": "service"}
    r = app.call("accel", "GET", f"/v2/accelerator_requests/{arqs['member']}", tokens["other"], headers=spoof)
    expect(f"[{n}] other project's member claiming demo in X-Project-Id: still 404", r, 404, lambda b: fault(r) is not None)
    r = app.call("accel", "POST", "/v2/device_profiles", tokens["member"], headers=spoof, body=[{"name": "spoof", "groups": [{"resources:FPGA": "1"}]}])
    expect_denied(f"[{n}] member claiming X-Roles admin: POST device_profiles 403", r, "cyborg:device_profile:create")
    r = app.call("placement", "GET", "/resource_providers", tokens["member"], headers=spoof)
    expect_placement_denied(f"[{n}] member claiming X-Roles admin: Placement 403", r, "placement:resource_providers:list")
    r = app.call("accel", "GET", "/v2/accelerator_requests", tokens["admin"])
    expect(f"[{n}] admin lists every project's ARQs", r, 200, lambda b: set(arqs.values()) <= {a["uuid"] for a in b["arqs"]})
    # Hardware reads: a project manager or an admin, in both modes (never a member). In
    # legacy mode this is accel's one deliberate difference from upstream, whose
    # deprecated admin_or_owner reopens them to every member (CVE-2026-40213; see
    # crates/accel-core/src/policy/cyborg.rs).
    for who in ("admin", "manager"):
        for path, key in (("/v2/devices", "devices"), ("/v2/deployables", "deployables")):
            r = app.call("accel", "GET", path, tokens[who])
            expect(f"[{n}] {who}: GET {path} 200", r, 200, lambda b: b[key] and b[key][0].get("hostname", HOST) == HOST)
    for who in ("member", "reader", "svc"):
        r = app.call("accel", "GET", "/v2/devices", tokens[who])
        expect_denied(f"[{n}] {who}: GET /v2/devices 403", r, "cyborg:device:get_all")

    # Placement 16: admin or service; legacy adds role:admin (no change for these).
    for who in ("admin", "svc"):
        r = app.call("placement", "GET", "/resource_providers", tokens[who])
        expect(f"[{n}] {who}: Placement GET /resource_providers 200", r, 200, lambda b: len(b["resource_providers"]) >= 1)
    for who in ("manager", "member", "reader"):
        r = app.call("placement", "GET", "/resource_providers", tokens[who])
        expect_placement_denied(f"[{n}] {who}: Placement GET /resource_providers 403", r, "placement:resource_providers:list")
    # GET /usages?project_id=: a reader of the project asked about.
    r = app.call("placement", "GET", f"/usages?project_id={demo_id}", tokens["reader"])
    expect(f"[{n}] demo's reader: Placement GET /usages of demo 200", r, 200, lambda b: b["usages"] == {})
    r = app.call("placement", "GET", f"/usages?project_id={demo_id}", tokens["other"])
    expect_placement_denied(f"[{n}] other project's member: Placement /usages of demo 403", r, "placement:usages")
    return arqs


def scoped_tokens(app, sys_tok, dom_tok):
    """System- and domain-scoped tokens: every rule is project-scoped, so 403 on both APIs."""
    n = app.name
    for what, tok in (("system-scoped admin", sys_tok), ("domain-scoped admin", dom_tok)):
        for path, rule in (
            ("/v2/device_profiles", "cyborg:device_profile:get_all"),
            ("/v2/accelerator_requests", "cyborg:arq:get_all"),
            ("/v2/devices", "cyborg:device:get_all"),
            ("/v2/deployables", "cyborg:deployable:get_all"),
            ("/v2/attributes", "cyborg:attribute:get_all"),
        ):
            expect_denied(f"[{n}] {what}: GET {path} 403", app.call("accel", "GET", path, tok), rule)
        r = app.call("accel", "POST", "/v2/device_profiles", tok, body=[{"name": "scoped", "groups": [{"resources:FPGA": "1"}]}])
        expect_denied(f"[{n}] {what}: POST /v2/device_profiles 403", r, "cyborg:device_profile:create")
        r = app.call("accel", "POST", "/v2/accelerator_requests", tok, body={"device_profile_name": "dp1"})
        expect_denied(f"[{n}] {what}: POST /v2/accelerator_requests 403", r, "cyborg:arq:create")
        for path, rule in (
            ("/resource_providers", "placement:resource_providers:list"),
            ("/resource_classes", "placement:resource_classes:list"),
            ("/traits", "placement:traits:list"),
            ("/usages?project_id=any", "placement:usages"),
            ("/allocation_candidates?resources=FPGA:1", "placement:allocation_candidates:list"),
        ):
            r = app.call("placement", "GET", path, tok)
            expect_placement_denied(f"[{n}] {what}: Placement GET {path} 403", r, rule)


def bind_body(arq, rp):
    return {
        arq: [
            {"op": "add", "path": "/hostname", "value": HOST},
            {"op": "add", "path": "/device_rp_uuid", "value": rp},
            {"op": "add", "path": "/instance_uuid", "value": str(uuid.uuid4())},
        ]
    }


def service_tokens(app, required, tokens, arq, rp):
    """X-Service-Token: Nova's (roles service and admin) lets the bind through; a token
    without the service role is a 401 when roles are required, and no service when not."""
    n = app.name
    body = bind_body(arq, rp)
    r = app.call("accel", "PATCH", "/v2/accelerator_requests", tokens["member"], body=body)
    expect(
        f"[{n}] bind without a service token 403",
        r,
        403,
        lambda b: fault(r).startswith("This operation requires a service token."),
    )
    r = app.call("accel", "PATCH", "/v2/accelerator_requests", tokens["member"], service="not-a-token", body=body)
    expect_401(f"[{n}] bind with an invalid service token 401", r, "accel")
    r = app.call("accel", "PATCH", "/v2/accelerator_requests", tokens["member"], service=tokens["other"], body=body)
    if required:
        expect_401(f"[{n}] service token without the service role 401 (roles required)", r, "accel")
    else:
        expect(
            f"[{n}] service token without the service role accepted, not a service: 403 (roles optional)",
            r,
            403,
            lambda b: fault(r).startswith("This operation requires a service token."),
        )
    r = app.call("accel", "PATCH", "/v2/accelerator_requests", tokens["member"], service=tokens["nova"], body=body)
    expect(f"[{n}] bind with Nova's service token 202, no body", r, 202, lambda b: r.content == b"")
    r = app.call("accel", "GET", f"/v2/accelerator_requests/{arq}", tokens["member"])
    expect(
        f"[{n}] the bound ARQ carries the host and instance",
        r,
        200,
        lambda b: b["hostname"] == HOST and b["instance_uuid"] == body[arq][2]["value"],
    )


def app_credentials(app, new, demo_id):
    """Application credentials: a token with the credential's project and its role subset."""
    n = app.name
    uid = user_id("member")
    member_tok = token("member")
    out = {}
    for name, roles in (("all", None), ("reader-only", [{"name": "reader"}])):
        body = {"application_credential": {"name": f"{n}-{name}-{uuid.uuid4().hex[:6]}"}}
        if roles:
            body["application_credential"]["roles"] = roles
        r = requests.post(f"{KS_A}/v3/users/{uid}/application_credentials", json=body, headers={"X-Auth-Token": member_tok})
        if r.status_code != 201:
            raise SystemExit(f"application credential: {r.status_code} {r.text}")
        ac = r.json()["application_credential"]
        r = requests.post(
            f"{KS_A}/v3/auth/tokens?nocatalog",
            json={
                "auth": {
                    "identity": {
                        "methods": ["application_credential"],
                        "application_credential": {"id": ac["id"], "secret": ac["secret"]},
                    }
                }
            },
        )
        check(f"[{n}] Keystone issues a token for application credential {name}", r.status_code == 201, r.text[:200])
        out[name] = r.headers.get("X-Subject-Token")
    r = app.call("accel", "POST", "/v2/accelerator_requests", out["all"], body={"device_profile_name": "dp1"})
    expect(
        f"[{n}] application credential (member's roles): POST ARQ 201 in demo",
        r,
        201,
        lambda b: b["arqs"][0]["project_id"] == demo_id,
    )
    r = app.call("accel", "GET", "/v2/device_profiles", out["reader-only"])
    expect(f"[{n}] application credential (reader only): GET device_profiles 200", r, 200, lambda b: len(b["device_profiles"]) == 1)
    r = app.call("accel", "POST", "/v2/accelerator_requests", out["reader-only"], body={"device_profile_name": "dp1"})
    if new:
        expect_denied(f"[{n}] application credential (reader only): POST ARQ 403", r, "cyborg:arq:create")
    else:
        expect(f"[{n}] application credential (reader only): POST ARQ 201 (legacy admin_or_owner)", r, 201, lambda b: len(b["arqs"]) == 1)


def wait_for_401(app, tok, what):
    """After a revocation: the cached validation answers until token_cache_time passes,
    then Keystone's refusal is a 401. Returns the seconds it took."""
    start = time.time()
    deadline = start + CACHE_TIME + 5
    while time.time() < deadline:
        r = app.call("accel", "GET", "/v2/device_profiles", tok)
        if r.status_code == 401:
            expect_401(f"[{app.name}] {what}: 401 after the cache ({time.time() - start:.1f} s)", r, "accel")
            return
        if r.status_code != 200:
            check(f"[{app.name}] {what}", False, f"{r.status_code} {r.text[:200]}")
            return
        time.sleep(0.25)
    check(f"[{app.name}] {what}: 401 within token_cache_time + 5 s", False, "still 200")


def revocation(apps):
    """A revoked token and a disabled user: served from the cache, then 401 everywhere."""
    t = token("reader")
    for app in apps:
        expect(f"[{app.name}] reader's token: 200 before revocation", app.call("accel", "GET", "/v2/device_profiles", t), 200, lambda b: "device_profiles" in b)
    r = requests.delete(f"{KS_A}/v3/auth/tokens", headers={"X-Auth-Token": ADMIN_TOKEN, "X-Subject-Token": t})
    check("Keystone revokes the reader's token", r.status_code == 204, r.text[:200])
    for app in apps:
        r = app.call("accel", "GET", "/v2/device_profiles", t)
        expect(f"[{app.name}] revoked token still served from the validation cache", r, 200, lambda b: "device_profiles" in b)
    for app in apps:
        wait_for_401(app, t, "revoked token")

    # A disabled user: Keystone refuses its tokens once disabled.
    uid = user_id("manager")
    t = token("manager")
    for app in apps:
        expect(f"[{app.name}] manager's token: 200 before the user is disabled", app.call("accel", "GET", "/v2/devices", t), 200, lambda b: "devices" in b)
    ks_admin("PATCH", f"/users/{uid}", {"user": {"enabled": False}})
    for app in apps:
        wait_for_401(app, t, "disabled user's token")
    r = requests.post(
        f"{KS_A}/v3/auth/tokens",
        json={"auth": {"identity": {"methods": ["password"], "password": {"user": {"id": uid, "password": "manager-pw"}}}}},
    )
    check("Keystone refuses the disabled user's password", r.status_code == 401, f"{r.status_code}")
    ks_admin("PATCH", f"/users/{uid}", {"user": {"enabled": True}})


def expiry(apps, tokens):
    """Keystone B issues tokens with a short lifetime; A validates them (shared keys)."""
    t, body = password_token("member", "member-pw", ("project", "demo"), KS_B)
    exp = time.mktime(time.strptime(body["expires_at"][:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone
    left = exp - time.time()
    check(f"Keystone B's token expires in {left:.0f} s", 0 < left < 30, body["expires_at"])
    for app in apps:
        r = app.call("accel", "GET", "/v2/accelerator_requests", t)
        expect(f"[{app.name}] short-lived token: 200 before expiry", r, 200, lambda b: "arqs" in b)
    time.sleep(max(0.0, exp - time.time()) + 1.2)
    for app in apps:
        r = app.call("accel", "GET", "/v2/accelerator_requests", t)
        expect_401(f"[{app.name}] expired token alone: 401", r, "accel")
        r = app.call("placement", "GET", "/usages?project_id=x", t)
        expect_401(f"[{app.name}] expired token alone: Placement 401", r, "placement")
        # Beside a service token with the service role: keystonemiddleware's allow_expired.
        r = app.call("accel", "GET", "/v2/accelerator_requests", t, service=tokens["nova"])
        expect(f"[{app.name}] expired token beside Nova's service token: 200", r, 200, lambda b: "arqs" in b)
        # ...but not beside a token without the service role.
        r = app.call("accel", "GET", "/v2/accelerator_requests", t, service=tokens["other"])
        expect_401(f"[{app.name}] expired token beside a non-service token: 401", r, "accel")


def unauthenticated(app):
    n = app.name
    for what, h in (("no token", None), ("a garbage token", "gAAAAAnot-a-fernet-token")):
        expect_401(f"[{n}] {what}: accelerator API 401", app.call("accel", "GET", "/v2/device_profiles", h), "accel")
        expect_401(f"[{n}] {what}: Placement 401", app.call("placement", "GET", "/resource_providers", h), "placement")
    r = app.call("accel", "GET", "/")
    expect(f"[{n}] version document without a token 200", r, 200, lambda b: "versions" in b or "default_version" in b)
    r = app.call("placement", "GET", "/")
    expect(f"[{n}] Placement root without a token 200", r, 200, lambda b: "versions" in b)


def auth_posts():
    """The password (POST /v3/auth/tokens) requests Keystone A has answered so far."""
    with open(os.path.join(WORK, "keystone-a", "access.log")) as f:
        return [line.split()[2] for line in f if line.startswith("POST /v3/auth/tokens ")]


def expect_unavailable(what, r, api):
    if api == "accel":
        shape = lambda b: b["title"] == "Service Unavailable"
    else:
        shape = lambda b: placement_error(r) == "The Keystone service is temporarily unavailable."
    expect(what, r, 503, shape)


def own_credentials(tokens):
    """accel's own credentials refused by Keystone: at start-up a configuration error
    (exit non-zero naming the user, the project and Keystone's answer); later (a
    rotated password) /readyz fails, requests get 503, the refusal is logged once and
    the password is tried again with backoff, not once per request."""
    port = BASE_PORT + 6
    before = len(auth_posts())
    bad = Accel("refused-at-start", port, True, True, user="accel-rot", password="wrong")
    try:
        rc = bad.proc.wait(30)
    except subprocess.TimeoutExpired:
        bad.stop()
        rc = None
    with open(os.path.join(bad.dir, "accel.log")) as f:
        out = f.read()
    check("wrong password at start-up: accel serve exits non-zero", rc not in (None, 0), f"exit {rc}")
    check(
        "wrong password at start-up: the message names the user, the project and Keystone's answer",
        'refused the credentials of user "accel-rot" in project "service" (401' in out
        and "The request you have made requires authentication." in out,
        out[-600:],
    )
    posts = auth_posts()[before:]
    check(f"wrong password at start-up: Keystone asked once ({len(posts)} POST /v3/auth/tokens)", posts == ["401"], posts)

    app = Accel("rotation", port, True, True, user="accel-rot", password="accel-rot-pw")
    try:
        app.wait_ready()
        r = requests.get(f"{app.metrics}/readyz", timeout=10)
        check("right password: /readyz 200", r.status_code == 200, f"{r.status_code} {r.text[:200]}")
        fresh = [token("member") for _ in range(21)]
        expect("right password: a member's request 200", app.call("accel", "GET", "/v2/accelerator_requests", fresh.pop()), 200, lambda b: "arqs" in b)
        uid = user_id("accel-rot")
        ks_admin("PATCH", f"/users/{uid}", {"user": {"password": "rotated-pw"}})
        mark = len(auth_posts())
        # Twenty requests with tokens accel has not validated yet: each needs its own token,
        # which Keystone revoked with the password change.
        statuses = []
        for i, t in enumerate(fresh):
            api = "accel" if i % 2 == 0 else "placement"
            r = app.call(api, "GET", "/v2/device_profiles" if api == "accel" else "/resource_providers", t)
            statuses.append(r.status_code)
            if i < 2:
                expect_unavailable(f"password rotated in Keystone: {api} request 503", r, api)
        check("password rotated: all 20 requests 503", statuses == [503] * 20, statuses)
        posts = auth_posts()[mark:]
        check(
            f"password rotated: 20 requests caused {len(posts)} password attempts (backoff, not one per request)",
            1 <= len(posts) <= 4 and all(p == "401" for p in posts),
            posts,
        )
        r = requests.get(f"{app.metrics}/readyz", timeout=10)
        check(
            "password rotated: /readyz 503 naming the refused credentials",
            r.status_code == 503 and "Keystone refuses the service credentials (user accel-rot, project service)" in r.text,
            f"{r.status_code} {r.text[:300]}",
        )
        with open(os.path.join(app.dir, "accel.log")) as f:
            said = f.read().count("Keystone refused the service's own credentials")
        check(f"password rotated: the refusal logged once ({said})", said == 1)
        ks_admin("PATCH", f"/users/{uid}", {"user": {"password": "accel-rot-pw"}})
        deadline = time.time() + 70
        ready = None
        while time.time() < deadline:
            r = requests.get(f"{app.metrics}/readyz", timeout=10)
            if r.status_code == 200:
                ready = time.time()
                break
            time.sleep(0.5)
        check(
            "password restored: /readyz 200 again (next backoff attempt; the user was not locked out)",
            ready is not None,
            "still 503 after 70 s",
        )
        expect(
            "password restored: a member's request 200",
            app.call("accel", "GET", "/v2/accelerator_requests", token("member")),
            200,
            lambda b: "arqs" in b,
        )
    finally:
        app.stop()

    # The lockout policy is live: six wrong passwords lock a user, and then even the
    # right one is refused. So accel's user, whose password was refused while accel kept
    # serving requests, would have been locked had accel tried once per request.
    for _ in range(6):
        requests.post(
            f"{KS_A}/v3/auth/tokens",
            json={"auth": {"identity": {"methods": ["password"], "password": {"user": {"name": "lockme", "domain": {"id": "default"}, "password": "wrong"}}}}},
        )
    r = requests.post(
        f"{KS_A}/v3/auth/tokens",
        json={"auth": {"identity": {"methods": ["password"], "password": {"user": {"name": "lockme", "domain": {"id": "default"}, "password": "lockme-pw"}}}}},
    )
    check("Keystone's lockout policy is on: six wrong passwords lock a user (the right one then 401)", r.status_code == 401, f"{r.status_code} {r.text[:200]}")


def main():
    apps = [Accel("new", BASE_PORT, True, True), Accel("legacy", BASE_PORT + 3, False, False)]
    try:
        for app in apps:
            app.wait_ready()
        demo_id = project_id("demo")
        tokens = {who: token(who) for who in ("member", "manager", "reader")}
        tokens["admin"] = ADMIN_TOKEN
        tokens["svc"] = token("svc", ("project", "service"))
        tokens["other"] = token("other", ("project", "other"))
        tokens["nova"] = password_token("nova", "nova-secret", ("project", "service"))[0]
        sys_tok = token("sysadmin", ("system",))
        dom_tok = token("domadmin", ("domain",))
        for app in apps:
            new = app.name == "new"
            unauthenticated(app)
            rp = setup(app, ADMIN_TOKEN)
            arqs = role_matrix(app, new, tokens, demo_id)
            scoped_tokens(app, sys_tok, dom_tok)
            service_tokens(app, new, tokens, arqs["member"], rp)
            app_credentials(app, new, demo_id)
        revocation(apps)
        expiry(apps, tokens)
    finally:
        for app in apps:
            app.stop()
    own_credentials(tokens)
    print(f"keystone-real: {PASSED[0]} checks passed, {len(FAILED)} failed")
    if FAILED:
        for f in FAILED:
            print(f"  failed: {f}")
        sys.exit(1)


if __name__ == "__main__":
    main()
