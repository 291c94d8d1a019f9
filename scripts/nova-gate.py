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
# The classes ARQs are bound to; a GPU's memory inventory (CUSTOM_ACCELERATOR_MEMORY_HBM,
# from the nvidia driver) rides beside its GPU class and is never asked for here.
ACCEL_CLASS = re.compile(r"^CUSTOM_ACCELERATOR_(?!MEMORY_)")


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
DEMO = sess("demo", "demo")          # a project member: boots the servers
NOVA_SVC = sess("nova", "service")   # for a service token, as Nova's [service_user]
compute = adapter.Adapter(ADMIN, service_type="compute", interface="public",
                          region_name="RegionOne", default_microversion="2.95")
placement = adapter.Adapter(ADMIN, service_type="placement", interface="public",
                            region_name="RegionOne", default_microversion="1.39")
accel = adapter.Adapter(ADMIN, service_type="accelerator", interface="public",
                        region_name="RegionOne")
image = adapter.Adapter(ADMIN, service_type="image", interface="public",
                        region_name="RegionOne")
member = adapter.Adapter(DEMO, service_type="compute", interface="public",
                         region_name="RegionOne", default_microversion="2.95")


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


def wait_server(sid, status, task_none=True, timeout=90, host=None):
    def done():
        s = server(sid)
        check(s is not None, f"server {sid} vanished while waiting for {status}")
        if s["status"] == "ERROR" and status != "ERROR":
            raise GateError(f"server {sid} went ERROR: {s.get('fault')}")
        if (s["status"] == status and (not task_none or s.get("OS-EXT-STS:task_state") is None)
                and host in (None, host_of(s))):
            return s
        return None
    return wait(f"server {sid} {status}" + (f" on {host}" if host else ""), done, timeout)


def wait_gone(sid, timeout=60):
    """Deleted: Nova answers 404, and (nova-compute removes them just after it destroys
    the instance) its allocations are gone."""
    wait(f"server {sid} deleted", lambda: server(sid) is None, timeout)
    wait(f"server {sid}'s allocations removed", lambda: not allocations(sid), timeout)


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
        if a["state"] == "Bound" and a["uuid"] not in OWN_ARQS:
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
                                             "container_format": "bare", "visibility": "public"},
                        raise_exc=False),
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
    f = ok(compute.post("/flavors", json={"flavor": {"name": name, "ram": 64, "vcpus": 1, "disk": 1}},
                        raise_exc=False), f"create flavor {name}").json()["flavor"]
    specs = {"accel:device_profile": profile}
    if groups > 1:
        specs["group_policy"] = "none"
    ok(compute.post(f"/flavors/{f['id']}/os-extra_specs", json={"extra_specs": specs},
                    raise_exc=False), f"flavor {name} extra specs")
    FLAVORS[name] = f["id"]


def boot(name, flavor_name, **extra):
    """Boots as the project member demo (as the admin when a host is asked for)."""
    body = {"server": {"name": name, "imageRef": IMAGE, "flavorRef": FLAVORS[flavor_name],
                       "networks": "none", **extra}}
    api = compute if "host" in extra else member
    return ok(api.post("/servers", json=body, raise_exc=False), f"boot {name}").json()["server"]["id"]


def action(sid, body, microversion=None):
    kw = {"microversion": microversion} if microversion else {}
    r = compute.post(f"/servers/{sid}/action", json=body, raise_exc=False, **kw)
    check(r.status_code in (200, 202), f"action {list(body)[0]}: {r.status_code} {r.text[:300]}")
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


def snapshot():
    """What accel holds: ARQs (uuid, state, host, device, handle) and allocations per server."""
    arq_view = sorted((a["uuid"], a["state"], a.get("hostname"), a.get("device_rp_uuid"),
                       handle_key(a), a.get("instance_uuid")) for a in arqs())
    alloc_view = {sid: allocations(sid) for sid in EXPECT}
    return arq_view, alloc_view


