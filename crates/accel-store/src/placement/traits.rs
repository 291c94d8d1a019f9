//! Traits: the os-traits catalogue plus `CUSTOM_*` traits, and the traits each
//! provider has. Every list comes back sorted by name, on every backend. The API's
//! operations on them are [`Traits`] ([`Store::traits`]).

use super::lookup;
use super::providers::{self, Provider};
use super::refused::Refused;
use crate::{placeholders, Store, StoreError, Tx};
use sqlx::Row;

/// A trait row.
#[derive(Debug, Clone, PartialEq)]
pub struct Trait {
    pub id: i64,
    pub name: String,
    /// `updated_at`, or `created_at` when never updated (epoch seconds).
    pub modified: i64,
}

const SELECT: &str =
    "SELECT t.id, t.name, COALESCE(t.updated_at, t.created_at) AS modified FROM traits t";

fn from_row(row: &sqlx::any::AnyRow) -> Result<Trait, sqlx::Error> {
    Ok(Trait {
        id: row.try_get("id")?,
        name: row.try_get("name")?,
        modified: row.try_get("modified")?,
    })
}

/// Filters of `GET /traits`; every given filter must hold.
#[derive(Debug, Default, Clone)]
pub struct Filter {
    /// Only these names.
    pub name_in: Option<Vec<String>>,
    /// Only names starting with this (taken literally, not as a LIKE pattern).
    pub prefix: Option<String>,
    /// Only traits some provider has (`true`) or none has (`false`).
    pub associated: Option<bool>,
}

/// Traits matching `f`, sorted by name.
pub async fn list(tx: &mut Tx, f: &Filter) -> Result<Vec<Trait>, StoreError> {
    let mut wh: Vec<String> = Vec::new();
    let mut args: Vec<String> = Vec::new();
    if let Some(names) = &f.name_in {
        if names.is_empty() {
            return Ok(Vec::new());
        }
        wh.push(format!(
            "t.name IN ({})",
            placeholders(args.len() + 1, names.len())
        ));
        args.extend(names.iter().cloned());
    }
    if let Some(p) = &f.prefix {
        // Compared by substring so `_` and `%` in the prefix stay literal.
        args.push(p.clone());
        wh.push(format!(
            "SUBSTR(t.name, 1, {}) = ${}",
            p.chars().count(),
            args.len()
        ));
    }
    match f.associated {
        Some(true) => wh.push(
            "EXISTS (SELECT 1 FROM resource_provider_traits rpt WHERE rpt.trait_id = t.id)".into(),
        ),
        Some(false) => wh.push(
            "NOT EXISTS (SELECT 1 FROM resource_provider_traits rpt WHERE rpt.trait_id = t.id)"
                .into(),
        ),
        None => {}
    }
    let mut sql = SELECT.to_owned();
    if !wh.is_empty() {
        sql.push_str(" WHERE ");
        sql.push_str(&wh.join(" AND "));
    }
    sql.push_str(" ORDER BY t.name");
    let mut q = sqlx::query(&sql);
    for a in &args {
        q = q.bind(a.as_str());
    }
    let rows = q.fetch_all(&mut *tx).await?;
    Ok(rows.iter().map(from_row).collect::<Result<_, _>>()?)
}

pub async fn get(tx: &mut Tx, name: &str) -> Result<Option<Trait>, StoreError> {
    let row = sqlx::query(&format!("{SELECT} WHERE t.name = $1"))
        .bind(name)
        .fetch_optional(&mut *tx)
        .await?;
    Ok(row.as_ref().map(from_row).transpose()?)
}

/// `(name, id)` of those of `names` that exist, in one statement per few hundred.
pub async fn ids_by_name(tx: &mut Tx, names: &[&str]) -> Result<Vec<(String, i64)>, StoreError> {
    let mut out = Vec::with_capacity(names.len());
    for chunk in names.chunks(crate::BATCH_ROWS) {
        let sql = format!(
            "SELECT name, id FROM traits WHERE name IN ({})",
            crate::placeholders(1, chunk.len())
        );
        let mut q = sqlx::query(&sql);
        for n in chunk {
            q = q.bind(*n);
        }
        for r in q.fetch_all(&mut *tx).await? {
            out.push((r.try_get(0)?, r.try_get(1)?));
        }
    }
    Ok(out)
}

