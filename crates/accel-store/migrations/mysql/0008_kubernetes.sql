-- Kubernetes device plugins (src/accelerator/kubernetes.rs).
-- Seed 001's deviceUsage of every held slot of a host, as the node agent last saved it:
-- usage is "<node>" (instance-level) or "C:<virtual id>:<node>" (pooled); device is the
-- device's PCI address; pod is "<namespace>/<name>" once kubelet lists the slot.
CREATE TABLE kubernetes_slots (
    hostname VARCHAR(255) NOT NULL,
    slot VARCHAR(63) NOT NULL,
    `usage` VARCHAR(255) NOT NULL,
    device VARCHAR(255),
    pod VARCHAR(255),
    PRIMARY KEY (hostname, slot)
);
-- The Placement consumers created for pods' slots, per host: whatever else allocates
-- from a device's providers is a virtual machine.
CREATE TABLE kubernetes_consumers (
    consumer_uuid VARCHAR(36) PRIMARY KEY,
    hostname VARCHAR(255) NOT NULL
);
CREATE INDEX kubernetes_consumers_hostname_idx ON kubernetes_consumers (hostname);
