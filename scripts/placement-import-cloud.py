#!/usr/bin/env python3
"""Fill a Placement (upstream's, for the import test) with a seeded random cloud, through its
HTTP API only (noauth2 admin), at microversion 1.39:

- custom resource classes and traits;
- compute nodes in trees: each root has NUMA children (VCPU, PCPU with step 2) and some have
  FPGA children, one with a grandchild; inventories with reserved, min_unit, max_unit,
  step_size and allocation_ratio all set to something other than the default;
- shared providers (DISK_GB, MISC_SHARES_VIA_AGGREGATE) in aggregates with compute nodes;
- many consumers of several projects and users, of consumer types INSTANCE and MIGRATION,
  each allocating across its host's tree and a shared provider;
- then changes and deletions: allocations replaced (consumer generations move), some
  consumers deleted, inventories updated (provider generations move), a provider deleted,
  traits and aggregates changed;
- last, two providers left over capacity as upstream's API allows (issue 42): a lowered
  allocation_ratio on the most used VCPU inventory, a raised reserved on the most used
  shared DISK_GB.

    placement-import-cloud.py --url http://127.0.0.1:18971 [--seed 28] [--hosts 12] [--consumers 60]

Same seed, same cloud (uuids included). Exits non-zero if upstream refuses a write it must
accept.
"""
import argparse
import json
import random
import sys
import urllib.error
import urllib.request
import uuid

MV = "placement 1.39"


class Placement:
    def __init__(self, url):
        self.url = url.rstrip("/")
        self.calls = 0

    def req(self, method, path, body=None, ok=(200, 201, 204)):
        data = None if body is None else json.dumps(body).encode()
        r = urllib.request.Request(self.url + path, data=data, method=method)
        r.add_header("x-auth-token", "admin")
        r.add_header("openstack-api-version", MV)
        r.add_header("accept", "application/json")
        if data is not None:
            r.add_header("content-type", "application/json")
        self.calls += 1
        try:
            with urllib.request.urlopen(r) as resp:
                status, text = resp.status, resp.read().decode()
        except urllib.error.HTTPError as e:
            status, text = e.code, e.read().decode()
        if status not in ok:
            sys.exit(f"{method} {path}: HTTP {status}: {text}")
        return status, (json.loads(text) if text else None)

    def generation(self, rp):
        return self.req("GET", f"/resource_providers/{rp}")[1]["generation"]


