//! The open transaction store modules write through ([`Tx`]), and the one place SQL
//! written for PostgreSQL and SQLite is turned into MariaDB/MySQL's dialect.
//!
//! Store queries are written once, with `$N` placeholders, `CAST(.. AS BIGINT)` and
//! `INSERT .. ON CONFLICT DO NOTHING`, which SQLite and PostgreSQL both accept. MySQL's
//! protocol knows only positional `?` placeholders, casts to `SIGNED`, spells the
//! insert `INSERT IGNORE`, and reserves some of our column names (`key`, `usage`,
//! `groups`). Rather than keep a second copy of ~180 statements, [`Tx`] is the
//! executor every store function runs its queries on: on MySQL it rewrites each
//! statement as it is sent ([`to_mysql`]) and reorders the bound values to match (a
//! `$N` may appear twice, or out of order). On SQLite and PostgreSQL it hands the
//! query to the connection untouched.
//!
//! Statements whose meaning, not only spelling, differs by dialect (an upsert, an
//! `UPDATE .. RETURNING`, a multi-row `INSERT .. RETURNING`) branch on [`Tx::backend`]
//! where they are written.
//!
//! One such statement is common enough to be rewritten here: a single-row `INSERT ..
//! RETURNING id`. MariaDB (10.5+) accepts `RETURNING`, MySQL 8 does not, so on both the
//! insert is sent without it and the new id is taken from the insert's OK packet (what
//! `LAST_INSERT_ID()` would answer, without a second round trip; [`InsertId`]); the
//! MariaDB tests therefore run the SQL MySQL 8 accepts. `ON CONFLICT DO NOTHING
//! RETURNING id` answers no row when the insert was ignored, as on the other backends.
//!
//! Rows coming back from MySQL are mapped too: `sqlx::Any` hands `TEXT` columns over
//! as blobs (MySQL reports them as BLOB types with a character set), so a blob that is
//! valid UTF-8 is given back as text. The schema has no binary columns.

use futures::future::BoxFuture;
use futures::stream::{self, BoxStream, StreamExt, TryStreamExt};
use sqlx::any::{AnyArguments, AnyQueryResult, AnyRow, AnyStatement, AnyTypeInfo};
use sqlx::pool::PoolConnection;
use sqlx::{Any, AnyConnection, Describe, Either, Execute, Executor};
use std::collections::BTreeSet;

/// Which database engine a [`crate::Store`] talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
    /// MariaDB 10.6+ or MySQL 8, through sqlx's MySQL driver.
    MySql,
}

impl Backend {
    /// The engine a database URL names (`sqlite:`, `postgres://`/`postgresql://`,
    /// `mysql://`/`mariadb://`); `None` for any other scheme.
    pub fn of_url(url: &str) -> Option<Backend> {
        if url.starts_with("sqlite:") {
            Some(Backend::Sqlite)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Some(Backend::Postgres)
        } else if url.starts_with("mysql://") || url.starts_with("mariadb://") {
            Some(Backend::MySql)
        } else {
            None
        }
    }
}

/// Seconds since the Unix epoch, the unit of every `created_at`/`updated_at` column.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// In-memory counters of one [`crate::Store`] (shared by its clones).
#[derive(Debug, Default)]
pub struct Counters {
    /// Write transactions rerun after a provider race or deadlock.
    pub(crate) write_retries: std::sync::atomic::AtomicU64,
    /// Connection acquisitions that found no idle connection (a new connection was
    /// opened, or the caller queued for one).
    pub(crate) pool_waits: std::sync::atomic::AtomicU64,
    /// Time spent in those acquisitions, in nanoseconds.
    pub(crate) pool_wait_nanos: std::sync::atomic::AtomicU64,
    /// Placement versions the SQLite probe answered, and those it could not (read
    /// through the pool instead; `sqlite_probe.rs`).
    pub(crate) version_probes: std::sync::atomic::AtomicU64,
    pub(crate) version_probe_fallbacks: std::sync::atomic::AtomicU64,
}

