//! Resource classes, traits and provider aggregates, on SQLite and PostgreSQL alike.

use accel_store::placement::{aggregates, classes, providers, traits, Refused};
use accel_store::testing::each_backend;
use accel_store::{Store, StoreError};

/// The placement refusal `r` failed with.
fn refused<T: std::fmt::Debug>(r: Result<T, StoreError>) -> Refused {
    match r {
        Err(StoreError::Refused(accel_store::Refused::Placement(r))) => r,
        other => panic!("expected a placement refusal, got {other:?}"),
    }
}

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
        assert_eq!(
            refused(dup),
            Refused::ClassExists {
                name: "CUSTOM_A".into()
            }
        );

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
        assert_eq!(
            refused(r),
            Refused::StandardClassUpdate {
                name: "VCPU".into()
            }
        );
        let r = store
            .write(|tx| Box::pin(async move { classes::delete(tx, "VCPU").await }))
            .await;
        assert_eq!(
            refused(r),
            Refused::StandardClassDelete {
                name: "VCPU".into()
            }
        );

        // Renaming onto a taken name is refused; onto a free one works.
        let r = store
            .write(|tx| {
                Box::pin(async move {
                    let a = classes::require(tx, "CUSTOM_A").await?;
                    classes::rename(tx, &a, "CUSTOM_B").await
                })
            })
            .await;
        assert_eq!(
            refused(r),
            Refused::ClassNameTaken {
                name: "CUSTOM_B".into()
            }
        );
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
        assert_eq!(
            refused(r),
            Refused::ClassInUse {
                name: "CUSTOM_B".into()
            }
        );
        store
            .write(|tx| Box::pin(async move { classes::delete(tx, "CUSTOM_C").await }))
            .await
            .unwrap();
        let r = store
            .write(|tx| Box::pin(async move { classes::delete(tx, "CUSTOM_C").await }))
            .await;
        assert_eq!(
            refused(r),
            Refused::NoClass {
                name: "CUSTOM_C".into()
            }
        );
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
        assert_eq!(refused(r), Refused::ProviderChanged);
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
        assert_eq!(
            refused(r),
            Refused::TraitInUse {
                name: "CUSTOM_A".into()
            }
        );
        let r = store
            .write(|tx| Box::pin(async move { traits::delete(tx, "HW_CPU_X86_SSE").await }))
            .await;
        assert_eq!(
            refused(r),
            Refused::StandardTrait {
                name: "HW_CPU_X86_SSE".into()
            }
        );
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
        assert_eq!(refused(r), Refused::ProviderChanged);
        let rp = reload(&store).await;
        let got = store
            .read(move |tx| Box::pin(async move { aggregates::for_provider(tx, rp.id).await }))
            .await
            .unwrap();
        assert_eq!(got, [AGG1]);
    })
    .await;
}

/// The API's operations on a provider's traits and aggregates check the provider and
/// the generation the client sent before writing, and refuse unknown traits.
#[tokio::test]
async fn provider_writes_check_the_provider_and_the_generation_first() {
    each_backend(|store| async move {
        const NONE: &str = "00000000-0000-0000-0000-000000000000";
        provider(&store).await;
        let traits = store.traits();
        assert_eq!(
            refused(traits.set_for_provider(NONE, 0, vec![]).await),
            Refused::NoProvider { uuid: NONE.into() }
        );
        assert_eq!(
            refused(traits.set_for_provider(RP, 1, vec![]).await),
            Refused::ProviderGeneration { uuid: RP.into() }
        );
        let unknown = vec![
            "CUSTOM_NOPE".into(),
            "HW_CPU_X86_SSE".into(),
            "CUSTOM_NOPE".into(),
        ];
        assert_eq!(
            refused(traits.set_for_provider(RP, 0, unknown).await),
            Refused::UnknownTraits {
                names: vec!["CUSTOM_NOPE".into()]
            }
        );
        let (g, ts) = traits
            .set_for_provider(RP, 0, vec!["HW_CPU_X86_SSE".into()])
            .await
            .unwrap();
        assert_eq!(g, 1);
        assert_eq!(
            ts.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
            ["HW_CPU_X86_SSE"]
        );
        traits.clear_for_provider(RP).await.unwrap();
        let (rp, ts) = traits.of_provider(RP).await.unwrap().unwrap();
        assert_eq!((rp.generation, ts.len()), (2, 0));
        assert!(traits.of_provider(NONE).await.unwrap().is_none());

        let aggs = store.aggregates();
        assert_eq!(
            refused(
                aggs.set_for_provider(RP, Some(0), vec![AGG1.into()], true)
                    .await
            ),
            Refused::ProviderGeneration { uuid: RP.into() }
        );
        // Before 1.19 no generation is sent, and none is bumped.
        assert_eq!(
            aggs.set_for_provider(RP, None, vec![AGG1.into()], false)
                .await
                .unwrap(),
            2
        );
        assert_eq!(
            aggs.set_for_provider(RP, Some(2), vec![AGG2.into()], true)
                .await
                .unwrap(),
            3
        );
        let (_, got) = aggs.of_provider(RP).await.unwrap().unwrap();
        assert_eq!(got, [AGG2]);

        // A class is created once; a second ensure finds it.
        let classes = store.classes();
        assert!(classes.ensure("CUSTOM_ONCE").await.unwrap());
        assert!(!classes.ensure("CUSTOM_ONCE").await.unwrap());
    })
    .await;
}
