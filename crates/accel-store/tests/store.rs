//! The store suite, run against SQLite and PostgreSQL alike (and MariaDB/MySQL when
//! `ACCEL_TEST_MYSQL` is set).

use accel_store::placement::providers::{self, Filter, ParentChange};
use accel_store::placement::{traits, ParentRefusal, Refused as PlacementRefused};
use accel_store::testing::{self, each_backend};
use accel_store::{Conflict, Store, StoreError};

/// The placement refusal `r` failed with.
fn refused<T: std::fmt::Debug>(r: Result<T, StoreError>) -> PlacementRefused {
    match r {
        Err(StoreError::Refused(accel_store::Refused::Placement(r))) => r,
        other => panic!("expected a placement refusal, got {other:?}"),
    }
}

async fn create(
    store: &Store,
    uuid: &str,
    name: &str,
    parent: Option<&str>,
) -> Result<providers::Provider, StoreError> {
    let (u, n, p) = (uuid.to_owned(), name.to_owned(), parent.map(str::to_owned));
    store
        .write(move |tx| Box::pin(async move { providers::create(tx, &u, &n, p.as_deref()).await }))
        .await
}

/// One integer `sql` reads (a `COUNT(*)`) in a read transaction.
async fn count(store: &Store, sql: &'static str) -> i64 {
    store
        .read(move |tx| {
            Box::pin(async move { Ok(sqlx::query_scalar(sql).fetch_one(&mut *tx).await?) })
        })
        .await
        .unwrap()
}

/// A provider `writer` creates is there for `reader` (another server on the database).
async fn sees_writes_of(reader: &Store, writer: &Store) {
    create(writer, A, "a", None).await.unwrap();
    let seen = reader
        .read(|tx| Box::pin(async move { providers::get(tx, A).await }))
        .await
        .unwrap();
    assert!(
        seen.is_some(),
        "the second server sees the first one's writes"
    );
}

const A: &str = "7e4e8a3a-0f5e-4a43-9a50-3c2b1d9a4b5c";
const B: &str = "0b8d5e0c-2a7f-4c41-8a0b-6f5e2d1c3b4a";
const C: &str = "c3b4a0b8-d5e0-4c2a-7f41-8a0b6f5e2d1c";

#[tokio::test]
async fn standards_are_synced_once() {
    each_backend(|store| async move {
        let n: i64 = count(&store, "SELECT COUNT(*) FROM resource_classes").await;
        assert_eq!(n, 21);
        let traits: i64 = count(&store, "SELECT COUNT(*) FROM traits").await;
        assert_eq!(traits as usize, accel_core::standard::traits().count());
    })
    .await;
}

#[tokio::test]
async fn postgres_migrations_are_idempotent_across_servers() {
    let url = testing::fresh_postgres_url().await.unwrap();
    // Two servers starting at once on one database must both succeed.
    let (a, b) = tokio::join!(Store::connect(&url), Store::connect(&url));
    let (a, b) = (a.unwrap(), b.unwrap());
    sees_writes_of(&b, &a).await;
}

#[tokio::test]
async fn mysql_migrations_are_idempotent_across_servers() {
    let Some(url) = testing::fresh_mysql_url().await.unwrap() else {
        eprintln!("ACCEL_TEST_MYSQL is unset: skipping the MariaDB/MySQL case");
        return;
    };
    // Three servers starting at once (one through the mariadb:// spelling) must all
    // succeed: GET_LOCK lets one apply the migrations, the others find them applied.
    let maria = url.replacen("mysql://", "mariadb://", 1);
    let (a, b, c) = tokio::join!(
        Store::connect(&url),
        Store::connect(&maria),
        Store::connect(&url)
    );
    let (a, b, _c) = (a.unwrap(), b.unwrap(), c.unwrap());
    assert_eq!(b.backend(), accel_store::Backend::MySql);
    sees_writes_of(&b, &a).await;
    let versions: i64 = count(&a, "SELECT COUNT(*) FROM accel_schema_migrations").await;
    let distinct: i64 = count(
        &a,
        "SELECT COUNT(DISTINCT version) FROM accel_schema_migrations",
    )
    .await;
    assert_eq!(versions, distinct, "each migration applied once");
}

