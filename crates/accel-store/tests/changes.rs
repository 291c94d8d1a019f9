//! The placement change log (`placement::changes`), on SQLite and PostgreSQL: every
//! committed change is visible as a new version naming the touched providers, a
//! rolled-back one is not, and a reader whose log was pruned is told to reload.
//! Allocation writes also name the consumer projects whose usage they change.

use accel_core::capacity::Limits;
use accel_store::placement::allocations::{self as allocs, ConsumerWrite};
use accel_store::placement::changes::{self, Delta, ProjectChanges, Version};
use accel_store::placement::inventories::{self, Inventory};
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

/// Checks that the roots `made` from `new` (uuid, name) are logged as one change since
/// `v0` and stored as answered, each its own root; the version after them.
async fn logged_and_stored(
    store: &Store,
    v0: Version,
    new: &[(String, String)],
    made: &[providers::Provider],
) -> Version {
    let (v1, d) = since(store, v0).await;
    let ids: Vec<i64> = made.iter().map(|p| p.id).collect();
    assert_eq!(
        d,
        Delta::Some {
            providers: ids,
            names: false
        }
    );
    for ((uuid, name), p) in new.iter().zip(made) {
        let u = uuid.clone();
        let stored = store
            .read(move |tx| Box::pin(async move { providers::require(tx, &u).await }))
            .await
            .unwrap();
        assert_eq!(&stored, p);
        assert_eq!((&stored.name, stored.root_id), (name, stored.id));
    }
    v1
}

#[tokio::test]
async fn roots_created_together_are_logged_as_one_change() {
    // On MariaDB/MySQL this is the accel_create_roots procedure, elsewhere statements.
    each_backend(|store| async move {
        let v0 = version(&store).await;
        let new: Vec<(String, String)> = ["r1", "r2", "r3"]
            .iter()
            .map(|n| (uuid::Uuid::new_v4().to_string(), n.to_string()))
            .collect();
        let rows = new.clone();
        let made = store
            .write(move |tx| {
                Box::pin(async move {
                    let pairs: Vec<(&str, &str)> =
                        rows.iter().map(|(u, n)| (u.as_str(), n.as_str())).collect();
                    providers::create_roots(tx, &pairs).await
                })
            })
            .await
            .unwrap();
        let ids: Vec<i64> = made.iter().map(|p| p.id).collect();
        let v1 = logged_and_stored(&store, v0, &new, &made).await;
        // A taken name refuses the whole call and logs nothing.
        let again = [
            (uuid::Uuid::new_v4().to_string(), "r9".to_owned()),
            (uuid::Uuid::new_v4().to_string(), "r2".to_owned()),
        ];
        let err = store
            .write(move |tx| {
                Box::pin(async move {
                    let pairs: Vec<(&str, &str)> = again
                        .iter()
                        .map(|(u, n)| (u.as_str(), n.as_str()))
                        .collect();
                    providers::create_roots(tx, &pairs).await
                })
            })
            .await
            .unwrap_err();
        assert!(err.is_unique_violation(), "{err:?}");
        assert_eq!(version(&store).await, v1);
        let loaded = store
            .read(move |tx| Box::pin(async move { world::load_providers(tx, None).await }))
            .await
            .unwrap();
        assert_eq!(loaded.iter().map(|p| p.id).collect::<Vec<_>>(), ids);
    })
    .await;
}

