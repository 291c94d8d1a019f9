-- The node agent (src/accelerator/report.rs).
-- devices.health: ok, unhealthy (the agent says so), or vanished (no longer reported, but
-- kept, with its inventory reserved, until no allocation or ARQ holds it).
ALTER TABLE devices ADD COLUMN health VARCHAR(16) NOT NULL DEFAULT 'ok';
-- The digest of the last report applied per host: an identical report is skipped.
CREATE TABLE agent_reports (
    hostname VARCHAR(255) PRIMARY KEY,
    digest VARCHAR(64) NOT NULL,
    updated_at BIGINT NOT NULL
);