/// An open transaction on one of the store's connections. Store functions take
/// `&mut Tx` and run their queries on `&mut *tx`.
///
/// A write transaction also carries what its commit must act on ([`Written`]): the
/// store functions that change providers or let go of them note it here, on the
/// transaction itself, so the note cannot outlive or escape the transaction it
/// belongs to.
#[derive(Debug)]
pub struct Tx {
    conn: PoolConnection<Any>,
    backend: Backend,
    /// `None` on a read transaction.
    written: Option<Written>,
}

/// What a write transaction noted for its commit (`Store::transaction`).
#[derive(Debug, Default)]
pub(crate) struct Written {
    /// Ids for the Placement change log (`placement::changes`): providers, and the
    /// `NAMES` / `PROJECTS - id` markers.
    pub(crate) touched: BTreeSet<i64>,
    /// Providers some consumer let go of: candidates for a cleaning, decided before
    /// the commit (`accelerator::cleaning::after_release`).
    pub(crate) released: BTreeSet<i64>,
    /// Whether a cleaning was queued: the agents' long polls are woken after commit.
    pub(crate) cleanings_queued: bool,
}

impl Tx {
    /// A read transaction (or a single read statement).
    pub(crate) fn new(conn: PoolConnection<Any>, backend: Backend) -> Self {
        Tx {
            conn,
            backend,
            written: None,
        }
    }

    /// A write transaction: its changes are noted for its commit.
    pub(crate) fn writing(conn: PoolConnection<Any>, backend: Backend) -> Self {
        Tx {
            conn,
            backend,
            written: Some(Written::default()),
        }
    }

    /// What this write transaction noted; an error on a read transaction (`what` says
    /// what was attempted).
    pub(crate) fn written(&mut self, what: &str) -> Result<&mut Written, crate::StoreError> {
        self.written.as_mut().ok_or_else(|| {
            crate::StoreError::Config(format!("{what} was made outside Store::write"))
        })
    }

    /// The database engine this transaction runs on, for the few statements whose
    /// meaning differs by dialect.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The connection itself, for transaction control (`BEGIN`, `COMMIT`): sent
    /// as written, never rewritten.
    pub(crate) fn raw(&mut self) -> &mut AnyConnection {
        &mut self.conn
    }

    pub(crate) fn into_inner(self) -> PoolConnection<Any> {
        self.conn
    }
}

impl<'c> Executor<'c> for &'c mut Tx {
    type Database = Any;

    fn fetch_many<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxStream<'e, Result<Either<AnyQueryResult, AnyRow>, sqlx::Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Any>,
    {
        match self.backend {
            Backend::MySql => mysql_fetch_many(&mut self.conn, query),
            Backend::Sqlite | Backend::Postgres => (&mut *self.conn).fetch_many(query),
        }
    }

    fn fetch_optional<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxFuture<'e, Result<Option<AnyRow>, sqlx::Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Any>,
    {
        match self.backend {
            Backend::MySql => mysql_fetch_optional(&mut self.conn, query),
            Backend::Sqlite | Backend::Postgres => (&mut *self.conn).fetch_optional(query),
        }
    }

    /// Prepares `sql` as written: the store never prepares statements by hand, so no
    /// rewrite is needed here.
    fn prepare_with<'e, 'q: 'e>(
        self,
        sql: &'q str,
        parameters: &'e [AnyTypeInfo],
    ) -> BoxFuture<'e, Result<AnyStatement<'q>, sqlx::Error>>
    where
        'c: 'e,
    {
        (&mut *self.conn).prepare_with(sql, parameters)
    }

    fn describe<'e, 'q: 'e>(self, sql: &'q str) -> BoxFuture<'e, Result<Describe<Any>, sqlx::Error>>
    where
        'c: 'e,
    {
        (&mut *self.conn).describe(sql)
    }
}

