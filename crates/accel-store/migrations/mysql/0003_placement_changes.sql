-- Change tracking for the in-memory placement index (see src/placement/changes.rs).
-- Every write transaction that changes placement data bumps one shard's sequence by
-- one and logs the providers it touched under that (shard, seq).
CREATE TABLE placement_change_shards (
    shard INTEGER PRIMARY KEY,
    seq BIGINT NOT NULL
);
INSERT INTO placement_change_shards (shard, seq) VALUES
    (0, 0), (1, 0), (2, 0), (3, 0), (4, 0), (5, 0), (6, 0), (7, 0),
    (8, 0), (9, 0), (10, 0), (11, 0), (12, 0), (13, 0), (14, 0), (15, 0);
-- provider_id: a provider whose data changed, or -1 when class or trait names changed.
CREATE TABLE placement_changes (
    shard INTEGER NOT NULL,
    seq BIGINT NOT NULL,
    provider_id BIGINT NOT NULL
);
CREATE INDEX placement_changes_shard_seq_idx ON placement_changes(shard, seq);
