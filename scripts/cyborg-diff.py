#!/usr/bin/env python3
"""Differential test: the same seeded random accelerator-API traffic sent to upstream Cyborg 17.0.0 and to accel.

Why: tempest and the clients check the paths their authors thought of; this checks what a random walk finds
(scripts/cyborg_diff_walk.py builds the requests). Each request goes to upstream (the reference) and to accel;
status, the compared headers, the error envelope (WSME's fault inside `error_message`) and the body are
compared after naming what legitimately differs (uuids by first appearance or by the object the walk made,
timestamps, the host in links, request ids). After a bind or unbind, the Nova events each side sent to its
fake events endpoint are compared too. The walk follows upstream's answers.

A difference that a documented deviation explains is not counted: DEVIATIONS below names each kind with a
predicate, and a kind counts as documented only when docs/cyborg-compat.md (--allow) carries its tag
`diff:<name>`. --self-test (upstream against a second upstream stack) plants faults into the second side's
answers and fails unless every one is caught and nothing else differs.

    cyborg-diff.py --upstream URL --accel URL --upstream-nova-port N --accel-nova-port N [--seed N]
                   [--requests N] [--allow docs/cyborg-compat.md] [--self-test]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import requests

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from cyborg_diff_walk import HOST, PROJECT, Req, Walk  # noqa: E402

UUID_RE = re.compile(r"[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}")
REQ_ID_RE = re.compile(r"req-[0-9a-f-]{36}")
HOST_RE = re.compile(r"https?://127\.0\.0\.1:\d+")
TIME_KEYS = {"created_at", "updated_at"}
COMPARED_HEADERS = ["content-type", "openstack-api-version", "openstack-api-minimum-version",
                    "openstack-api-maximum-version", "vary", "allow", "location"]
IDENTITY = {"x-auth-token": "admin", "x-user-id": "admin", "x-project-id": PROJECT,
            "x-roles": "admin,member,reader", "x-service-roles": "service"}


class FakeNova:
    """Nova's os-server-external-events for one side: records every event and answers 200."""

    def __init__(self, port: int):
        self.events: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                n = int(self.headers.get("content-length") or 0)
                try:
                    events = json.loads(self.rfile.read(n)).get("events", [])
                except ValueError:
                    events = [{"unreadable": True}]
                with outer.lock:
                    outer.events.extend(events)
                out = json.dumps({"events": [dict(e, code=200, status=e.get("status", "completed"))
                                             for e in events]}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def do_GET(self):  # noqa: N802  (version discovery)
                href = f"http://127.0.0.1:{port}/v2.1/"  # keystoneauth's discovery needs the self link
                out = json.dumps({"version": {"id": "v2.1", "version": "2.96", "min_version": "2.1",
                                              "status": "CURRENT", "links": [{"rel": "self", "href": href}]}}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def drain(self) -> list[dict[str, Any]]:
        with self.lock:
            out, self.events = self.events, []
        return out


class Side:
    """One server, the uuids of the objects the walk made on it, and the names its other uuids got."""

    def __init__(self, name: str, url: str, nova_port: int):
        self.name, self.url = name, url.rstrip("/")
        self.http = requests.Session()
        self.nova = FakeNova(nova_port)
        self.sym: dict[str, str] = {}      # placeholder ("arq:3", "dp:name", "rp", ...) -> uuid
        self.names: dict[str, str] = {}    # uuid -> its name in normalised answers
        self.unknown = 0                   # uuids named by first appearance so far
        self.fixed: dict[str, str] = {}

    def resolve(self, v: Any) -> Any:
        if isinstance(v, str):
            return re.sub(r"\{(\w+(?::[^{}]*)?)\}", lambda m: self.sym.get(m.group(1), m.group(0)), v)
        if isinstance(v, dict):
            return {self.resolve(k): self.resolve(x) for k, x in v.items()}
        if isinstance(v, list):
            return [self.resolve(x) for x in v]
        return v

    def send(self, req: Req) -> dict[str, Any]:
        headers = dict(IDENTITY)
        data = None
        if req.raw is not None:
            data = req.raw.encode()
            headers["content-type"] = "application/json"
        elif req.body is not None:
            data = json.dumps(self.resolve(req.body)).encode()
            headers["content-type"] = "application/json"
        headers.update(req.headers)
        headers = {k: v for k, v in headers.items() if v != "" or k.lower() != "content-type"}
        if "" in (req.headers.get("Content-Type"),):
            headers.pop("content-type", None)
        r = self.http.request(req.method, self.url + self.resolve(req.path), data=data, headers=headers,
                              timeout=120, allow_redirects=False)
        try:
            body = r.json() if r.content else None
        except ValueError:
            body = r.text
        return {"status": r.status_code, "headers": {k.lower(): v for k, v in r.headers.items()}, "body": body}

    def get(self, path: str) -> Any:
        r = self.http.get(self.url + path, headers=IDENTITY, timeout=60)
        return r.json() if r.status_code == 200 else None

    def learn(self, req: Req, ans: dict[str, Any], made: list[int]) -> None:
        b = ans["body"]
        if req.kind.startswith("create_profile") and ans["status"] == 201 and isinstance(b, dict):
            self.sym[f"dp:{b.get('name')}"] = b.get("uuid", "")
            self.names.setdefault(b.get("uuid", ""), f"<dp:{b.get('name')}>")
        if req.kind.startswith("create_arq") and ans["status"] == 201 and isinstance(b, dict):
            for n, arq in zip(made, b.get("arqs", [])):
                self.sym[f"arq:{n}"] = arq.get("uuid", "")
                self.names.setdefault(arq.get("uuid", ""), f"<arq:{n}>")
        if req.kind.startswith("create_attr") and ans["status"] == 201 and isinstance(b, dict) and made:
            self.sym[f"attr:{made[0]}"] = b.get("uuid", "")
            self.names.setdefault(b.get("uuid", ""), f"<attr:{made[0]}>")

    def discover(self) -> None:
        """The fake device's deployable, device and resource provider on this side."""
        dep = (self.get("/v2/deployables") or {}).get("deployables", [])
        dev = (self.get("/v2/devices") or {}).get("devices", [])
        if dep:
            self.sym["dep"], self.sym["rp"] = dep[0]["uuid"], dep[0]["rp_uuid"]
            self.names[dep[0]["uuid"]], self.names[dep[0]["rp_uuid"]] = "<dep>", "<rp>"
        if dev:
            self.sym["dev"] = dev[0]["uuid"]
            self.names[dev[0]["uuid"]] = "<dev>"

    # -- normalising -------------------------------------------------------------------------------------
    def name_uuid(self, u: str) -> str:
        u = u.lower()
        if u in self.fixed:
            return self.fixed[u]
        if u not in self.names:
            self.names[u] = f"<uuid#{self.unknown}>"
            self.unknown += 1
        return self.names[u]

    def norm_str(self, s: str) -> str:
        s = HOST_RE.sub("<host>", REQ_ID_RE.sub("<req-id>", s))
        s = UUID_RE.sub(lambda m: self.name_uuid(m.group(0)), s)
        s = re.sub(r"`cyborg_diff_\w+`", "<database>", s)  # upstream's 500s name its database
        s = re.sub(r"datetime\.datetime\([\d, ]*\)", "<datetime>", s)  # ... and the row's times
        # WSME's enum refusal lists the allowed values from a Python set: one process's hash order
        return re.sub(r"(Value should be one of: )([\w, ]+)",
                      lambda m: m.group(1) + ", ".join(sorted(m.group(2).split(", "))), s)

    def canon(self, v: Any, key: str = "") -> Any:
        if key in TIME_KEYS:
            return "<time>"
        if isinstance(v, dict):
            return {self.norm_str(k): self.canon(x, k) for k, x in v.items()}
        if isinstance(v, list):
            return [self.canon(x, key) for x in v]
        if isinstance(v, str):
            return self.norm_str(v)
        return v


def fault(body: Any) -> Any:
    """The WSME fault inside Cyborg's envelope, parsed (its text is JSON in a JSON string)."""
    if isinstance(body, dict) and isinstance(body.get("error_message"), str):
        try:
            return {"error_message": json.loads(body["error_message"])}
        except ValueError:
            return body
    return body


def name_handles(side: Side, v: Any) -> None:
    """Attach handles are named by their PCI function (the fake driver's 16 are alike on both sides)."""
    if isinstance(v, dict):
        info, uuid = v.get("attach_handle_info"), v.get("attach_handle_uuid")
        if isinstance(info, dict) and isinstance(uuid, str) and info:
            side.names[uuid.lower()] = f"<ah:{info.get('device')}.{info.get('function')}>"
        # attributes the walk did not make (the fake driver's) by what they say
        if {"key", "value", "deployable_id"} <= set(v) and isinstance(v.get("uuid"), str):
            side.names.setdefault(v["uuid"].lower(), f"<attr {v['deployable_id']}:{v['key']}={v['value']}>")
        for x in v.values():
            name_handles(side, x)
    elif isinstance(v, list):
        for x in v:
            name_handles(side, x)


def normalise(side: Side, ans: dict[str, Any]) -> dict[str, Any]:
    name_handles(side, ans["body"])
    h = {}
    for k in COMPARED_HEADERS:
        if k in ans["headers"]:
            v = ans["headers"][k]
            if k == "allow":
                v = ", ".join(sorted(x.strip() for x in v.split(",")))
            h[k] = side.norm_str(v)
    body = fault(ans["body"])
    ct = ans["headers"].get("content-type", "")
    if body is not None and "json" not in ct:
        body = "<non-json body>"
    body = side.canon(body)
    if isinstance(body, dict) and isinstance(body.get("error_message"), dict):
        em = body["error_message"]
        if isinstance(em.get("debuginfo"), str):
            em["debuginfo"] = "<traceback>"
        fs = em.get("faultstring")
        if isinstance(fs, str) and "\nTraceback (most recent call last)" in fs:
            em["faultstring"] = fs.split("\nTraceback (most recent call last)")[0]
            em["traceback"] = True
    for key in ("device_profiles", "accelerator_requests", "arqs", "attributes"):
        if isinstance(body, dict) and isinstance(body.get(key), list):
            body[key] = sorted(body[key], key=lambda x: json.dumps(x, sort_keys=True))
    return {"status": ans["status"], "headers": h, "body": body}


def first_difference(u: Any, a: Any, path: str = "") -> str | None:
    """Where two normalised bodies first differ, and how (long lists are cut in the report)."""
    if isinstance(u, dict) and isinstance(a, dict):
        for k in sorted(set(u) | set(a)):
            if k not in u or k not in a:
                return f"{path}/{k}: only {'accel' if k in a else 'upstream'} has it"
            d = first_difference(u[k], a[k], f"{path}/{k}")
            if d:
                return d
        return None
    if isinstance(u, list) and isinstance(a, list):
        if len(u) != len(a):
            return f"{path}: {len(u)} items upstream, {len(a)} accel"
        for i, (x, y) in enumerate(zip(u, a)):
            d = first_difference(x, y, f"{path}/{i}")
            if d:
                return d
        return None
    return None if u == a else f"{path}: {json.dumps(u)[:200]} vs {json.dumps(a)[:200]}"


def norm_events(side: Side, events: list[dict[str, Any]]) -> list[Any]:
    return sorted((side.canon(e) for e in events), key=lambda e: json.dumps(e, sort_keys=True))


# ---------------------------------------------------------------------------------------------------------
# Documented deviations: each a kind of difference, a predicate over (request, upstream's, accel's
# normalised answer), counted as documented only when docs/cyborg-compat.md carries `diff:<name>`.

def _fs(a: dict[str, Any]) -> str:
    b = a["body"]
    if isinstance(b, dict) and isinstance(b.get("error_message"), dict):
        return str(b["error_message"].get("faultstring", ""))
    return ""


def _without_traceback(u: dict[str, Any]) -> dict[str, Any]:
    u = json.loads(json.dumps(u))
    em = u["body"]["error_message"]
    em.pop("traceback")
    return u


DEVIATIONS = {
    # upstream answers 500 (an exception it does not catch) where accel answers the caller's 4xx
    "upstream-500": lambda q, u, a: u["status"] == 500 and 400 <= a["status"] < 500,
    # upstream's faultstring carries the conductor's traceback after the message; accel's stops there
    "traceback": lambda q, u, a: _without_traceback(u) == a,
    # accel answers under /accelerator too (DevStack's mount); upstream's own server does not
    "accelerator-prefix": lambda q, u, a: q.path.startswith("/accelerator") and u["status"] in (404, 406),
    # standard Placement classes and os-traits are accepted in profile groups (and the checks after
    # them answer: the amount, or a taken name)
    "standard-names": lambda q, u, a: q.kind.startswith("create_profile") and u["status"] == 400
    and a["status"] in (201, 400, 409) and re.match(r"Unsupported (resource class|trait name format) [A-Z]", _fs(u)),
    # a bind value that is null, a list or an object is refused before anything happens; upstream
    # checks the instance's other ARQs (400) and looks the ARQ up (404) first, and then fails in the
    # conductor when setting the field (500)
    "bind-values": lambda q, u, a: q.kind.startswith("bind") and a["status"] == 400
    and u["status"] in (400, 404, 500) and re.match(r"(A string is required in field|Couldn't apply patch. Reason: "
                                                r"Fields absent in patch)", _fs(a)),
    # a non-UUID instance_uuid in a bind is refused; upstream binds it and then cannot list its ARQs
    "bind-instance-uuid": lambda q, u, a: q.kind.startswith("bind") and a["status"] == 400
    and "field/attribute instance_uuid" in _fs(a),
}


# Documented deviations that leave the two worlds apart without a different answer; the walk follows
# upstream's world on accel after them (see main) and counts each time it had to.
FOLLOWED = {"all-or-nothing-delete", "partial-bind"}


def follow_partial_bind(up: Side, ac: Side, req: Req) -> int:
    """Upstream applies a multi-ARQ bind ARQ by ARQ, in the conductor: when a later one fails (an
    unknown ARQ, a bad state, a value it cannot set), those before it stay bound, where accel binds
    all or none. The ARQs upstream bound are bound on accel too, one by one, with the same values,
    so that later answers compare; returns how many."""
    if not isinstance(req.body, dict):
        return 0
    followed = 0
    for key, ops in req.body.items():
        u = up.get(f"/v2/accelerator_requests/{up.resolve(key)}")
        deadline = time.time() + 10  # upstream's bind goes on in the conductor after its answer
        while isinstance(u, dict) and u.get("state") == "BindStarted" and time.time() < deadline:
            time.sleep(0.1)
            u = up.get(f"/v2/accelerator_requests/{up.resolve(key)}")
        a = ac.get(f"/v2/accelerator_requests/{ac.resolve(key)}")
        if not (isinstance(u, dict) and isinstance(a, dict)):
            continue
        if u.get("state") == "Bound" and a.get("state") in ("Initial", "Unbound"):
            one = Req("PATCH", "/v2/accelerator_requests", body={key: ops}, kind="bind")
            ac.send(one)
            wait_bound(ac, one, True)
            ac.nova.drain()  # upstream sent no event for it: its bind never reached the notify
            followed += 1
    return followed


def explain(req: Req, u: dict[str, Any], a: dict[str, Any], allowed: set[str]) -> str | None:
    for name, pred in DEVIATIONS.items():
        if name in allowed:
            try:
                if pred(req, u, a):
                    return name
            except (KeyError, TypeError, AttributeError):
                continue
    return None


def undo_accel_only(ac: Side, req: Req, ua: dict[str, Any], aa: dict[str, Any]) -> None:
    """A documented deviation where only accel created something: it goes again on accel, so that the
    two worlds stay alike and later answers compare."""
    if aa["status"] != 201 or ua["status"] == 201 or not isinstance(aa["body"], dict):
        return
    if req.kind.startswith("create_profile"):
        ac.send(Req("DELETE", "/v2/device_profiles/" + str(aa["body"].get("uuid"))))
    elif req.kind.startswith("create_attr"):
        ac.send(Req("DELETE", "/v2/attributes/" + str(aa["body"].get("uuid"))))
    elif req.kind.startswith("create_arq"):
        uuids = ",".join(a["uuid"] for a in aa["body"].get("arqs", []))
        ac.send(Req("DELETE", "/v2/accelerator_requests?arqs=" + uuids))


def plant(ans: dict[str, Any], r) -> str:
    """Self-test: one fault in an answer, of the kinds the comparison must catch."""
    kinds = ["status", "header", "body"]
    if not ans["headers"].get("openstack-api-version"):
        kinds.remove("header")
    k = r.choice(kinds)
    if k == "status":
        ans["status"] += 1
    elif k == "header":
        ans["headers"]["openstack-api-version"] = "accelerator 2.99"
    else:
        ans["body"] = {"planted": ans["body"]}
    return k


def wait_bound(side: Side, req: Req, bind: bool) -> None:
    """A bind or unbind goes on after its 202 (upstream casts it to the conductor): wait until each
    ARQ of the patch has left the state it was in, and for a bind until its Nova event came."""
    done = {"Bound", "BindFailed"} if bind else {"Unbound", "Initial"}
    uuids = [side.resolve(k) for k in (req.body or {})] if isinstance(req.body, dict) else []
    deadline = time.time() + 30
    while time.time() < deadline:
        states = []
        for u in uuids:
            a = side.get(f"/v2/accelerator_requests/{u}")
            states.append(a.get("state") if isinstance(a, dict) else None)
        if all(s in done or s is None for s in states):
            break
        time.sleep(0.1)
    if bind:
        deadline = time.time() + 5
        while time.time() < deadline and not side.nova.events:
            time.sleep(0.05)
    time.sleep(0.2)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--accel", required=True)
    ap.add_argument("--upstream-nova-port", type=int, required=True)
    ap.add_argument("--accel-nova-port", type=int, required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--requests", type=int, default=600)
    ap.add_argument("--allow", help="docs/cyborg-compat.md: the deviations it documents (diff:<name>)")
    ap.add_argument("--self-test", action="store_true")
    ap.add_argument("--verbose", action="store_true", help="print every request and upstream's status")
    args = ap.parse_args()
    allowed = set(re.findall(r"\bdiff:([a-z0-9-]+)", open(args.allow).read())) if args.allow else set()
    unknown = allowed - set(DEVIATIONS) - FOLLOWED
    if unknown:
        print(f"docs name deviations the tester does not know: {sorted(unknown)}")
        return 2
    up, ac = Side("upstream", args.upstream, args.upstream_nova_port), \
        Side("accel", args.accel, args.accel_nova_port)
    walk = Walk(args.seed)
    for s in (up, ac):
        s.fixed = walk.made  # the uuids the walk chooses, named alike on both sides
        s.names[PROJECT] = "<project>"
        s.discover()
    import random
    planter = random.Random(args.seed * 7919)
    diffs, documented, planted, caught = 0, {}, 0, 0
    for i in range(args.requests):
        req = walk.next()
        ua, aa = up.send(req), ac.send(req)
        made = walk.learned(req, ua["status"], ua["body"])
        up.learn(req, ua, made)
        ac.learn(req, aa, made)
        mark = None
        if args.verbose:
            print(f"    #{i} {ua['status']}/{aa['status']} {req.describe()[:300]}")
        if args.self_test and planter.random() < 0.05:
            mark = plant(aa, planter)
            planted += 1
        u, a = normalise(up, ua), normalise(ac, aa)
        if req.kind.startswith(("bind", "unbind")) and (ua["status"] == 202 or aa["status"] == 202):
            bind = req.kind.startswith("bind")
            wait_bound(up, req, bind and ua["status"] == 202)
            wait_bound(ac, req, bind and aa["status"] == 202)
        ue, ae = norm_events(up, up.nova.drain()), norm_events(ac, ac.nova.drain())
        # (after the events are read: following binds on accel sends events upstream never sent)
        if req.kind.startswith("bind") and ua["status"] >= 400 and "partial-bind" in allowed:
            n = follow_partial_bind(up, ac, req)
            if n:
                documented["partial-bind"] = documented.get("partial-bind", 0) + n
        # The walk's model, and what accel follows of upstream's world (before the comparison's
        # continues, so that documented deviations are followed too).
        if req.kind.startswith(("delete_profile", "create_profile")):
            walk.profiles = [p["name"] for p in (up.get("/v2/device_profiles") or {}).get("device_profiles", [])]
            # all-or-nothing deletes (documented): what upstream deleted before its 404 goes on accel too
            if req.kind.startswith("delete_profile") and "all-or-nothing-delete" in allowed:
                for p in (ac.get("/v2/device_profiles") or {}).get("device_profiles", []):
                    if p["name"] not in walk.profiles:
                        ac.send(Req("DELETE", "/v2/device_profiles/" + p["uuid"]))
                        documented["all-or-nothing-delete"] = documented.get("all-or-nothing-delete", 0) + 1
        if req.kind.startswith("delete_arqs"):
            live = {a["uuid"] for a in (up.get("/v2/accelerator_requests") or {}).get("arqs", [])}
            walk.arqs = [n for n in walk.arqs if up.sym.get(f"arq:{n}") in live]
        if u != a or ue != ae:
            if mark:
                caught += 1
                print(f"--- #{i} planted {mark} fault caught: {req.describe()[:200]}")
                continue
            why = explain(req, u, a, allowed) if ue == ae else None
            if why:
                documented[why] = documented.get(why, 0) + 1
                undo_accel_only(ac, req, ua, aa)
                continue
            diffs += 1
            print(f"--- #{i} {req.kind}: {req.describe()}")
            where = first_difference(u["body"], a["body"])
            if where:
                print(f"  first body difference at {where}")
            for part in ("status", "headers", "body"):
                if u[part] != a[part]:
                    print(f"  {part}:\n    upstream: {json.dumps(u[part])[:1500]}\n    accel:    {json.dumps(a[part])[:1500]}")
            if ue != ae:
                print(f"  nova events:\n    upstream: {json.dumps(ue)}\n    accel:    {json.dumps(ae)}")
    if args.verbose:
        print(f"upstream: {up.sym}\naccel: {ac.sym}")
    doc = ", ".join(f"{k} {v}" for k, v in sorted(documented.items())) or "none"
    if args.self_test:
        ok = diffs == 0 and caught == planted and planted > 0
        print(f"seed {args.seed}: self-test {'ok' if ok else 'FAILED'}: {args.requests} requests, {diffs} "
              f"differences, planted {planted}, caught {caught}")
        return 0 if ok else 1
    print(f"seed {args.seed}: {args.requests} requests, {diffs} accel differences beyond docs/cyborg-compat.md "
          f"(documented: {doc})")
    return 0 if diffs == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