/// Rewrites `query` for MySQL and collects its results (store queries read whole
/// results anyway; collecting lets the rewritten text live inside the future).
fn mysql_fetch_many<'e, 'q: 'e, E>(
    conn: &'e mut AnyConnection,
    mut query: E,
) -> BoxStream<'e, Result<Either<AnyQueryResult, AnyRow>, sqlx::Error>>
where
    E: 'q + Execute<'q, Any>,
{
    let args = query.take_arguments();
    let sql = query.sql();
    let run = async move {
        let args = args.map_err(sqlx::Error::Encode)?;
        let (sql, args, returning) = rewrite(sql, args);
        if returning == InsertId::Read {
            let row = insert_then_id(conn, &sql, args).await?;
            return Ok(row.into_iter().map(Either::Right).collect());
        }
        let items: Vec<_> = match args {
            Some(args) => {
                conn.fetch_many((sql.as_str(), Some(args)))
                    .map_ok(text_item)
                    .try_collect()
                    .await?
            }
            None => {
                conn.fetch_many(sql.as_str())
                    .map_ok(text_item)
                    .try_collect()
                    .await?
            }
        };
        Ok::<_, sqlx::Error>(items)
    };
    stream::once(run)
        .flat_map(|r| {
            stream::iter(match r {
                Ok(items) => items.into_iter().map(Ok).collect::<Vec<_>>(),
                Err(e) => vec![Err(e)],
            })
        })
        .boxed()
}

fn mysql_fetch_optional<'e, 'q: 'e, E>(
    conn: &'e mut AnyConnection,
    mut query: E,
) -> BoxFuture<'e, Result<Option<AnyRow>, sqlx::Error>>
where
    E: 'q + Execute<'q, Any>,
{
    let args = query.take_arguments();
    let sql = query.sql();
    Box::pin(async move {
        let args = args.map_err(sqlx::Error::Encode)?;
        let (sql, args, returning) = rewrite(sql, args);
        if returning == InsertId::Read {
            return insert_then_id(conn, &sql, args).await;
        }
        let row = match args {
            Some(args) => conn.fetch_optional((sql.as_str(), Some(args))).await?,
            None => conn.fetch_optional(sql.as_str()).await?,
        };
        Ok(row.map(text_row))
    })
}

/// Whether a rewritten statement's answer is the id its insert generated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InsertId {
    /// The statement answers for itself.
    Not,
    /// It was `INSERT .. RETURNING id`: run it and answer the id it generated.
    Read,
}

/// Runs the insert `sql` (its `RETURNING id` already removed), then answers the row
/// `RETURNING id` would have: one column `id`, the AUTO_INCREMENT value the insert
/// generated, or no row when it inserted none (`INSERT IGNORE`, from `ON CONFLICT DO
/// NOTHING`). The server sends the id in the insert's own OK packet, so no `SELECT
/// LAST_INSERT_ID()` round trip follows.
async fn insert_then_id(
    conn: &mut AnyConnection,
    sql: &str,
    args: Option<AnyArguments<'_>>,
) -> Result<Option<AnyRow>, sqlx::Error> {
    let done = match args {
        Some(args) => (&mut *conn).execute((sql, Some(args))).await?,
        None => (&mut *conn).execute(sql).await?,
    };
    if done.rows_affected() == 0 {
        return Ok(None);
    }
    let id = done
        .last_insert_id()
        .ok_or_else(|| sqlx::Error::Protocol("the insert answered no generated id".into()))?;
    Ok(Some(id_row(id)))
}

/// A one-column row `id` holding `id`, as `RETURNING id` answers it.
fn id_row(id: i64) -> AnyRow {
    use sqlx::any::{AnyTypeInfoKind, AnyValue};
    use sqlx_core::any::{AnyColumn, AnyValueKind};
    use sqlx_core::ext::ustr::UStr;
    static NAMES: std::sync::LazyLock<std::sync::Arc<sqlx_core::HashMap<UStr, usize>>> =
        std::sync::LazyLock::new(|| {
            std::sync::Arc::new([(UStr::from("id"), 0)].into_iter().collect())
        });
    AnyRow {
        column_names: NAMES.clone(),
        columns: vec![AnyColumn {
            ordinal: 0,
            name: UStr::from("id"),
            type_info: AnyTypeInfo {
                kind: AnyTypeInfoKind::BigInt,
            },
        }],
        values: vec![AnyValue {
            kind: AnyValueKind::BigInt(id),
        }],
    }
}

