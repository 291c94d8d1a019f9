"""The seeded walk of scripts/cyborg-diff.py: which accelerator-API requests to send, and in what order.

Why a separate module: the runner compares answers; this module only knows what a meaningful sequence of
Cyborg v2 requests looks like (profiles before ARQs, ARQs before binds, binds with valid and broken patches)
and how to break a request on purpose (content types, Accept, malformed JSON, unknown fields, long strings,
percent-encoded paths, microversion headers). Objects the servers name (ARQ, profile, attribute, device and
deployable uuids, the device's resource provider) appear in a request as placeholders (`{arq:3}`,
`{dp:name}`, `{attr:1}`, `{dev}`, `{dep}`, `{rp}`) that each side resolves from its own answers.
"""

from __future__ import annotations

import json
import random
import uuid as uuidlib
from dataclasses import dataclass, field
from typing import Any

HOST = "diff-host"
PROJECT = "5eed00000000400080000000000000a1"


@dataclass
class Req:
    method: str
    path: str
    body: Any = None              # JSON-encoded when sent
    raw: str | None = None        # sent as is
    headers: dict[str, str] = field(default_factory=dict)
    kind: str = ""
    instance: str | None = None   # the instance a bind or unbind is about (the runner waits for its events)

    def describe(self) -> str:
        s = f"{self.method} {self.path}"
        if self.raw is not None:
            s += f" raw={self.raw[:200]!r}"
        elif self.body is not None:
            s += f" body={json.dumps(self.body)[:300]}"
        if self.headers:
            s += f" headers={self.headers}"
        return s


