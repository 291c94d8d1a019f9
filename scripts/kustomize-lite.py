#!/usr/bin/env python3
"""Renders a kustomization of deploy/kubernetes without kubectl, for the subset those
use, and refuses anything else: `resources` (files and directories), `components`,
`patches` with an inline JSON 6902 patch (add, remove, replace, test) and a target
by kind and name, and `configMapGenerator` from files with `behavior: replace` or
`create` and `disableNameSuffixHash: true`.

    kustomize-lite.py DIR                 the rendered documents, YAML, on stdout
    kustomize-lite.py --same A.yaml B.yaml exit 1 unless both hold the same objects

scripts/dra-check.sh renders each overlay with `kubectl kustomize` where installed,
with this where not, and where both are checks that they agree (--same).
"""
import copy
import pathlib
import sys

import yaml

KUSTOMIZATION = {"apiVersion", "kind", "resources", "components", "patches", "configMapGenerator"}


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
        generate(root, g, docs)
    for p in k.get("patches", []):
        patch(root, p, docs)
    return docs


def ident(d):
    m = d["metadata"]
    return (d["kind"], m.get("namespace", ""), m["name"])


def generate(root, g, docs):
    unknown = set(g) - {"name", "namespace", "behavior", "files", "options"}
    if unknown or g.get("options") != {"disableNameSuffixHash": True}:
        fail(f"{root}: configMapGenerator {g['name']}: only files, behavior and disableNameSuffixHash")
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": g["name"]}, "data": {}}
    if "namespace" in g:
        cm["metadata"]["namespace"] = g["namespace"]
    for f in g.get("files", []):
        cm["data"][pathlib.PurePath(f).name] = (root / f).read_text()
    at = [i for i, d in enumerate(docs) if ident(d) == ident(cm)]
    behavior = g.get("behavior", "create")
    if behavior == "replace" and at:
        docs[at[0]] = cm
    elif behavior == "create" and not at:
        docs.append(cm)
    else:
        fail(f"{root}: configMapGenerator {g['name']}: behavior {behavior} with {len(at)} existing")


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
        a, b = (sorted(load(pathlib.Path(f)), key=ident) for f in sys.argv[2:4])
        if a != b:
            for x, y in zip(a, b):
                if x != y:
                    print(f"first difference: {ident(x)} / {ident(y)}", file=sys.stderr)
                    break
            fail(f"{sys.argv[2]} and {sys.argv[3]} differ")
        return
    docs = build(pathlib.Path(sys.argv[1]))
    yaml.safe_dump_all(docs, sys.stdout, sort_keys=False)


if __name__ == "__main__":
    main()
