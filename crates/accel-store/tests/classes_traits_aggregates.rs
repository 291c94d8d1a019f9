//! Resource classes, traits and provider aggregates, on SQLite and PostgreSQL alike.

use accel_store::placement::{aggregates, classes, providers, traits};
use accel_store::testing::each_backend;
use accel_store::{Conflict, Store, StoreError};

const RP: &str = "7e4e8a3a-0f5e-4a43-9a50-3c2b1d9a4b5c";
const AGG1: &str = "0b8d5e0c-2a7f-4c41-8a0b-6f5e2d1c3b4a";
const AGG2: &str = "c3b4a0b8-d5e0-4c2a-7f41-8a0b6f5e2d1c";

async fn provider(store: &Store) -> providers::Provider {
    store
        .write(|tx| Box::pin(async move { providers::create(tx, RP, "rp", None).await }))
        .await
        .unwrap()
}

async fn reload(store: &Store) -> providers::Provider {
    store
        .read(|tx| Box::pin(async move { providers::require(tx, RP).await }))
        .await
        .unwrap()
}

#[tokio::test]
async fn custom_classes_get_ids_from_10000_and_standard_ones_are_fixed() {
    each_backend(|store| async move {
        let a = store
            .write(|tx| Box::pin(async move { classes::create(tx, "CUSTOM_A").await }))
            .await
            .unwrap();
        let b = store
            .write(|tx| Box::pin(async move { classes::create(tx, "CUSTOM_B").await }))
            .await
            .unwrap();
        assert_eq!((a.id, b.id), (10000, 10001));
        let dup = store
            .write(|tx| Box::pin(async move { classes::create(tx, "CUSTOM_A").await }))
            .await;
        assert!(matches!(dup, Err(StoreError::Conflict(Conflict::Duplicate, _))));

        let all = store
            .read(|tx| Box::pin(async move { classes::list(tx).await }))
            .await
            .unwrap();
        assert_eq!(all.len(), 23);
        assert_eq!(all[0].name, "VCPU");
        assert_eq!(all[22].name, "CUSTOM_B");

        // Standard classes can be neither renamed nor deleted.
        let r = store
            .write(|tx| {
                Box::pin(async move {
                    let vcpu = classes::require(tx, "VCPU").await?;
                    classes::rename(tx, &vcpu, "CUSTOM_C").await
                })
            })
            .await;
        assert!(matches!(r, Err(StoreError::Invalid(_))));
        let r = store
            .write(|tx| Box::pin(async move { classes::delete(tx, "VCPU").await }))
            .await;
        assert!(matches!(r, Err(StoreError::Invalid(_))));

        // Renaming onto a taken name is refused; onto a free one works.
        let r = store
            .write(|tx| {
                Box::pin(async move {
                    let a = classes::require(tx, "CUSTOM_A").await?;
                    classes::rename(tx, &a, "CUSTOM_B").await
                })
            })
            .await;
        assert!(matches!(r, Err(StoreError::Conflict(Conflict::Duplicate, _))));
        store
            .write(|tx| {
                Box::pin(async move {
                    let a = classes::require(tx, "CUSTOM_A").await?;
                    classes::rename(tx, &a, "CUSTOM_C").await
                })
            })
            .await
            .unwrap();

        // A class used by inventory cannot be deleted.
        let rp = provider(&store).await;
        store
            .write(move |tx| {
                Box::pin(async move {
                    sqlx::query(
                        "INSERT INTO inventories (resource_provider_id, resource_class_id, total, reserved, \
                         min_unit, max_unit, step_size, allocation_ratio, created_at) \
                         VALUES ($1, 10001, 4, 0, 1, 4, 1, 1.0, 0)",
                    )
                    .bind(rp.id)
                    .execute(&mut *tx)
                    .await?;
                    Ok(())
                })
            })
            .await
            .unwrap();
        let r = store
            .write(|tx| Box::pin(async move { classes::delete(tx, "CUSTOM_B").await }))
            .await;
        assert!(matches!(r, Err(StoreError::Conflict(Conflict::InUse, _))));
        store
            .write(|tx| Box::pin(async move { classes::delete(tx, "CUSTOM_C").await }))
            .await
            .unwrap();
        let r = store
            .write(|tx| Box::pin(async move { classes::delete(tx, "CUSTOM_C").await }))
            .await;
        assert!(matches!(r, Err(StoreError::NotFound(_))));
    })
    .await;
}

