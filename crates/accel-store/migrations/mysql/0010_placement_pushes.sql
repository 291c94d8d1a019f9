-- The outbox of pushes to an external OpenStack Placement (src/accelerator/pushes.rs).
-- One row per host whose device providers changed: version is bumped by every
-- transaction that changes the host's tree (report, enable, disable), pushed_version
-- is the last version a push completed; the host is pending while they differ.
-- owner/lease_until: the server pushing it and until when (epoch seconds), as
-- bind_jobs; attempts counts failures since the last success, last_error the latest.
CREATE TABLE placement_pushes (
    hostname VARCHAR(255) PRIMARY KEY,
    version BIGINT NOT NULL,
    pushed_version BIGINT NOT NULL DEFAULT 0,
    attempts BIGINT NOT NULL DEFAULT 0,
    next_attempt BIGINT NOT NULL,
    owner VARCHAR(64),
    lease_until BIGINT,
    last_error LONGTEXT,
    updated_at BIGINT
);
CREATE INDEX placement_pushes_next_idx ON placement_pushes (next_attempt);
