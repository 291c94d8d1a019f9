//! Provider aggregates: uuids with no other meaning to Placement, created on first
//! use (`placement_aggregates`) and linked to providers. The API's operations on them
//! are [`Aggregates`] ([`Store::aggregates`]).

use super::providers::{self, Provider};
use crate::{placeholders, Store, StoreError, Tx};

/// The aggregate uuids of one provider, sorted.
pub async fn for_provider(tx: &mut Tx, rp_id: i64) -> Result<Vec<String>, StoreError> {
    Ok(sqlx::query_scalar(
        "SELECT pa.uuid FROM placement_aggregates pa \
         JOIN resource_provider_aggregates rpa ON rpa.aggregate_id = pa.id \
         WHERE rpa.resource_provider_id = $1 ORDER BY pa.uuid",
    )
    .bind(rp_id)
    .fetch_all(&mut *tx)
    .await?)
}

/// The id of aggregate `uuid`, creating it when unseen.
pub async fn ensure(tx: &mut Tx, uuid: &str) -> Result<i64, StoreError> {
    sqlx::query("INSERT INTO placement_aggregates (uuid) VALUES ($1) ON CONFLICT DO NOTHING")
        .bind(uuid)
        .execute(&mut *tx)
        .await?;
    Ok(
        sqlx::query_scalar("SELECT id FROM placement_aggregates WHERE uuid = $1")
            .bind(uuid)
            .fetch_one(&mut *tx)
            .await?,
    )
}

/// Replaces the provider's aggregates with `uuids` (already normalised). With
/// `bump`, the provider's generation is then bumped by compare-and-swap from
/// `rp.generation` (microversion 1.19 on), even when nothing changed, as upstream
/// does. Returns the generation after the call.
pub async fn set_for_provider(
    tx: &mut Tx,
    rp: &Provider,
    uuids: &[String],
    bump: bool,
) -> Result<i64, StoreError> {
    let mut want: Vec<i64> = Vec::with_capacity(uuids.len());
    for u in uuids {
        let id = ensure(tx, u).await?;
        if !want.contains(&id) {
            want.push(id);
        }
    }
    if want.is_empty() {
        sqlx::query("DELETE FROM resource_provider_aggregates WHERE resource_provider_id = $1")
            .bind(rp.id)
            .execute(&mut *tx)
            .await?;
    } else {
        let sql = format!(
            "DELETE FROM resource_provider_aggregates WHERE resource_provider_id = $1 \
             AND aggregate_id NOT IN ({})",
            placeholders(2, want.len())
        );
        let mut q = sqlx::query(&sql).bind(rp.id);
        for id in &want {
            q = q.bind(*id);
        }
        q.execute(&mut *tx).await?;
    }
    for id in &want {
        sqlx::query(
            "INSERT INTO resource_provider_aggregates (resource_provider_id, aggregate_id) \
             VALUES ($1, $2) ON CONFLICT DO NOTHING",
        )
        .bind(rp.id)
        .bind(*id)
        .execute(&mut *tx)
        .await?;
    }
    super::changes::touch(tx, &[rp.id]).await?;
    if bump {
        providers::bump_generation(tx, rp.id, rp.generation).await
    } else {
        Ok(rp.generation)
    }
}

/// Aggregate operations ([`Store::aggregates`]).
pub struct Aggregates<'s>(&'s Store);

impl Store {
    /// Operations on provider aggregates.
    pub fn aggregates(&self) -> Aggregates<'_> {
        Aggregates(self)
    }
}

impl Aggregates<'_> {
    /// Provider `uuid` and its aggregate uuids, `None` when there is no such provider.
    pub async fn of_provider(
        &self,
        uuid: &str,
    ) -> Result<Option<(Provider, Vec<String>)>, StoreError> {
        providers::read_of(self.0, uuid, |tx, id| Box::pin(for_provider(tx, id))).await
    }

    /// Replaces the aggregates of provider `uuid` with `uuids` ([`set_for_provider`]),
    /// if its generation is still `expected` when given; answers the generation after.
    pub async fn set_for_provider(
        &self,
        uuid: &str,
        expected: Option<i64>,
        uuids: Vec<String>,
        bump: bool,
    ) -> Result<i64, StoreError> {
        providers::write_at(self.0, uuid, expected, move |tx, rp| {
            Box::pin(async move { set_for_provider(tx, &rp, &uuids, bump).await })
        })
        .await
    }
}
