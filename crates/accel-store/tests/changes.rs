//! The placement change log (`placement::changes`), on SQLite and PostgreSQL: every
//! committed change is visible as a new version naming the touched providers, a
//! rolled-back one is not, and a reader whose log was pruned is told to reload.

use accel_store::placement::changes::{self, Delta, Version};
use accel_store::placement::{classes, providers, traits, world};
use accel_store::testing::{self, each_backend};
use accel_store::{Store, StoreError};

async fn version(store: &Store) -> Version {
    store
        .read(|tx| Box::pin(async move { changes::version(tx).await }))
        .await
        .unwrap()
}

async fn since(store: &Store, from: Version) -> (Version, Delta) {
    store
        .read(move |tx| {
            Box::pin(async move {
                let to = changes::version(tx).await?;
                let d = changes::since(tx, &from, &to).await?;
                Ok((to, d))
            })
        })
        .await
        .unwrap()
}

async fn create(store: &Store, name: &str, parent: Option<&str>) -> providers::Provider {
    let (n, p) = (name.to_owned(), parent.map(str::to_owned));
    let u = uuid::Uuid::new_v4().to_string();
    store
        .write(move |tx| Box::pin(async move { providers::create(tx, &u, &n, p.as_deref()).await }))
        .await
        .unwrap()
}

#[tokio::test]
async fn committed_changes_name_their_providers() {
    each_backend(|store| async move {
        let v0 = version(&store).await;
        let a = create(&store, "a", None).await;
        let b = create(&store, "b", Some(&a.uuid)).await;
        let (v1, d) = since(&store, v0).await;
        assert_ne!(v0, v1);
        assert_eq!(
            d,
            Delta::Some {
                providers: vec![a.id, b.id],
                names: false
            }
        );
        // Nothing new: the same version, an empty delta.
        assert_eq!(version(&store).await, v1);

        // A trait set on b touches b only; creating the custom trait touches names.
        let bb = b.clone();
        store
            .write(move |tx| {
                Box::pin(async move {
                    let (t, _) = traits::ensure(tx, "CUSTOM_GOLD").await?;
                    traits::set_for_provider(tx, &bb, &[t.id]).await
                })
            })
            .await
            .unwrap();
        let (v2, d) = since(&store, v1).await;
        assert_eq!(
            d,
            Delta::Some {
                providers: vec![b.id],
                names: true
            }
        );

        // A failed write (duplicate name after a real insert) rolls its log back too.
        let u = uuid::Uuid::new_v4().to_string();
        let err = store
            .write(move |tx| {
                Box::pin(async move {
                    providers::create(tx, &u, "c", None).await?;
                    classes::create(tx, "CUSTOM_X").await?;
                    Err::<(), _>(StoreError::Invalid("abort".into()))
                })
            })
            .await;
        assert!(err.is_err());
        assert_eq!(version(&store).await, v2);

        // Deleting a provider touches it; a later load no longer has it.
        let bb = b.clone();
        store
            .write(move |tx| Box::pin(async move { providers::delete(tx, &bb).await }))
            .await
            .unwrap();
        let (_, d) = since(&store, v2).await;
        assert_eq!(
            d,
            Delta::Some {
                providers: vec![b.id],
                names: false
            }
        );
        let loaded = store
            .read(move |tx| {
                Box::pin(async move { world::load_providers(tx, Some(&[a.id, b.id])).await })
            })
            .await
            .unwrap();
        assert_eq!(loaded.len(), 1);
        assert_eq!(loaded[0].id, a.id);
    })
    .await;
}

#[tokio::test]
async fn a_pruned_log_asks_for_a_reload() {
    each_backend(|store| async move {
        let v0 = version(&store).await;
        create(&store, "a", None).await;
        create(&store, "b", None).await;
        store
            .write(|tx| {
                Box::pin(async move {
                    // Simulate pruning: drop the oldest logged transaction's rows.
                    sqlx::query(
                        "DELETE FROM placement_changes WHERE seq = (SELECT MIN(seq) FROM placement_changes WHERE provider_id > 0) AND provider_id > 0",
                    )
                    .execute(&mut *tx)
                    .await?;
                    Ok(())
                })
            })
            .await
            .unwrap();
        let (_, d) = since(&store, v0).await;
        assert_eq!(d, Delta::Reload);
    })
    .await;
}

#[tokio::test]
async fn concurrent_writers_on_postgres_lose_no_change() {
    let store = testing::postgres().await;
    let v0 = version(&store).await;
    let mut tasks = Vec::new();
    for i in 0..24 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            create(&store, &format!("p{i}"), None).await.id
        }));
    }
    let mut ids = Vec::new();
    for t in tasks {
        ids.push(t.await.unwrap());
    }
    ids.sort_unstable();
    let (v1, d) = since(&store, v0).await;
    assert_eq!(
        d,
        Delta::Some {
            providers: ids,
            names: false
        }
    );
    let bumps: i64 = v1.iter().zip(v0.iter()).map(|(a, b)| a - b).sum();
    assert_eq!(bumps, 24, "one sequence step per committed transaction");
}