def new_uuid(rng):
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--seed", type=int, default=28)
    ap.add_argument("--hosts", type=int, default=12)
    ap.add_argument("--consumers", type=int, default=60)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    p = Placement(a.url)

    custom_classes = ["CUSTOM_FPGA_ARRIA10", "CUSTOM_GOLD_IOPS", "CUSTOM_UNUSED_CLASS"]
    for c in custom_classes:
        p.req("PUT", f"/resource_classes/{c}")
    custom_traits = ["CUSTOM_RACK_A", "CUSTOM_RACK_B", "CUSTOM_FPGA_INTEL", "CUSTOM_UNUSED_TRAIT"]
    for t in custom_traits:
        p.req("PUT", f"/traits/{t}")
    aggs = [new_uuid(rng) for _ in range(3)]

    # inventories[rp][class] = dict; usage[rp][class] = int
    inventories, usage, tree = {}, {}, {}

    def provider(name, parent=None):
        u = new_uuid(rng)
        body = {"name": name, "uuid": u}
        if parent:
            body["parent_provider_uuid"] = parent
        p.req("POST", "/resource_providers", body)
        inventories[u], usage[u] = {}, {}
        return u

    def set_inventory(rp, inv):
        p.req("PUT", f"/resource_providers/{rp}/inventories",
              {"resource_provider_generation": p.generation(rp), "inventories": inv})
        inventories[rp] = inv

    def set_traits(rp, traits):
        p.req("PUT", f"/resource_providers/{rp}/traits",
              {"resource_provider_generation": p.generation(rp), "traits": traits})

    def set_aggs(rp, agg_list):
        p.req("PUT", f"/resource_providers/{rp}/aggregates",
              {"resource_provider_generation": p.generation(rp), "aggregates": agg_list})

    shared = []
    for i in range(2):
        s = provider(f"shared-storage-{i}")
        set_inventory(s, {"DISK_GB": {"total": 2000 + 500 * i, "reserved": 10, "min_unit": 10,
                                      "max_unit": 1000, "step_size": 10, "allocation_ratio": 0.9},
                          "CUSTOM_GOLD_IOPS": {"total": 100, "reserved": 0, "min_unit": 5,
                                               "max_unit": 50, "step_size": 5,
                                               "allocation_ratio": 1.0}})
        set_traits(s, ["MISC_SHARES_VIA_AGGREGATE", "STORAGE_DISK_SSD"])
        set_aggs(s, [aggs[i]])
        shared.append(s)

    hosts = []
    for h in range(a.hosts):
        root = provider(f"compute-{h:03d}")
        tree[root] = []
        set_inventory(root, {
            "MEMORY_MB": {"total": rng.choice([16384, 32768, 65536]), "reserved": 512,
                          "min_unit": 256, "max_unit": 16384, "step_size": 256,
                          "allocation_ratio": 1.5},
            "DISK_GB": {"total": rng.randint(100, 400), "reserved": rng.randint(0, 20),
                        "min_unit": 1, "max_unit": 100, "step_size": 1, "allocation_ratio": 1.0},
        })
        set_traits(root, ["HW_CPU_X86_AVX2", rng.choice(["CUSTOM_RACK_A", "CUSTOM_RACK_B"])]
                   + (["COMPUTE_VOLUME_MULTI_ATTACH"] if h % 3 == 0 else []))
        set_aggs(root, [aggs[h % 2]] + ([aggs[2]] if h % 4 == 0 else []))
        for n in range(2):
            numa = provider(f"compute-{h:03d}-numa{n}", root)
            tree[root].append(numa)
            set_inventory(numa, {
                "VCPU": {"total": rng.randint(8, 32), "reserved": rng.randint(0, 2), "min_unit": 1,
                         "max_unit": 8, "step_size": 1, "allocation_ratio": 4.0},
                "PCPU": {"total": 8, "reserved": 0, "min_unit": 2, "max_unit": 8, "step_size": 2,
                         "allocation_ratio": 1.0},
            })
            set_traits(numa, ["HW_NUMA_ROOT"])
        if h % 2 == 0:
            fpga = provider(f"compute-{h:03d}-fpga0", root)
            tree[root].append(fpga)
            set_inventory(fpga, {"CUSTOM_FPGA_ARRIA10": {"total": 2, "reserved": 0, "min_unit": 1,
                                                         "max_unit": 1, "step_size": 1,
                                                         "allocation_ratio": 1.0}})
            set_traits(fpga, ["CUSTOM_FPGA_INTEL"])
            if h % 4 == 0:
                region = provider(f"compute-{h:03d}-fpga0-region0", fpga)
                tree[root].append(region)
                set_inventory(region, {"FPGA": {"total": 4, "reserved": 1, "min_unit": 1,
                                                "max_unit": 2, "step_size": 1,
                                                "allocation_ratio": 1.0}})
        hosts.append(root)

    def fits(rp, rc, amount):
        inv = inventories[rp].get(rc)
        if not inv:
            return False
        cap = int((inv["total"] - inv["reserved"]) * inv["allocation_ratio"])
        return (inv["min_unit"] <= amount <= inv["max_unit"] and amount % inv["step_size"] == 0
                and usage[rp].get(rc, 0) + amount <= cap)

    projects = [f"project-{i}" for i in range(5)]
    users = [f"user-{i}" for i in range(4)]
    consumers = {}  # uuid -> (allocations, project, user, type, generation)

    def allocate(c, generation):
        host = rng.choice(hosts)
        want = {}

        def take(rp, rc, amount):
            if fits(rp, rc, amount):
                want.setdefault(rp, {})[rc] = amount

        take(host, "MEMORY_MB", 256 * rng.randint(1, 16))
        numa = [x for x in tree[host] if "VCPU" in inventories[x]]
        take(rng.choice(numa), rng.choice(["VCPU", "VCPU", "PCPU"]), rng.choice([1, 2, 4]))
        if rng.random() < 0.4:
            for dev in tree[host]:
                if "CUSTOM_FPGA_ARRIA10" in inventories[dev] or "FPGA" in inventories[dev]:
                    rc = "FPGA" if "FPGA" in inventories[dev] else "CUSTOM_FPGA_ARRIA10"
                    take(dev, rc, 1)
                    break
        if rng.random() < 0.5:
            s = shared[hosts.index(host) % 2]
            take(s, "DISK_GB", 10 * rng.randint(1, 10))
            if rng.random() < 0.3:
                take(s, "CUSTOM_GOLD_IOPS", 5 * rng.randint(1, 4))
        else:
            take(host, "DISK_GB", rng.randint(1, 20))
        if not want:
            return False
        prev = consumers.get(c)
        project = prev[1] if prev else rng.choice(projects)
        user = prev[2] if prev else rng.choice(users)
        ctype = rng.choice(["INSTANCE", "INSTANCE", "MIGRATION"])
        body = {"allocations": {rp: {"resources": r} for rp, r in want.items()},
                "project_id": project, "user_id": user, "consumer_generation": generation,
                "consumer_type": ctype}
        if prev:
            release(c)
        p.req("PUT", f"/allocations/{c}", body)
        for rp, r in want.items():
            for rc, n in r.items():
                usage[rp][rc] = usage[rp].get(rc, 0) + n
        consumers[c] = (want, project, user, ctype)
        return True

    def release(c):
        for rp, r in consumers[c][0].items():
            for rc, n in r.items():
                usage[rp][rc] -= n

    for _ in range(a.consumers):
        allocate(new_uuid(rng), None)

    # Changes and deletions.
    ids = sorted(consumers)
    for c in rng.sample(ids, len(ids) // 5):  # replaced allocations: generations move
        gen = p.req("GET", f"/allocations/{c}")[1]["consumer_generation"]
        allocate(c, gen)
    for c in rng.sample(ids, len(ids) // 6):  # deleted consumers
        if c in consumers:
            p.req("DELETE", f"/allocations/{c}")
            release(c)
            del consumers[c]
    for h in rng.sample(hosts, 3):  # inventory updates: generations move
        inv = dict(inventories[h])
        mem = dict(inv["MEMORY_MB"])
        mem["reserved"] = 1024
        inv["MEMORY_MB"] = mem
        set_inventory(h, inv)
    # A provider deleted (an unused NUMA child without allocations), traits and aggregates
    # changed.
    for h in hosts:
        for child in tree[h]:
            if not any(usage[child].values()) and "VCPU" in inventories[child]:
                p.req("DELETE", f"/resource_providers/{child}")
                tree[h].remove(child)
                break
        else:
            continue
        break
    set_traits(hosts[1], ["HW_CPU_X86_AVX2", "CUSTOM_RACK_B", "HW_CPU_X86_AVX512F"])
    set_aggs(hosts[1], [])
    p.req("DELETE", "/traits/CUSTOM_UNUSED_TRAIT")
    over = over_capacity(p, inventories, usage, set_inventory)
    n_rps = len(p.req("GET", "/resource_providers")[1]["resource_providers"])
    print(f"cloud seed {a.seed}: {n_rps} providers, {len(consumers)} consumers, "
          f"{p.calls} API calls, {len(over)} provider(s) left over capacity: {', '.join(over)}")


def over_capacity(p, inventories, usage, set_inventory):
    """Usage left above capacity, as upstream's API allows (it only logs a warning): the most
    used VCPU inventory gets a lowered allocation_ratio, the most used shared DISK_GB a raised
    reserved. Returns "uuid CLASS" of each."""
    def most_used(rc):
        used = [(usage[rp].get(rc, 0), rp) for rp in inventories if rc in inventories[rp]]
        n, rp = max(used)
        if n < 2:
            sys.exit(f"no {rc} inventory used enough to put over capacity")
        return rp, n

    rp, n = most_used("VCPU")
    inv = {rc: dict(v) for rc, v in inventories[rp].items()}
    vcpu = inv["VCPU"]
    vcpu["allocation_ratio"] = max(0.01, int((n - 1) * 100 / (vcpu["total"] - vcpu["reserved"])) / 100)
    set_inventory(rp, inv)
    done = [f"{rp} VCPU"]
    disk = [s for s in inventories if "CUSTOM_GOLD_IOPS" in inventories[s]]
    rp, n = max((usage[s].get("DISK_GB", 0), s) for s in disk)[::-1]
    inv = {rc: dict(v) for rc, v in inventories[rp].items()}
    inv["DISK_GB"]["reserved"] = inv["DISK_GB"]["total"] - n // 2
    set_inventory(rp, inv)
    done.append(f"{rp} DISK_GB")
    for d in done:
        rp, rc = d.split()
        i = inventories[rp][rc]
        if int((i["total"] - i["reserved"]) * i["allocation_ratio"]) >= usage[rp][rc]:
            sys.exit(f"{d} is not over capacity")
    return done


if __name__ == "__main__":
    main()
