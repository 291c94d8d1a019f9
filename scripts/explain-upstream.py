"""Helpers of scripts/explain-upstream.sh (stdlib only).

  explain-upstream.py load URL FIXTURE        replay FIXTURE's [method, path, body] calls on the
                                              Placement at URL (noauth admin, microversion 1.39);
                                              any answer >= 400 is an error
  explain-upstream.py hosts URL N             add N compute nodes (VCPU 8) each with one FPGA child
                                              (CUSTOM_ACCELERATOR_FPGA 1, CUSTOM_FPGA_INTEL), for
                                              timing `accel explain` on a bigger estate
  explain-upstream.py compare NAME A.json B.json
                                              compare two `accel explain -f json` answers: the
                                              candidate count, every root's fits by name, and the
                                              set of reason codes of every root; print the
                                              differences and exit 1 when there are any
"""
import json
import sys
import urllib.error
import urllib.request


def load(url, fixture):
    with open(fixture) as f:
        replay(url, json.load(f))


def replay(url, calls):
    for method, path, body in calls:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url + path, data=data, method=method)
        req.add_header("x-auth-token", "admin")
        req.add_header("openstack-api-version", "placement 1.39")
        if data is not None:
            req.add_header("content-type", "application/json")
        try:
            urllib.request.urlopen(req).read()
        except urllib.error.HTTPError as e:
            sys.exit("%s %s%s: HTTP %s: %s" % (method, url, path, e.code, e.read().decode()[:500]))


def hosts(url, n):
    calls = [["PUT", "/resource_classes/CUSTOM_ACCELERATOR_FPGA", None],
             ["PUT", "/traits/CUSTOM_FPGA_INTEL", None]]
    for i in range(n):
        host, fpga = "10000000-0000-4000-8000-%012d" % i, "20000000-0000-4000-8000-%012d" % i
        calls += [
            ["POST", "/resource_providers", {"name": "bench-host%05d" % i, "uuid": host}],
            ["PUT", "/resource_providers/%s/inventories" % host,
             {"resource_provider_generation": 0, "inventories": {"VCPU": {"total": 8}}}],
            ["POST", "/resource_providers",
             {"name": "bench-host%05d_fpga0" % i, "uuid": fpga, "parent_provider_uuid": host}],
            ["PUT", "/resource_providers/%s/inventories" % fpga,
             {"resource_provider_generation": 0,
              "inventories": {"CUSTOM_ACCELERATOR_FPGA": {"total": 1}}}],
            ["PUT", "/resource_providers/%s/traits" % fpga,
             {"resource_provider_generation": 1, "traits": ["CUSTOM_FPGA_INTEL"]}],
        ]
    replay(url, calls)


def verdicts(doc):
    return {
        r["name"]: (r["fits"], sorted({x["code"] for x in r["reasons"]}))
        for r in doc["roots"]
    }


def compare(name, a_path, b_path):
    with open(a_path) as f:
        a = json.load(f)
    with open(b_path) as f:
        b = json.load(f)
    diffs = []
    if a["candidates"] != b["candidates"]:
        diffs.append("candidates: accel %s, upstream %s" % (a["candidates"], b["candidates"]))
    va, vb = verdicts(a), verdicts(b)
    for root in sorted(set(va) | set(vb)):
        if va.get(root) != vb.get(root):
            diffs.append("%s: accel %s, upstream %s" % (root, va.get(root), vb.get(root)))
    for r in a["roots"]:
        if not r["fits"] and not r["reasons"]:
            diffs.append("%s does not fit and has no reason" % r["name"])
    if diffs:
        print("DIFFERENT %s" % name)
        for d in diffs:
            print("  " + d)
        sys.exit(1)
    fits = sorted(r for r, (f, _) in va.items() if f)
    print("same %s: %d candidate(s), fits %s" % (name, a["candidates"], ", ".join(fits) or "none"))


if __name__ == "__main__":
    if sys.argv[1:2] == ["load"] and len(sys.argv) == 4:
        load(sys.argv[2], sys.argv[3])
    elif sys.argv[1:2] == ["hosts"] and len(sys.argv) == 4:
        hosts(sys.argv[2], int(sys.argv[3]))
    elif sys.argv[1:2] == ["compare"] and len(sys.argv) == 5:
        compare(*sys.argv[2:])
    else:
        sys.exit(__doc__)
