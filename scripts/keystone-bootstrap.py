"""Bootstraps a freshly `keystone-manage bootstrap`ped Keystone as a cloud's install
guide does, through the v3 REST API in one process (the `openstack` CLI costs about a
second of CPU per call): the `service` project, the service users with roles `service`
and `admin` in it, the roles, and the catalog's services and endpoints.

Reads one JSON document on stdin (written by scripts/keystone.sh):
  {"auth_url": ".../v3", "admin_password": "...", "region": "RegionOne",
   "roles": [...],
   "service_users": [{"name", "password"}],
   "users": [{"name", "password", "project", "roles": [...]}],   project "system": system scope,
                                                                  "domain": the Default domain
   "endpoints": [{"name", "type", "url"}]}
Everything is created if missing, so running it twice changes nothing.
"""

import json
import sys

import requests

DOMAIN = "default"


class Keystone:
    def __init__(self, auth_url, password):
        self.base = auth_url.rstrip("/")
        self.http = requests.Session()
        r = self.http.post(
            f"{self.base}/auth/tokens",
            json={
                "auth": {
                    "identity": {
                        "methods": ["password"],
                        "password": {
                            "user": {"name": "admin", "domain": {"id": DOMAIN}, "password": password}
                        },
                    },
                    "scope": {"project": {"name": "admin", "domain": {"id": DOMAIN}}},
                }
            },
        )
        r.raise_for_status()
        self.http.headers["X-Auth-Token"] = r.headers["X-Subject-Token"]

    def call(self, method, path, body=None, ok=(200, 201, 204)):
        r = self.http.request(method, f"{self.base}{path}", json=body)
        if r.status_code not in ok:
            raise SystemExit(f"keystone-bootstrap: {method} {path}: {r.status_code} {r.text}")
        return r.json() if r.content else None

    def find(self, collection, **filters):
        query = "&".join(f"{k}={v}" for k, v in filters.items())
        return self.call("GET", f"/{collection}?{query}")[collection]

    def ensure(self, collection, singular, body, **filters):
        found = self.find(collection, **filters)
        if found:
            return found[0]["id"]
        return self.call("POST", f"/{collection}", {singular: body})[singular]["id"]


def main():
    spec = json.load(sys.stdin)
    ks = Keystone(spec["auth_url"], spec["admin_password"])
    role_ids = {name: ks.ensure("roles", "role", {"name": name}, name=name) for name in spec["roles"]}
    projects = {}

    def project(name):
        if name not in projects:
            projects[name] = ks.ensure(
                "projects", "project", {"name": name, "domain_id": DOMAIN}, name=name, domain_id=DOMAIN
            )
        return projects[name]

    def user(name, password, project_name, roles):
        body = {"name": name, "password": password, "domain_id": DOMAIN, "enabled": True}
        if project_name not in ("system", "domain"):
            body["default_project_id"] = project(project_name)
        uid = ks.ensure("users", "user", body, name=name, domain_id=DOMAIN)
        for role in roles:
            rid = role_ids.get(role) or ks.ensure("roles", "role", {"name": role}, name=role)
            role_ids[role] = rid
            if project_name == "system":
                ks.call("PUT", f"/system/users/{uid}/roles/{rid}")
            elif project_name == "domain":
                ks.call("PUT", f"/domains/{DOMAIN}/users/{uid}/roles/{rid}")
            else:
                ks.call("PUT", f"/projects/{project(project_name)}/users/{uid}/roles/{rid}")
        return uid

    ids = {}
    for u in spec["service_users"]:
        ids[u["name"]] = user(u["name"], u["password"], "service", ["service", "admin"])
    for u in spec.get("users", []):
        ids[u["name"]] = user(u["name"], u["password"], u["project"], u["roles"])

    region = spec["region"]
    for e in spec.get("endpoints", []):
        sid = ks.ensure("services", "service", {"name": e["name"], "type": e["type"]}, type=e["type"])
        for interface in ("public", "internal", "admin"):
            if not ks.find("endpoints", service_id=sid, interface=interface):
                ks.call(
                    "POST",
                    "/endpoints",
                    {
                        "endpoint": {
                            "service_id": sid,
                            "interface": interface,
                            "url": e["url"],
                            "region_id": region,
                        }
                    },
                )
    json.dump({"projects": projects, "users": ids, "roles": role_ids}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
