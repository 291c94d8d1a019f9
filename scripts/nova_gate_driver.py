"""Nova's fake virt driver, recording what scripts/nova-gate.sh checks.

Every call that hands the driver accelerators (spawn, hard reboot, power on) appends one
JSON line to $NOVA_GATE_RECORD: the compute host, the method, the instance uuid and the
ARQs (`accel_info`) Nova passed, so the gate can compare the attach handles the driver
received with the Bound ARQs in accel. Node uuids are stable across restarts. A server whose name contains
`fail-spawn-<host>` fails its spawn on that host, and one whose name contains
`fail-first-spawn` fails its first spawn wherever it is (the record says which was first,
across both computes), so the gate can watch Nova reschedule.
"""

import json
import os
import threading

from nova import exception
import nova.virt.node
from nova.virt import fake

from oslo_config import cfg

CONF = cfg.CONF
_LOCK = threading.Lock()


def _record(method, instance, accel_info):
    path = os.environ.get("NOVA_GATE_RECORD")
    if not path:
        return
    line = json.dumps({
        "host": CONF.host,
        "method": method,
        "instance": instance.uuid,
        "accel_info": [
            {
                "uuid": a.get("uuid"),
                "state": a.get("state"),
                "hostname": a.get("hostname"),
                "device_rp_uuid": a.get("device_rp_uuid"),
                "attach_handle_type": a.get("attach_handle_type"),
                "attach_handle_info": a.get("attach_handle_info"),
            }
            for a in (accel_info or [])
        ],
    })
    with _LOCK, open(path, "a") as f:
        f.write(line + "\n")


def _spawned_before(instance_uuid):
    path = os.environ.get("NOVA_GATE_RECORD")
    if not path or not os.path.exists(path):
        return False
    with _LOCK, open(path) as f:
        return any(json.loads(line)["instance"] == instance_uuid for line in f)


class RecordingFakeDriver(fake.FakeDriver):
    # The fake driver's node uuids are new in every process; a compute that restarts
    # (the gate's evacuation) must find its node again: the persisted local node
    # identity ($state_path/compute_id), as libvirt's driver does.
    def get_available_resource(self, nodename):
        resources = super().get_available_resource(nodename)
        if resources:
            resources["uuid"] = nova.virt.node.get_local_node_uuid()
        return resources

    def get_nodenames_by_uuid(self, refresh=False):
        return {nova.virt.node.get_local_node_uuid(): self.get_available_nodes()[0]}

    def spawn(self, context, instance, image_meta, injected_files,
              admin_password, allocations, network_info=None,
              block_device_info=None, power_on=True, accel_info=None):
        name = instance.display_name or ""
        first = "fail-first-spawn" in name and not _spawned_before(instance.uuid)
        _record("spawn", instance, accel_info)
        if first or ("fail-spawn-%s" % CONF.host) in name:
            raise exception.NovaException(
                "nova-gate: spawn refused on %s by the server's name" % CONF.host)
        super().spawn(context, instance, image_meta, injected_files,
                      admin_password, allocations, network_info=network_info,
                      block_device_info=block_device_info, power_on=power_on,
                      accel_info=accel_info)

    def reboot(self, context, instance, network_info, reboot_type,
               block_device_info=None, bad_volumes_callback=None,
               accel_info=None, share_info=None):
        _record("reboot-" + reboot_type.lower(), instance, accel_info)
        super().reboot(context, instance, network_info, reboot_type,
                       block_device_info=block_device_info,
                       bad_volumes_callback=bad_volumes_callback,
                       accel_info=accel_info, share_info=share_info)

    def power_on(self, context, instance, network_info,
                 block_device_info=None, accel_info=None, share_info=None):
        _record("power_on", instance, accel_info)
        super().power_on(context, instance, network_info,
                         block_device_info=block_device_info,
                         accel_info=accel_info, share_info=share_info)
