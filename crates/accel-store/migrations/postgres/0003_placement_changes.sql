-- Change tracking for the in-memory placement index (see src/placement/changes.rs).
-- Every write transaction that changes placement data bumps one shard's sequence by
-- one and logs the providers it touched under that (shard, seq).
CREATE TABLE placement_change_shards (
    shard INTEGER PRIMARY KEY,
    seq BIGINT NOT NULL
);
INSERT INTO placement_change_shards (shard, seq) SELECT i, 0 FROM generate_series(0, 15) AS i;
-- provider_id: a provider whose data changed, or -1 when class or trait names changed.
CREATE TABLE placement_changes (
    shard INTEGER NOT NULL,
    seq BIGINT NOT NULL,
    provider_id BIGINT NOT NULL
);
CREATE INDEX placement_changes_shard_seq_idx ON placement_changes(shard, seq);
