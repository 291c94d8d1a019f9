//! `accel import placement`'s store side on every backend: an upstream-shaped source
//! database (upstream Placement 16.0.0's tables, built here on SQLite with the
//! columns and types its alembic migrations create) read and written in one
//! transaction; each refusal (non-empty target, unknown schema version, inconsistent
//! rows) with its message, and the target left exactly as it was.
//! The real upstream is exercised by scripts/import-upstream.sh.

use accel_store::import::{self, write::target_contents, Options, Refused};
use accel_store::placement::changes::{self, Delta};
use accel_store::placement::providers;
use accel_store::testing::each_backend;
use accel_store::testing::upstream::{empty_upstream, source, CN1, NUMA, SHARED, VM1, VM2};
use accel_store::{Row, Store};

async fn read(url: &str) -> Result<import::PlacementData, accel_store::StoreError> {
    let src = import::Source::open(url).await?;
    let out = import::read_placement(&src).await;
    src.close().await;
    out
}

/// What a refusal must not change: the data counts, the change-log version and every
/// provider (uuid, name, generation).
async fn picture(store: &Store) -> (Vec<(&'static str, i64)>, changes::Version, Vec<String>) {
    store
        .read(|tx| {
            Box::pin(async move {
                let held = target_contents(tx).await?;
                let v = changes::version(tx).await?;
                let rows = sqlx::query(
                    "SELECT uuid, name, generation FROM resource_providers ORDER BY uuid",
                )
                .fetch_all(&mut *tx)
                .await?;
                let rps = rows
                    .iter()
                    .map(|r| {
                        format!(
                            "{} {} {}",
                            r.get::<String, _>(0),
                            r.get::<String, _>(1),
                            r.get::<i64, _>(2)
                        )
                    })
                    .collect();
                Ok((held, v, rps))
            })
        })
        .await
        .unwrap()
}

#[tokio::test]
async fn a_cloud_comes_through_with_its_uuids_generations_and_names() {
    let src = source(&[]).await;
    let data = read(&src.url).await.unwrap();
    assert_eq!(data.providers.len(), 3);
    assert_eq!(data.inventories[3].allocation_ratio, 0.9);
    assert_eq!(data.providers[0].created, Some(1_704_164_645));
    each_backend(|store| {
        let data = data.clone();
        async move {
            let before = picture(&store).await;
            assert!(before.0.is_empty(), "a new database counts as empty");
            let done = import::import_placement(&store, &data, Options::default())
                .await
                .unwrap()
                .unwrap();
            assert!(done.skipped.is_empty() && done.replaced.is_empty());
            assert!(done.counts.contains(&("allocations", 5)));
            let (cn1, numa, shared, gold, traits, v2) = store
                .read(|tx| {
                    Box::pin(async move {
                        let cn1 = providers::get(tx, CN1).await?.unwrap();
                        let numa = providers::get(tx, NUMA).await?.unwrap();
                        let shared = providers::get(tx, SHARED).await?.unwrap();
                        let gold: i64 = sqlx::query_scalar(
                            "SELECT i.step_size FROM inventories i JOIN resource_classes c \
                             ON c.id = i.resource_class_id WHERE c.name = 'CUSTOM_GOLD'",
                        )
                        .fetch_one(&mut *tx)
                        .await?;
                        let traits: Vec<String> = sqlx::query_scalar(
                            "SELECT t.name FROM resource_provider_traits rpt JOIN traits t \
                             ON t.id = rpt.trait_id JOIN resource_providers rp \
                             ON rp.id = rpt.resource_provider_id WHERE rp.uuid = $1 ORDER BY t.name",
                        )
                        .bind(NUMA)
                        .fetch_all(&mut *tx)
                        .await?;
                        let v2: (i64, String, Option<String>) = {
                            let r = sqlx::query(
                                "SELECT c.generation, p.external_id, t.name FROM consumers c \
                                 JOIN projects p ON p.id = c.project_id \
                                 LEFT JOIN consumer_types t ON t.id = c.consumer_type_id WHERE c.uuid = $1",
                            )
                            .bind(VM1)
                            .fetch_one(&mut *tx)
                            .await?;
                            (r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)
                        };
                        Ok((cn1, numa, shared, gold, traits, v2))
                    })
                })
                .await
                .unwrap();
            assert_eq!((cn1.name.as_str(), cn1.generation), ("cn1", 7));
            assert_eq!(cn1.modified, 1_706_843_045, "updated_at carried over");
            assert_eq!(
                (numa.parent_uuid.as_deref(), numa.root_uuid.as_str(), numa.generation),
                (Some(CN1), CN1, 3)
            );
            assert_eq!(shared.generation, 2);
            assert_eq!(gold, 2);
            assert_eq!(traits, ["CUSTOM_FAST", "HW_CPU_X86_AVX2"]);
            assert_eq!(v2, (4, "proj-a".to_owned(), Some("INSTANCE".to_owned())));
            // The change log names every imported provider, so a running server's
            // candidate index reloads them.
            let after = picture(&store).await;
            let delta = store
                .read(move |tx| {
                    Box::pin(async move { changes::since(tx, &before.1, &after.1).await })
                })
                .await
                .unwrap();
            let Delta::Some { providers, names } = delta else {
                panic!("{delta:?}")
            };
            assert!(names);
            assert_eq!(providers.len(), 3);
            // New writes after the import get fresh ids (PostgreSQL's sequences moved).
            let (n, u) = ("after-import".to_owned(), uuid::Uuid::new_v4().to_string());
            store
                .write(move |tx| Box::pin(async move { providers::create(tx, &u, &n, None).await }))
                .await
                .unwrap();
        }
    })
    .await;
}

#[tokio::test]
async fn a_target_holding_data_is_refused_without_force_and_replaced_with_it() {
    let data = read(&source(&[]).await.url).await.unwrap();
    each_backend(|store| {
        let data = data.clone();
        async move {
            let u = uuid::Uuid::new_v4().to_string();
            store
                .write(move |tx| Box::pin(async move { providers::create(tx, &u, "already-here", None).await }))
                .await
                .unwrap();
            let before = picture(&store).await;
            let refused = import::import_placement(&store, &data, Options::default())
                .await
                .unwrap()
                .unwrap_err();
            assert_eq!(refused, Refused::NotEmpty(vec![("resource_providers", 1)]));
            assert_eq!(
                refused.to_string(),
                "the target database is not empty (1 resource_providers); pass --force to replace its Placement data"
            );
            assert_eq!(picture(&store).await, before, "a refusal changes nothing");
            let done = import::import_placement(
                &store,
                &data,
                Options {
                    force: true,
                    ..Options::default()
                },
            )
            .await
            .unwrap()
            .unwrap();
            assert_eq!(done.replaced, vec![("resource_providers", 1)]);
            let after = picture(&store).await;
            assert_eq!(after.2.len(), 3);
            assert!(!after.2.iter().any(|p| p.contains("already-here")));
        }
    })
    .await;
}

#[tokio::test]
async fn an_unknown_schema_version_is_refused_naming_it() {
    // Stein's schema, before consumer types.
    let src = source(&["UPDATE alembic_version SET version_num = 'b5c396305c25'"]).await;
    let e = read(&src.url).await.unwrap_err().to_string();
    assert_eq!(
        e,
        "unsupported upstream Placement schema: alembic_version is b5c396305c25 (accel reads \
         a082b8bb98d0 and 422ece571366, the schemas of Placement 2023.1 to 16.0.0; upgrade \
         upstream with `placement-manage db sync` first)"
    );
    let src = source(&["DROP TABLE alembic_version"]).await;
    let e = read(&src.url).await.unwrap_err().to_string();
    assert!(e.starts_with("not an upstream Placement database"), "{e}");
    // 2023.1's schema differs only by indexes: read as 16.0.0's.
    let src = source(&["UPDATE alembic_version SET version_num = '422ece571366'"]).await;
    assert_eq!(read(&src.url).await.unwrap().providers.len(), 3);
}

/// Each kind of inconsistent row: refused with its message naming the uuid, the target
/// unchanged; with --skip-invalid the rest imported and the row listed, each consumer
/// whole or not at all.
#[tokio::test]
async fn inconsistent_rows_are_refused_row_by_row_or_skipped_and_listed() {
    const LOOP_A: &str = "44444444-4444-4444-8444-00000000000a";
    const LOOP_B: &str = "44444444-4444-4444-8444-00000000000b";
    const GONE: &str = "22222222-2222-4222-8222-000000000003";
    let src = source(&[
        // An allocation on a provider that no longer exists, beside one on a good
        // provider: the consumer is left out whole.
        "INSERT INTO consumers (id, uuid, project_id, user_id, generation) VALUES (12, '22222222-2222-4222-8222-000000000003', 3, 2, 0)",
        "INSERT INTO allocations (resource_provider_id, consumer_id, resource_class_id, used) VALUES \
         (77, '22222222-2222-4222-8222-000000000003', 0, 1), (5, '22222222-2222-4222-8222-000000000003', 1, 256)",
        // Two providers each other's parent.
        "INSERT INTO resource_providers (id, uuid, name, generation, root_provider_id, parent_provider_id) VALUES \
         (20, '44444444-4444-4444-8444-00000000000a', 'loop-a', 0, 20, 21), (21, '44444444-4444-4444-8444-00000000000b', 'loop-b', 0, 20, 20)",
        // A consumer of a project that does not exist.
        "INSERT INTO consumers (id, uuid, project_id, user_id, generation) VALUES (13, '22222222-2222-4222-8222-000000000004', 99, 2, 0)",
        "INSERT INTO allocations (resource_provider_id, consumer_id, resource_class_id, used) VALUES (9, '22222222-2222-4222-8222-000000000004', 2, 10)",
    ])
    .await;
    let data = read(&src.url).await.unwrap();
    each_backend(|store| {
        let data = data.clone();
        async move {
            let before = picture(&store).await;
            let refused = import::import_placement(&store, &data, Options::default())
                .await
                .unwrap()
                .unwrap_err();
            let text = refused.to_string();
            for line in [
                &format!("consumer {GONE}: allocation on missing provider id 77"),
                &format!("provider {LOOP_A}: parent loop: {LOOP_A} -> {LOOP_B} -> {LOOP_A}"),
                &format!("provider {LOOP_B}: parent loop: {LOOP_B} -> {LOOP_A} -> {LOOP_B}"),
                "consumer 22222222-2222-4222-8222-000000000004: project id 99 does not exist",
            ] {
                assert!(
                    text.contains(&format!("\n  {line}")),
                    "{line:?} not in {text}"
                );
            }
            assert!(
                text.starts_with("the source holds 4 inconsistent row(s); nothing was written"),
                "{text}"
            );
            assert_eq!(picture(&store).await, before, "a refusal changes nothing");

            let skip = Options {
                skip_invalid: true,
                ..Options::default()
            };
            let done = import::import_placement(&store, &data, skip)
                .await
                .unwrap()
                .unwrap();
            assert_eq!(done.skipped.len(), 4);
            assert_eq!(
                done.left_out,
                [
                    format!("consumer {GONE}: 1 VCPU on provider id 77, 256 MEMORY_MB on {CN1}"),
                    format!(
                        "consumer 22222222-2222-4222-8222-000000000004: 10 DISK_GB on {SHARED}"
                    ),
                ]
            );
            let after = picture(&store).await;
            // The loop's two providers are out, the three good ones in.
            assert_eq!(after.2.len(), 3);
            // The consumer with one allocation on a missing provider is out with its
            // allocation on cn1 too; VM1 (four allocations) and VM2 are in whole.
            assert_eq!(
                allocations_by_consumer(&store).await,
                [(VM1.to_owned(), 4), (VM2.to_owned(), 1)]
            );
        }
    })
    .await;
}

/// `(consumer, allocations)` of the target, by consumer.
async fn allocations_by_consumer(store: &Store) -> Vec<(String, i64)> {
    store
        .read(|tx| {
            Box::pin(async move {
                let rows = sqlx::query(
                    "SELECT consumer_id, COUNT(*) FROM allocations GROUP BY consumer_id ORDER BY consumer_id",
                )
                .fetch_all(&mut *tx)
                .await?;
                rows.iter().map(|r| Ok((r.try_get(0)?, r.try_get(1)?))).collect()
            })
        })
        .await
        .unwrap()
}

/// A provider whose usage is above its capacity, as upstream's API leaves one after a
/// lowered allocation_ratio or a raised reserved: imported as it stands, every
/// consumer whole, with a warning naming the provider, class, usage and capacity.
#[tokio::test]
async fn over_capacity_providers_are_imported_with_a_warning() {
    let src = source(&[
        // The shared disk's ratio lowered: (1000 - 0) * 0.05 = 50 < 100 used.
        "UPDATE inventories SET allocation_ratio = 0.05 WHERE resource_provider_id = 9",
        // cn1's reserved memory raised: (4096 - 4000) * 1.5 = 144 < 1024 used.
        "UPDATE inventories SET reserved = 4000 WHERE resource_provider_id = 5",
    ])
    .await;
    let data = read(&src.url).await.unwrap();
    let checked = import::check(&data);
    assert!(checked.problems.is_empty(), "{:?}", checked.problems);
    assert_eq!(checked.valid, data, "nothing left out");
    each_backend(|store| {
        let data = data.clone();
        async move {
            let done = import::import_placement(&store, &data, Options::default())
                .await
                .unwrap()
                .unwrap();
            assert!(done.skipped.is_empty());
            let warnings: Vec<String> = done.warnings.iter().map(|w| w.to_string()).collect();
            assert_eq!(warnings.len(), 2, "{warnings:?}");
            assert!(warnings[0].starts_with(&format!(
                "provider {CN1}: usage of MEMORY_MB is 1024, over its capacity 144 ((total 4096 - reserved 4000) * allocation_ratio 1.5); imported as it stands"
            )), "{warnings:?}");
            assert!(warnings[1].starts_with(&format!(
                "provider {SHARED}: usage of DISK_GB is 100, over its capacity 50 ((total 1000 - reserved 0) * allocation_ratio 0.05)"
            )), "{warnings:?}");
            assert_eq!(allocations_by_consumer(&store).await, [(VM1.to_owned(), 4), (VM2.to_owned(), 1)]);
        }
    })
    .await;
}

/// A refusal writes nothing, change log included, even counting what opening the
/// target does (the standard names synced by every `Store::connect`).
#[tokio::test]
async fn a_refused_import_and_a_reopened_target_leave_the_change_log_as_it_was() {
    let data = read(&source(&[]).await.url).await.unwrap();
    each_backend(|store| {
        let data = data.clone();
        async move {
            import::import_placement(&store, &data, Options::default())
                .await
                .unwrap()
                .unwrap();
            let before = picture(&store).await;
            store.sync_standards().await.unwrap();
            let refused = import::import_placement(&store, &data, Options::default())
                .await
                .unwrap()
                .unwrap_err();
            assert!(matches!(refused, Refused::NotEmpty(_)), "{refused}");
            assert_eq!(
                picture(&store).await,
                before,
                "nothing written, change log included"
            );
        }
    })
    .await;
}

/// The way back: what an import wrote, exported into an empty upstream database,
/// reads back as the rows the import read (ids, uuids, generations, timestamps; class
/// and trait links by name), and a second export into it is refused.
#[tokio::test]
async fn an_export_gives_back_the_rows_an_import_took() {
    let original = read(&source(&[]).await.url).await.unwrap();
    each_backend(|store| {
        let original = original.clone();
        async move {
            import::import_placement(&store, &original, Options::default())
                .await
                .unwrap()
                .unwrap();
            let data = import::export::read_accel(&store).await.unwrap();
            let upstream = empty_upstream().await;
            let url = upstream.url.clone();
            let target = import::Source::open_for_write(&url).await.unwrap();
            let counts = import::export::export_placement(&data, &target)
                .await
                .unwrap()
                .unwrap();
            assert!(counts.contains(&("allocations", 5)));
            let again = import::export::export_placement(&data, &target)
                .await
                .unwrap()
                .unwrap_err();
            assert!(
                again.to_string().starts_with("the upstream database is not empty (3 resource_providers, 4 inventories, 2 consumers, 5 allocations"),
                "{again}"
            );
            target.close().await;
            let back = read(&url).await.unwrap();
            assert_eq!(back.providers, original.providers);
            assert_eq!(back.consumers, original.consumers);
            assert_eq!(back.projects.len(), 2);
            let key = |d: &import::PlacementData| {
                let class: std::collections::HashMap<i64, String> =
                    d.classes.iter().map(|c| (c.id, c.name.clone())).collect();
                let trait_: std::collections::HashMap<i64, String> =
                    d.traits.iter().map(|c| (c.id, c.name.clone())).collect();
                let mut allocs: Vec<String> = d
                    .allocations
                    .iter()
                    .map(|a| format!("{} {} {} {}", a.provider_id, a.consumer, class[&a.class_id], a.used))
                    .collect();
                allocs.sort();
                let mut invs: Vec<String> = d
                    .inventories
                    .iter()
                    .map(|i| {
                        format!(
                            "{} {} {} {} {} {} {} {}",
                            i.provider_id, class[&i.class_id], i.total, i.reserved, i.min_unit, i.max_unit, i.step_size, i.allocation_ratio
                        )
                    })
                    .collect();
                invs.sort();
                let mut rp_traits: Vec<String> = d
                    .provider_traits
                    .iter()
                    .map(|(rp, t)| format!("{rp} {}", trait_[t]))
                    .collect();
                rp_traits.sort();
                (allocs, invs, rp_traits, d.provider_aggregates.clone())
            };
            assert_eq!(key(&back), key(&original));
            let vcpu = back.classes.iter().find(|c| c.name == "VCPU").unwrap();
            assert_eq!(vcpu.id, 0, "standard classes keep upstream's ids");
        }
    })
    .await;
}
