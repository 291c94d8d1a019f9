-- One row per running server process, named as its leases are (the workers' owner);
-- see the SQLite and PostgreSQL versions. The owner is a key, so VARCHAR.
CREATE TABLE server_heartbeats (
    owner VARCHAR(255) PRIMARY KEY,
    alive_until BIGINT NOT NULL,
    started_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
