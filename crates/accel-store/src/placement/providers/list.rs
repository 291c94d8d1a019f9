//! `GET /resource_providers` with filters: one SQL statement built from the filters
//! (the unfiltered listing is answered from the candidate index, not here).

use super::{Provider, SELECT};
use crate::placement::lookup;
use crate::placement::refused::Refused;
use crate::{StoreError, Tx};
use sqlx::Row;

/// Filters of `GET /resource_providers`; every given filter must hold.
#[derive(Debug, Default, Clone)]
pub struct Filter {
    pub name: Option<String>,
    pub uuid: Option<String>,
    /// Root id of the tree to stay in.
    pub in_tree: Option<i64>,
    /// AND of any-of lists of trait ids.
    pub required: Vec<Vec<i64>>,
    pub forbidden: Vec<i64>,
    /// AND of any-of lists of aggregate uuids (direct membership).
    pub member_of: Vec<Vec<String>>,
    pub forbidden_aggregates: Vec<String>,
    /// (resource class id, amount): each must fit on the provider itself.
    pub resources: Vec<(i64, i64)>,
}

/// A listing's filters as the client names them: classes and traits by name, the
/// tree by one of its providers' uuid ([`super::Providers::list`]).
#[derive(Debug, Default, Clone)]
pub struct Query {
    pub name: Option<String>,
    pub uuid: Option<String>,
    /// A provider of the tree to stay in.
    pub in_tree: Option<String>,
    /// AND of any-of lists of trait names.
    pub required: Vec<Vec<String>>,
    pub forbidden: Vec<String>,
    /// AND of any-of lists of aggregate uuids (direct membership).
    pub member_of: Vec<Vec<String>>,
    pub forbidden_aggregates: Vec<String>,
    /// (resource class name, amount), in request order.
    pub resources: Vec<(String, i64)>,
}

/// The providers `q` asks for: its names resolved to ids, then [`list`]. An unknown
/// tree answers nothing; an unknown class (the first in request order) or traits are
/// refused ([`Refused::ListUnknownClass`], [`Refused::ListUnknownTraits`]).
pub(crate) async fn list_named(tx: &mut Tx, q: Query) -> Result<Vec<Provider>, StoreError> {
    let mut filter = Filter {
        name: q.name,
        uuid: q.uuid,
        member_of: q.member_of,
        forbidden_aggregates: q.forbidden_aggregates,
        ..Filter::default()
    };
    if let Some(t) = q.in_tree {
        match super::get(tx, &t).await? {
            Some(rp) => filter.in_tree = Some(rp.root_id),
            None => return Ok(Vec::new()),
        }
    }
    let names: Vec<String> = q.resources.iter().map(|(n, _)| n.clone()).collect();
    let rc_ids = lookup::resource_class_ids(tx, &names).await?;
    for (name, amount) in &q.resources {
        let id = rc_ids
            .get(name)
            .ok_or_else(|| Refused::ListUnknownClass { name: name.clone() })?;
        filter.resources.push((*id, *amount));
    }
    let tnames: Vec<String> = q
        .required
        .iter()
        .flatten()
        .chain(&q.forbidden)
        .cloned()
        .collect();
    let t_ids = lookup::trait_ids(tx, &tnames).await?;
    let mut missing: Vec<String> = tnames
        .into_iter()
        .filter(|n| !t_ids.contains_key(n))
        .collect();
    missing.sort();
    missing.dedup();
    if !missing.is_empty() {
        return Err(Refused::ListUnknownTraits { names: missing }.into());
    }
    filter.required = q
        .required
        .iter()
        .map(|any| any.iter().map(|t| t_ids[t]).collect())
        .collect();
    filter.forbidden = q.forbidden.iter().map(|t| t_ids[t]).collect();
    list(tx, &filter).await
}

