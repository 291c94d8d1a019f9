#!/usr/bin/env python3
"""Renders a kustomization of deploy/kubernetes without kubectl, for the subset those
use, and refuses anything else: `resources` (files and directories), `components`,
`patches` with an inline JSON 6902 patch (add, remove, replace, test) and a target
by kind and name, and `configMapGenerator` and `secretGenerator` from files and
literals with `behavior: replace` or `create` and `disableNameSuffixHash: true`.

    kustomize-lite.py DIR                 the rendered documents, YAML, on stdout
    kustomize-lite.py --same A.yaml B.yaml exit 1 unless both hold the same objects
    kustomize-lite.py --refs A.yaml [MADE.yaml...]
                                          exit 1 unless every Namespace, Secret,
                                          ConfigMap, ServiceAccount, PersistentVolumeClaim
                                          and ClusterRole the objects of A name is among
                                          them or in a MADE file (the objects documented
                                          commands make: scripts/kube-secrets.py), with
                                          every Secret and ConfigMap key they read

scripts/dra-check.sh renders each overlay with `kubectl kustomize` where installed,
with this where not, and where both are checks that they agree (--same).
"""
import base64
import copy
import pathlib
import sys

import yaml

KUSTOMIZATION = {"apiVersion", "kind", "resources", "components", "patches",
                 "configMapGenerator", "secretGenerator"}


def fail(msg):
    sys.exit(f"kustomize-lite: {msg}")


def load(path):
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def build(root, docs=None):
    """The documents of the kustomization (or component) in `root`; a component adds
    to and changes `docs`, what the kustomization that names it has so far."""
    k = yaml.safe_load((root / "kustomization.yaml").read_text())
    unknown = set(k) - KUSTOMIZATION
    if unknown:
        fail(f"{root}: {sorted(unknown)} not supported")
    docs = [] if docs is None else docs
    for r in k.get("resources", []):
        p = root / r
        docs.extend(build(p) if p.is_dir() else load(p))
    for c in k.get("components", []):
        build(root / c, docs)
    for g in k.get("configMapGenerator", []):
        generate(root, g, docs, "ConfigMap")
    for g in k.get("secretGenerator", []):
        generate(root, g, docs, "Secret")
    for p in k.get("patches", []):
        patch(root, p, docs)
    return docs


def ident(d):
    m = d["metadata"]
    return (d["kind"], m.get("namespace", ""), m["name"])


def generate(root, g, docs, kind):
    """A ConfigMap or (base64 data, type Opaque) Secret, as kustomize generates it."""
    unknown = set(g) - {"name", "namespace", "behavior", "files", "literals", "options"}
    if unknown or g.get("options") != {"disableNameSuffixHash": True}:
        fail(f"{root}: {kind} generator {g['name']}: only files, literals, behavior and disableNameSuffixHash")
    data = {}
    for f in g.get("files", []):
        data[pathlib.PurePath(f).name] = (root / f).read_text()
    for lit in g.get("literals", []):
        key, _, value = lit.partition("=")
        data[key] = value
    obj = {"apiVersion": "v1", "kind": kind, "metadata": {"name": g["name"]}}
    if kind == "Secret":
        obj["type"] = "Opaque"
        data = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    obj["data"] = data
    if "namespace" in g:
        obj["metadata"]["namespace"] = g["namespace"]
    at = [i for i, d in enumerate(docs) if ident(d) == ident(obj)]
    behavior = g.get("behavior", "create")
    if behavior == "replace" and at:
        docs[at[0]] = obj
    elif behavior == "create" and not at:
        docs.append(obj)
    else:
        fail(f"{root}: {kind} generator {g['name']}: behavior {behavior} with {len(at)} existing")


def decoded(d):
    """A Secret with its data decoded: kubectl folds long base64 lines, which YAML
    reads back with spaces in them."""
    if d.get("kind") == "Secret":
        d = dict(d, data={k: base64.b64decode("".join(v.split())) for k, v in d.get("data", {}).items()})
    return d


BUILT_IN = {("Namespace", "", "kube-system"), ("Namespace", "", "default")}