fn not_found(name: &str) -> Refused {
    Refused::NoTrait {
        name: name.to_owned(),
    }
}

/// Creates the trait unless it exists; returns it and whether this call created it.
pub async fn ensure(tx: &mut Tx, name: &str) -> Result<(Trait, bool), StoreError> {
    if let Some(t) = get(tx, name).await? {
        return Ok((t, false));
    }
    let n =
        sqlx::query("INSERT INTO traits (name, created_at) VALUES ($1, $2) ON CONFLICT DO NOTHING")
            .bind(name)
            .bind(crate::now())
            .execute(&mut *tx)
            .await?
            .rows_affected();
    let t = get(tx, name).await?.ok_or_else(|| not_found(name))?;
    if n == 1 {
        super::changes::touch_names(tx).await?;
    }
    Ok((t, n == 1))
}

/// Deletes a custom trait no provider has.
///
/// Refusals: missing ([`Refused::NoTrait`]), standard ([`Refused::StandardTrait`]),
/// in use ([`Refused::TraitInUse`]).
pub async fn delete(tx: &mut Tx, name: &str) -> Result<(), StoreError> {
    let t = get(tx, name).await?.ok_or_else(|| not_found(name))?;
    if !name.starts_with(accel_core::names::CUSTOM_PREFIX) {
        return Err(Refused::StandardTrait {
            name: name.to_owned(),
        }
        .into());
    }
    super::delete_unused_name(
        tx,
        "traits",
        "SELECT COUNT(*) FROM resource_provider_traits WHERE trait_id = $1",
        t.id,
        Refused::TraitInUse {
            name: name.to_owned(),
        },
        not_found(name),
    )
    .await
}

/// The traits of one provider, sorted by name.
pub async fn for_provider(tx: &mut Tx, rp_id: i64) -> Result<Vec<Trait>, StoreError> {
    let rows = sqlx::query(&format!(
        "{SELECT} JOIN resource_provider_traits rpt ON rpt.trait_id = t.id \
         WHERE rpt.resource_provider_id = $1 ORDER BY t.name"
    ))
    .bind(rp_id)
    .fetch_all(&mut *tx)
    .await?;
    Ok(rows.iter().map(from_row).collect::<Result<_, _>>()?)
}

/// Replaces the provider's traits with `want` (trait ids). When the set changes, the
/// provider's generation is bumped by compare-and-swap from `rp.generation`; returns
/// the generation after the call.
pub async fn set_for_provider(tx: &mut Tx, rp: &Provider, want: &[i64]) -> Result<i64, StoreError> {
    let have: Vec<i64> = sqlx::query_scalar(
        "SELECT trait_id FROM resource_provider_traits WHERE resource_provider_id = $1",
    )
    .bind(rp.id)
    .fetch_all(&mut *tx)
    .await?;
    let to_delete: Vec<i64> = have.iter().copied().filter(|t| !want.contains(t)).collect();
    let mut to_add: Vec<i64> = want.iter().copied().filter(|t| !have.contains(t)).collect();
    to_add.sort_unstable();
    to_add.dedup();
    if to_delete.is_empty() && to_add.is_empty() {
        return Ok(rp.generation);
    }
    if !to_delete.is_empty() {
        let sql = format!(
            "DELETE FROM resource_provider_traits WHERE resource_provider_id = $1 AND trait_id IN ({})",
            placeholders(2, to_delete.len())
        );
        let mut q = sqlx::query(&sql).bind(rp.id);
        for t in &to_delete {
            q = q.bind(*t);
        }
        q.execute(&mut *tx).await?;
    }
    insert_links(tx, rp.id, &to_add).await?;
    providers::bump_generation(tx, rp.id, rp.generation).await
}