class Walk:
    """The generator and its model of the world (what upstream answered)."""

    def __init__(self, seed: int):
        self.r = random.Random(seed)
        self.profiles: list[str] = []       # names upstream created
        self.arqs: list[int] = []           # ARQ symbols upstream created (and did not delete)
        self.n_arq = 0
        self.attrs: list[int] = []
        self.n_attr = 0
        self.made: dict[str, str] = {}      # every uuid the walk chose -> its name in normalised answers
        self.instances = [self.uuid() for _ in range(6)]

    def uuid(self) -> str:
        u = str(uuidlib.UUID(int=self.r.getrandbits(128), version=4))
        self.made[u] = f"<w{len(self.made)}>"
        return u

    def pick(self, xs):
        return self.r.choice(xs)

    def chance(self, p: float) -> bool:
        return self.r.random() < p

    # -- what upstream's answers teach the model ---------------------------------------------------------
    def learned(self, req: Req, status: int, body: Any) -> list[int]:
        """Updates the model from upstream's answer; returns the ARQ symbols a create made."""
        made: list[int] = []
        kind = req.kind.split("+")[0]  # what the request was, whatever was broken in it
        if kind == "create_profile" and status == 201 and isinstance(body, dict):
            self.profiles.append(body.get("name"))
        elif kind == "delete_profile" and status == 204:
            gone = req.path.rsplit("/", 1)[-1] if req.path.count("/") > 2 else ""
            self.profiles = [p for p in self.profiles if p not in gone.split(",")]
        elif kind == "create_arq" and status == 201 and isinstance(body, dict):
            for _ in body.get("arqs", []):
                made.append(self.n_arq)
                self.arqs.append(self.n_arq)
                self.n_arq += 1
        elif kind == "create_attr" and status == 201:
            made.append(self.n_attr)
            self.attrs.append(self.n_attr)
            self.n_attr += 1
        return made

    # -- operations ----------------------------------------------------------------------------------------
    def next(self) -> Req:
        if not self.profiles:
            return self.op_create_profile(valid=True)
        ops = [(8, self.op_create_profile), (6, self.op_get_profiles), (3, self.op_delete_profile),
               (10, self.op_create_arq), (7, self.op_list_arqs), (5, self.op_show_arq),
               (12, self.op_bind), (4, self.op_unbind), (4, self.op_delete_arqs), (5, self.op_hardware),
               (4, self.op_attributes), (3, self.op_versions), (8, self.op_negotiation), (4, self.op_routing)]
        x = self.r.uniform(0, sum(w for w, _ in ops))
        for w, f in ops:
            x -= w
            if x <= 0:
                return f()
        return ops[-1][1]()

    def name(self) -> str:
        n = f"dp-{self.r.randint(0, 9999)}"
        if self.chance(0.08):
            n = self.pick(["a b", "x%y", "ünï", "x" * self.pick([255, 256, 300]), "", "dp.dot", "dp/slash"])
        return n

    def group(self) -> dict[str, Any]:
        g: dict[str, Any] = {"resources:FPGA": self.pick(["1", "1", "2", 1])}
        if self.chance(0.5):
            g["trait:CUSTOM_FAKE_DEVICE"] = "required"
        # No `accel:bitstream_id`: a bind that programs needs Glance, which neither side has here.
        if self.chance(0.1):
            g[self.pick(["bogus", "resources:VCPU", "trait:HW_X", "resources:CUSTOM_X"])] = \
                self.pick(["1", "x", "required", "maybe"])
        return g

    def op_create_profile(self, valid: bool = False) -> Req:
        name = self.name() if not valid else f"dp-{self.r.randint(0, 9999)}"
        dp: dict[str, Any] = {"name": name, "groups": [self.group() for _ in range(self.pick([1, 1, 2]))]}
        if self.chance(0.2):
            dp["description"] = self.pick(["d", "x" * 300, None])
        if self.chance(0.1) and self.profiles:
            dp["name"] = self.pick(self.profiles)      # a duplicate name
        if not valid and self.chance(0.15):
            dp = self.pick([{}, {"name": "n"}, {"groups": []}, {"name": "n", "groups": {}},
                            {"name": "n", "groups": [], "extra": 1}, {"name": 7, "groups": [{}]},
                            dict(dp, uuid=self.pick([self.uuid(), "not-a-uuid"])), dict(dp, extra="x")])
        body: Any = [dp]
        if not valid and self.chance(0.08):
            body = self.pick([dp, [dp, dp], [], None, "text"])
        return Req("POST", "/v2/device_profiles", body=body, kind="create_profile",
                   headers=self.version_header())

    def version_header(self) -> dict[str, str]:
        if self.chance(0.25):
            return {"OpenStack-API-Version": "accelerator " + self.pick(["2.0", "2.1", "2.2", "2.3", "latest"])}
        return {}

    def profile_ref(self) -> str:
        if self.profiles and self.chance(0.85):
            name = self.pick(self.profiles)
            return self.pick(["{dp:%s}" % name, name, "".join(f"%{ord(c):02X}" if c == "-" else c for c in name)])
        return self.pick([self.uuid(), "nope", "%2Fx", "a%20b"])

    def op_get_profiles(self) -> Req:
        if self.chance(0.5):
            q = ""
            if self.chance(0.4) and self.profiles:
                q = "?name=" + ",".join(self.r.sample(self.profiles, min(len(self.profiles), 2)))
            elif self.chance(0.1):
                q = self.pick(["?name=", "?bogus=1", "?name=a&name=b"])
            return Req("GET", "/v2/device_profiles" + q, kind="list_profiles", headers=self.version_header())
        return Req("GET", "/v2/device_profiles/" + self.profile_ref(), kind="show_profile",
                   headers=self.version_header())

    def op_delete_profile(self) -> Req:
        refs = [self.profile_ref() for _ in range(self.pick([1, 1, 2]))]
        sep = self.pick([",", ",", "%2C"])
        if self.chance(0.2):
            return Req("DELETE", "/v2/device_profiles?value=" + sep.join(refs), kind="delete_profile")
        return Req("DELETE", "/v2/device_profiles/" + sep.join(refs), kind="delete_profile")

    def op_create_arq(self) -> Req:
        body: Any = {"device_profile_name": self.pick(self.profiles) if self.profiles else "none"}
        if self.chance(0.15):
            body = self.pick([{}, {"device_profile_name": "missing"}, {"device_profile_name": 3},
                              {"device_profile_name": None}, dict(body, extra=1), [body]])
            # No `device_profile_group_id`: accel creates that group's ARQs only, upstream every
            # group's (docs/cyborg-compat.md), and the two worlds would part for good.
        return Req("POST", "/v2/accelerator_requests", body=body, kind="create_arq",
                   headers=self.version_header())

    def arq_ref(self) -> str:
        if self.arqs and self.chance(0.9):
            return "{arq:%d}" % self.pick(self.arqs)
        return self.pick([self.uuid(), "not-a-uuid"])

    def op_list_arqs(self) -> Req:
        q = self.pick(["", "", "?instance=" + self.pick(self.instances), "?bind_state=resolved",
                       "?bind_state=", "?bind_state=started", "?instance=&bind_state=resolved",
                       "?instance=" + self.pick(self.instances) + "&bind_state=resolved", "?instance=x",
                       "?bogus=1"])
        return Req("GET", "/v2/accelerator_requests" + q, kind="list_arqs", headers=self.version_header())

    def op_show_arq(self) -> Req:
        return Req("GET", "/v2/accelerator_requests/" + self.arq_ref(), kind="show_arq",
                   headers=self.version_header())

    def op_delete_arqs(self) -> Req:
        if self.chance(0.5):
            q = "?arqs=" + ",".join(self.arq_ref() for _ in range(self.pick([1, 2])))
        else:
            q = self.pick(["?instance=" + self.pick(self.instances), "", "?instance=x", "?arqs="])
        return Req("DELETE", "/v2/accelerator_requests" + q, kind="delete_arqs")

    def bind_patch(self, instance: str) -> list[dict[str, Any]]:
        patch: list[dict[str, Any]] = [
            {"path": "/hostname", "op": "add", "value": HOST},
            {"path": "/device_rp_uuid", "op": "add", "value": "{rp}"},
            {"path": "/instance_uuid", "op": "add", "value": instance},
        ]
        if self.chance(0.25):
            i = self.r.randrange(3)
            how = self.pick(["drop", "null", "list", "object", "int", "bad-uuid", "bad-op", "extra-path",
                             "no-op", "no-path", "bad-host", "empty"])
            if how == "drop":
                patch.pop(i)
            elif how in ("null", "list", "object", "int", "empty"):
                patch[i]["value"] = {"null": None, "list": [1], "object": {"a": 1}, "int": 5, "empty": ""}[how]
                # upstream binds a number, empty text or a null host where accel refuses them
                self.divergent = self.divergent or how in ("int", "empty", "null")
            elif how == "bad-uuid":
                # upstream binds any text (a documented deviation): sent for ARQs nobody made
                patch[2]["value"] = self.pick(["not-a-uuid", "1234"])
                self.divergent = True
            elif how == "bad-op":
                patch[i]["op"] = self.pick(["replace", "remove", "x"])
            elif how == "extra-path":
                patch.append({"path": self.pick(["/project_id", "/state", "/bogus"]), "op": "add",
                              "value": PROJECT})
            elif how == "no-op":
                del patch[i]["op"]
            elif how == "no-path":
                del patch[i]["path"]
            elif how == "bad-host":
                patch[0]["value"] = "other-host"
                self.divergent = True
            if how in ("drop", "null") and i == 1 and self.chance(0.5):
                patch = patch[:1] if patch else patch
        return patch

    def op_bind(self) -> Req:
        inst = self.pick(self.instances)
        arqs = [self.arq_ref() for _ in range(self.pick([1, 1, 2]))]
        self.divergent = False
        body: Any = {a: self.bind_patch(inst) for a in arqs}
        if self.divergent:
            body = {self.uuid(): patch for patch in body.values()}
        if self.chance(0.05):
            body = self.pick([[], {}, {arqs[0]: {}}, {arqs[0]: "x"}])
        return Req("PATCH", "/v2/accelerator_requests", body=body, kind="bind", instance=inst)

    def op_unbind(self) -> Req:
        a = self.arq_ref()
        body = {a: [{"path": "/hostname", "op": "remove"}, {"path": "/device_rp_uuid", "op": "remove"},
                    {"path": "/instance_uuid", "op": "remove"}]}
        return Req("PATCH", "/v2/accelerator_requests", body=body, kind="unbind", instance=None)

    def op_hardware(self) -> Req:
        what = self.pick(["deployables", "devices"])
        ref = "{dep}" if what == "deployables" else "{dev}"
        path = self.pick([f"/v2/{what}", f"/v2/{what}", f"/v2/{what}/{ref}", f"/v2/{what}/{self.uuid()}",
                          f"/v2/{what}/not-a-uuid"])
        if path == f"/v2/{what}" and self.chance(0.6):
            if what == "devices":
                path += self.pick(["?type=FPGA", "?type=GPU", "?vendor=0xABCD", "?hostname=" + HOST,
                                   "?hostname=nope", "?filters.field=x", "?bogus=1", "?type="])
            else:
                path += self.pick(["?filters.field=name&filters.value=" + HOST + "_FakeDevice",
                                   "?filters.field=bogus&filters.value=1", "?filters.field=num_accelerators",
                                   "?filters.field=uuid&filters.value={dep}", "?filters.value=x",
                                   "?filters.field=name&filters.value=nope", "?bogus=1"])
        return Req("GET", path, kind="hardware", headers=self.version_header())

    def op_attributes(self) -> Req:
        c = self.r.random()
        if c < 0.3:
            body: Any = {"deployable_id": self.pick([1, 1, 99, "1", None]), "key": self.pick(["k", "rc", "x" * 300]),
                         "value": self.pick(["v", "FPGA"])}
            if self.chance(0.15):
                body = self.pick([{}, {"key": "k"}, dict(body, extra=1), []])
            return Req("POST", "/v2/attributes", body=body, kind="create_attr")
        if c < 0.55:
            return Req("GET", "/v2/attributes" + self.pick(["", "?deployable_id=1", "?key=rc", "?deployable_id=x",
                                                          "?key=traits1&deployable_id=1"]), kind="list_attr")
        ref = "{attr:%d}" % self.pick(self.attrs) if self.attrs and self.chance(0.8) else self.uuid()
        if c < 0.8:
            return Req("GET", "/v2/attributes/" + ref, kind="show_attr")
        return Req("DELETE", "/v2/attributes/" + ref, kind="delete_attr")

    def op_versions(self) -> Req:
        path = self.pick(["/", "/v2", "/v2/", "/accelerator/v2", "/accelerator/", "/v2.json"])
        h = self.pick([{}, {"OpenStack-API-Version": "accelerator 2.9"}, {"OpenStack-API-Version": "accelerator x"},
                       {"OpenStack-API-Version": "compute 2.1"}, {"OpenStack-API-Version": "accelerator 2.3"},
                       {"X-OpenStack-Accelerator-API-Version": "2.1"}])
        return Req(self.pick(["GET", "GET", "GET", "POST"]), path, headers=h, kind="version")

    def op_negotiation(self) -> Req:
        """A write or read whose media types, body text or header are off."""
        base = self.pick([self.op_create_profile, self.op_create_arq, self.op_bind, self.op_get_profiles])()
        how = self.pick(["ctype", "ctype", "accept", "malformed", "none-body", "microversion"])
        if how == "ctype":
            base.headers["Content-Type"] = self.pick(["text/plain", "application/xml", "",
                                                      "application/x-www-form-urlencoded", "application/json; charset=utf-8",
                                                      "application/JSON"])
        elif how == "accept":
            base.headers["Accept"] = self.pick(["application/xml", "text/html", "*/*", "application/json",
                                                "text/plain", "application/json;q=0.5, text/html"])
        elif how == "malformed" and base.method != "GET":
            base.raw = self.pick(["{", "[{\"name\": }]", "nul", "{\"a\": 1,}", "\"str\"", "", "[]", "{}x"])
        elif how == "none-body" and base.method != "GET":
            base.raw = ""
            base.headers["Content-Type"] = self.pick(["application/json", ""])
        else:
            base.headers["OpenStack-API-Version"] = self.pick(["accelerator 2.4", "accelerator 1.0", "accelerator",
                                                               "accelerator 2.01", "accelerator latest"])
        base.kind += "+" + how
        return base

    def op_routing(self) -> Req:
        m, p = self.pick([("PATCH", "/v2/device_profiles"), ("PUT", "/v2/device_profiles"),
                          ("POST", "/v2/deployables"), ("GET", "/v2/deployables/{dep}/program"),
                          ("PUT", "/v2/accelerator_requests"), ("GET", "/v2/nothing"), ("DELETE", "/"),
                          ("POST", "/accelerator/"), ("GET", "/v3"), ("PATCH", "/v2/devices/{dev}"),
                          ("GET", "/v2/devices/{dev}/enable"), ("POST", "/v2/attributes/x"),
                          ("GET", "/v2/accelerator_requests/{arq}/x"), ("PUT", "/"),
                          ("GET", "/v2/device_profiles/a/b")])
        if "{arq}" in p:
            p = p.replace("{arq}", self.arq_ref())
        return Req(m, p, kind="routing")