def driver_got(sid, method, host):
    """The driver's last `method` call for `sid` on `host` carried the Bound ARQs' handles."""
    calls = [r for r in records(sid) if r["method"] == method and r["host"] == host]
    check(calls, f"server {sid}: no {method} on {host} in the driver's record")
    got = sorted(handle_key(a) for a in calls[-1]["accel_info"])
    want = sorted(handle_key(a) for a in arqs(sid) if a["state"] == "Bound")
    check(got == want, f"server {sid}: {method} got handles {got}, Bound ARQs have {want}")


def arq_uuids(sid):
    return sorted(a["uuid"] for a in arqs(sid))


def simple_action(body, status, method=None, same_arqs=True):
    """An action that keeps the server where it is: ARQs and allocations before and
    after, the same ARQs unless told otherwise, and what the driver got."""
    sid = STATE["one"]
    s = server(sid)
    host = host_of(s)
    verify(sid, True, host)
    before = arq_uuids(sid)
    action(sid, body)
    wait_server(sid, status)
    verify(sid, True, host)
    if same_arqs:
        check(arq_uuids(sid) == before, f"ARQs changed: {before} -> {arq_uuids(sid)}")
    if method:
        driver_got(sid, method, host)


@step("reboot (soft)")
def reboot_soft():
    simple_action({"reboot": {"type": "SOFT"}}, "ACTIVE", "reboot-soft")


@step("reboot (hard)")
def reboot_hard():
    simple_action({"reboot": {"type": "HARD"}}, "ACTIVE", "reboot-hard")


@step("stop")
def stop():
    simple_action({"os-stop": None}, "SHUTOFF")


@step("start")
def start():
    simple_action({"os-start": None}, "ACTIVE", "power_on")


@step("pause")
def pause():
    simple_action({"pause": None}, "PAUSED")


@step("unpause")
def unpause():
    simple_action({"unpause": None}, "ACTIVE")


@step("lock")
def lock():
    simple_action({"lock": None}, "ACTIVE")
    check(server(STATE["one"])["locked"] is True, "not locked")


@step("unlock")
def unlock():
    simple_action({"unlock": None}, "ACTIVE")
    check(server(STATE["one"])["locked"] is False, "still locked")


@step("rebuild")
def rebuild():
    n = len([r for r in records(STATE["one"]) if r["method"] == "spawn"])
    simple_action({"rebuild": {"imageRef": IMAGE}}, "ACTIVE", "spawn")
    check(len([r for r in records(STATE["one"]) if r["method"] == "spawn"]) == n + 1,
          "rebuild did not spawn again")


@step("refused with accelerators: resize, cold migrate, suspend, live migrate (400, accel untouched)")
def refused():
    sid = STATE["one"]
    host = host_of(server(sid))
    verify(sid, True, host)
    before = snapshot()
    other = FLAVORS["gate-gpu2"]
    plain = ok(compute.post("/flavors", json={"flavor": {"name": "gate-plain", "ram": 64, "vcpus": 1,
                                                          "disk": 0}}, raise_exc=False),
               "create flavor gate-plain").json()["flavor"]["id"]
    for body in ({"resize": {"flavorRef": other}}, {"resize": {"flavorRef": plain}},
                 {"migrate": None}, {"migrate": {"host": "compute-a" if host == "compute-b" else "compute-b"}},
                 {"suspend": None},
                 {"os-migrateLive": {"host": None, "block_migration": "auto"}}):
        r = compute.post(f"/servers/{sid}/action", json=body, raise_exc=False)
        check(r.status_code == 400, f"{body}: {r.status_code} {r.text[:200]} (expected 400)")
    s = wait_server(sid, "ACTIVE")
    check(host_of(s) == host, f"server moved to {host_of(s)}")
    check(snapshot() == before, "accel changed after refused actions")
    verify(sid, True, host)


@step("shelve (SHELVED: kept on its host)")
def shelve():
    simple_action({"shelve": None}, "SHELVED")


