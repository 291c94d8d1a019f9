-- One row per running server process, named as its leases are (the workers' owner):
-- alive_until moves forward with every heartbeat. A lease held by an owner whose
-- alive_until has passed is free at once (accelerator/lease.rs), so a restarted
-- server resumes a killed predecessor's bind jobs, events and pushes within seconds
-- rather than after the 30 s lease. A cleanly stopped server sets alive_until = 0.
CREATE TABLE server_heartbeats (
    owner TEXT PRIMARY KEY,
    alive_until BIGINT NOT NULL,
    started_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