def references(d):
    """(kind, namespace, name, key) of every object `d` needs to exist, `key` the
    Secret's or ConfigMap's key it reads (None: the object itself)."""
    ns = d["metadata"].get("namespace", "")
    if ns:
        yield ("Namespace", "", ns, None)
    pod = d.get("spec", {}).get("template", {}).get("spec")
    if pod:
        if pod.get("serviceAccountName"):
            yield ("ServiceAccount", ns, pod["serviceAccountName"], None)
        for v in pod.get("volumes", []):
            if "secret" in v:
                name = v["secret"]["secretName"]
                yield ("Secret", ns, name, None)
                for item in v["secret"].get("items", []):
                    yield ("Secret", ns, name, item["key"])
            if "configMap" in v:
                name = v["configMap"]["name"]
                yield ("ConfigMap", ns, name, None)
                for item in v["configMap"].get("items", []):
                    yield ("ConfigMap", ns, name, item["key"])
            if "persistentVolumeClaim" in v:
                yield ("PersistentVolumeClaim", ns, v["persistentVolumeClaim"]["claimName"], None)
        for c in pod.get("containers", []) + pod.get("initContainers", []):
            for e in c.get("env", []):
                ref = e.get("valueFrom", {})
                if "secretKeyRef" in ref:
                    yield ("Secret", ns, ref["secretKeyRef"]["name"], ref["secretKeyRef"]["key"])
                if "configMapKeyRef" in ref:
                    r = ref["configMapKeyRef"]
                    yield ("ConfigMap", ns, r["name"], r["key"])
    if d["kind"] == "ClusterRoleBinding":
        yield ("ClusterRole", "", d["roleRef"]["name"], None)
        for sub in d.get("subjects", []):
            if sub["kind"] == "ServiceAccount":
                yield ("ServiceAccount", sub["namespace"], sub["name"], None)


def keys(d):
    """The keys a Secret or ConfigMap holds."""
    return set(d.get("data") or {}) | set(d.get("stringData") or {}) | set(d.get("binaryData") or {})


def missing(docs, made):
    """What the objects of `docs` need that neither they nor `made` hold."""
    have = {ident(d): d for d in docs + made}
    out = []
    for d in docs:
        for kind, ns, name, key in references(d):
            r = (kind, ns, name)
            if r in BUILT_IN:
                continue
            gap = None
            if r not in have:
                gap = f"{ident(d)} needs {r}"
            elif key is not None and key not in keys(have[r]):
                gap = f"{ident(d)} needs key {key!r} of {r}"
            if gap and gap not in out:
                out.append(gap)
    return out


def patch(root, p, docs):
    target = p.get("target", {})
    if set(p) != {"target", "patch"} or set(target) != {"kind", "name"}:
        fail(f"{root}: a patch needs an inline JSON 6902 patch and a target kind and name")
    hits = [d for d in docs if d["kind"] == target["kind"] and d["metadata"]["name"] == target["name"]]
    if not hits:
        fail(f"{root}: no {target['kind']} {target['name']} to patch")
    for d in hits:
        for op in yaml.safe_load(p["patch"]):
            apply(d, op, root)


def pointer(path):
    return [t.replace("~1", "/").replace("~0", "~") for t in path.split("/")[1:]]


def apply(doc, op, where):
    *parents, last = pointer(op["path"])
    node = doc
    for t in parents:
        node = node[int(t)] if isinstance(node, list) else node[t]
    kind = op["op"]
    if isinstance(node, list):
        i = len(node) if last == "-" else int(last)
        if kind == "add":
            node.insert(i, copy.deepcopy(op["value"]))
        elif kind == "replace":
            node[i] = copy.deepcopy(op["value"])
        elif kind == "remove":
            del node[i]
        elif kind == "test":
            if node[i] != op["value"]:
                fail(f"{where}: test {op['path']}: {node[i]!r} is not {op['value']!r}")
        else:
            fail(f"{where}: op {kind} not supported")
    else:
        if kind in ("add", "replace"):
            if kind == "replace" and last not in node:
                fail(f"{where}: replace {op['path']}: nothing there")
            node[last] = copy.deepcopy(op["value"])
        elif kind == "remove":
            del node[last]
        elif kind == "test":
            if node.get(last) != op["value"]:
                fail(f"{where}: test {op['path']}: {node.get(last)!r} is not {op['value']!r}")
        else:
            fail(f"{where}: op {kind} not supported")


def main():
    if sys.argv[1] == "--same":
        a, b = (sorted(map(decoded, load(pathlib.Path(f))), key=ident) for f in sys.argv[2:4])
        if a != b:
            for x, y in zip(a, b):
                if x != y:
                    print(f"first difference: {ident(x)} / {ident(y)}", file=sys.stderr)
                    break
            fail(f"{sys.argv[2]} and {sys.argv[3]} differ")
        return
    if sys.argv[1] == "--refs":
        made = [d for f in sys.argv[3:] for d in load(pathlib.Path(f))]
        gaps = missing(load(pathlib.Path(sys.argv[2])), made)
        for g in gaps:
            print(f"kustomize-lite: {sys.argv[2]}: {g}", file=sys.stderr)
        sys.exit(1 if gaps else 0)
    docs = build(pathlib.Path(sys.argv[1]))
    yaml.safe_dump_all(docs, sys.stdout, sort_keys=False)


if __name__ == "__main__":
    main()