@step("shelve offload (ARQs and allocations released)")
def shelve_offload():
    sid = STATE["one"]
    STATE["one_host"] = host_of(server(sid))
    action(sid, {"shelveOffload": None})
    wait_server(sid, "SHELVED_OFFLOADED")
    wait("offloaded server's allocations removed", lambda: not allocations(sid), 30)
    verify(sid, False)


def unshelve_to(target):
    sid = STATE["one"]
    verify(sid, False)
    old = set(a["uuid"] for a in arqs())
    action(sid, {"unshelve": {"availability_zone": None, "host": target}} if target else {"unshelve": None},
           microversion="2.91")
    s = wait_server(sid, "ACTIVE")
    check(target is None or host_of(s) == target, f"unshelved on {host_of(s)}, asked {target}")
    verify(sid, True, host_of(s))
    check(not (set(arq_uuids(sid)) & old), "unshelve reused old ARQs")
    return host_of(s)


@step("unshelve onto the other host")
def unshelve_other():
    first = STATE["one_host"]
    unshelve_to("compute-a" if first == "compute-b" else "compute-b")


@step("shelve, offload and unshelve back onto the first host")
def unshelve_back():
    sid = STATE["one"]
    action(sid, {"shelve": None})
    wait_server(sid, "SHELVED")
    action(sid, {"shelveOffload": None})
    wait_server(sid, "SHELVED_OFFLOADED")
    unshelve_to(STATE["one_host"])


def compute_service(host):
    svcs = get(compute, "/os-services", params={"binary": "nova-compute", "host": host})["services"]
    check(len(svcs) == 1, f"nova-compute services on {host}: {svcs}")
    return svcs[0]


def stop_compute(host):
    with open(os.path.join(DIR, f"nova-{host.replace('compute', 'compute')}.pid")) as f:
        pid = int(f.read())
    try:
        os.killpg(pid, 15)
    except ProcessLookupError:
        pass
    wait(f"nova-compute on {host} to stop", lambda: not os.path.exists(f"/proc/{pid}"), 30, 0.2)


