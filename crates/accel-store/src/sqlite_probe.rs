//! The candidate index's per-request freshness check on a SQLite file, answered on the
//! calling thread.
//!
//! sqlx runs every SQLite connection on a worker thread of its own, so each statement
//! is two thread hand-offs (the request's task wakes the worker, the worker wakes the
//! task). `GET /allocation_candidates` asks "has any Placement data changed?" before
//! every answer; on the fpga200 answer that one statement and its hand-offs were about
//! a fifth of the server's CPU (docs/benchmarks.md, "The physical limit").
//!
//! Here a dedicated read-only connection (rusqlite, over the same linked SQLite) asks
//! `PRAGMA data_version`, whose value changes whenever another connection, of this
//! process or any other, commits to the file. While it has not changed, the version
//! vector this probe read last is still the database's; when it has, the vector is read
//! again on the same connection. `data_version` is read *before* the vector, so a
//! commit between the two pairs an old mark with a newer vector, which only costs one
//! more read next time, never a stale answer.
//!
//! Anything unexpected (the file cannot be opened read-only, a busy or failed
//! statement, a poisoned lock) answers `None` and the caller reads through sqlx as
//! before: the probe is a shortcut, never the only way.
//!
//! A leaf of the crate (it knows the change log's table, not the store): the store
//! holds one, and `Store::placement_version` (`placement/changes.rs`) asks it.

use std::sync::Mutex;
use std::time::Duration;

/// How long a probe statement waits for a lock. Readers of a WAL database take none
/// in the normal case; a longer wait would hold the async worker that asks.
const BUSY_WAIT: Duration = Duration::from_millis(50);

/// A read-only connection to a SQLite file and what it saw last: the version vector
/// of the change log's `N` shards.
#[derive(Debug)]
pub(crate) struct VersionProbe<const N: usize> {
    inner: Mutex<Probe<N>>,
}

#[derive(Debug)]
struct Probe<const N: usize> {
    conn: rusqlite::Connection,
    /// `(data_version, the vector read right after it)`.
    seen: Option<(i64, [i64; N])>,
}

impl<const N: usize> VersionProbe<N> {
    /// Opens the probe on the SQLite file at `path` (which must exist), or `None`
    /// (logged) when it cannot.
    pub(crate) fn open(path: &str) -> Option<Self> {
        use rusqlite::OpenFlags;
        let opened = rusqlite::Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .and_then(|conn| {
            conn.busy_timeout(BUSY_WAIT)?;
            Ok(conn)
        });
        match opened {
            Ok(conn) => Some(VersionProbe {
                inner: Mutex::new(Probe { conn, seen: None }),
            }),
            Err(e) => {
                tracing::warn!(path, error = %e,
                    "cannot open the SQLite version probe; the index checks through the pool");
                None
            }
        }
    }

    /// The placement change version now, or `None` when the probe cannot tell.
    pub(crate) fn version(&self) -> Option<[i64; N]> {
        let mut p = self.inner.lock().ok()?;
        match p.read() {
            Ok(v) => Some(v),
            Err(e) => {
                tracing::debug!(error = %e, "SQLite version probe failed; reading through the pool");
                p.seen = None;
                None
            }
        }
    }
}

impl<const N: usize> Probe<N> {
    fn read(&mut self) -> rusqlite::Result<[i64; N]> {
        let mark: i64 = self
            .conn
            .prepare_cached("PRAGMA data_version")?
            .query_row([], |r| r.get(0))?;
        if let Some((seen, v)) = self.seen {
            if seen == mark {
                return Ok(v);
            }
        }
        let mut v = [0; N];
        let mut stmt = self
            .conn
            .prepare_cached("SELECT shard, seq FROM placement_change_shards")?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            let shard: i64 = r.get(0)?;
            if let Some(slot) = usize::try_from(shard).ok().and_then(|s| v.get_mut(s)) {
                *slot = r.get(1)?;
            }
        }
        self.seen = Some((mark, v));
        Ok(v)
    }
}
