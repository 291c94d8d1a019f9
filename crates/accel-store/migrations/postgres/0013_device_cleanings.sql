-- Devices cleaned between tenants (src/accelerator/cleaning.rs). One row per device
-- provider that has been released at least once (no row: clean). While state is
-- 'cleaning' or 'clean_failed' the provider's inventories stay reserved in full. The
-- agent of the host takes a cleaning as owner (its process id: a new process of the
-- same host takes it over at once, so a restarted agent resumes it);
-- attempt counts the takes, so an answer from an earlier take changes nothing.
CREATE TABLE device_cleanings (
    rp_uuid VARCHAR(36) PRIMARY KEY,
    hostname VARCHAR(255) NOT NULL,
    state VARCHAR(16) NOT NULL,
    reason TEXT,
    attempt BIGINT NOT NULL DEFAULT 0,
    owner VARCHAR(255),
    started_at BIGINT,
    finished_at BIGINT,
    last_duration_ms BIGINT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT
);
CREATE INDEX device_cleanings_host_state_idx ON device_cleanings(hostname, state);