def start_compute(host):
    log = open(os.path.join(DIR, f"nova-{host}.log"), "a")
    p = subprocess.Popen([sys.executable, os.path.join(DIR, "nova", "nova_compute.py"),
                          "--config-file", os.path.join(DIR, "nova", f"{host}.conf")],
                         stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
    with open(os.path.join(DIR, "pids"), "a") as f:
        f.write(f"{p.pid}\n")
    with open(os.path.join(DIR, f"nova-{host}.pid"), "w") as f:
        f.write(f"{p.pid}\n")


@step("evacuate (source compute down and forced down; server ends SHUTOFF on the other host)")
def evacuate():
    sid = STATE["one"]
    src = host_of(server(sid))
    dst = "compute-a" if src == "compute-b" else "compute-b"
    verify(sid, True, src)
    before = {a["device_rp_uuid"]: 1 for a in arqs(sid)}
    old = set(arq_uuids(sid))
    stop_compute(src)
    svc = compute_service(src)
    ok(compute.put(f"/os-services/{svc['id']}", json={"forced_down": True}, raise_exc=False), "force down")
    wait(f"{src} down", lambda: compute_service(src)["state"] == "down", 30)
    action(sid, {"evacuate": {}})
    s = wait_server(sid, "SHUTOFF", host=dst)
    check(host_of(s) == dst, f"evacuated to {host_of(s)}, expected {dst}")
    # Nova keeps the source host's allocations until that compute restarts.
    for rp, n in before.items():
        KEPT[rp] = KEPT.get(rp, 0) + n
    STATE["evacuated"] = (sid, src, before)
    check(not (set(arq_uuids(sid)) & old), "evacuate kept the source host's ARQs")
    verify()
    mine = arqs(sid)
    check(len(mine) == EXPECT[sid] and all(a["state"] == "Bound" and a["hostname"] == dst for a in mine),
          f"ARQs after evacuate: {[(a['state'], a['hostname']) for a in mine]}")
    alloc = allocations(sid)
    names = {p["uuid"]: p["name"] for p in providers()}
    nodes = sorted(names[rp] for rp, v in alloc.items() if "VCPU" in v["resources"])
    check(nodes == ["compute-a", "compute-b"], f"VCPU allocated on {nodes} (source kept + destination)")
    for rp in before:
        check(rp in alloc, f"the source device {names.get(rp)} allocation was not kept")
    driver_got(sid, "spawn", dst)


@step("source compute restarts: Nova drops the source host's allocations")
def evacuate_source_back():
    sid, src, before = STATE["evacuated"]
    start_compute(src)
    dst = host_of(server(sid))

    def released():
        alloc = allocations(sid)
        return all(rp not in alloc for rp in before)
    wait("source allocations released", released, 90, 0.5)
    for rp in before:
        KEPT[rp] -= before[rp]
    svc = compute_service(src)
    ok(compute.put(f"/os-services/{svc['id']}", json={"forced_down": False}, raise_exc=False), "unset forced down")
    wait(f"{src} up", lambda: compute_service(src)["state"] == "up", 60, 0.5)
    verify(sid, True, dst, spawned=True)


@step("start the evacuated server")
def start_evacuated():
    simple_action({"os-start": None}, "ACTIVE", "power_on")


@step("delete every server: no ARQ, no allocation left")
def delete_all():
    for sid in list(EXPECT):
        if server(sid) is not None:
            ok(compute.delete(f"/servers/{sid}", raise_exc=False), f"delete {sid}")
    # Every server gone first: while one is torn down Nova has deleted its ARQs a moment
    # before nova-compute removes its allocations, so the cloud-wide check in verify()
    # would see another server's teardown half-way.
    for sid in list(EXPECT):
        wait_gone(sid)
    for sid in list(EXPECT):
        verify(sid, False)
    verify()
    devs = device_providers()
    check(all(d[3] == 0 for d in devs.values()), f"device usage left: {devs}")
    check(not [a for a in arqs() if a["uuid"] not in OWN_ARQS], f"ARQs left: {arqs()}")


def device_rp(host, rc):
    rps = [rp for rp, d in device_providers().items() if d[0].startswith(host + "_") and d[1] == rc]
    check(len(rps) == 1, f"{rc} providers on {host}: {rps}")
    return rps[0]


def service_headers():
    return {"X-Service-Token": NOVA_SVC.get_token()}


@step("a bind that cannot succeed (the device's only handle taken): the PATCH fails, Nova puts the server in ERROR and deletes its ARQs")
def bind_refused():
    verify()
    rp = device_rp("compute-a", "CUSTOM_ACCELERATOR_AICHIP")
    # Take the device's one attach handle behind Placement's back: an ARQ bound to it
    # for an instance Nova does not know, as a stale binding would.
    mine = ok(accel.post("/accelerator_requests", json={"device_profile_name": "gate-aichip"},
                         raise_exc=False), "create ARQ").json()["arqs"][0]["uuid"]
    OWN_ARQS.add(mine)
    ok(accel.patch("/accelerator_requests", json={mine: [
        {"path": "/hostname", "op": "add", "value": "compute-a"},
        {"path": "/device_rp_uuid", "op": "add", "value": rp},
        {"path": "/instance_uuid", "op": "add", "value": str(uuid.uuid4())}]},
        headers=service_headers(), raise_exc=False), "bind the gate's ARQ")
    wait("the gate's ARQ Bound", lambda: [a for a in arqs() if a["uuid"] == mine and a["state"] == "Bound"], 30)
    before = [a for a in arqs() if a["uuid"] != mine]
    sid = boot("gate-no-handle", "gate-aichip", host="compute-a")
    EXPECT[sid] = 1
    s = wait_server(sid, "ERROR", task_none=False)
    fault = (s.get("fault") or {}).get("message", "")
    check("ARQ" in fault or "ind" in fault, f"fault: {fault!r}")
    check([a for a in arqs() if a["uuid"] != mine] == before, "other ARQs changed")
    check(not records(sid), "the driver was asked to spawn it")
    delete_errored(sid)
    ok(accel.delete("/accelerator_requests", params={"arqs": mine}, headers=service_headers(),
                    raise_exc=False), "delete the gate's ARQ")
    OWN_ARQS.discard(mine)
    verify()


@step("a spawn failure on one host: Nova reschedules onto the other with new ARQs")
def reschedule():
    verify()
    sid = boot("gate-fail-first-spawn", "gate-gpu1")
    EXPECT[sid] = 1
    s = wait_server(sid, "ACTIVE")
    spawns = [r for r in records(sid) if r["method"] == "spawn"]
    check(len(spawns) == 2, f"spawns: {[(r['host']) for r in spawns]}")
    check(spawns[0]["host"] != spawns[1]["host"] == host_of(s), f"spawned on {[r['host'] for r in spawns]}, "
          f"server on {host_of(s)}")
    first = {a["uuid"] for a in spawns[0]["accel_info"]}
    check(first and not (first & set(arq_uuids(sid))), "the rescheduled server kept the first host's ARQs")
    verify(sid, True, host_of(s))
    STATE["rescheduled"] = sid


def delete_errored(sid):
    """A server in ERROR: its ARQs are gone; the allocations Nova keeps for it until it is
    deleted are counted as kept; then it is deleted and nothing of it is left."""
    check(not arqs(sid), f"server {sid} in ERROR still has ARQs: {arqs(sid)}")
    kept = {}
    for rp, v in allocations(sid).items():
        for rc, n in v["resources"].items():
            if ACCEL_CLASS.match(rc):
                kept[rp] = kept.get(rp, 0) + n
                KEPT[rp] = KEPT.get(rp, 0) + n
    print(f"  note: Nova keeps {sum(kept.values())} accelerator allocation(s) of the ERROR server until it is deleted",
          flush=True)
    verify()
    ok(compute.delete(f"/servers/{sid}", raise_exc=False), "delete")
    wait_gone(sid)
    for rp, n in kept.items():
        KEPT[rp] -= n
    verify(sid, False)
    del EXPECT[sid]


@step("a second bind PATCH for a server whose ARQs are Bound is refused (400), its ARQs untouched")
def second_bind():
    sid = STATE["rescheduled"]
    host = host_of(server(sid))
    verify(sid, True, host)
    before = snapshot()
    extra = ok(accel.post("/accelerator_requests", json={"device_profile_name": "gate-gpu1"},
                          raise_exc=False), "create ARQ").json()["arqs"][0]["uuid"]
    OWN_ARQS.add(extra)
    rp = arqs(sid)[0]["device_rp_uuid"]
    r = accel.patch("/accelerator_requests", json={extra: [
        {"path": "/hostname", "op": "add", "value": host},
        {"path": "/device_rp_uuid", "op": "add", "value": rp},
        {"path": "/instance_uuid", "op": "add", "value": sid}]},
        headers=service_headers(), raise_exc=False)
    check(r.status_code == 400 and "already has accelerator requests" in r.text,
          f"second bind: {r.status_code} {r.text[:300]}")
    ok(accel.delete("/accelerator_requests", params={"arqs": extra}, headers=service_headers(),
                    raise_exc=False), "delete the gate's ARQ")
    OWN_ARQS.discard(extra)
    check(snapshot() == before, "accel changed after the refused second bind")
    verify(sid, True, host)


def building(sid):
    """nova-compute has started the build (its instance action event), which waits for
    the ARQs' events before anything else."""
    actions = get(compute, f"/servers/{sid}/os-instance-actions")["instanceActions"]
    for a in actions:
        if a["action"] == "create":
            events = get(compute, f"/servers/{sid}/os-instance-actions/{a['request_id']}")[
                "instanceAction"].get("events", [])
            return any(e["event"] == "compute__do_build_and_run_instance" for e in events)
    return False


def agents(sig):
    for h in ("a", "b"):
        with open(os.path.join(DIR, f"agent-{h}.pid")) as f:
            os.kill(int(f.read()), sig)


def bitstream_image(name, content, function_id):
    img = ok(image.post("/v2/images", json={
        "name": name, "disk_format": "raw", "container_format": "bare", "visibility": "public",
        # As Cyborg's FPGA guide documents bitstream images.
        "bitstream_type": "gbs", "vendor": "fake", "accel:function_id": function_id},
        raise_exc=False), f"create image {name}").json()
    ok(image.put(f"/v2/images/{img['id']}/file", data=content,
                 headers={"Content-Type": "application/octet-stream"}, raise_exc=False), f"upload {name}")
    return img["id"]


@step("FPGA programming that fails: BindFailed, the failed event reaches Nova, which puts the server in ERROR and deletes its ARQs")
def fpga_fails():
    verify()
    bad = bitstream_image("gate-bitstream-bad", b"not a bitstream\n", str(uuid.uuid4()))
    ok(accel.post("/device_profiles", json=[{"name": "gate-fpga-bad", "groups": [
        {"resources:CUSTOM_ACCELERATOR_FPGA": "1", "accel:bitstream_id": bad}]}], raise_exc=False),
       "create profile gate-fpga-bad")
    flavor("gate-fpga-bad", "gate-fpga-bad")
    # The agents wait until nova-compute waits for the event: a failure that resolves
    # before it waits is counted as resolved by Nova 34 (docs/cyborg-compat.md).
    agents(19)  # SIGSTOP
    try:
        sid = boot("gate-fpga-bad", "gate-fpga-bad")
        EXPECT[sid] = 1
        wait("the FPGA bind accepted", lambda: [a for a in arqs(sid) if a["state"] == "BindStarted"], 30)
        wait("nova-compute building the server", lambda: building(sid), 30)
        time.sleep(1)  # from the build's start to its wait for the event: milliseconds
    finally:
        agents(18)  # SIGCONT
    s = wait_server(sid, "ERROR", task_none=False, timeout=60)
    fault = (s.get("fault") or {}).get("message", "")
    check("accelerator" in fault, f"fault: {fault!r}")
    check(not records(sid), "the driver was asked to spawn it")
    # nova-compute aborted the build: it removes the allocations itself.
    wait("the aborted build's allocations removed", lambda: not allocations(sid), 30)
    delete_errored(sid)


@step("FPGA flavor with a bitstream in Glance: the agent programs the region before Bound")
def fpga_programs():
    verify()
    function = str(uuid.uuid4())
    good = bitstream_image("gate-bitstream", (function + "\nfake bitstream\n").encode(), function)
    ok(accel.post("/device_profiles", json=[{"name": "gate-fpga", "groups": [
        {"resources:CUSTOM_ACCELERATOR_FPGA": "1", "accel:bitstream_id": good}]}], raise_exc=False),
       "create profile gate-fpga")
    flavor("gate-fpga", "gate-fpga")
    sid = boot("gate-fpga", "gate-fpga")
    EXPECT[sid] = 1
    s = wait_server(sid, "ACTIVE")
    verify(sid, True, host_of(s))
    rp = arqs(sid)[0]["device_rp_uuid"]
    traits = get(placement, f"/resource_providers/{rp}/traits")["traits"]
    want = "CUSTOM_FPGA_FUNCTION_FAKE_" + function.replace("-", "").upper()
    check(want in traits, f"region traits {traits} lack {want}")


def cleaning_state(rp):
    rows = get(accel, "/device_cleanings")["device_cleanings"]
    states = [c["state"] for c in rows if c["rp_uuid"] == rp]
    check(len(states) == 1, f"device cleanings of {rp}: {rows}")
    return states[0]


@step("a server booted onto a device that is being cleaned ends in ERROR, never ACTIVE on it (even with its reservation lowered by hand); unforced it lands on the other host; once clean the device serves again")
def boot_while_cleaning():
    verify()
    if "gate-qat" not in FLAVORS:
        ok(accel.post("/device_profiles", json=[{"name": "gate-qat", "groups": [
            {"resources:CUSTOM_ACCELERATOR_QAT": "1"}]}], raise_exc=False), "create profile gate-qat")
        flavor("gate-qat", "gate-qat")
    rp = device_rp("compute-a", "CUSTOM_ACCELERATOR_QAT")
    check(cleaning_state(rp) == "clean", f"compute-a's QAT starts {cleaning_state(rp)}")
    hold = os.path.join(DIR, "hold-cleaning")
    open(hold, "w").close()   # the cleaner waits while this file exists
    try:
        first = boot("gate-qat-tenant", "gate-qat", host="compute-a")
        EXPECT[first] = 1
        wait_server(first, "ACTIVE")
        verify(first, True, "compute-a")
        ok(compute.delete(f"/servers/{first}", raise_exc=False), "delete the first tenant")
        wait_gone(first)
        verify(first, False)
        del EXPECT[first]
        wait("the released QAT being cleaned", lambda: cleaning_state(rp) == "cleaning", 30)

        def refused(name):
            sid = boot(name, "gate-qat", host="compute-a")
            EXPECT[sid] = 1
            wait_server(sid, "ERROR", task_none=False)
            check(not records(sid), f"{name}: the driver was asked to spawn it")
            check(not [a for a in arqs(sid) if a["state"] == "Bound"], f"{name}: ARQs Bound {arqs(sid)}")
            delete_errored(sid)

        # Placement's reservation keeps the scheduler off it.
        refused("gate-qat-while-cleaning")
        # The reservation lowered by hand: the scheduler is offered the device, and its
        # claim is refused by the cleaning itself (issue 41's one rule).
        invs = get(placement, f"/resource_providers/{rp}/inventories")
        inv = dict(invs["inventories"]["CUSTOM_ACCELERATOR_QAT"], reserved=0)
        ok(placement.put(f"/resource_providers/{rp}/inventories/CUSTOM_ACCELERATOR_QAT",
                         json={**inv, "resource_provider_generation": invs["resource_provider_generation"]},
                         raise_exc=False), "lower the reservation")
        refused("gate-qat-reservation-lowered")
        check(cleaning_state(rp) == "cleaning", "the cleaning ended while the cleaner was held")
        # Not forced onto compute-a: the other host's QAT serves.
        other = boot("gate-qat-other", "gate-qat")
        EXPECT[other] = 1
        s = wait_server(other, "ACTIVE")
        check(host_of(s) == "compute-b", f"unforced server on {host_of(s)}")
        verify(other, True, "compute-b")
    finally:
        os.remove(hold)
    wait("the QAT clean again", lambda: cleaning_state(rp) == "clean", 60)
    with open(os.path.join(DIR, "cleaned.log")) as f:
        cleaned = f.read().split()
    check(cleaned.count("start") == cleaned.count("end") >= 1, f"cleaner log: {cleaned}")
    after = boot("gate-qat-after", "gate-qat", host="compute-a")
    EXPECT[after] = 1
    wait_server(after, "ACTIVE")
    verify(after, True, "compute-a")


H100_A, H100_B = "0000:3b:00.0", "0000:5e:00.0"   # compute-a's two MIG-mode H100s (fake NVML)
POD_CLAIM = "7d1c0c2e-45a0-4b6e-9c1e-4d0a5e1f0a01"


def pod_claim(uid, body):
    """A pod's DRA claim as the node's driver sends it (no kubelet here: the gate sends
    the driver's own request to the agent endpoint)."""
    return accel.put(f"/agent/hosts/compute-a/kubernetes/claims/{uid}", json=body, raise_exc=False)


def pod_release(uid):
    r = accel.delete(f"/agent/hosts/compute-a/kubernetes/claims/{uid}", raise_exc=False)
    check(r.status_code == 204, f"release claim {uid}: {r.status_code} {r.text[:200]}")


@step("one GPU ledger for VMs and pods: Nova boots on a whole H100 while pods hold MIG slices of the other, and cannot get the held one")
def mig_ledger():
    verify()
    def h100s():
        return {d[0]: rp for rp, d in device_providers().items()
                if d[0] in (f"compute-a_{H100_A}", f"compute-a_{H100_B}")}
    wait("compute-a's two H100s in Placement", lambda: len(h100s()) == 2, 60)
    rps = h100s()
    gpu_a, gpu_b = rps[f"compute-a_{H100_A}"], rps[f"compute-a_{H100_B}"]
    wait("their MIG profiles' providers", lambda: any(
        p["name"] == f"compute-a_{H100_A}_mig_1g.10gb" for p in providers()), 60)
    if "gate-h100" not in FLAVORS:
        ok(accel.post("/device_profiles", json=[{"name": "gate-h100", "groups": [
            {"resources:CUSTOM_ACCELERATOR_GPU": "1", "trait:CUSTOM_GPU_NVIDIA_HOPPER": "required"}]}],
            raise_exc=False), "create profile gate-h100")
        flavor("gate-h100", "gate-h100")
    # Pods hold a 1g.10gb at slice 0 and a 3g.40gb at slice 4 of H100 A, where the
    # Kubernetes scheduler put them.
    r = pod_claim(POD_CLAIM, {"devices": [], "partitions": [
        {"device": H100_A, "profile_id": 19, "start": 0},
        {"device": H100_A, "profile_id": 9, "start": 4}]})
    check(r.status_code == 200, f"pods' claim: {r.status_code} {r.text[:300]}")
    try:
        # Nova gets H100 B whole.
        first = boot("gate-h100-vm", "gate-h100")
        EXPECT[first] = 1
        s = wait_server(first, "ACTIVE")
        check(host_of(s) == "compute-a", f"H100 server on {host_of(s)}")
        verify(first, True, "compute-a")
        got = [a["device_rp_uuid"] for a in arqs(first)]
        check(got == [gpu_b], f"H100 server bound to {got}, not H100 B {gpu_b} (A is {gpu_a})")
        # A second whole H100: A's slices are held, so no host has one.
        second = boot("gate-h100-none", "gate-h100")
        EXPECT[second] = 1
        s = wait_server(second, "ERROR", task_none=False)
        fault = (s.get("fault") or {}).get("message", "")
        check("No valid host" in fault, f"second H100 server: fault {fault!r}")
        check(not records(second), "the driver was asked to spawn the second H100 server")
        delete_errored(second)
        # And a pod cannot take a slice of the GPU the VM holds.
        r = pod_claim(str(uuid.uuid4()), {"devices": [], "partitions": [
            {"device": H100_B, "profile_id": 19, "start": 6}]})
        check(r.status_code == 409 and "held by a virtual machine" in r.text,
              f"a pod's slice of the VM's GPU: {r.status_code} {r.text[:300]}")
    finally:
        pod_release(POD_CLAIM)
    # The pods gone, H100 A is whole again: Nova gets it.
    third = boot("gate-h100-after", "gate-h100")
    EXPECT[third] = 1
    wait_server(third, "ACTIVE")
    verify(third, True, "compute-a")
    check([a["device_rp_uuid"] for a in arqs(third)] == [gpu_a], f"third H100 server: {arqs(third)}")
    for sid in (first, third):
        ok(compute.delete(f"/servers/{sid}", raise_exc=False), "delete an H100 server")
    for sid in (first, third):
        wait_gone(sid)
        verify(sid, False)
        del EXPECT[sid]


ALL = [mig_ledger, boot_one, boot_several, reboot_soft, reboot_hard, stop, start, pause, unpause, lock,
       unlock, rebuild, refused, shelve, shelve_offload, unshelve_other, unshelve_back,
       evacuate, evacuate_source_back, start_evacuated, bind_refused, reschedule, fpga_fails,
       fpga_programs, second_bind, boot_while_cleaning, delete_all]


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
