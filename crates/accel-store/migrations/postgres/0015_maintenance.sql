-- The maintenance switch (issue 42): while this table holds its one row (id 1), both
-- APIs answer writes with 503 and the row's reason, and serve reads. It lives in the
-- database, not in a process, so every replica on the database stops writes together
-- and a restarted server comes back still stopped.
CREATE TABLE maintenance (
    id INTEGER PRIMARY KEY,
    reason TEXT NOT NULL,
    started_at BIGINT NOT NULL
);
