-- The bind worker (src/accelerator/binds.rs) and the Nova event outbox
-- (src/accelerator/events.rs).
--
-- bind_jobs.state: pending (not performed yet), programming (waiting for the agent to
-- program the deployable), done (ARQ Bound), failed (ARQ BindFailed).
-- owner/lease_until: the server that claimed the job and until when (epoch seconds);
-- a job whose lease ran out is free again, so a crashed server's jobs resume.
ALTER TABLE bind_jobs ADD COLUMN owner VARCHAR(64);
ALTER TABLE bind_jobs ADD COLUMN lease_until BIGINT;
ALTER TABLE bind_jobs ADD COLUMN error LONGTEXT;
-- What the agent must program before a bind can finish (accel:bitstream_id /
-- accel:function_id). state: pending, done, failed.
CREATE TABLE program_requests (
    id BIGINT AUTO_INCREMENT PRIMARY KEY,
    arq_uuid VARCHAR(36) NOT NULL UNIQUE,
    deployable_id BIGINT NOT NULL,
    hostname VARCHAR(255) NOT NULL,
    bitstream_id VARCHAR(36),
    function_id VARCHAR(36),
    state VARCHAR(16) NOT NULL,
    error LONGTEXT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT
);
CREATE INDEX program_requests_host_state_idx ON program_requests(hostname, state);
-- One row per POST /os-server-external-events. state: pending, delivered,
-- no_endpoint (no Nova URL configured), rejected (Nova answered 4xx), expired (gave up).
CREATE TABLE nova_events (
    id BIGINT AUTO_INCREMENT PRIMARY KEY,
    instance_uuid VARCHAR(36) NOT NULL,
    events LONGTEXT NOT NULL,
    state VARCHAR(16) NOT NULL,
    attempts BIGINT NOT NULL DEFAULT 0,
    next_attempt BIGINT NOT NULL,
    owner VARCHAR(64),
    lease_until BIGINT,
    last_error LONGTEXT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT
);
CREATE INDEX nova_events_state_next_idx ON nova_events(state, next_attempt);
CREATE INDEX nova_events_instance_idx ON nova_events(instance_uuid);
