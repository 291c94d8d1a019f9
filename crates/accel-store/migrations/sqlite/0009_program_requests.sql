-- Programming requests without an ARQ: PATCH /v2/deployables/{uuid}/program asks the
-- agent to program a deployable directly, so arq_uuid becomes optional (still unique
-- when set). SQLite cannot drop a NOT NULL in place: the table is rebuilt.
CREATE TABLE program_requests_new (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    arq_uuid VARCHAR(36) UNIQUE,
    deployable_id BIGINT NOT NULL,
    hostname VARCHAR(255) NOT NULL,
    bitstream_id VARCHAR(36),
    function_id VARCHAR(36),
    state VARCHAR(16) NOT NULL,
    error TEXT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT
);
INSERT INTO program_requests_new (id, arq_uuid, deployable_id, hostname, bitstream_id,
    function_id, state, error, created_at, updated_at)
    SELECT id, arq_uuid, deployable_id, hostname, bitstream_id, function_id, state, error,
    created_at, updated_at FROM program_requests;
DROP TABLE program_requests;
ALTER TABLE program_requests_new RENAME TO program_requests;
CREATE INDEX program_requests_host_state_idx ON program_requests(hostname, state);
