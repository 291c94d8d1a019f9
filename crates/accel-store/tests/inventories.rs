//! Inventory changes on SQLite and PostgreSQL: what each kind of change writes, and the
//! order in which refusals are judged (generation, the body's own problem, class, then
//! the class's presence), as upstream reports them.

use accel_core::capacity::Limits;
use accel_store::placement::inventories::{Change, ChangeRefusal as R, Inventory};
use accel_store::placement::providers;
use accel_store::testing::each_backend;
use accel_store::Store;

const RP: &str = "6d4e2b3c-1f50-4b6c-9d7e-8f90ab1c2d3e";

fn record(class: &str, total: i64) -> Inventory {
    Inventory::new(-1, class.into(), Limits::whole(total))
}

/// The provider's (class, total) pairs after a change that was not refused.
async fn apply(
    store: &Store,
    change: Change,
    invalid: Option<&str>,
) -> Result<Vec<(String, i64)>, R> {
    let out = store
        .inventories()
        .change(RP, change, invalid.map(str::to_owned))
        .await
        .unwrap();
    out.map(|(_, invs)| {
        invs.into_iter()
            .map(|i| (i.rc_name, i.limits.total))
            .collect()
    })
}

async fn generation(store: &Store) -> i64 {
    store
        .read(|tx| Box::pin(async move { Ok(providers::require(tx, RP).await?.generation) }))
        .await
        .unwrap()
}

fn totals(v: &[(&str, i64)]) -> Vec<(String, i64)> {
    v.iter().map(|(c, n)| (c.to_string(), *n)).collect()
}

#[tokio::test]
async fn each_change_and_its_refusals_in_upstreams_order() {
    each_backend(|store| async move {
        store
            .write(|tx| Box::pin(async move { providers::create(tx, RP, "rp", None).await }))
            .await
            .unwrap();
        let create = |c: &str, n| Change::Create(record(c, n));
        assert_eq!(
            apply(&store, create("VCPU", 8), None).await,
            Ok(totals(&[("VCPU", 8)]))
        );
        assert_eq!(
            apply(&store, create("VCPU", 4), None).await,
            Err(R::Exists("VCPU".into()))
        );
        // The body's own problem is judged before the class, which comes before presence.
        assert_eq!(
            apply(&store, create("CUSTOM_NOPE", 1), Some("bad")).await,
            Err(R::Invalid("bad".into()))
        );
        assert_eq!(
            apply(&store, create("CUSTOM_NOPE", 1), None).await,
            Err(R::UnknownClass("CUSTOM_NOPE".into()))
        );
        assert_eq!(
            apply(&store, create("VCPU", 4), Some("bad")).await,
            Err(R::Invalid("bad".into()))
        );

        let g = generation(&store).await;
        let update = |generation, c: &str, n| Change::Update {
            generation,
            record: record(c, n),
        };
        // A stale generation is judged first of all.
        assert_eq!(
            apply(&store, update(g - 1, "CUSTOM_NOPE", 1), Some("bad")).await,
            Err(R::Generation)
        );
        assert_eq!(
            apply(&store, update(g, "MEMORY_MB", 1), None).await,
            Err(R::Missing("MEMORY_MB".into()))
        );
        assert_eq!(
            apply(&store, update(g, "VCPU", 16), None).await,
            Ok(totals(&[("VCPU", 16)]))
        );

        let g = generation(&store).await;
        let replace = |generation, records| Change::ReplaceAll {
            generation,
            records,
        };
        assert_eq!(
            apply(&store, replace(g - 1, vec![record("DISK_GB", 1)]), None).await,
            Err(R::Generation)
        );
        assert_eq!(
            apply(&store, replace(g, vec![record("DISK_GB", 1)]), Some("bad")).await,
            Err(R::Invalid("bad".into()))
        );
        assert_eq!(
            apply(
                &store,
                replace(g, vec![record("VCPU", 2), record("MEMORY_MB", 512)]),
                None
            )
            .await,
            Ok(totals(&[("VCPU", 2), ("MEMORY_MB", 512)]))
        );

        let delete = |c: &str| Change::Delete { class: c.into() };
        assert_eq!(
            apply(&store, delete("DISK_GB"), None).await,
            Err(R::Missing("DISK_GB".into()))
        );
        assert_eq!(
            apply(&store, delete("CUSTOM_NOPE"), None).await,
            Err(R::UnknownClass("CUSTOM_NOPE".into()))
        );
        assert_eq!(
            apply(&store, delete("VCPU"), None).await,
            Ok(totals(&[("MEMORY_MB", 512)]))
        );
        assert_eq!(apply(&store, Change::DeleteAll, None).await, Ok(vec![]));
    })
    .await;
}
