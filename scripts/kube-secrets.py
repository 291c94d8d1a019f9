#!/usr/bin/env python3
"""Runs the documented commands that make what an overlay of deploy/kubernetes does
not ship (the Namespace and Secrets of overlays/nova and overlays/kubernetes-postgres,
docs/deployment.md), as written, with `--dry-run=client -o yaml` added, and writes the
objects they make, so that scripts/dra-check.sh validates them against the Kubernetes
schemas and checks (kustomize-lite.py --refs) that with them each overlay has every
object, and every Secret key, it names.

A block is the ```sh block after a line `<!-- secrets: OVERLAY[ OVERLAY...] -->` in
the document; its `kubectl ... create namespace|secret generic ...` commands are run
(the others, `kubectl label`, `kubectl apply`, ..., are the operator's, not the
test's), from the repository's root, where their `--from-file` paths are. Each is
run by `kubectl` where it is installed and rendered here too (the few flags these
commands use); where both are, they must make the same objects.

usage: kube-secrets.py <document> <output dir>
  writes <output dir>/<overlay>.yaml per overlay named
"""

import base64
import pathlib
import re
import shlex
import shutil
import subprocess
import sys

import yaml

MARK = re.compile(r"^<!-- secrets: ([a-z0-9 -]+) -->$")


def fail(msg):
    sys.exit(f"kube-secrets: {msg}")


def blocks(text):
    """(overlays, commands) of each marked block; a command is its argv, the lines
    it continues over joined, comments gone."""
    lines = text.splitlines()
    out = []
    for i, line in enumerate(lines):
        m = MARK.match(line.strip())
        if not m:
            continue
        if i + 1 >= len(lines) or lines[i + 1].strip() != "```sh":
            fail(f"line {i + 1}: the mark is not followed by a ```sh block")
        body = []
        for rest in lines[i + 2:]:
            if rest.strip() == "```":
                break
            body.append(rest)
        else:
            fail(f"line {i + 1}: the block does not end")
        joined = re.sub(r"\\\n", " ", "\n".join(body) + "\n")
        commands = [shlex.split(c, comments=True) for c in joined.splitlines()]
        out.append((m.group(1).split(), [c for c in commands if c]))
    if not out:
        fail("no block is marked `<!-- secrets: ... -->`")
    return out


def creates(argv):
    """Whether `argv` is a `kubectl create` of a Namespace or generic Secret."""
    return argv[:1] == ["kubectl"] and "create" in argv


def lite(argv):
    """The object `kubectl [-n NS] create namespace NAME` or `kubectl [-n NS] create
    secret generic NAME [--from-literal=K=V] [--from-file=K=PATH]` makes."""
    args = argv[1:]
    ns = None
    if args[:1] == ["-n"]:
        ns, args = args[1], args[2:]
    if args[:2] == ["create", "namespace"] and len(args) == 3:
        return {"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"creationTimestamp": None, "name": args[2]},
                "spec": {}, "status": {}}
    if args[:3] != ["create", "secret", "generic"] or len(args) < 4:
        fail(f"not a command this renders: {shlex.join(argv)}")
    data = {}
    for a in args[4:]:
        if a.startswith("--from-literal="):
            k, v = a[len("--from-literal="):].split("=", 1)
            data[k] = v.encode()
        elif a.startswith("--from-file="):
            k, path = a[len("--from-file="):].split("=", 1)
            data[k] = pathlib.Path(path).read_bytes()
        else:
            fail(f"a flag this does not render: {a}")
    meta = {"creationTimestamp": None, "name": args[3]}
    if ns:
        meta["namespace"] = ns
    return {"apiVersion": "v1", "kind": "Secret",
            "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
            "metadata": meta}


def decoded(d):
    """kubectl folds long base64 lines; the data compared decoded."""
    if d.get("kind") == "Secret":
        d = dict(d, data={k: base64.b64decode("".join(v.split())) for k, v in d.get("data", {}).items()})
    return d


def main():
    doc, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    kubectl = shutil.which("kubectl")
    out.mkdir(parents=True, exist_ok=True)
    made = {}
    for overlays, commands in blocks(doc.read_text()):
        objects = []
        for argv in filter(creates, commands):
            obj = lite(argv)
            if kubectl:
                run = subprocess.run([kubectl, *argv[1:], "--dry-run=client", "-o", "yaml"],
                                     capture_output=True, text=True, check=False)
                if run.returncode != 0:
                    fail(f"{shlex.join(argv)}: {run.stderr.strip()}")
                got = yaml.safe_load(run.stdout)
                if decoded(got) != decoded(obj):
                    fail(f"kubectl and this render {shlex.join(argv)} differently")
                obj = got
            objects.append(obj)
            print(f"kube-secrets: {doc}: {shlex.join(argv)} -> {obj['kind']} "
                  f"{obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}")
        if not objects:
            fail(f"the block for {' '.join(overlays)} creates nothing")
        for o in overlays:
            made.setdefault(o, []).extend(objects)
    for o, objects in made.items():
        (out / f"{o}.yaml").write_text(yaml.safe_dump_all(objects, sort_keys=False))
    by = "kubectl create --dry-run=client, and this agrees" if kubectl else "this (no kubectl)"
    print(f"kube-secrets: {len(made)} overlays' documented objects made ({by})")


if __name__ == "__main__":
    main()