/// The MySQL text of `sql` and its arguments in `?` order. A statement without
/// arguments comes back with `None`, so it is sent as text rather than prepared
/// (MySQL refuses to prepare some statements, and nothing is gained by it).
fn rewrite<'q>(
    sql: &str,
    args: Option<AnyArguments<'q>>,
) -> (String, Option<AnyArguments<'q>>, InsertId) {
    // `RETURNING id` comes off first, so that an `ON CONFLICT DO NOTHING` before it
    // ends the statement `to_mysql` rewrites.
    let (sql, returning) = match strip_returning_id(sql) {
        Some(len) => (&sql[..len], InsertId::Read),
        None => (sql, InsertId::Not),
    };
    let (text, order) = to_mysql(sql);
    let args = match args {
        Some(a) if !a.values.0.is_empty() => a,
        _ => return (text, None, returning),
    };
    let mut out = AnyArguments::default();
    out.values.0 = order
        .iter()
        .filter_map(|&i| args.values.0.get(i).cloned())
        .collect();
    (text, Some(out), returning)
}

/// For a single-row `INSERT .. VALUES (..) RETURNING id`, the length of the statement
/// without its `RETURNING id`. A multi-row insert (`VALUES (..), (..)`) is not
/// matched: `LAST_INSERT_ID()` names only its first row, so such a statement must
/// branch on the backend where it is written.
fn strip_returning_id(sql: &str) -> Option<usize> {
    const TAIL: &str = " RETURNING id";
    let trimmed = sql.trim_end();
    let body = trimmed.strip_suffix(TAIL)?;
    if !body.trim_start().starts_with("INSERT INTO") {
        return None;
    }
    let values = body.find(" VALUES ")?;
    let rows = &body[values..];
    // Quoted literals could hide a "),(": a store insert binds its values instead.
    if rows.contains('\'') || rows.matches('(').count() != 1 {
        return None;
    }
    Some(body.trim_end().len())
}

/// Column names of ours that MySQL reserves: quoted wherever they appear.
const RESERVED: &[&str] = &["key", "usage", "groups"];

/// `sql` in MySQL's dialect, and for each `?` the index of the argument it takes.
///
/// Outside quoted strings: `$N` becomes `?`; a reserved column name is quoted with
/// backticks; `AS BIGINT` (in a `CAST`) becomes `AS SIGNED`; and `INSERT INTO ..
/// ON CONFLICT DO NOTHING` becomes `INSERT IGNORE INTO ..`.
pub(crate) fn to_mysql(sql: &str) -> (String, Vec<usize>) {
    let mut out = String::with_capacity(sql.len() + 16);
    let mut order = Vec::new();
    let mut prev_word = String::new();
    let mut chars = sql.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '\'' => {
                out.push(c);
                for (_, d) in chars.by_ref() {
                    out.push(d);
                    if d == '\'' {
                        break;
                    }
                }
            }
            '$' if chars.peek().is_some_and(|(_, d)| d.is_ascii_digit()) => {
                let mut n = 0usize;
                while let Some(&(_, d)) = chars.peek() {
                    match d.to_digit(10) {
                        Some(v) => {
                            n = n * 10 + v as usize;
                            chars.next();
                        }
                        None => break,
                    }
                }
                out.push('?');
                order.push(n.saturating_sub(1));
            }
            c if c.is_ascii_alphabetic() || c == '_' => {
                let mut end = i + c.len_utf8();
                while let Some(&(j, d)) = chars.peek() {
                    if d.is_ascii_alphanumeric() || d == '_' {
                        end = j + d.len_utf8();
                        chars.next();
                    } else {
                        break;
                    }
                }
                let word = &sql[i..end];
                if RESERVED.contains(&word) {
                    out.push('`');
                    out.push_str(word);
                    out.push('`');
                } else if word.eq_ignore_ascii_case("BIGINT")
                    && prev_word.eq_ignore_ascii_case("AS")
                {
                    out.push_str("SIGNED");
                } else {
                    out.push_str(word);
                }
                prev_word.clear();
                prev_word.push_str(word);
            }
            _ => out.push(c),
        }
    }
    const DO_NOTHING: &str = "ON CONFLICT DO NOTHING";
    let trimmed = out.trim_end();
    if trimmed.ends_with(DO_NOTHING) && trimmed.starts_with("INSERT INTO") {
        let body = &trimmed["INSERT INTO".len()..trimmed.len() - DO_NOTHING.len()];
        out = format!("INSERT IGNORE INTO{}", body.trim_end());
    }
    (out, order)
}