#[tokio::test]
async fn provider_traits_are_sorted_and_bump_the_generation_only_on_change() {
    each_backend(|store| async move {
        for name in ["CUSTOM_Z", "CUSTOM_A"] {
            let (_, created) = store
                .write(move |tx| Box::pin(async move { traits::ensure(tx, name).await }))
                .await
                .unwrap();
            assert!(created);
        }
        let (_, created) = store
            .write(|tx| Box::pin(async move { traits::ensure(tx, "CUSTOM_Z").await }))
            .await
            .unwrap();
        assert!(!created);

        let rp = provider(&store).await;
        let set = |names: &'static [&'static str], rp: providers::Provider| {
            let store = store.clone();
            async move {
                store
                    .write(move |tx| {
                        Box::pin(async move {
                            let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
                            let ids = accel_store::placement::lookup::trait_ids(tx, &names).await?;
                            let want: Vec<i64> = ids.values().copied().collect();
                            traits::set_for_provider(tx, &rp, &want).await
                        })
                    })
                    .await
            }
        };
        let g = set(&["CUSTOM_Z", "HW_CPU_X86_SSE", "CUSTOM_A"], rp.clone())
            .await
            .unwrap();
        assert_eq!(g, 1);
        let listed = store
            .read(move |tx| Box::pin(async move { traits::for_provider(tx, rp.id).await }))
            .await
            .unwrap();
        let names: Vec<&str> = listed.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["CUSTOM_A", "CUSTOM_Z", "HW_CPU_X86_SSE"]);

        // The same set again changes nothing, not even the generation.
        let rp = reload(&store).await;
        assert_eq!(
            set(&["CUSTOM_A", "CUSTOM_Z", "HW_CPU_X86_SSE"], rp.clone())
                .await
                .unwrap(),
            1
        );
        // A stale generation loses the compare-and-swap and writes nothing.
        let mut stale = rp.clone();
        stale.generation = 0;
        let r = set(&["CUSTOM_A"], stale).await;
        assert!(matches!(
            r,
            Err(StoreError::Conflict(Conflict::ConcurrentUpdate, _))
        ));
        let listed = store
            .read(move |tx| Box::pin(async move { traits::for_provider(tx, rp.id).await }))
            .await
            .unwrap();
        assert_eq!(listed.len(), 3);

        // Filters and deletion rules.
        let assoc = store
            .read(|tx| {
                Box::pin(async move {
                    traits::list(
                        tx,
                        &traits::Filter {
                            associated: Some(true),
                            ..Default::default()
                        },
                    )
                    .await
                })
            })
            .await
            .unwrap();
        assert_eq!(assoc.len(), 3);
        let custom = store
            .read(|tx| {
                Box::pin(async move {
                    traits::list(
                        tx,
                        &traits::Filter {
                            prefix: Some("CUSTOM_".into()),
                            ..Default::default()
                        },
                    )
                    .await
                })
            })
            .await
            .unwrap();
        assert_eq!(
            custom.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
            ["CUSTOM_A", "CUSTOM_Z"]
        );
        let r = store
            .write(|tx| Box::pin(async move { traits::delete(tx, "CUSTOM_A").await }))
            .await;
        assert!(matches!(r, Err(StoreError::Conflict(Conflict::InUse, _))));
        let r = store
            .write(|tx| Box::pin(async move { traits::delete(tx, "HW_CPU_X86_SSE").await }))
            .await;
        assert!(matches!(r, Err(StoreError::Invalid(_))));
        let rp = reload(&store).await;
        assert_eq!(set(&[], rp).await.unwrap(), 2);
        store
            .write(|tx| Box::pin(async move { traits::delete(tx, "CUSTOM_A").await }))
            .await
            .unwrap();
    })
    .await;
}

#[tokio::test]
async fn aggregates_are_created_on_first_use_and_replaced_as_a_set() {
    each_backend(|store| async move {
        let rp = provider(&store).await;
        let set = |uuids: Vec<&'static str>, rp: providers::Provider, bump: bool| {
            let store = store.clone();
            async move {
                store
                    .write(move |tx| {
                        Box::pin(async move {
                            let uuids: Vec<String> = uuids.iter().map(|s| s.to_string()).collect();
                            aggregates::set_for_provider(tx, &rp, &uuids, bump).await
                        })
                    })
                    .await
            }
        };
        assert_eq!(set(vec![AGG2, AGG1], rp.clone(), true).await.unwrap(), 1);
        let got = store
            .read(move |tx| Box::pin(async move { aggregates::for_provider(tx, rp.id).await }))
            .await
            .unwrap();
        assert_eq!(got, [AGG1, AGG2]);

        // Without a bump (before 1.19) the generation stays.
        let rp = reload(&store).await;
        assert_eq!(set(vec![AGG1], rp.clone(), false).await.unwrap(), 1);
        let got = store
            .read(move |tx| Box::pin(async move { aggregates::for_provider(tx, rp.id).await }))
            .await
            .unwrap();
        assert_eq!(got, [AGG1]);

        // A stale generation writes nothing.
        let mut stale = reload(&store).await;
        stale.generation = 0;
        let r = set(vec![], stale, true).await;
        assert!(matches!(
            r,
            Err(StoreError::Conflict(Conflict::ConcurrentUpdate, _))
        ));
        let rp = reload(&store).await;
        let got = store
            .read(move |tx| Box::pin(async move { aggregates::for_provider(tx, rp.id).await }))
            .await
            .unwrap();
        assert_eq!(got, [AGG1]);
    })
    .await;
}
