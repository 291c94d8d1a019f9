#!/usr/bin/env python3
"""Asks a DRA driver's registration socket GetInfo with Python grpcio (gRPC C-core),
once per `:authority` a kubelet-side client may send, and prints one JSON line per
case: {"authority": ..., "ok": bool, "info" | "error": ...}.

    dra-authority.py /var/lib/kubelet/plugins_registry/accel.dev-reg.sock

Cases: "localhost" (what kubelet >= 1.26 sends, kubernetes/kubernetes#112597), the
socket path percent-encoded (what grpc-go and C-core >= 1.57 send when left to their
default for a unix target), and the client's own default. No protobuf package is
needed: the empty request is b"" and the PluginInfo answer is decoded by hand.
Exit status 0 when every case answered: the driver's sockets take the percent-encoded
path too (crates/accel-k8s/src/authority.rs rewrites it before h2 sees it).
"""
import json
import sys
import urllib.parse

import grpc


def fields(buf):
    """Length-delimited fields of a protobuf message: [(number, bytes)]."""
    out, i = [], 0
    while i < len(buf):
        key, shift = 0, 0
        while True:
            b = buf[i]
            i += 1
            key |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                break
        n, shift = 0, 0
        while True:
            b = buf[i]
            i += 1
            n |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                break
        out.append((key >> 3, buf[i:i + n]))
        i += n
    return out


def info(raw):
    d = {"type": "", "name": "", "endpoint": "", "supported_versions": []}
    for num, v in fields(raw):
        s = v.decode()
        if num == 1:
            d["type"] = s
        elif num == 2:
            d["name"] = s
        elif num == 3:
            d["endpoint"] = s
        elif num == 4:
            d["supported_versions"].append(s)
    return d


def ask(path, authority):
    options = [] if authority is None else [("grpc.default_authority", authority)]
    with grpc.insecure_channel("unix:" + path, options=options) as ch:
        call = ch.unary_unary(
            "/pluginregistration.Registration/GetInfo",
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        try:
            return {"ok": True, "info": info(call(b"", timeout=5))}
        except grpc.RpcError as e:
            return {"ok": False, "error": f"{e.code().name}: {e.details()}"}


def main():
    path = sys.argv[1]
    encoded = urllib.parse.quote(path, safe="")
    ok = True
    for label, authority in [
        ("localhost", "localhost"),
        ("percent-encoded path", encoded),
        ("client default", None),
    ]:
        r = ask(path, authority)
        r["case"] = label
        r["authority"] = authority
        print(json.dumps(r), flush=True)
        ok = ok and r["ok"]
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