/// An AND of any-of groups with each group's members and the groups themselves sorted
/// and deduplicated: a repeated group or member says nothing new.
fn distinct_groups<T: Ord + Clone>(groups: &[Vec<T>]) -> Vec<Vec<T>> {
    let mut out: Vec<Vec<T>> = groups
        .iter()
        .map(|any| {
            let mut g = any.clone();
            g.sort_unstable();
            g.dedup();
            g
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// `rows` of two SQL expressions as a derived table with the columns `column1` and
/// `column2`, the names SQLite and PostgreSQL give a VALUES list's columns. MariaDB
/// names a VALUES list's columns after its first row (`?` twice: a duplicate column),
/// so there the rows are SELECTs that name them, joined by UNION ALL (MySQL has no
/// limit on their number; SQLite's is 500, which is why it keeps VALUES).
fn pairs(backend: crate::Backend, rows: &[(String, String)]) -> String {
    if backend == crate::Backend::MySql {
        let selects: Vec<String> = rows
            .iter()
            .enumerate()
            .map(|(i, (a, b))| match i {
                0 => format!("SELECT {a} AS column1, {b} AS column2"),
                _ => format!("SELECT {a}, {b}"),
            })
            .collect();
        format!("({})", selects.join(" UNION ALL "))
    } else {
        let values: Vec<String> = rows.iter().map(|(a, b)| format!("({a}, {b})")).collect();
        format!("(VALUES {})", values.join(", "))
    }
}

/// Lists providers matching `f`, ordered by id (creation order).
pub async fn list(tx: &mut Tx, f: &Filter) -> Result<Vec<Provider>, StoreError> {
    enum Arg {
        S(String),
        I(i64),
    }
    let mut args: Vec<Arg> = Vec::new();
    let next = |args: &mut Vec<Arg>, a: Arg| {
        args.push(a);
        format!("${}", args.len())
    };
    let mut wh: Vec<String> = Vec::new();
    if let Some(n) = &f.name {
        wh.push(format!("rp.name = {}", next(&mut args, Arg::S(n.clone()))));
    }
    if let Some(u) = &f.uuid {
        wh.push(format!("rp.uuid = {}", next(&mut args, Arg::S(u.clone()))));
    }
    if let Some(r) = f.in_tree {
        wh.push(format!(
            "rp.root_provider_id = {}",
            next(&mut args, Arg::I(r))
        ));
    }
    // Repeated groups say nothing new; one condition each for the distinct ones.
    let required = distinct_groups(&f.required);
    // Every group as one condition: the (group, trait) pairs are a VALUES list joined
    // to the provider's traits, and a provider qualifies when it matches every group.
    // One `IN (subquery)` per group made PostgreSQL's planner take minutes at a few
    // hundred groups.
    if !required.is_empty() {
        let rows: Vec<(String, String)> = required
            .iter()
            .enumerate()
            .flat_map(|(g, any)| any.iter().map(move |t| (g, *t)))
            .map(|(g, t)| {
                let g = next(&mut args, Arg::I(g as i64));
                (g, next(&mut args, Arg::I(t)))
            })
            .collect();
        wh.push(format!(
            "rp.id IN (SELECT rpt.resource_provider_id FROM resource_provider_traits rpt \
             JOIN {} AS g ON g.column2 = rpt.trait_id \
             GROUP BY rpt.resource_provider_id HAVING COUNT(DISTINCT g.column1) = {})",
            pairs(tx.backend(), &rows),
            required.len()
        ));
    }
    if !f.forbidden.is_empty() {
        let ids: Vec<String> = f
            .forbidden
            .iter()
            .map(|t| next(&mut args, Arg::I(*t)))
            .collect();
        wh.push(format!(
            "rp.id NOT IN (SELECT resource_provider_id FROM resource_provider_traits WHERE trait_id IN ({}))",
            ids.join(", ")
        ));
    }
    let member_of = distinct_groups(&f.member_of);
    // As for traits: one condition for all groups.
    if !member_of.is_empty() {
        let rows: Vec<(String, String)> = member_of
            .iter()
            .enumerate()
            .flat_map(|(g, any)| any.iter().map(move |a| (g, a.clone())))
            .map(|(g, a)| {
                let g = next(&mut args, Arg::I(g as i64));
                (g, next(&mut args, Arg::S(a)))
            })
            .collect();
        wh.push(format!(
            "rp.id IN (SELECT rpa.resource_provider_id FROM resource_provider_aggregates rpa \
             JOIN placement_aggregates pa ON pa.id = rpa.aggregate_id \
             JOIN {} AS g ON g.column2 = pa.uuid \
             GROUP BY rpa.resource_provider_id HAVING COUNT(DISTINCT g.column1) = {})",
            pairs(tx.backend(), &rows),
            member_of.len()
        ));
    }
    if !f.forbidden_aggregates.is_empty() {
        let ids: Vec<String> = f
            .forbidden_aggregates
            .iter()
            .map(|a| next(&mut args, Arg::S(a.clone())))
            .collect();
        wh.push(format!(
            "rp.id NOT IN (SELECT rpa.resource_provider_id FROM resource_provider_aggregates rpa \
             JOIN placement_aggregates pa ON pa.id = rpa.aggregate_id WHERE pa.uuid IN ({}))",
            ids.join(", ")
        ));
    }
    for (rc, amount) in &f.resources {
        let rc = next(&mut args, Arg::I(*rc));
        let amt = next(&mut args, Arg::I(*amount));
        wh.push(format!(
            "rp.id IN (SELECT inv.resource_provider_id FROM inventories inv \
             LEFT JOIN (SELECT resource_provider_id, CAST(SUM(used) AS BIGINT) AS used FROM allocations \
                        WHERE resource_class_id = {rc} GROUP BY resource_provider_id) u \
               ON u.resource_provider_id = inv.resource_provider_id \
             WHERE inv.resource_class_id = {rc} \
               AND COALESCE(u.used, 0) + {amt} <= (inv.total - inv.reserved) * inv.allocation_ratio \
               AND inv.min_unit <= {amt} AND inv.max_unit >= {amt} AND {amt} % inv.step_size = 0)"
        ));
    }
    let mut sql = SELECT.to_owned();
    if !wh.is_empty() {
        sql.push_str(" WHERE ");
        sql.push_str(&crate::all_of(&wh));
    }
    let sql = packed(tx, &sql);
    let mut q = sqlx::query(&sql);
    for a in args {
        q = match a {
            Arg::S(s) => q.bind(s),
            Arg::I(i) => q.bind(i),
        };
    }
    let packed: String = q.fetch_one(&mut *tx).await?.try_get(0)?;
    unpack(&packed)
}

/// Wraps a query selecting [`SELECT`]'s columns so the database returns all rows as one
/// JSON array in a single row. Listings of thousands of providers otherwise pay, per
/// row, a hand-off from the driver's thread and a conversion through `sqlx::Any`; the
/// database's JSON encoder does the same work in one pass.
fn packed(tx: &Tx, sql: &str) -> String {
    const COLS: &str = "q.id, q.uuid, q.name, q.generation, q.parent_provider_id, \
         q.root_provider_id, q.parent_uuid, q.root_uuid, q.modified";
    match tx.backend() {
        crate::Backend::Postgres => format!(
            "SELECT COALESCE(json_agg(json_build_array({COLS}) ORDER BY q.id), '[]')::text FROM ({sql}) q"
        ),
        crate::Backend::Sqlite => {
            format!("SELECT COALESCE(json_group_array(json_array({COLS})), '[]') FROM ({sql}) q")
        }
        // `unpack` sorts by id; the cast makes MySQL 8's JSON type come back as text.
        crate::Backend::MySql => format!(
            "SELECT CAST(COALESCE(JSON_ARRAYAGG(JSON_ARRAY({COLS})), '[]') AS CHAR) FROM ({sql}) q"
        ),
    }
}

type PackedRow = (
    i64,
    String,
    String,
    i64,
    Option<i64>,
    i64,
    Option<String>,
    String,
    i64,
);

fn unpack(packed: &str) -> Result<Vec<Provider>, StoreError> {
    let rows: Vec<PackedRow> = serde_json::from_str(packed)
        .map_err(|e| StoreError::Config(format!("decoding packed provider rows: {e}")))?;
    let mut out: Vec<Provider> = rows
        .into_iter()
        .map(
            |(id, uuid, name, generation, parent_id, root_id, parent_uuid, root_uuid, modified)| {
                Provider {
                    id,
                    uuid,
                    name,
                    generation,
                    parent_uuid,
                    root_uuid,
                    parent_id,
                    root_id,
                    modified,
                }
            },
        )
        .collect();
    out.sort_unstable_by_key(|p| p.id);
    Ok(out)
}