/// The traits of providers created in this same transaction (they have none yet):
/// `(provider id, trait id)` rows, a few hundred per statement.
pub async fn insert_many_on_new(tx: &mut Tx, rows: &[(i64, i64)]) -> Result<(), StoreError> {
    let mut rows = rows.to_vec();
    rows.sort_unstable();
    rows.dedup();
    for chunk in rows.chunks(crate::BATCH_ROWS) {
        let sql = format!(
            "INSERT INTO resource_provider_traits (resource_provider_id, trait_id) VALUES {} \
             ON CONFLICT DO NOTHING",
            crate::value_rows(chunk.len(), 2)
        );
        let mut q = sqlx::query(&sql);
        for (rp, t) in chunk {
            q = q.bind(*rp).bind(*t);
        }
        q.execute(&mut *tx).await?;
    }
    Ok(())
}

async fn insert_links(tx: &mut Tx, rp_id: i64, ids: &[i64]) -> Result<(), StoreError> {
    let rows: Vec<(i64, i64)> = ids.iter().map(|t| (rp_id, *t)).collect();
    insert_many_on_new(tx, &rows).await
}

/// Trait operations ([`Store::traits`]).
pub struct Traits<'s>(&'s Store);

impl Store {
    /// Operations on traits.
    pub fn traits(&self) -> Traits<'_> {
        Traits(self)
    }
}

impl Traits<'_> {
    /// The traits matching `f`, sorted by name.
    pub async fn list(&self, f: Filter) -> Result<Vec<Trait>, StoreError> {
        self.0
            .read(move |tx| Box::pin(async move { list(tx, &f).await }))
            .await
    }

    /// One trait by name, `None` when absent.
    pub async fn get(&self, name: &str) -> Result<Option<Trait>, StoreError> {
        let name = name.to_owned();
        self.0
            .read(move |tx| Box::pin(async move { get(tx, &name).await }))
            .await
    }

    /// Creates the trait unless it exists ([`ensure`]).
    pub async fn ensure(&self, name: &str) -> Result<(Trait, bool), StoreError> {
        let name = name.to_owned();
        self.0
            .write(move |tx| Box::pin(async move { ensure(tx, &name).await }))
            .await
    }

    /// Deletes a custom trait no provider has ([`delete`]).
    pub async fn delete(&self, name: &str) -> Result<(), StoreError> {
        let name = name.to_owned();
        self.0
            .write(move |tx| Box::pin(async move { delete(tx, &name).await }))
            .await
    }

    /// Provider `uuid` and its traits, `None` when there is no such provider.
    pub async fn of_provider(
        &self,
        uuid: &str,
    ) -> Result<Option<(Provider, Vec<Trait>)>, StoreError> {
        providers::read_of(self.0, uuid, |tx, id| Box::pin(for_provider(tx, id))).await
    }

    /// Replaces the traits of provider `uuid` with the traits `names`, if its
    /// generation is still `generation`; answers the new generation and traits.
    /// Refusals: no provider, another generation, unknown traits
    /// ([`Refused::UnknownTraits`]).
    pub async fn set_for_provider(
        &self,
        uuid: &str,
        generation: i64,
        names: Vec<String>,
    ) -> Result<(i64, Vec<Trait>), StoreError> {
        providers::write_at(self.0, uuid, Some(generation), move |tx, rp| {
            Box::pin(async move {
                let ids = lookup::trait_ids(tx, &names).await?;
                let mut missing: Vec<String> = names
                    .iter()
                    .filter(|n| !ids.contains_key(*n))
                    .cloned()
                    .collect();
                if !missing.is_empty() {
                    missing.sort();
                    missing.dedup();
                    return Err(Refused::UnknownTraits { names: missing }.into());
                }
                let want: Vec<i64> = ids.values().copied().collect();
                let gen = set_for_provider(tx, &rp, &want).await?;
                Ok((gen, for_provider(tx, rp.id).await?))
            })
        })
        .await
    }

    /// Removes every trait of provider `uuid` (no generation check, as upstream).
    pub async fn clear_for_provider(&self, uuid: &str) -> Result<(), StoreError> {
        providers::write_at(self.0, uuid, None, |tx, rp| {
            Box::pin(async move { set_for_provider(tx, &rp, &[]).await.map(drop) })
        })
        .await
    }
}
