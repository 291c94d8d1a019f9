#!/usr/bin/env python3
"""openstacksdk's accelerator proxy against accel (run by scripts/cyborg-clients.sh).

Usage: cyborg-sdk-check.py CLOUD   (a cloud of OS_CLIENT_CONFIG_FILE's clouds.yaml)

The connection authenticates with the cloud's password against Keystone and finds the
accelerator endpoint in the catalog, as a user's would. Expects an admin cloud, the
fake device of host compute-1 (`accel serve --fake-devices compute-1`) and no profiles
or ARQs yet. Exits 1 on the first mismatch.
"""

import sys

import openstack

FAILED = []


def check(what, ok, detail=""):
    if ok:
        print(f"ok   sdk: {what}")
    else:
        print(f"FAIL sdk: {what}: {detail}", file=sys.stderr)
        FAILED.append(what)


def main(cloud):
    conn = openstack.connect(cloud=cloud, accelerator_default_microversion="2.3")
    endpoint = conn.session.get_endpoint(service_type="accelerator", interface="public")
    check("the catalog's accelerator endpoint", endpoint.endswith("/accelerator/v2"), endpoint)
    acc = conn.accelerator
    groups = [{"resources:FPGA": "1", "trait:CUSTOM_FAKE_DEVICE": "required"}]

    dp = acc.create_device_profile(name="sdk-dp", groups=groups, description="from sdk")
    check("create_device_profile", dp.name == "sdk-dp" and dp.groups == groups
          and dp.description == "from sdk" and len(dp.id or "") == 36, dp)
    listed = [p.name for p in acc.device_profiles()]
    check("device_profiles", listed == ["sdk-dp"], listed)
    got = acc.get_device_profile(dp.id)
    check("get_device_profile", got.id == dp.id and got.name == "sdk-dp", got)

    arq = acc.create_accelerator_request(device_profile_name="sdk-dp")
    check("create_accelerator_request", arq.state == "Initial"
          and arq.device_profile_name == "sdk-dp" and len(arq.id or "") == 36, arq)
    arqs = [a.id for a in acc.accelerator_requests()]
    check("accelerator_requests", arqs == [arq.id], arqs)
    got = acc.get_accelerator_request(arq.id)
    check("get_accelerator_request", got.id == arq.id and got.state == "Initial", got)

    devices = list(acc.devices())
    check("devices", [(d.hostname, d.type) for d in devices] == [("compute-1", "FPGA")],
          [(d.hostname, d.type) for d in devices])
    if devices:
        dev = acc.get_device(devices[0].id)
        check("get_device", dev.id == devices[0].id and dev.vendor == devices[0].vendor, dev)
    deployables = list(acc.deployables())
    check("deployables", [d.name for d in deployables] == ["compute-1_FakeDevice"],
          [d.name for d in deployables])

    acc.delete_accelerator_request(arq)
    arqs = list(acc.accelerator_requests())
    check("delete_accelerator_request", arqs == [], arqs)
    acc.delete_device_profile(dp)
    left = [p.name for p in acc.device_profiles()]
    check("delete_device_profile", left == [], left)
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