#[tokio::test]
async fn names_and_traits_compare_byte_for_byte() {
    // MySQL's default collations fold case and ignore trailing spaces; accel's answers
    // must not depend on the backend.
    each_backend(|store| async move {
        create(&store, A, "node", None).await.unwrap();
        create(&store, B, "Node", None).await.unwrap();
        create(&store, C, "node ", None).await.unwrap();
        for name in ["node", "Node", "node "] {
            let f = Filter {
                name: Some(name.to_owned()),
                ..Default::default()
            };
            let found = store
                .read(move |tx| Box::pin(async move { providers::list(tx, &f).await }))
                .await
                .unwrap();
            assert_eq!(found.len(), 1, "{name:?}: {found:?}");
            assert_eq!(found[0].name, name);
        }
        let missing = store
            .read(|tx| Box::pin(async move { providers::get(tx, &A.to_uppercase()).await }))
            .await
            .unwrap();
        assert!(missing.is_none(), "uuids compare exactly");
        let (t, created) = store
            .write(|tx| Box::pin(async move { traits::ensure(tx, "CUSTOM_EXACT").await }))
            .await
            .unwrap();
        assert!(created);
        for other in ["custom_exact", "CUSTOM_EXACT "] {
            let got = store
                .read(move |tx| Box::pin(async move { traits::get(tx, other).await }))
                .await
                .unwrap();
            assert!(got.is_none(), "{other:?} is not {:?}", t.name);
            let (u, created) = store
                .write(move |tx| Box::pin(async move { traits::ensure(tx, other).await }))
                .await
                .unwrap();
            assert!(created, "{other:?} is a trait of its own");
            assert_eq!(u.name, other);
        }
    })
    .await;
}

#[tokio::test]
async fn providers_trees_and_conflicts() {
    each_backend(|store| async move {
        let root = create(&store, A, "root", None).await.unwrap();
        assert_eq!(root.root_uuid, A);
        assert_eq!(root.generation, 0);
        let child = create(&store, B, "child", Some(A)).await.unwrap();
        assert_eq!(child.root_uuid, A);
        assert_eq!(child.parent_uuid.as_deref(), Some(A));
        // Duplicate name and uuid.
        assert_eq!(
            refused(create(&store, A, "root", None).await),
            PlacementRefused::ProviderExists {
                uuid: Some(A.into()),
                name: Some("root".into())
            }
        );
        // Each alone, and a taken name outranks a bad parent (the insert runs first on
        // MySQL and SQLite; the check, then).
        let dup = |uuid: &'static str, name: &'static str, parent: Option<&'static str>| {
            let store = store.clone();
            async move {
                match refused(create(&store, uuid, name, parent).await) {
                    PlacementRefused::ProviderExists { uuid, name } => (uuid, name),
                    other => panic!("expected duplicate, got {other:?}"),
                }
            }
        };
        let name_taken = (None, Some("root".to_owned()));
        assert_eq!(dup(A, "other", None).await, (Some(A.to_owned()), None));
        assert_eq!(dup(C, "root", None).await, name_taken);
        assert_eq!(dup(C, "root", Some(C)).await, name_taken);
        assert_eq!(
            dup(C, "root", Some("00000000-0000-0000-0000-000000000000")).await,
            name_taken
        );
        // Unknown parent and self-parent are refused and write nothing.
        let bad_parent = |why| PlacementRefused::ProviderCreate {
            uuid: C.into(),
            name: "x".into(),
            why,
        };
        assert_eq!(
            refused(create(&store, C, "x", Some(C)).await),
            bad_parent(ParentRefusal::Itself)
        );
        assert_eq!(
            refused(create(&store, C, "x", Some("00000000-0000-0000-0000-000000000000")).await),
            bad_parent(ParentRefusal::Missing)
        );
        // A parent cannot be deleted; a loop cannot be made.
        let err = store
            .write(|tx| {
                Box::pin(async move {
                    let rp = providers::require(tx, A).await?;
                    providers::delete(tx, &rp).await
                })
            })
            .await;
        assert_eq!(
            refused(err),
            PlacementRefused::ProviderHasChildren { uuid: A.into() }
        );
        let err = store
            .write(|tx| {
                Box::pin(async move {
                    let rp = providers::require(tx, A).await?;
                    providers::update(tx, &rp, "root", ParentChange::Set(B.to_owned())).await
                })
            })
            .await;
        assert_eq!(
            refused(err),
            PlacementRefused::ProviderUpdate {
                uuid: A.into(),
                why: ParentRefusal::Loop
            }
        );
        // Un-parenting moves the subtree's root.
        let moved = store
            .write(|tx| {
                Box::pin(async move {
                    let rp = providers::require(tx, B).await?;
                    providers::update(tx, &rp, "child", ParentChange::Clear).await
                })
            })
            .await
            .unwrap();
        assert_eq!(moved.root_uuid, B);
        let listed = store
            .read(|tx| {
                Box::pin(async move {
                    providers::list(
                        tx,
                        &Filter {
                            name: Some("child".into()),
                            ..Default::default()
                        },
                    )
                    .await
                })
            })
            .await
            .unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].uuid, B);
    })
    .await;
}

