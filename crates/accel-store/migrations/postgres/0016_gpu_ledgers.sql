-- One ledger per partitioned GPU (src/partitions/, issue 45). gpu_ledgers: the GPU's
-- geometry as its agent reports it (JSON of the ledger's Geometry, accel-core partition/), under the
-- uuid of the GPU's own provider; generation moves on with every change, and its row
-- lock is taken before any provider's by every writer of the GPU's holders.
-- gpu_ledger_members: which provider takes the GPU which way ('whole', 'mig:<profile
-- id>', 'vgpu:<type id>'). gpu_ledger_holders: who holds what, where (JSON of
-- the ledger's Consumer: the MIG placement the agent creates the instance at).
CREATE TABLE gpu_ledgers (
    id BIGSERIAL PRIMARY KEY,
    rp_uuid VARCHAR(36) NOT NULL UNIQUE,
    hostname VARCHAR(255) NOT NULL,
    geometry TEXT NOT NULL,
    generation BIGINT NOT NULL DEFAULT 0,
    created_at BIGINT NOT NULL,
    updated_at BIGINT
);
CREATE INDEX gpu_ledgers_host_idx ON gpu_ledgers(hostname);
CREATE TABLE gpu_ledger_members (
    rp_uuid VARCHAR(36) PRIMARY KEY,
    ledger_id BIGINT NOT NULL REFERENCES gpu_ledgers(id),
    member VARCHAR(255) NOT NULL
);
CREATE INDEX gpu_ledger_members_ledger_idx ON gpu_ledger_members(ledger_id);
CREATE TABLE gpu_ledger_holders (
    id BIGSERIAL PRIMARY KEY,
    ledger_id BIGINT NOT NULL REFERENCES gpu_ledgers(id),
    consumer VARCHAR(255) NOT NULL,
    rp_uuid VARCHAR(36) NOT NULL,
    holder TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX gpu_ledger_holders_ledger_idx ON gpu_ledger_holders(ledger_id);
