#!/usr/bin/env python3
"""Write a large Cyborg straight into an empty upstream Cyborg 17.0.0 database (one
`cyborg-dbsync upgrade` made), for timing `accel import cyborg` at scale (docs/benchmarks.md):
10,000 hosts, each with the fake driver's FPGA as its agent reports it (a device, its control
path id, one deployable with attributes `rc`/`traits1` and 16 TEST_PCI attach handles), and
40,000 ARQs of two device profiles, four per host: two Bound (their handles in use), one Initial,
and one Unbound, BindFailed, BindStarted or Deleting in turn. Going through upstream's agents and
API would take hours; the rows and fields are the ones its conductor writes.

    cyborg-import-scale.py --url mysql://root@127.0.0.1:3306/cyborg_scale [--hosts 10000]

Needs PyMySQL (upstream-cyborg.sh's venv has it).
"""
import argparse
import json
import time
import uuid

import pymysql

PROJECT = "c0ffee0000004000800000000000028a"
NOW = "2026-01-01 00:00:00"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True, help="mysql://USER@HOST:PORT/DB")
    ap.add_argument("--hosts", type=int, default=10000)
    a = ap.parse_args()
    rest = a.url.split("://", 1)[1]
    user, rest = rest.split("@", 1)
    hostport, db = rest.split("/", 1)
    host, port = (hostport.split(":") + ["3306"])[:2]
    conn = pymysql.connect(host=host, port=int(port), user=user, database=db)
    started = time.time()
    c = conn.cursor()
    u = lambda: str(uuid.uuid4())  # noqa: E731

    def put(table, cols, rows):
        sql = f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join(['%s'] * len(cols))})"
        for i in range(0, len(rows), 5000):
            c.executemany(sql, rows[i:i + 5000])

    put("device_profiles", ["id", "uuid", "name", "profile_json", "description", "created_at"], [
        (1, u(), "fpga-one", json.dumps({"groups": [{"resources:FPGA": "1"}]}), "one FPGA", NOW),
        (2, u(), "fpga-two", json.dumps({"groups": [
            {"resources:FPGA": "1"}, {"resources:FPGA": "1", "trait:CUSTOM_FAKE_DEVICE": "required"}]}),
         None, NOW),
    ])
    devices, cpids, deps, attrs, handles, arqs = [], [], [], [], [], []
    slot = '{"domain": "0000", "bus": "0c", "device": "00", "function": "0"}'
    others = ["Unbound", "BindFailed", "BindStarted", "Deleting"]
    for h in range(a.hosts):
        hostname = f"scale-host-{h}"
        i = h + 1
        name = f"{hostname}_FakeDevice"
        rp = str(uuid.uuid3(uuid.NAMESPACE_DNS, name))
        devices.append((i, u(), "FPGA", "0xABCD", "miss model info",
                        '{"device_id": "0xabcd", "class": "Fake class"}', "fake_vendor_info", hostname,
                        "enabled", "allocated", NOW))
        cpids.append((i, u(), i, "PCI", slot, NOW))
        deps.append((i, u(), name, 16, i, rp, "fake", NOW))
        attrs += [(2 * h + 1, u(), i, "traits1", "CUSTOM_FAKE_DEVICE", NOW),
                  (2 * h + 2, u(), i, "rc", "FPGA", NOW)]
        for k in range(16):
            fn = k + 1
            info = json.dumps({"domain": "0000", "bus": "0c", "device": str(fn // 8), "function": str(fn % 8)})
            handles.append((16 * h + fn, u(), i, i, 1 if k < 2 else 0, "TEST_PCI", info, NOW))
        vm = u()
        for j in range(2):  # Bound: one instance, the fpga-two profile's two groups
            arqs.append((u(), PROJECT, "Bound", 2, j, hostname, rp, vm, 16 * h + j + 1, i, NOW))
        arqs.append((u(), PROJECT, "Initial", 1, 0, None, None, None, None, None, NOW))
        state = others[h % 4]
        bound_to = (hostname, rp, u()) if state in ("BindFailed", "BindStarted") else (None, None, None)
        arqs.append((u(), PROJECT, state, 1, 0) + bound_to + (None, None, NOW))
    put("devices", ["id", "uuid", "type", "vendor", "model", "std_board_info", "vendor_board_info",
                    "hostname", "status", "device_state", "created_at"], devices)
    put("controlpath_ids", ["id", "uuid", "device_id", "cpid_type", "cpid_info", "created_at"], cpids)
    put("deployables", ["id", "uuid", "name", "num_accelerators", "device_id", "rp_uuid", "driver_name",
                        "created_at"], deps)
    put("attributes", ["id", "uuid", "deployable_id", "`key`", "value", "created_at"], attrs)
    put("attach_handles", ["id", "uuid", "deployable_id", "cpid_id", "in_use", "attach_type",
                           "attach_info", "created_at"], handles)
    put("extended_accelerator_requests", ["uuid", "project_id", "state", "device_profile_id",
                                          "device_profile_group_id", "hostname", "device_rp_uuid",
                                          "instance_uuid", "attach_handle_id", "deployable_id",
                                          "created_at"], arqs)
    conn.commit()
    print(f"{len(devices)} devices, {len(deps)} deployables, {len(attrs)} attributes, {len(handles)} "
          f"attach handles, {len(arqs)} ARQs written in {time.time() - started:.1f} s")


if __name__ == "__main__":
    main()