#[tokio::test]
async fn roots_created_alone_in_one_round_trip_commit_or_leave_nothing() {
    // On MariaDB/MySQL one text round trip (names travel as a hex literal).
    each_backend(|store| async move {
        let v0 = version(&store).await;
        let names = ["q'uote\\back \"slash\"", "ünï ✓ 名前", "trailing  "];
        let new: Vec<(String, String)> = names
            .iter()
            .map(|n| (uuid::Uuid::new_v4().to_string(), n.to_string()))
            .collect();
        let made = store.providers().create_roots(&new).await.unwrap();
        let v1 = logged_and_stored(&store, v0, &new, &made).await;
        // A taken name: refused, nothing committed, and the connection it used is
        // clean (the next write commits on its own).
        let clash = vec![
            (uuid::Uuid::new_v4().to_string(), "fresh".to_owned()),
            (uuid::Uuid::new_v4().to_string(), names[1].to_owned()),
        ];
        let err = store.providers().create_roots(&clash).await.unwrap_err();
        assert!(err.is_unique_violation(), "{err:?}");
        assert_eq!(version(&store).await, v1);
        for _ in 0..4 {
            create(&store, &format!("after-{}", uuid::Uuid::new_v4()), None).await;
        }
        let (_, d) = since(&store, v1).await;
        assert!(
            matches!(d, Delta::Some { ref providers, .. } if providers.len() == 4),
            "{d:?}"
        );
        let all = store
            .read(move |tx| Box::pin(async move { world::load_providers(tx, None).await }))
            .await
            .unwrap();
        assert!(!all.iter().any(|p| p.name == "fresh"));
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

/// The projects (by id, sorted) logged after `from`, or `None` when the log was pruned.
async fn projects_since(store: &Store, from: Version) -> (Version, Option<Vec<i64>>) {
    let to = version(store).await;
    let got = store
        .read_one(move |tx| Box::pin(async move { changes::projects_since(tx, &from, &to).await }))
        .await
        .unwrap();
    let ids = got.map(|ProjectChanges { projects, .. }| {
        let mut ids: Vec<i64> = projects.iter().map(|(p, _, _)| *p).collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    });
    (to, ids)
}

async fn project_id(store: &Store, name: &'static str) -> i64 {
    store
        .read_one(move |tx| {
            Box::pin(async move {
                Ok(
                    sqlx::query_scalar("SELECT id FROM projects WHERE external_id = $1")
                        .bind(name)
                        .fetch_one(&mut *tx)
                        .await?,
                )
            })
        })
        .await
        .unwrap()
}

fn claim(consumer: &str, project: &str, rp: &str, vcpu: i64) -> ConsumerWrite {
    ConsumerWrite {
        uuid: consumer.into(),
        project_id: Some(project.into()),
        user_id: Some("u".into()),
        check_generation: false,
        generation: None,
        consumer_type: None,
        allocations: if vcpu > 0 {
            vec![(rp.into(), vec![("VCPU".into(), vcpu)])]
        } else {
            vec![]
        },
    }
}

#[tokio::test]
async fn allocation_writes_name_the_projects_whose_usage_changed() {
    each_backend(|store| async move {
        let rp = create(&store, "rp", None).await;
        let r = rp.clone();
        store
            .write(move |tx| {
                Box::pin(async move {
                    let inv = Inventory::new(0, "VCPU".into(), Limits::whole(100));
                    inventories::replace(tx, &r, &[inv]).await
                })
            })
            .await
            .unwrap();
        let write = |w: ConsumerWrite| {
            let store = store.clone();
            async move { store.allocations().replace(&[w], 3).await.unwrap().unwrap() }
        };
        const C1: &str = "c1c1c1c1-0000-4000-8000-000000000001";
        const C2: &str = "c2c2c2c2-0000-4000-8000-000000000002";
        let v0 = version(&store).await;
        write(claim(C1, "p", &rp.uuid, 1)).await;
        write(claim(C2, "q", &rp.uuid, 2)).await;
        let (p, q) = (project_id(&store, "p").await, project_id(&store, "q").await);
        let (v1, got) = projects_since(&store, v0).await;
        assert_eq!(got, Some(vec![p.min(q), p.max(q)]));
        // The index's reader still sees only the provider.
        let (_, d) = since(&store, v0).await;
        assert_eq!(
            d,
            Delta::Some {
                providers: vec![rp.id],
                names: false
            }
        );

        // An inventory change names no project; moving C1 to "r" names both.
        let u = rp.uuid.clone();
        store
            .write(move |tx| {
                Box::pin(async move {
                    let r = providers::require(tx, &u).await?;
                    let inv = Inventory::new(0, "VCPU".into(), Limits::whole(99));
                    inventories::replace(tx, &r, &[inv]).await
                })
            })
            .await
            .unwrap();
        let (v2, got) = projects_since(&store, v1).await;
        assert_eq!(got, Some(vec![]));
        write(claim(C1, "r", &rp.uuid, 1)).await;
        let r_id = project_id(&store, "r").await;
        let (v3, got) = projects_since(&store, v2).await;
        let mut moved = vec![p, r_id];
        moved.sort_unstable();
        assert_eq!(got, Some(moved));

        // Deleting a consumer's allocations names its project.
        let deleted = store
            .write(|tx| Box::pin(async move { allocs::delete_for_consumer(tx, C2).await }))
            .await
            .unwrap();
        assert!(deleted);
        let (_, got) = projects_since(&store, v3).await;
        assert_eq!(got, Some(vec![q]));

        // A log that no longer reaches back to v0 is said to be pruned: the first
        // claim's rows (provider and project) go.
        let shard = rp.id.rem_euclid(changes::SHARDS as i64) as usize;
        let first = v0[shard] + 1;
        store
            .write(move |tx| {
                Box::pin(async move {
                    sqlx::query("DELETE FROM placement_changes WHERE shard = $1 AND seq = $2")
                        .bind(shard as i32)
                        .bind(first)
                        .execute(&mut *tx)
                        .await?;
                    Ok(())
                })
            })
            .await
            .unwrap();
        let (_, got) = projects_since(&store, v0).await;
        assert_eq!(got, None);
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
