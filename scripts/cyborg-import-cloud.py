#!/usr/bin/env python3
"""Fills an upstream Cyborg 17.0.0 (scripts/upstream-cyborg.sh, started with CYBORG_HOSTS=0) for
`accel import cyborg`'s test (scripts/import-cyborg.sh).

Hardware: each host's fake FPGA is reported by upstream's own cyborg-agent with its fake driver
(upstream-cyborg.sh's CYBORG_AGENT_HOSTS; the conductor wrote the device, control path id,
deployable, attributes and 16 TEST_PCI attach handles, and the deployable's resource provider in
Placement). The agents are stopped before this script runs, and what the fake driver cannot
report is then seeded in Cyborg's database beside it: per host a GPU device (4 PCI attach
handles, attributes rc/trait0; upstream's GPU drivers need the hardware), an FPGA device with a
region deployable under it (parent_id/root_id, one with a bitstream_id: the fake driver reports
one flat deployable and programming needs Glance), the last host's GPU in maintenance (an agent
reports `enabled`), and a host whose only FPGA handle is taken (binds to it fail).

Device profiles and ARQs go through upstream's API; the conductor binds (Bound), fails to bind
(BindFailed), unbinds (Unbound) and leaves one in BindStarted over RPC, with a fake Nova answering
its external events. BindStarted is upstream's own doing: a bind naming a provider Placement knows
but no deployable has (the host's compute node) is moved to BindStarted by the conductor before
its deployable lookup fails, and nothing moves it back. Deleting is set in SQL, with the fields
upstream keeps: Cyborg 17.0.0 never writes that state (it is in its constants and transition
matrix only; a DELETE unbinds and removes the row in one call).

  cyborg-import-cloud.py --url http://127.0.0.1:PORT --db DATABASE --nova-port N
                         --placement http://127.0.0.1:PORT [--seed S]
"""
import argparse
import http.server
import json
import random
import threading
import uuid

import pymysql
import requests

ADMIN = {"x-user-id": "admin", "x-project-id": "c0ffee0000004000800000000000028a", "x-roles": "admin,member,reader",
         "openstack-api-version": "accelerator 2.3"}
NOVA = dict(ADMIN, **{"x-service-roles": "service"})


