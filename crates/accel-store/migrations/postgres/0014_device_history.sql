-- The console's device health and history (src/accelerator/history.rs).
-- devices.health_reason: why the device is not ok, in the agent's words (or the
-- server's, for a device no longer reported); health_since: when health last changed
-- (NULL: before this migration).
ALTER TABLE devices ADD COLUMN health_reason TEXT;
ALTER TABLE devices ADD COLUMN health_since BIGINT;
-- A bounded history per device (KEEP rows, history.rs): reports that changed it, health
-- changes, binds and cleanings, written in the transaction of the change. Each insert
-- prunes that device's rows beyond the newest KEEP; a removed device's rows go with it.
CREATE TABLE device_events (
    id BIGSERIAL PRIMARY KEY,
    device_uuid VARCHAR(36) NOT NULL,
    hostname VARCHAR(255) NOT NULL,
    rp_uuid VARCHAR(36),
    kind VARCHAR(16) NOT NULL,
    detail TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX device_events_device_idx ON device_events(device_uuid, id);
CREATE INDEX device_events_host_idx ON device_events(hostname, id);
