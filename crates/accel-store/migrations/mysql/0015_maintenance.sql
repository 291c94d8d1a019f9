-- The maintenance switch; see the SQLite and PostgreSQL version.
CREATE TABLE maintenance (
    id INTEGER PRIMARY KEY,
    reason TEXT NOT NULL,
    started_at BIGINT NOT NULL
);