def fake_nova(port):
    class H(http.server.BaseHTTPRequestHandler):
        def reply(self, body):
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self.reply({"version": {"id": "v2.1", "status": "CURRENT", "version": "2.96",
                                    "min_version": "2.1", "links": [
                                        {"rel": "self", "href": f"http://127.0.0.1:{port}/v2.1/"}]}})

        def do_POST(self):
            n = int(self.headers.get("content-length") or 0)
            body = json.loads(self.rfile.read(n) or b"{}")
            events = [dict(e, code=200, status="completed") for e in body.get("events", [])]
            self.reply({"events": events})

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def u(rng):
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def seed_hardware(db, rng, hosts):
    """Returns {host: {"gpu": rp, "fpga": rp, "fake": rp}} and the rp of the FPGA with no free
    handle; "fake" is the fake driver's deployable, reported by the host's agent."""
    c = db.cursor()
    out = {}
    c.execute("SELECT v.hostname, d.rp_uuid FROM deployables d JOIN devices v ON v.id = d.device_id "
              "WHERE d.driver_name = 'fake' AND d.name = CONCAT(v.hostname, '_FakeDevice')")
    reported = dict(c.fetchall())

    # device_state set as upstream's agent report sets it: upstream heals a NULL one on the
    # next load, bumping updated_at.
    def device(host, typ, vendor, model, status="enabled", t=0):
        c.execute("INSERT INTO devices (uuid, type, vendor, model, std_board_info, vendor_board_info, "
                  "hostname, status, device_state, created_at, updated_at) VALUES (%s, %s, %s, %s, %s, "
                  "%s, %s, %s, 'available', FROM_UNIXTIME(%s), %s)",
                  (u(rng), typ, vendor, model, json.dumps({"controller": "fake", "product_id": model}),
                   "fake_vendor_info", host, status, 1_700_000_000 + t,
                   None if t % 2 else f"2024-03-0{1 + t % 9} 10:20:30"))
        dev = c.lastrowid
        c.execute("INSERT INTO controlpath_ids (uuid, device_id, cpid_type, cpid_info, created_at) "
                  "VALUES (%s, %s, 'PCI', %s, FROM_UNIXTIME(%s))",
                  (u(rng), dev, json.dumps({"domain": "0000", "bus": f"{dev:02x}", "device": "00",
                                            "function": "0"}), 1_700_000_100 + t))
        return dev, c.lastrowid

    def deployable(dev, name, n, driver, parent=None, root=None, rp=True, t=0, bitstream=None):
        rp_uuid = u(rng) if rp else None
        c.execute("INSERT INTO deployables (uuid, parent_id, root_id, name, num_accelerators, device_id, "
                  "rp_uuid, driver_name, bitstream_id, created_at) VALUES (%s, %s, %s, %s, %s, %s, %s, "
                  "%s, %s, FROM_UNIXTIME(%s))",
                  (u(rng), parent, root, name, n, dev, rp_uuid, driver, bitstream, 1_700_000_200 + t))
        return c.lastrowid, rp_uuid

    def handles(dep, cpid, n, typ, used=0):
        for i in range(n):
            c.execute("INSERT INTO attach_handles (uuid, deployable_id, cpid_id, in_use, attach_type, "
                      "attach_info, created_at) VALUES (%s, %s, %s, %s, %s, %s, NOW())",
                      (u(rng), dep, cpid, 1 if i < used else 0, typ,
                       json.dumps({"domain": "0000", "bus": "0c", "device": str(i // 8),
                                   "function": str(i % 8)})))

    def attribute(dep, key, value):
        c.execute("INSERT INTO attributes (uuid, deployable_id, `key`, value, created_at) "
                  "VALUES (%s, %s, %s, %s, NOW())", (u(rng), dep, key, value))

    for h in range(hosts):
        host = f"cyimp-host-{h}"
        dev, cpid = device(host, "GPU", "10de", "1eb8", "maintaining" if h == hosts - 1 else "enabled", h)
        dep, gpu_rp = deployable(dev, f"{host}_GPU", 4, "nvidia_gpu_driver", t=h)
        attribute(dep, "rc", "PGPU")
        attribute(dep, "trait0", "CUSTOM_NVIDIA_1EB8")
        handles(dep, cpid, 4, "PCI")
        dev, cpid = device(host, "FPGA", "0xABCD", "region model", t=h + 10)
        root, _ = deployable(dev, f"{host}_RegionDevice", 2, "fake", rp=False, t=h)
        region, fpga_rp = deployable(dev, f"{host}_RegionDevice_region0", 2, "fake", parent=root,
                                     root=root, t=h, bitstream=u(rng) if h == 0 else None)
        attribute(region, "rc", "FPGA")
        attribute(region, "trait0", "CUSTOM_FAKE_DEVICE")
        handles(region, cpid, 2, "TEST_PCI")
        if host not in reported:
            raise SystemExit(f"no fake-driver deployable reported for {host}")
        out[host] = {"gpu": gpu_rp, "fpga": fpga_rp, "fake": reported[host]}
    dev, cpid = device("cyimp-host-full", "FPGA", "0xABCD", "full", t=99)
    dep, full_rp = deployable(dev, "cyimp-host-full_FakeDevice", 1, "fake", t=99)
    attribute(dep, "rc", "FPGA")
    handles(dep, cpid, 1, "TEST_PCI", used=1)
    db.commit()
    return out, full_rp


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--db", required=True)
    ap.add_argument("--mysql-host", default="127.0.0.1")
    ap.add_argument("--mysql-port", type=int, default=3306)
    ap.add_argument("--mysql-user", default="root")
    ap.add_argument("--nova-port", type=int, required=True)
    ap.add_argument("--placement", required=True)
    ap.add_argument("--seed", type=int, default=28)
    ap.add_argument("--hosts", type=int, default=3)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    db = pymysql.connect(host=a.mysql_host, port=a.mysql_port, user=a.mysql_user, database=a.db)
    hosts, full_rp = seed_hardware(db, rng, a.hosts)
    nova = fake_nova(a.nova_port)
    s = requests.Session()
    api = a.url.rstrip("/") + "/v2"

    def call(method, path, body=None, headers=ADMIN, ok=(200, 201, 202, 204)):
        r = s.request(method, api + path, json=body, headers=headers, timeout=60)
        if r.status_code not in ok:
            raise SystemExit(f"{method} {path}: {r.status_code} {r.text}")
        return r.json() if r.text else None

    profiles = [
        ("gpu-one", "one vGPU", [{"resources:PGPU": "1", "trait:CUSTOM_NVIDIA_1EB8": "required"}]),
        ("fpga-two", None, [{"resources:FPGA": "1"},
                            {"resources:FPGA": "1", "trait:CUSTOM_FAKE_DEVICE": "required"}]),
        ("gpu-pair", "two GPUs in one group", [{"resources:PGPU": "2"}]),
        ("unused", "no ARQ uses it", [{"resources:FPGA": "1", "accel:bitstream_id": u(rng)}]),
        ("gone", None, [{"resources:FPGA": "1"}]),
    ]
    for name, desc, groups in profiles:
        body = {"name": name, "groups": groups}
        if desc:
            body["description"] = desc
        call("POST", "/device_profiles", [body])
    call("DELETE", "/device_profiles/gone")
    arqs = {}
    for name, n in [("gpu-one", 8), ("fpga-two", 3), ("gpu-pair", 1)]:
        arqs[name] = []
        for _ in range(n):
            arqs[name] += [x["uuid"] for x in call("POST", "/accelerator_requests",
                                                   {"device_profile_name": name})["arqs"]]
    host_names = sorted(hosts)

    def bind(arq, host, rp, ok=(202,)):
        inst = u(rng)
        call("PATCH", "/accelerator_requests", {arq: [
            {"path": "/hostname", "op": "add", "value": host},
            {"path": "/device_rp_uuid", "op": "add", "value": rp},
            {"path": "/instance_uuid", "op": "add", "value": inst}]}, headers=NOVA, ok=ok)
        return inst

    gpu = arqs["gpu-one"]
    # Bound: one per host's GPU, and two more on host 0; then two of them unbound.
    for i, arq in enumerate(gpu[:5]):
        host = host_names[i % len(host_names)]
        bind(arq, host, hosts[host]["gpu"])
    for arq in gpu[3:5]:
        call("PATCH", "/accelerator_requests", {arq: [
            {"path": "/hostname", "op": "remove"}, {"path": "/device_rp_uuid", "op": "remove"},
            {"path": "/instance_uuid", "op": "remove"}]}, headers=NOVA)
    # BindFailed: the FPGA whose only handle is taken (upstream answers 404 and records it).
    for arq in arqs["fpga-two"][:2]:
        bind(arq, "cyimp-host-full", full_rp, ok=(202, 404))
    # The agent-reported fake FPGA bound (two groups of one profile, one instance each).
    bind(arqs["fpga-two"][2], host_names[0], hosts[host_names[0]]["fake"])
    # BindStarted: a bind to host 1's compute node provider, which no deployable has (see the
    # module doc); upstream answers 404 and leaves the ARQ there.
    r = s.get(a.placement.rstrip("/") + "/resource_providers", params={"name": host_names[1]},
              headers={"x-auth-token": "admin"}, timeout=60)
    r.raise_for_status()
    bind(gpu[5], host_names[1], r.json()["resource_providers"][0]["uuid"], ok=(202, 404))
    # Deleting: set in SQL (see the module doc).
    c = db.cursor()
    c.execute("UPDATE extended_accelerator_requests SET state = 'Deleting', updated_at = NOW() "
              "WHERE uuid = %s", (gpu[6],))
    db.commit()
    states = {}
    for x in call("GET", "/accelerator_requests")["arqs"]:
        states[x["state"]] = states.get(x["state"], 0) + 1
    nova.shutdown()
    need = {"Initial", "BindStarted", "Bound", "Unbound", "BindFailed", "Deleting"}
    missing = need - set(states)
    print("ARQs by state: " + ", ".join(f"{k} {v}" for k, v in sorted(states.items())))
    if missing:
        raise SystemExit(f"no ARQ in state(s) {sorted(missing)}")


if __name__ == "__main__":
    main()