/// The API's provider operations: moving a child only from 1.37 on, deleting, and a
/// filtered listing that names classes, traits and a tree.
#[tokio::test]
async fn provider_operations() {
    each_backend(|store| async move {
        let providers = store.providers();
        providers.create(A, "root", None).await.unwrap();
        providers.create(B, "child", Some(A)).await.unwrap();
        providers.create(C, "other", None).await.unwrap();
        let moved = |why| PlacementRefused::ProviderUpdate {
            uuid: B.into(),
            why,
        };
        let to_c = ParentChange::Set(C.to_owned());
        assert_eq!(
            refused(providers.update(B, "child", to_c.clone(), false).await),
            moved(ParentRefusal::Reparent)
        );
        assert_eq!(
            refused(
                providers
                    .update(B, "child", ParentChange::Clear, false)
                    .await
            ),
            moved(ParentRefusal::Unparent)
        );
        assert_eq!(
            refused(
                providers
                    .update(A, "child", ParentChange::Keep, false)
                    .await
            ),
            PlacementRefused::ProviderNameTaken {
                name: "child".into()
            }
        );
        // A root never updated since its insert has an update time; a child has none.
        let (rp, before) = providers.update(B, "kid", to_c, true).await.unwrap();
        assert_eq!((rp.root_uuid.as_str(), before), (C, None));

        let list = |q: providers::Query| {
            let store = store.clone();
            async move { store.providers().list(q).await }
        };
        let in_tree = |t: &str| providers::Query {
            in_tree: Some(t.to_owned()),
            ..Default::default()
        };
        let uuids =
            |ps: Vec<providers::Provider>| ps.into_iter().map(|p| p.uuid).collect::<Vec<_>>();
        assert_eq!(uuids(list(in_tree(B)).await.unwrap()), [B, C]);
        assert!(list(in_tree("00000000-0000-0000-0000-000000000000"))
            .await
            .unwrap()
            .is_empty());
        let q = providers::Query {
            resources: vec![("VCPU".into(), 1), ("CUSTOM_NOPE".into(), 1)],
            required: vec![vec!["CUSTOM_NOT_A_TRAIT".into()]],
            ..Default::default()
        };
        assert_eq!(
            refused(list(q).await),
            PlacementRefused::ListUnknownClass {
                name: "CUSTOM_NOPE".into()
            }
        );
        let q = providers::Query {
            required: vec![vec!["CUSTOM_Z".into(), "HW_CPU_X86_SSE".into()]],
            forbidden: vec!["CUSTOM_A".into(), "CUSTOM_Z".into()],
            ..Default::default()
        };
        assert_eq!(
            refused(list(q).await),
            PlacementRefused::ListUnknownTraits {
                names: vec!["CUSTOM_A".into(), "CUSTOM_Z".into()]
            }
        );

        assert_eq!(
            refused(providers.delete(C).await),
            PlacementRefused::ProviderHasChildren { uuid: C.into() }
        );
        assert!(providers.delete(B).await.unwrap());
        assert!(!providers.delete(B).await.unwrap());
        assert!(!providers.exists(B).await.unwrap());
        assert!(providers.exists(C).await.unwrap());
    })
    .await;
}

