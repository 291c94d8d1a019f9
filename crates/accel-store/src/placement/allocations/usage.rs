//! Usage totals: per inventory class of one provider, and per project, user and
//! consumer type for `GET /usages`. Sums are computed in SQL (`CAST(SUM(..) AS
//! BIGINT)`, which PostgreSQL would otherwise return as NUMERIC), never by loading
//! allocation rows.
//!
//! MariaDB's optimizer, on a freshly loaded table, drives the sums from the whole
//! `allocations` table and materializes the consumer-count `EXISTS` over all of it,
//! so a project's usage cost grew with everyone's allocations (about four times
//! slower at 4,000 allocations). On MySQL the same statement is therefore written in
//! the order it should run, pinned with `STRAIGHT_JOIN` (the project, its consumers
//! through the covering index, their allocations), and consumers are counted over
//! that join with `COUNT(DISTINCT ..)`; PostgreSQL and SQLite plan the portable
//! statement well and keep it.

use crate::{StoreError, Tx};
use sqlx::Row;
use std::collections::HashMap;

/// Usage per inventory class of one provider (zero when unallocated), by class id.
pub async fn provider_usages(tx: &mut Tx, rp_id: i64) -> Result<Vec<(String, i64)>, StoreError> {
    let rows = sqlx::query(
        "SELECT rc.name, CAST(COALESCE(SUM(a.used), 0) AS BIGINT) FROM inventories i \
         JOIN resource_classes rc ON rc.id = i.resource_class_id \
         LEFT JOIN allocations a ON a.resource_provider_id = i.resource_provider_id \
              AND a.resource_class_id = i.resource_class_id \
         WHERE i.resource_provider_id = $1 \
         GROUP BY i.resource_class_id, rc.name ORDER BY i.resource_class_id",
    )
    .bind(rp_id)
    .fetch_all(&mut *tx)
    .await?;
    rows.iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
        .collect()
}

/// How `GET /usages` groups by consumer type (1.38+).
#[derive(Debug, Clone, PartialEq)]
pub enum TypeFilter {
    /// Before 1.38: no grouping.
    Ungrouped,
    /// Grouped by type; optionally only the named one.
    ByType(Option<String>),
    /// Everything under one key `all`.
    All,
    /// Only consumers without a type, under `unknown`.
    Unknown,
}

/// One line of `GET /usages`: (type key or `None` when ungrouped, class, usage,
/// consumers of that type).
pub type TotalUsage = (Option<String>, String, i64, i64);

async fn fetch(
    tx: &mut Tx,
    sql: String,
    args: Vec<String>,
) -> Result<Vec<sqlx::any::AnyRow>, StoreError> {
    let mut q = sqlx::query(&sql);
    for a in args {
        q = q.bind(a);
    }
    Ok(q.fetch_all(&mut *tx).await?)
}

/// Usage totals of a project (and optionally a user).
pub async fn totals(
    tx: &mut Tx,
    project_id: &str,
    user_id: Option<&str>,
    filter: &TypeFilter,
) -> Result<Vec<TotalUsage>, StoreError> {
    // The consumer filter, shared by the sums (over allocations) and the consumer
    // counts (over consumers that hold any allocation: counting from `consumers` with
    // an EXISTS probe is half the work of COUNT(DISTINCT) over the allocation join).
    let mut filter_sql = " WHERE p.external_id = $1".to_owned();
    let mut args: Vec<String> = vec![project_id.to_owned()];
    // The users table is joined only to filter by user.
    let mut users_join = "";
    if let Some(u) = user_id {
        args.push(u.to_owned());
        users_join = " JOIN users u ON u.id = c.user_id";
        filter_sql.push_str(&format!(" AND u.external_id = ${}", args.len()));
    }
    match filter {
        TypeFilter::ByType(Some(t)) => {
            args.push(t.clone());
            filter_sql.push_str(&format!(" AND ct.name = ${}", args.len()));
        }
        TypeFilter::Unknown => filter_sql.push_str(" AND c.consumer_type_id IS NULL"),
        _ => {}
    }
    let mysql = tx.backend() == crate::Backend::MySql;
    let project_first = format!(
        "FROM projects p \
         JOIN consumers c ON c.project_id = p.id{users_join} \
         JOIN allocations a ON a.consumer_id = c.uuid \
         LEFT JOIN consumer_types ct ON ct.id = c.consumer_type_id"
    );
    let from = if mysql {
        format!(
            "{project_first} JOIN resource_classes rc ON rc.id = a.resource_class_id{filter_sql}"
        )
    } else {
        format!(
            "FROM allocations a \
             JOIN consumers c ON c.uuid = a.consumer_id \
             JOIN projects p ON p.id = c.project_id{users_join} \
             LEFT JOIN consumer_types ct ON ct.id = c.consumer_type_id \
             JOIN resource_classes rc ON rc.id = a.resource_class_id{filter_sql}"
        )
    };
    let (count, consumers_from) = if mysql {
        (
            "COUNT(DISTINCT c.id)",
            format!("{project_first}{filter_sql}"),
        )
    } else {
        (
            "COUNT(*)",
            format!(
                "FROM consumers c \
                 JOIN projects p ON p.id = c.project_id{users_join} \
                 LEFT JOIN consumer_types ct ON ct.id = c.consumer_type_id{filter_sql} \
                 AND EXISTS (SELECT 1 FROM allocations a WHERE a.consumer_id = c.uuid)"
            ),
        )
    };
    let select = if mysql {
        "SELECT STRAIGHT_JOIN"
    } else {
        "SELECT"
    };
    // One statement (a snapshot of its own, and one round trip): the class sums
    // (kind 0) and, when grouped, the consumer counts (kind 1).
    let grouped_by_type = matches!(filter, TypeFilter::ByType(_));
    let type_col = if grouped_by_type { "ct.name" } else { "NULL" };
    let mut sql = format!(
        "{select} CAST(0 AS BIGINT) AS kind, {type_col} AS t, rc.name AS rc, a.resource_class_id AS rcid, \
         CAST(SUM(a.used) AS BIGINT) AS n {from} GROUP BY {}a.resource_class_id, rc.name",
        if grouped_by_type { "ct.name, " } else { "" }
    );
    if filter != &TypeFilter::Ungrouped {
        sql.push_str(&format!(
            " UNION ALL {select} CAST(1 AS BIGINT), {type_col}, NULL, NULL, {count} {consumers_from}{}",
            if grouped_by_type { " GROUP BY ct.name" } else { "" }
        ));
    }
    sql.push_str(" ORDER BY 1, 2, 4");
    let rows = fetch(tx, sql, args).await?;
    let mut counts: HashMap<Option<String>, i64> = HashMap::new();
    let mut sums: Vec<(Option<String>, String, i64)> = Vec::new();
    for r in &rows {
        let kind: i64 = r.try_get(0)?;
        let t: Option<String> = r.try_get(1)?;
        if kind == 1 {
            counts.insert(t, r.try_get(4)?);
        } else {
            sums.push((t, r.try_get(2)?, r.try_get(4)?));
        }
    }
    let key = |t: Option<String>| match filter {
        TypeFilter::Ungrouped => None,
        TypeFilter::All => Some("all".to_owned()),
        TypeFilter::Unknown => Some("unknown".to_owned()),
        TypeFilter::ByType(_) => Some(t.unwrap_or_else(|| "unknown".to_owned())),
    };
    Ok(sums
        .into_iter()
        .map(|(t, rc, n)| {
            let count = counts.get(&t).copied().unwrap_or(0);
            (key(t), rc, n, count)
        })
        .collect())
}
