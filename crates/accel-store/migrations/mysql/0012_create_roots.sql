-- Root providers inserted and logged in one call, inside the caller's transaction:
-- what providers::create_roots does elsewhere in four statements, each a round trip
-- (src/placement/providers.rs says why). `new_rows` is a JSON array of [uuid, name]
-- pairs; the answer is one row, the new ids as a JSON array in the same order.
-- The change-log steps are src/placement/changes.rs's flush, for these ids: the shard
-- of the smallest id, its sequence moved on last, one log row per id, and the shard
-- pruned (KEEP_PER_SHARD = 4096 rows) on every 512th sequence number.
-- The whole file is one statement (its body has semicolons): see migrate.rs.
CREATE PROCEDURE accel_create_roots(IN new_rows LONGTEXT, IN now_s BIGINT)
BEGIN
    DECLARE n INT DEFAULT JSON_LENGTH(new_rows);
    DECLARE i INT DEFAULT 0;
    DECLARE rp BIGINT;
    DECLARE first_id BIGINT DEFAULT NULL;
    DECLARE ids LONGTEXT DEFAULT '[]';
    DECLARE s INT;
    DECLARE q BIGINT;
    WHILE i < n DO
        INSERT INTO resource_providers (uuid, name, generation, created_at, updated_at)
        VALUES (JSON_UNQUOTE(JSON_EXTRACT(new_rows, CONCAT('$[', i, '][0]'))),
                JSON_UNQUOTE(JSON_EXTRACT(new_rows, CONCAT('$[', i, '][1]'))),
                0, now_s, now_s);
        SET rp = LAST_INSERT_ID();
        UPDATE resource_providers SET root_provider_id = rp WHERE id = rp;
        IF first_id IS NULL OR rp < first_id THEN
            SET first_id = rp;
        END IF;
        SET ids = JSON_ARRAY_APPEND(ids, '$', rp);
        SET i = i + 1;
    END WHILE;
    IF n > 0 THEN
        SET s = first_id MOD 16;
        UPDATE placement_change_shards SET seq = LAST_INSERT_ID(seq + 1) WHERE shard = s;
        SET q = LAST_INSERT_ID();
        SET i = 0;
        WHILE i < n DO
            INSERT INTO placement_changes (shard, seq, provider_id)
            VALUES (s, q, JSON_EXTRACT(ids, CONCAT('$[', i, ']')));
            SET i = i + 1;
        END WHILE;
        IF q MOD 512 = 0 THEN
            DELETE FROM placement_changes WHERE shard = s AND seq < q - 4096;
        END IF;
    END IF;
    SELECT ids;
END
