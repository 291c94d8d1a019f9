"""The cyborg-agents of a simulated cloud, for `accel-bench cloud` against upstream Cyborg.

A real cloud runs one cyborg-agent per compute node; each discovers its devices and
sends the conductor a `report_data` RPC over RabbitMQ every periodic run. A thousand
agent processes do not fit on one benchmark machine, so this one process stands in
for all of them: `POST /report/<host>?devices=M` builds the device list a fake-driver
agent on <host> would send (M FPGA cards, each one deployable of one accelerator with
one TEST_PCI attach handle, traits CUSTOM_FAKE_DEVICE, class FPGA: the cloud
simulator's scenario, which is accel's fake report) and makes the same RPC call with
upstream's own client (`cyborg.conductor.rpcapi.ConductorAPI`). It answers 204 when
the conductor has answered, so the simulator times the report as the agent would
wait for it. The conductor does the rest as upstream does: the first report creates
the devices and their resource providers in Placement under the host's provider;
later reports diff against the database.

Usage (in upstream Cyborg's virtualenv, with its configuration file):
    python cloud-cyborg-relay.py --config-file cyborg.conf --relay-port 19570
"""

# Cyborg's services run on eventlet (oslo.service's backend patches the socket module
# once imported); patch everything first, as they do, so the server's threads and the
# RPC client's reply listener are all green threads on one hub.
import eventlet

eventlet.monkey_patch()

import argparse  # noqa: E402
import http.server  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import urllib.parse  # noqa: E402


def device_list(host, devices):
    from cyborg.common import constants
    from cyborg.objects.driver_objects import (
        driver_attach_handle,
        driver_attribute,
        driver_controlpath_id,
        driver_deployable,
        driver_device,
    )

    out = []
    for i in range(devices):
        slot = {"domain": "0000", "bus": "%02x" % (0x0C + i), "device": "00", "function": "0"}
        cpid = driver_controlpath_id.DriverControlPathID()
        cpid.cpid_type = "PCI"
        cpid.cpid_info = json.dumps(slot)
        handle = driver_attach_handle.DriverAttachHandle()
        handle.attach_type = constants.AH_TYPE_TEST_PCI
        handle.in_use = False
        handle.attach_info = json.dumps(dict(slot, function="1"))
        traits = driver_attribute.DriverAttribute()
        traits.key, traits.value = "traits1", "CUSTOM_FAKE_DEVICE"
        rc = driver_attribute.DriverAttribute()
        rc.key, rc.value = "rc", "FPGA"
        dep = driver_deployable.DriverDeployable()
        dep.name = re.sub(r"(?![a-zA-Z0-9_\-]).", "_", "%s_FakeDevice%d" % (host, i))
        dep.driver_name = "fake"
        dep.num_accelerators = 1
        dep.attach_handle_list = [handle]
        dep.attribute_list = [traits, rc]
        dev = driver_device.DriverDevice()
        dev.vendor = "0xABCD"
        dev.model = "miss model info"
        dev.std_board_info = json.dumps({"device_id": "0xabcd", "class": "Fake class"})
        dev.vendor_board_info = "fake_vendor_info"
        dev.type = constants.DEVICE_FPGA
        dev.stub = False
        dev.controlpath_id = cpid
        dev.deployable_list = [dep]
        out.append(dev)
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--config-file", required=True)
    p.add_argument("--relay-port", type=int, default=19570)
    a = p.parse_args()

    from cyborg.common import service
    from cyborg import context
    from cyborg.conductor import rpcapi

    service.prepare_service([sys.argv[0], "--config-file", a.config_file])
    conductor = rpcapi.ConductorAPI()
    lock = threading.Lock()
    counts = {"ok": 0, "failed": 0}

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            url = urllib.parse.urlparse(self.path)
            host = url.path.removeprefix("/report/")
            n = int(urllib.parse.parse_qs(url.query).get("devices", ["1"])[0])
            length = int(self.headers.get("content-length") or 0)
            if length:
                self.rfile.read(length)
            try:
                conductor.report_data(context.get_admin_context(), host, device_list(host, n))
                status, body = 204, b""
                with lock:
                    counts["ok"] += 1
            except Exception as e:  # the simulator counts it as the report's error
                status, body = 502, ("%s: %s" % (type(e).__name__, e)).encode()
                with lock:
                    counts["failed"] += 1
                sys.stderr.write("report of %s failed: %s\n" % (host, body.decode()))
            self.send_response(status)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            with lock:
                body = json.dumps(counts).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", a.relay_port), Handler)
    server.daemon_threads = True
    print("relay ready on 127.0.0.1:%d" % a.relay_port, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
