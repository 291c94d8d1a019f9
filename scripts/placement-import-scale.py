#!/usr/bin/env python3
"""Write a large cloud straight into an empty upstream Placement database (one
`placement-manage db sync` made), for timing `accel import placement` at issue 28's scale:
10,000 compute nodes, 40,000 device providers (4 per node), 200,000 allocations of 50,000
consumers. Going through upstream's API would take hours; the rows written are the ones its API
writes (standard classes and traits as its start-up sync stores them, providers in trees,
inventories, traits, aggregates, projects, users, consumer types, consumers, allocations).

    placement-import-scale.py --url mysql+pymysql://root@127.0.0.1:3306/placement_scale [--hosts 10000]

Needs the conformance kit's Python (SQLAlchemy, PyMySQL, os-traits, os-resource-classes).
"""
import argparse
import time
import uuid

import os_resource_classes
import os_traits
import sqlalchemy as sa


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--hosts", type=int, default=10000)
    a = ap.parse_args()
    eng = sa.create_engine(a.url)
    started = time.time()
    now = "2026-01-01 00:00:00"
    u = lambda: str(uuid.uuid4())  # noqa: E731
    with eng.begin() as c:
        def put(table, cols, rows):
            sql = sa.text(f"INSERT INTO {table} ({', '.join(cols)}) VALUES "
                          f"({', '.join(':' + x for x in cols)})")
            for i in range(0, len(rows), 5000):
                c.execute(sql, [dict(zip(cols, r)) for r in rows[i:i + 5000]])

        if c.dialect.name == "mysql":
            c.execute(sa.text("SET SESSION sql_mode = CONCAT(@@sql_mode, ',NO_AUTO_VALUE_ON_ZERO')"))
        put("resource_classes", ["id", "name", "created_at"],
            [(i, n, now) for i, n in enumerate(os_resource_classes.STANDARDS)]
            + [(10000, "CUSTOM_FPGA_ARRIA10", now)])
        traits = sorted(os_traits.get_traits()) + ["CUSTOM_RACK_A", "CUSTOM_RACK_B"]
        put("traits", ["id", "name", "created_at"], [(i + 1, t, now) for i, t in enumerate(traits)])
        tid = {t: i + 1 for i, t in enumerate(traits)}
        rc = {n: i for i, n in enumerate(os_resource_classes.STANDARDS)}
        rc["CUSTOM_FPGA_ARRIA10"] = 10000
        rps, inv, rpt, rpa, cons, alloc = [], [], [], [], [], []
        aggs = [(i + 1, u(), now) for i in range(100)]
        projects = [(i + 1, f"project-{i}", now) for i in range(200)]
        users = [(i + 1, f"user-{i}", now) for i in range(500)]
        rp_id, c_id = 0, 0
        for h in range(a.hosts):
            rp_id += 1
            root = rp_id
            rps.append((root, u(), f"compute-{h:05d}", 5, root, None, now))
            inv += [(root, rc["VCPU"], 64, 2, 1, 64, 1, 4.0, now),
                    (root, rc["MEMORY_MB"], 262144, 4096, 256, 262144, 256, 1.5, now),
                    (root, rc["DISK_GB"], 2000, 10, 1, 2000, 1, 1.0, now)]
            rpt += [(root, tid["HW_CPU_X86_AVX2"], now),
                    (root, tid["CUSTOM_RACK_A" if h % 2 else "CUSTOM_RACK_B"], now)]
            rpa.append((root, 1 + h % 100, now))
            devices = []
            for d in range(4):
                rp_id += 1
                devices.append(rp_id)
                rps.append((rp_id, u(), f"compute-{h:05d}-dev{d}", 2, root, root, now))
                cls = "PGPU" if d % 2 else "CUSTOM_FPGA_ARRIA10"
                inv.append((rp_id, rc[cls], 2, 0, 1, 1, 1, 1.0, now))
                rpt.append((rp_id, tid["HW_GPU_API_VULKAN" if d % 2 else "CUSTOM_RACK_A"], now))
            for k in range(5):
                c_id += 1
                cu = u()
                cons.append((c_id, cu, 1 + c_id % 200, 1 + c_id % 500, 1, 1, now))
                dev = devices[k % 4]
                cls = "PGPU" if (k % 4) % 2 else "CUSTOM_FPGA_ARRIA10"
                alloc += [(root, cu, rc["VCPU"], 2, now), (root, cu, rc["MEMORY_MB"], 4096, now),
                          (root, cu, rc["DISK_GB"], 20, now), (dev, cu, rc[cls], 1, now)]
        put("placement_aggregates", ["id", "uuid", "created_at"], aggs)
        put("projects", ["id", "external_id", "created_at"], projects)
        put("users", ["id", "external_id", "created_at"], users)
        put("consumer_types", ["id", "name", "created_at"], [(1, "INSTANCE", now)])
        put("resource_providers", ["id", "uuid", "name", "generation", "root_provider_id",
                                   "parent_provider_id", "created_at"], rps)
        put("inventories", ["resource_provider_id", "resource_class_id", "total", "reserved",
                            "min_unit", "max_unit", "step_size", "allocation_ratio", "created_at"],
            inv)
        put("resource_provider_traits", ["resource_provider_id", "trait_id", "created_at"], rpt)
        put("resource_provider_aggregates", ["resource_provider_id", "aggregate_id", "created_at"],
            rpa)
        put("consumers", ["id", "uuid", "project_id", "user_id", "generation", "consumer_type_id",
                          "created_at"], cons)
        put("allocations", ["resource_provider_id", "consumer_id", "resource_class_id", "used",
                            "created_at"], alloc)
    print(f"{len(rps)} providers, {len(inv)} inventories, {len(cons)} consumers, "
          f"{len(alloc)} allocations written in {time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
