#!/usr/bin/env python3
"""The CEL selectors of deploy/kubernetes/examples, evaluated (cel-python, pinned in
scripts/dra-check.txt) against the ResourceSlices the DRA driver published in the
tests (ACCEL_DRA_SLICES_OUT): a request matches a device when its DeviceClass's
selectors and its own all hold, as the scheduler decides.

The device is given to CEL as Kubernetes does: `device.driver`, `device.attributes`
and `device.capacity` keyed by domain (an unqualified name is in the driver's
domain), capacities as quantities with `quantity()` and `compareTo()`.

On the examples' node (crates/accel-k8s/tests/examples.rs) each request must select
exactly the devices named in EXPECTED; on every slice, a request of one
configuration's class must select no device of another configuration.

usage: dra-cel.py <examples dir> <device classes yaml> <slices dir>
"""

import fractions
import pathlib
import re
import sys

import celpy
import yaml

EXAMPLES_NODE = "examples-node"
# request (claim or template name / request name) -> pciBusIDs selected there.
EXPECTED = {
    "gpu/gpu": {"0000:17:00.0", "0000:31:00.0", "0000:4b:00.0"},
    "fpga/fpga": {"0000:65:00.0"},
    "a100-80g/gpu": {"0000:31:00.0"},
    "shared-gpu/gpu": {"0000:17:00.0", "0000:31:00.0", "0000:4b:00.0"},
}

SUFFIX = {"": 1, "n": fractions.Fraction(1, 10**9), "u": fractions.Fraction(1, 10**6),
          "m": fractions.Fraction(1, 1000), "k": 10**3, "M": 10**6, "G": 10**9,
          "T": 10**12, "P": 10**15, "E": 10**18, "Ki": 2**10, "Mi": 2**20,
          "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
QUANTITY = re.compile(r"^([+-]?[0-9]+(?:\.[0-9]*)?|[+-]?\.[0-9]+)([a-zA-Z]*|[eE][+-]?[0-9]+)$")


def amount(text):
    """A Kubernetes quantity's exact value."""
    m = QUANTITY.match(str(text))
    if not m:
        raise ValueError(f"not a quantity: {text!r}")
    number, suffix = fractions.Fraction(m.group(1)), m.group(2)
    if suffix[:1] in ("e", "E"):
        return number * fractions.Fraction(10) ** int(suffix[1:])
    return number * SUFFIX[suffix]


def quantity(text):
    amount(text)
    return celpy.celtypes.StringType(text)


def compare_to(a, b):
    x, y = amount(a), amount(b)
    return celpy.celtypes.IntType((x > y) - (x < y))


FUNCTIONS = {"quantity": quantity, "compareTo": compare_to}


def as_cel(driver, device):
    attributes, capacity = {}, {}
    for name, value in device.get("attributes", {}).items():
        domain, _, ident = name.rpartition("/")
        (kind, v), = value.items()
        attributes.setdefault(domain or driver, {})[ident] = v
    for name, value in device.get("capacity", {}).items():
        domain, _, ident = name.rpartition("/")
        capacity.setdefault(domain or driver, {})[ident] = value["value"]
    return {"device": celpy.json_to_cel(
        {"driver": driver, "attributes": attributes, "capacity": capacity})}


def selects(env, expressions, activation):
    for e in expressions:
        result = env.program(env.compile(e), functions=FUNCTIONS).evaluate(activation)
        if result is not True and result != celpy.celtypes.BoolType(True):
            return False
    return True


def cel_of(selectors):
    return [s["cel"]["expression"] for s in selectors or []]


def requests(examples):
    """(label, class name, the request's own CEL) of every claim and template."""
    for path in sorted(pathlib.Path(examples).glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            kind = doc.get("kind")
            if kind == "ResourceClaim":
                spec = doc["spec"]
            elif kind == "ResourceClaimTemplate":
                spec = doc["spec"]["spec"]
            else:
                continue
            for r in spec["devices"]["requests"]:
                label = f'{doc["metadata"]["name"]}/{r["name"]}'
                yield label, r["exactly"]["deviceClassName"], cel_of(r["exactly"].get("selectors"))


def configuration_of(expressions):
    for e in expressions:
        m = re.search(r'\.configuration == "([^"]+)"', e)
        if m:
            return m.group(1)
    return None


def main(examples, classes_file, slices_dir):
    env = celpy.Environment()
    classes = {d["metadata"]["name"]: cel_of(d["spec"]["selectors"])
               for d in yaml.safe_load_all(pathlib.Path(classes_file).read_text())
               if d and d.get("kind") == "DeviceClass"}
    slices = [yaml.safe_load(p.read_text()) for p in sorted(pathlib.Path(slices_dir).glob("*.yaml"))]
    failures, seen_examples_node = [], False
    for label, class_name, own in requests(examples):
        expressions = classes[class_name] + own
        conf = configuration_of(classes[class_name])
        for s in slices:
            driver, node = s["spec"]["driver"], s["spec"]["nodeName"]
            picked, wrong = set(), []
            for d in s["spec"].get("devices", []):
                if selects(env, expressions, as_cel(driver, d)):
                    bus_id = d["attributes"]["resource.kubernetes.io/pciBusID"]["string"]
                    picked.add(bus_id)
                    if d["attributes"]["configuration"]["string"] != conf:
                        wrong.append(bus_id)
            if wrong:
                failures.append(f"{label} (class {class_name}) selects {wrong} of another configuration on {node}")
            if node == EXAMPLES_NODE:
                seen_examples_node = True
                if picked != EXPECTED[label]:
                    failures.append(f"{label} selects {sorted(picked)} on {node}, not {sorted(EXPECTED[label])}")
                else:
                    print(f"cel: {label} selects exactly {sorted(picked)} on {node}")
    if not seen_examples_node:
        failures.append(f"no slice of {EXAMPLES_NODE} in {slices_dir} (crates/accel-k8s/tests/examples.rs)")
    for f in failures:
        print(f"dra-cel: {f}", file=sys.stderr)
    print(f"cel: {len(slices)} slices, every example request checked on each")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