#[tokio::test]
async fn generation_compare_and_swap() {
    each_backend(|store| async move {
        let rp = create(&store, A, "cas", None).await.unwrap();
        let id = rp.id;
        let g = store
            .write(move |tx| Box::pin(async move { providers::bump_generation(tx, id, 0).await }))
            .await
            .unwrap();
        assert_eq!(g, 1);
        let stale = store
            .write(move |tx| Box::pin(async move { providers::bump_generation(tx, id, 0).await }))
            .await;
        assert_eq!(refused(stale), PlacementRefused::ProviderChanged);
    })
    .await;
}

#[tokio::test]
async fn concurrent_cas_has_exactly_one_winner_on_postgres() {
    concurrent_cas_has_exactly_one_winner(testing::postgres().await).await;
}

#[tokio::test]
async fn concurrent_cas_has_exactly_one_winner_on_mysql() {
    match testing::mysql().await {
        Some(store) => concurrent_cas_has_exactly_one_winner(store).await,
        None => eprintln!("ACCEL_TEST_MYSQL is unset: skipping the MariaDB/MySQL case"),
    }
}

async fn concurrent_cas_has_exactly_one_winner(store: Store) {
    let rp = create(&store, A, "race", None).await.unwrap();
    let id = rp.id;
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let s = store.clone();
        set.spawn(async move {
            s.write(move |tx| Box::pin(async move { providers::bump_generation(tx, id, 0).await }))
                .await
                .is_ok()
        });
    }
    let mut wins = 0;
    while let Some(r) = set.join_next().await {
        wins += r.unwrap() as usize;
    }
    assert_eq!(wins, 1);
}

#[tokio::test]
async fn a_refusal_rolls_the_write_back() {
    each_backend(|store| async move {
        let refused = store
            .write_or_refuse(|tx| {
                Box::pin(async move {
                    providers::create(tx, A, "refused", None).await?;
                    Ok(Err("no"))
                })
            })
            .await
            .unwrap();
        assert_eq!(refused, Err::<providers::Provider, _>("no"));
        let seen = store
            .read(|tx| Box::pin(async move { providers::get(tx, A).await }))
            .await
            .unwrap();
        assert!(seen.is_none(), "nothing of a refused write is kept");
        let done = store
            .write_or_refuse(|tx| {
                Box::pin(async move {
                    Ok(Ok::<_, &str>(
                        providers::create(tx, A, "kept", None).await?.uuid,
                    ))
                })
            })
            .await
            .unwrap();
        assert_eq!(done, Ok(A.to_owned()));
    })
    .await;
}

#[tokio::test]
async fn only_a_provider_race_is_rerun() {
    each_backend(|store| async move {
        let runs = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let counted = runs.clone();
        let result = store
            .write_retrying(3, || {
                let runs = counted.clone();
                move |_tx: &mut accel_store::Tx| -> accel_store::BoxFut<'_, Result<(), ()>> {
                    Box::pin(async move {
                        runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        Err(StoreError::provider_race())
                    })
                }
            })
            .await;
        assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 3);
        match result {
            Err(e @ StoreError::Conflict(Conflict::ProviderRace, _)) => assert!(e.is_retryable()),
            other => panic!("expected the race, got {other:?}"),
        }
        let other = StoreError::conflict(Conflict::ConcurrentUpdate, "consumer");
        assert!(!other.is_retryable());
    })
    .await;
}
