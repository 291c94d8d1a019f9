//! `Store::placement_version`, the candidate index's freshness check: on a SQLite file
//! it is answered by a read-only probe connection (`sqlite_probe.rs`) that re-reads
//! the version only when `PRAGMA data_version` says another connection committed.
//! These tests hold it to the version read through the pool, for commits of the same
//! store, of a second store on the same file (another process's writes), rolled-back
//! writes and writes that touch no provider.

use accel_store::placement::changes::{self, Version};
use accel_store::placement::providers;
use accel_store::{Store, StoreError};

async fn pooled(store: &Store) -> Version {
    store
        .read(|tx| Box::pin(async move { changes::version(tx).await }))
        .await
        .unwrap()
}

async fn create(store: &Store, name: &str) -> Result<providers::Provider, StoreError> {
    let n = name.to_owned();
    let u = uuid::Uuid::new_v4().to_string();
    store
        .write(move |tx| Box::pin(async move { providers::create(tx, &u, &n, None).await }))
        .await
}

/// A fresh SQLite file and two stores on it, as two `accel` processes would have.
async fn two_stores() -> (std::path::PathBuf, Store, Store) {
    let dir = std::env::temp_dir().join(format!("accel-probe-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}", dir.join("probe.db").display());
    let a = Store::connect(&url).await.unwrap();
    let b = Store::connect(&url).await.unwrap();
    (dir, a, b)
}

#[tokio::test]
async fn the_probe_sees_every_commit_of_any_connection() {
    let (dir, a, b) = two_stores().await;
    let v0 = a.placement_version().await.unwrap();
    assert_eq!(v0, pooled(&a).await);
    // Asked again with nothing committed: the same answer.
    assert_eq!(a.placement_version().await.unwrap(), v0);

    // Its own store's commit.
    create(&a, "mine").await.unwrap();
    let v1 = a.placement_version().await.unwrap();
    assert_ne!(v1, v0);
    assert_eq!(v1, pooled(&a).await);

    // Another store's (another process's) commit.
    create(&b, "theirs").await.unwrap();
    let v2 = a.placement_version().await.unwrap();
    assert_ne!(v2, v1);
    assert_eq!(v2, pooled(&a).await);
    assert_eq!(v2, b.placement_version().await.unwrap());

    // A refused write commits nothing: the version stays.
    let dup = create(&b, "theirs").await;
    assert!(dup.is_err(), "{dup:?}");
    assert_eq!(a.placement_version().await.unwrap(), v2);

    // A commit that touches no provider: data_version moves, the vector is read again.
    b.write(|tx| {
        Box::pin(async move {
            accel_store::placement::traits::ensure(tx, "CUSTOM_PROBE").await?;
            Ok(())
        })
    })
    .await
    .unwrap();
    assert_eq!(a.placement_version().await.unwrap(), pooled(&a).await);
    // Every answer above came from the probe, none from the pool.
    let c = a.counters();
    assert_eq!(
        (c.version_probes, c.version_probe_fallbacks),
        (6, 0),
        "{c:?}"
    );
    a.close().await;
    b.close().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn without_a_file_the_version_is_read_through_the_pool() {
    let store = accel_store::testing::sqlite().await;
    let v0 = store.placement_version().await.unwrap();
    create(&store, "in-memory").await.unwrap();
    let v1 = store.placement_version().await.unwrap();
    assert_ne!(v0, v1);
    assert_eq!(v1, pooled(&store).await);
    let c = store.counters();
    assert_eq!(
        (c.version_probes, c.version_probe_fallbacks),
        (0, 0),
        "{c:?}"
    );
}
