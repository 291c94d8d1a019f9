"""The Nova gate's checks (run by scripts/nova-gate.sh, which starts the cloud).

Drives Nova's compute API as a user would (keystoneauth sessions, endpoints from the
catalog) and after every step compares what Nova shows with accel's accelerator requests
(`GET /accelerator_requests`) and Placement allocations (`GET /allocations/{server}`,
`GET /resource_providers/{rp}/usages`), and with the ARQs the fake virt driver received
(scripts/nova_gate_driver.py's record). Prints one line per step, `PASS` or `FAIL` with
the reason; exits 1 when any step failed.
"""

import json
import os
import re
import subprocess
import sys
import time
import traceback
import uuid

from keystoneauth1 import adapter
from keystoneauth1 import session
from keystoneauth1.identity import v3

DIR = os.environ.get("NOVA_GATE_DIR", "")
KS = os.environ.get("NOVA_GATE_KS", "")
STEPS = re.compile(os.environ.get("NOVA_GATE_STEPS", ".*"))
RECORD = os.path.join(DIR, "driver-record.jsonl")
HOSTS = ("compute-a", "compute-b")
ACCEL_CLASS = re.compile(r"^CUSTOM_ACCELERATOR_")


class GateError(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise GateError(msg)


def sess(user, project):
    auth = v3.Password(auth_url=KS, username=user, password=f"{user}-secret", project_name=project,
                       user_domain_name="Default", project_domain_name="Default")
    return session.Session(auth=auth)


ADMIN = sess("admin", "admin")
NOVA_SVC = sess("nova", "service")   # for a service token, as Nova's [service_user]
compute = adapter.Adapter(ADMIN, service_type="compute", interface="public",
                          region_name="RegionOne", default_microversion="2.95")
placement = adapter.Adapter(ADMIN, service_type="placement", interface="public",
                            region_name="RegionOne", default_microversion="1.39")
accel = adapter.Adapter(ADMIN, service_type="accelerator", interface="public",
                        region_name="RegionOne")
image = adapter.Adapter(ADMIN, service_type="image", interface="public",
                        region_name="RegionOne")


def ok(resp, what):
    if resp.status_code >= 400:
        raise GateError(f"{what}: {resp.status_code} {resp.text[:400]}")
    return resp


def get(api, path, **kw):
    return ok(api.get(path, raise_exc=False, **kw), f"GET {path}").json()


def wait(what, fn, timeout=60, interval=0.3):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise GateError(f"timed out after {timeout} s waiting for {what} (last: {last!r})")


# --- the world as Nova, accel and the driver see it ------------------------------

def server(sid):
    r = compute.get(f"/servers/{sid}", raise_exc=False)
    if r.status_code == 404:
        return None
    return ok(r, f"GET server {sid}").json()["server"]


def host_of(s):
    return s.get("OS-EXT-SRV-ATTR:host")


def wait_server(sid, status, task_none=True, timeout=90):
    def done():
        s = server(sid)
        check(s is not None, f"server {sid} vanished while waiting for {status}")
        if s["status"] == "ERROR" and status != "ERROR":
            raise GateError(f"server {sid} went ERROR: {s.get('fault')}")
        if s["status"] == status and (not task_none or s.get("OS-EXT-STS:task_state") is None):
            return s
        return None
    return wait(f"server {sid} {status}", done, timeout)


def wait_gone(sid, timeout=60):
    wait(f"server {sid} deleted", lambda: server(sid) is None, timeout)


def arqs(instance=None):
    params = {"instance": instance} if instance else {}
    return get(accel, "/accelerator_requests", params=params)["arqs"]


def allocations(consumer):
    return get(placement, f"/allocations/{consumer}")["allocations"]


def providers():
    return get(placement, "/resource_providers")["resource_providers"]


def device_providers():
    """{rp uuid: (name, class, total, used)} for every provider with an accelerator class."""
    out = {}
    for rp in providers():
        inv = get(placement, f"/resource_providers/{rp['uuid']}/inventories")["inventories"]
        use = get(placement, f"/resource_providers/{rp['uuid']}/usages")["usages"]
        for rc, i in inv.items():
            if ACCEL_CLASS.match(rc):
                out[rp["uuid"]] = (rp["name"], rc, i["total"], use.get(rc, 0))
    return out


def records(instance):
    if not os.path.exists(RECORD):
        return []
    with open(RECORD) as f:
        return [r for r in map(json.loads, f) if r["instance"] == instance]


def handle_key(a):
    return json.dumps(a.get("attach_handle_info"), sort_keys=True)


# What each server should hold: server uuid -> number of accelerators (ARQs) it has
# while it has them. Filled by the steps.
EXPECT = {}
# Extra device usage Nova keeps on purpose (the evacuated server's source host until
# that compute restarts): rp uuid -> amount.
KEPT = {}
# ARQs the gate made itself (not Nova's), left out of the leftovers check.
OWN_ARQS = set()


def verify(sid=None, holds=None, host=None, spawned=True):
    """Asserts the whole cloud is consistent; for `sid`, that it holds its accelerators
    (`holds` True: Bound ARQs on `host`, matching its allocations and what the driver
    received at its last spawn) or holds none (`holds` False: no ARQs, no allocations)."""
    all_arqs = arqs()
    by_instance = {}
    for a in all_arqs:
        by_instance.setdefault(a.get("instance_uuid"), []).append(a)
    devs = device_providers()
    # Every ARQ belongs to a server Nova knows (or to the gate itself).
    for inst, items in by_instance.items():
        mine = [a for a in items if a["uuid"] not in OWN_ARQS]
        if not mine:
            continue
        check(inst is not None and server(inst) is not None,
              f"ARQs left behind for {inst}: {[a['uuid'] + ' ' + a['state'] for a in mine]}")
    # Device usage in Placement is exactly the Bound ARQs on each device, plus what
    # Nova keeps on purpose.
    bound_per_rp = {}
    for a in all_arqs:
        if a["state"] == "Bound":
            bound_per_rp[a["device_rp_uuid"]] = bound_per_rp.get(a["device_rp_uuid"], 0) + 1
    for rp, (name, rc, total, used) in devs.items():
        want = bound_per_rp.get(rp, 0) + KEPT.get(rp, 0)
        check(used == want, f"{name} ({rc}): Placement usage {used}, but {bound_per_rp.get(rp, 0)} "
              f"Bound ARQs + {KEPT.get(rp, 0)} kept by Nova")
        check(used <= total, f"{name}: usage {used} over total {total}")
    # No attach handle is given twice.
    seen = {}
    for a in all_arqs:
        if a["state"] == "Bound":
            k = (a["device_rp_uuid"], handle_key(a))
            check(k not in seen, f"attach handle {k} bound to both {seen.get(k)} and {a['uuid']}")
            seen[k] = a["uuid"]
    if sid is None:
        return
    mine = by_instance.get(sid, [])
    alloc = allocations(sid)
    if holds is False:
        check(not mine, f"server {sid} should have no ARQs, has {[(a['uuid'], a['state']) for a in mine]}")
        check(not alloc, f"server {sid} should have no allocations, has {alloc}")
        return
    n = EXPECT[sid]
    check(len(mine) == n, f"server {sid}: {len(mine)} ARQs, expected {n}")
    for a in mine:
        check(a["state"] == "Bound", f"ARQ {a['uuid']} is {a['state']}, not Bound")
        check(a["hostname"] == host, f"ARQ {a['uuid']} bound on {a['hostname']}, server is on {host}")
        check(a["device_rp_uuid"] in devs, f"ARQ {a['uuid']}: {a['device_rp_uuid']} is no device provider")
        check(devs[a["device_rp_uuid"]][0].startswith(host + "_"),
              f"ARQ {a['uuid']}: device {devs[a['device_rp_uuid']][0]} is not on {host}")
    # The allocations: the compute node's VCPU/MEMORY_MB and the accelerators on the
    # ARQs' devices, nothing else.
    want_dev = {}
    for a in mine:
        want_dev[a["device_rp_uuid"]] = want_dev.get(a["device_rp_uuid"], 0) + 1
    got_dev = {}
    for rp, v in alloc.items():
        for rc, amount in v["resources"].items():
            if ACCEL_CLASS.match(rc):
                got_dev[rp] = got_dev.get(rp, 0) + amount
    check(got_dev == want_dev, f"server {sid}: device allocations {got_dev}, ARQs say {want_dev}")
    node = [rp for rp, v in alloc.items() if "VCPU" in v["resources"]]
    check(len(node) == 1, f"server {sid}: VCPU allocated on {node}")
    node_name = [p["name"] for p in providers() if p["uuid"] == node[0]]
    check(node_name == [host], f"server {sid}: VCPU on {node_name}, server is on {host}")
    if spawned:
        # The driver got exactly these ARQs' attach handles at its last spawn.
        spawns = [r for r in records(sid) if r["method"] == "spawn" and r["host"] == host]
        check(spawns, f"server {sid}: the driver on {host} never spawned it")
        got = sorted(handle_key(a) for a in spawns[-1]["accel_info"])
        want = sorted(handle_key(a) for a in mine)
        check(got == want, f"server {sid}: the driver received handles {got}, Bound ARQs have {want}")
        check(all(a["state"] == "Bound" for a in spawns[-1]["accel_info"]),
              f"server {sid}: the driver received ARQs not Bound: {spawns[-1]['accel_info']}")


# --- set-up --------------------------------------------------------------------

FLAVORS = {}
IMAGE = None


def setup():
    global IMAGE
    # Both agents have reported: each host has its device providers.
    def reported():
        names = [d[0] for d in device_providers().values()]
        return all(sum(n.startswith(h + "_") for n in names) >= 4 for h in HOSTS) and names
    wait("both agents' devices in Placement", reported, timeout=90)
    classes = {d[1] for d in device_providers().values()}
    check({"CUSTOM_ACCELERATOR_GPU", "CUSTOM_ACCELERATOR_AICHIP", "CUSTOM_ACCELERATOR_FPGA"} <= classes,
          f"device classes reported: {classes}")
    # An image in Glance.
    img = ok(image.post("/v2/images", json={"name": "gate-image", "disk_format": "raw",
                                             "container_format": "bare"}, raise_exc=False),
             "create image").json()
    ok(image.put(f"/v2/images/{img['id']}/file", data=b"\0" * 1024,
                 headers={"Content-Type": "application/octet-stream"}, raise_exc=False), "upload image")
    IMAGE = img["id"]
    profiles = {
        "gate-gpu1": [{"resources:CUSTOM_ACCELERATOR_GPU": "1"}],
        "gate-gpu2": [{"resources:CUSTOM_ACCELERATOR_GPU": "2"}],
        "gate-gpu-2groups": [{"resources:CUSTOM_ACCELERATOR_GPU": "1"},
                             {"resources:CUSTOM_ACCELERATOR_GPU": "1"}],
        "gate-aichip": [{"resources:CUSTOM_ACCELERATOR_AICHIP": "1"}],
    }
    for name, groups in profiles.items():
        ok(accel.post("/device_profiles", json=[{"name": name, "groups": groups}], raise_exc=False),
           f"create profile {name}")
        flavor(name, name, len(groups))


def flavor(name, profile, groups=1):
    f = ok(compute.post("/flavors", json={"flavor": {"name": name, "ram": 64, "vcpus": 1, "disk": 0}},
                        raise_exc=False), f"create flavor {name}").json()["flavor"]
    specs = {"accel:device_profile": profile}
    if groups > 1:
        specs["group_policy"] = "none"
    ok(compute.post(f"/flavors/{f['id']}/os-extra_specs", json={"extra_specs": specs},
                    raise_exc=False), f"flavor {name} extra specs")
    FLAVORS[name] = f["id"]


def boot(name, flavor_name, **extra):
    body = {"server": {"name": name, "imageRef": IMAGE, "flavorRef": FLAVORS[flavor_name],
                       "networks": "none", **extra}}
    return ok(compute.post("/servers", json=body, raise_exc=False), f"boot {name}").json()["server"]["id"]


def action(sid, body, expect=202, microversion=None):
    kw = {"microversion": microversion} if microversion else {}
    r = compute.post(f"/servers/{sid}/action", json=body, raise_exc=False, **kw)
    check(r.status_code == expect, f"action {list(body)[0]}: {r.status_code} (expected {expect}) {r.text[:300]}")
    return r


# --- steps ---------------------------------------------------------------------

RESULTS = []
STATE = {}


def step(name):
    def wrap(fn):
        def run():
            if not STEPS.search(name):
                return
            t = time.time()
            try:
                fn()
                RESULTS.append((name, True, ""))
                print(f"PASS {name} ({time.time() - t:.1f} s)", flush=True)
            except Exception as e:  # noqa: BLE001 - every failure is reported per step
                detail = str(e) if isinstance(e, GateError) else traceback.format_exc()
                RESULTS.append((name, False, detail))
                print(f"FAIL {name} ({time.time() - t:.1f} s): {detail}", flush=True)
        run.step_name = name
        return run
    return wrap


@step("boot one accelerator to ACTIVE")
def boot_one():
    verify()
    sid = boot("gate-one", "gate-gpu1")
    EXPECT[sid] = 1
    s = wait_server(sid, "ACTIVE")
    STATE["one"] = sid
    verify(sid, True, host_of(s))


@step("boot two accelerators (one group) and two device profile groups to ACTIVE")
def boot_several():
    a = boot("gate-two", "gate-gpu2")
    b = boot("gate-groups", "gate-gpu-2groups")
    EXPECT[a] = 2
    EXPECT[b] = 2
    sa = wait_server(a, "ACTIVE")
    sb = wait_server(b, "ACTIVE")
    verify(a, True, host_of(sa))
    verify(b, True, host_of(sb))
    STATE["two"], STATE["groups"] = a, b


ALL = [boot_one, boot_several]


def main():
    t0 = time.time()
    try:
        setup()
    except Exception:  # noqa: BLE001
        print("FAIL set-up: " + traceback.format_exc(), flush=True)
        return 1
    print(f"set-up done ({time.time() - t0:.1f} s)", flush=True)
    for s in ALL:
        s()
    failed = [r for r in RESULTS if not r[1]]
    print(f"nova-gate: {len(RESULTS) - len(failed)} of {len(RESULTS)} steps passed", flush=True)
    return 1 if failed else 0


def neutron_stub(port):
    """A network service with nothing in it: every list is empty, every delete a 204.
    Nova asks Neutron about ports and security groups even for servers booted with
    `networks: none`; the gate has no Neutron (issue 29), so this answers for it."""
    import http.server

    class Stub(http.server.BaseHTTPRequestHandler):
        def _send(self, code, body=None):
            data = json.dumps(body).encode() if body is not None else b""
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            path = self.path.split("?")[0].rstrip("/")
            if path in ("", "/"):
                return self._send(200, {"versions": [{"id": "v2.0", "status": "CURRENT", "links": [
                    {"rel": "self", "href": f"http://127.0.0.1:{port}/v2.0/"}]}]})
            if path.count("/") == 2:   # /v2.0/<collection>
                return self._send(200, {path.rsplit("/", 1)[1].replace("-", "_"): []})
            return self._send(404, {"NeutronError": {"message": "not found"}})

        def do_DELETE(self):
            self._send(204)

        def log_message(self, *a):
            pass

    http.server.ThreadingHTTPServer(("127.0.0.1", port), Stub).serve_forever()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--neutron-stub":
        neutron_stub(int(sys.argv[2]))
    sys.exit(main())
