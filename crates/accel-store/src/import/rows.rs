//! Multi-row inserts and row counts, shared by the imports (into accel) and the exports
//! (into upstream): both move whole tables between two schemas over sqlx's `Any`, so
//! the statements are built once here, in each target's dialect.

use crate::{Backend, StoreError, Tx};

/// Of `counts` (a table's name and its `COUNT(*)` query), those that are not zero.
pub(crate) async fn nonzero_counts(
    tx: &mut Tx,
    counts: &[(&'static str, &str)],
) -> Result<Vec<(&'static str, i64)>, StoreError> {
    let mut out = Vec::new();
    for (table, sql) in counts {
        let n: i64 = sqlx::query_scalar(sql).fetch_one(&mut *tx).await?;
        if n > 0 {
            out.push((*table, n));
        }
    }
    Ok(out)
}

/// One bound value of a multi-row insert.
#[derive(Debug, Clone)]
pub(crate) enum Val {
    I(i64),
    N(Option<i64>),
    S(String),
    /// A nullable text.
    T(Option<String>),
    F(f64),
}

/// The `n`th bound value's placeholder. SQLite gets anonymous `?`s, bound in order: a
/// `$N` is a named parameter there, and binding thousands of them costs a linear
/// name search each (`sqlite3VListNumToName` took 80% of a 200,000-allocation import).
pub(crate) fn placeholder(backend: Backend, n: usize) -> String {
    match backend {
        Backend::Sqlite => "?".to_owned(),
        Backend::Postgres | Backend::MySql => format!("${n}"),
    }
}

/// Inserts `rows` into `table (cols)` with multi-row statements.
pub(crate) async fn insert_rows(
    tx: &mut Tx,
    table: &str,
    cols: &[&str],
    rows: Vec<Vec<Val>>,
) -> Result<(), StoreError> {
    insert_rows_with(tx, table, cols, rows, |_, backend, n| {
        placeholder(backend, n)
    })
    .await
}

/// [`insert_rows`], each cell's SQL written by `cell(column, backend, n)` around the
/// `n`th bound value (the export wraps epoch seconds into `DateTime`s).
pub(crate) async fn insert_rows_with(
    tx: &mut Tx,
    table: &str,
    cols: &[&str],
    rows: Vec<Vec<Val>>,
    cell: impl Fn(&str, Backend, usize) -> String,
) -> Result<(), StoreError> {
    let per = (8000 / cols.len()).clamp(1, 1000);
    let backend = tx.backend();
    for chunk in rows.chunks(per) {
        let values: Vec<String> = (0..chunk.len())
            .map(|r| {
                let cells: Vec<String> = cols
                    .iter()
                    .enumerate()
                    .map(|(i, c)| cell(c, backend, r * cols.len() + i + 1))
                    .collect();
                format!("({})", cells.join(", "))
            })
            .collect();
        let sql = format!(
            "INSERT INTO {table} ({}) VALUES {}",
            cols.join(", "),
            values.join(", ")
        );
        let mut q = sqlx::query(&sql);
        for row in chunk {
            for v in row {
                q = match v {
                    Val::I(i) => q.bind(*i),
                    Val::N(i) => q.bind(*i),
                    Val::S(s) => q.bind(s.clone()),
                    Val::T(s) => q.bind(s.clone()),
                    Val::F(f) => q.bind(*f),
                };
            }
        }
        q.execute(&mut *tx).await?;
    }
    Ok(())
}

/// `12 resource_providers, 3 consumers`.
pub fn describe(counts: &[(&str, i64)]) -> String {
    counts
        .iter()
        .map(|(t, n)| format!("{n} {t}"))
        .collect::<Vec<_>>()
        .join(", ")
}