fn text_item(item: Either<AnyQueryResult, AnyRow>) -> Either<AnyQueryResult, AnyRow> {
    item.map_right(text_row)
}

/// `row` with each UTF-8 blob value turned into text (see the module doc).
fn text_row(mut row: AnyRow) -> AnyRow {
    use sqlx::any::AnyTypeInfoKind;
    use sqlx_core::any::AnyValueKind;
    for (i, value) in row.values.iter_mut().enumerate() {
        let text = match &value.kind {
            AnyValueKind::Blob(b) => match std::str::from_utf8(b) {
                Ok(s) => s.to_owned(),
                Err(_) => continue,
            },
            _ => continue,
        };
        value.kind = AnyValueKind::Text(text.into());
        if let Some(col) = row.columns.get_mut(i) {
            col.type_info = AnyTypeInfo {
                kind: AnyTypeInfoKind::Text,
            };
        }
    }
    row
}

#[cfg(test)]
mod tests {
    use super::{strip_returning_id, to_mysql};

    #[test]
    fn single_row_insert_returning_id_is_recognised() {
        let sql = "INSERT INTO devices (uuid, name) VALUES (?, ?) RETURNING id";
        assert_eq!(
            strip_returning_id(sql),
            Some(sql.len() - " RETURNING id".len())
        );
        // Several rows, other columns, or not an insert: left for the caller.
        for sql in [
            "INSERT INTO t (a) VALUES (?), (?) RETURNING id",
            "INSERT INTO t (a) VALUES (?) RETURNING id, uuid",
            "UPDATE t SET a = ? WHERE b = ? RETURNING id",
            "INSERT INTO t (a) VALUES (?)",
        ] {
            assert_eq!(strip_returning_id(sql), None, "{sql}");
        }
    }

    #[test]
    fn an_ignorable_insert_returning_id_becomes_insert_ignore() {
        let (sql, _, returning) = super::rewrite(
            "INSERT INTO consumers (uuid, n) VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING id",
            None,
        );
        assert_eq!(sql, "INSERT IGNORE INTO consumers (uuid, n) VALUES (?, ?)");
        assert_eq!(returning, super::InsertId::Read);
    }

    #[test]
    fn placeholders_become_positional_with_their_argument_order() {
        let (sql, order) = to_mysql("UPDATE t SET a = $2, b = $1, c = $2 WHERE d = '$3'");
        assert_eq!(sql, "UPDATE t SET a = ?, b = ?, c = ? WHERE d = '$3'");
        assert_eq!(order, vec![1, 0, 1]);
    }

    #[test]
    fn reserved_names_casts_and_insert_ignore() {
        let (sql, _) = to_mysql(
            "INSERT INTO attributes (key, value) SELECT a.key, CAST(SUM(x) AS BIGINT) FROM q ON CONFLICT DO NOTHING",
        );
        assert_eq!(
            sql,
            "INSERT IGNORE INTO attributes (`key`, value) SELECT a.`key`, CAST(SUM(x) AS SIGNED) FROM q"
        );
        let (sql, _) = to_mysql("SELECT 'key', keys, usage_x FROM kubernetes_slots");
        assert_eq!(sql, "SELECT 'key', keys, usage_x FROM kubernetes_slots");
    }
}
