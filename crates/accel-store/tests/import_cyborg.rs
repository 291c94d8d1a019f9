//! `accel import cyborg`'s store side on every backend: an upstream-shaped source
//! (upstream Cyborg 17.0.0's tables at alembic revision `b47c8f2d1e3a`, the columns
//! its migrations create, in SQLite's spelling) read and written in one transaction;
//! each refusal (non-empty target, unknown schema version, inconsistent rows) with its
//! message, the target left exactly as it was; and the way back into an empty
//! upstream-shaped database. The real upstream is exercised by scripts/import-cyborg.sh.

use accel_store::accelerator::{arqs, hardware, profiles, Scope};
use accel_store::import::cyborg::{self, accel_contents, CyborgData, CyborgRefused};
use accel_store::import::{Options, Source};
use accel_store::placement::providers;
use accel_store::testing::each_backend;
use accel_store::testing::upstream::{
    cyborg_source, CYBORG_BOUND, CYBORG_CLOUD, CYBORG_DDL, CYBORG_RP, CYBORG_VM,
};
use accel_store::{Row, Store};

async fn read(url: &str) -> Result<CyborgData, accel_store::StoreError> {
    let src = Source::open(url).await?;
    let out = cyborg::read_cyborg(&src).await;
    src.close().await;
    out
}

/// What a refusal must not change: the accelerator counts and every ARQ's uuid and state.
async fn picture(store: &Store) -> (Vec<(&'static str, i64)>, Vec<String>) {
    store
        .read(|tx| {
            Box::pin(async move {
                let held = accel_contents(tx).await?;
                let rows = sqlx::query(
                    "SELECT uuid, state FROM extended_accelerator_requests ORDER BY uuid",
                )
                .fetch_all(&mut *tx)
                .await?;
                let arqs = rows
                    .iter()
                    .map(|r| format!("{} {}", r.get::<String, _>(0), r.get::<String, _>(1)))
                    .collect();
                Ok((held, arqs))
            })
        })
        .await
        .unwrap()
}

#[tokio::test]
async fn a_cyborg_comes_through_beside_placement_with_its_ids_uuids_and_states() {
    let src = cyborg_source(&[CYBORG_DDL, CYBORG_CLOUD]).await;
    let data = read(&src.url).await.unwrap();
    assert_eq!(
        data.profiles[0].groups.as_deref(),
        Ok(r#"[{"resources:PGPU":"1","trait:CUSTOM_X":"required"},{"resources:PGPU":"2"}]"#),
        "groups in order, numbers as their text"
    );
    assert!(data.handles[0].in_use && !data.handles[1].in_use);
    each_backend(|store| {
        let data = data.clone();
        async move {
            // A Placement import came first: accepted.
            let u = CYBORG_RP.to_owned();
            store
                .write(move |tx| {
                    Box::pin(async move { providers::create(tx, &u, "host-a_GPU", None).await })
                })
                .await
                .unwrap();
            let done = cyborg::import_cyborg(&store, &data, Options::default())
                .await
                .unwrap()
                .unwrap();
            assert!(done.skipped.is_empty() && done.replaced.is_empty());
            assert!(done.counts.contains(&("extended_accelerator_requests", 3)));
            let (arq, profile, devices, deps, handles) = store
                .read(|tx| {
                    Box::pin(async move {
                        let arq = arqs::require(tx, &Scope::All, CYBORG_BOUND).await?;
                        let profile = profiles::list(tx, None).await?;
                        let devices = hardware::list_devices(tx, &[]).await?;
                        let deps = hardware::list_deployables(tx, &[]).await?;
                        let handles = hardware::handles_of(tx, 6).await?;
                        Ok((arq, profile, devices, deps, handles))
                    })
                })
                .await
                .unwrap();
            assert_eq!(arq.state.as_str(), "Bound");
            assert_eq!(arq.instance_uuid.as_deref(), Some(CYBORG_VM));
            assert_eq!(arq.device_rp_uuid.as_deref(), Some(CYBORG_RP));
            assert_eq!(arq.device_profile_name, "gpu");
            assert_eq!(
                arq.attach_handle.as_ref().map(|h| h.uuid.as_str()),
                Some("dddddddd-dddd-4ddd-8ddd-000000000001")
            );
            assert_eq!(arq.stamps.updated, Some(1_704_251_045));
            assert_eq!(profile[0].groups.len(), 2);
            assert_eq!(profile[0].description.as_deref(), Some("two groups"));
            assert_eq!((devices[0].id, devices[0].status.as_str()), (4, "maintaining"));
            assert_eq!(devices[0].stamps.updated, Some(1_706_843_045));
            assert_eq!(
                deps.iter()
                    .map(|d| (d.id, d.parent_id, d.device_id))
                    .collect::<Vec<_>>(),
                [(6, None, 4), (7, Some(6), 4)]
            );
            assert_eq!(handles.iter().filter(|h| h.in_use).count(), 1);
            // The way back: an empty upstream database gets the same rows.
            let back = cyborg_source(&[CYBORG_DDL]).await;
            let ours = cyborg::read_accel(&store).await.unwrap();
            let target = Source::open_for_write(&back.url).await.unwrap();
            let counts = cyborg::export_cyborg(&ours, &target)
                .await
                .unwrap()
                .unwrap();
            assert!(counts.contains(&("attach_handles", 2)));
            let again = cyborg::export_cyborg(&ours, &target).await.unwrap();
            target.close().await;
            assert_eq!(
                again.unwrap_err().to_string(),
                "the upstream database is not empty (1 device_profiles, 1 devices, 1 controlpath_ids, \
                 2 deployables, 1 attributes, 2 attach_handles, 3 extended_accelerator_requests); \
                 export into a database just created by `cyborg-dbsync upgrade`"
            );
            let mut expected = data.clone();
            expected.profiles[0].groups = Ok(
                r#"{"groups":[{"resources:PGPU":"1","trait:CUSTOM_X":"required"},{"resources:PGPU":"2"}]}"#
                    .to_owned(),
            );
            let mut exported = read(&back.url).await.unwrap();
            exported.profiles[0].groups = exported.profiles[0]
                .groups
                .clone()
                .map(|g| format!("{{\"groups\":{g}}}"));
            assert_eq!(exported, expected);
            // Nova's delete of the imported instance: its Bound ARQ goes, its handle is free.
            let (gone, free) = store
                .write(|tx| {
                    Box::pin(async move {
                        let n = arqs::delete_by_instance(tx, &Scope::All, CYBORG_VM).await?;
                        let h = hardware::handles_of(tx, 6).await?;
                        Ok((n, h.iter().all(|h| !h.in_use)))
                    })
                })
                .await
                .unwrap();
            assert_eq!((gone, free), (1, true));
            // New rows after the import get fresh ids (PostgreSQL's sequences moved).
            store
                .write(|tx| {
                    Box::pin(async move {
                        hardware::create_attribute(tx, 6, "trait0", "CUSTOM_Y").await
                    })
                })
                .await
                .unwrap();
        }
    })
    .await;
}

#[tokio::test]
async fn a_target_holding_accelerator_data_is_refused_without_force_and_replaced_with_it() {
    let src = cyborg_source(&[CYBORG_DDL, CYBORG_CLOUD]).await;
    let data = read(&src.url).await.unwrap();
    each_backend(|store| {
        let data = data.clone();
        async move {
            cyborg::import_cyborg(&store, &data, Options::default())
                .await
                .unwrap()
                .unwrap();
            let before = picture(&store).await;
            let refused = cyborg::import_cyborg(&store, &data, Options::default())
                .await
                .unwrap()
                .unwrap_err();
            assert_eq!(
                refused.to_string(),
                "the target database holds accelerator data (1 device_profiles, 1 devices, \
                 1 control_path_ids, 2 deployables, 1 attributes, 2 attach_handles, \
                 3 extended_accelerator_requests); pass --force to replace it"
            );
            assert_eq!(picture(&store).await, before, "a refusal changes nothing");
            let done = cyborg::import_cyborg(
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
            assert_eq!(done.replaced.len(), 7);
            assert_eq!(picture(&store).await, before);
        }
    })
    .await;
}

#[tokio::test]
async fn an_unknown_schema_version_is_refused_naming_it() {
    let src = cyborg_source(&[
        CYBORG_DDL,
        &["UPDATE alembic_version SET version_num = 'a35b4295a0e5'"],
    ])
    .await;
    assert_eq!(
        read(&src.url).await.unwrap_err().to_string(),
        "unsupported upstream Cyborg schema: alembic_version is a35b4295a0e5 (accel reads \
         b47c8f2d1e3a, the schema of Cyborg 17.0.0; upgrade upstream with `cyborg-dbsync \
         upgrade` first)"
    );
    let src = cyborg_source(&[&CYBORG_DDL[1..CYBORG_DDL.len() - 1]]).await;
    let e = read(&src.url).await.unwrap_err().to_string();
    assert!(e.starts_with("not an upstream Cyborg database"), "{e}");
}

#[tokio::test]
async fn inconsistent_rows_are_refused_row_by_row_or_skipped_and_listed() {
    let src = cyborg_source(&[
        CYBORG_DDL,
        CYBORG_CLOUD,
        &[
            // Bound to a deployable (and a handle) that do not exist.
            "INSERT INTO extended_accelerator_requests (id, uuid, project_id, state, device_profile_id, device_profile_group_id, hostname, device_rp_uuid, instance_uuid, attach_handle_id, deployable_id, substate) VALUES \
             (30, '66666666-6666-4666-8666-000000000030', 'p', 'Bound', 3, 0, 'h', '55555555-5555-4555-8555-000000000001', '77777777-7777-4777-8777-000000000030', 12, 40, 'Initial')",
            // An NVMe device accel does not model, and the deployable under it.
            "INSERT INTO devices (id, uuid, type, vendor, model, hostname, status) VALUES (5, '99999999-9999-4999-8999-000000000005', 'NVME', 'v', 'm', 'host-b', 'enabled')",
            "INSERT INTO deployables (id, uuid, name, num_accelerators, device_id) VALUES (8, 'bbbbbbbb-bbbb-4bbb-8bbb-000000000008', 'nvme', 1, 5)",
            // A profile whose JSON is not upstream's shape.
            "INSERT INTO device_profiles (id, uuid, name, profile_json) VALUES (4, '88888888-8888-4888-8888-000000000004', 'bad', '[1]')",
        ],
    ])
    .await;
    let data = read(&src.url).await.unwrap();
    each_backend(|store| {
        let data = data.clone();
        async move {
            let before = picture(&store).await;
            let refused = cyborg::import_cyborg(&store, &data, Options::default())
                .await
                .unwrap()
                .unwrap_err();
            let CyborgRefused::Invalid(problems) = &refused else {
                panic!("{refused:?}")
            };
            let text = refused.to_string();
            assert!(
                text.starts_with("the source holds 5 inconsistent row(s); nothing was written"),
                "{text}"
            );
            for line in [
                "accelerator request 66666666-6666-4666-8666-000000000030: bound to deployable 40, which does not exist",
                "accelerator request 66666666-6666-4666-8666-000000000030: attach handle 12 is not deployable 40's",
                "device 99999999-9999-4999-8999-000000000005: type NVME is not one accel models (GPU, FPGA, AICHIP, QAT, NIC, SSD)",
                "device profile 88888888-8888-4888-8888-000000000004: profile_json has no \"groups\" list",
                "deployable bbbbbbbb-bbbb-4bbb-8bbb-000000000008: device 5 does not exist",
            ] {
                assert!(text.contains(&format!("\n  {line}")), "{line:?} not in {text}");
            }
            assert_eq!(problems.len(), 5);
            assert_eq!(picture(&store).await, before, "a refusal changes nothing");
            let done = cyborg::import_cyborg(
                &store,
                &data,
                Options {
                    skip_invalid: true,
                    ..Options::default()
                },
            )
            .await
            .unwrap()
            .unwrap();
            assert_eq!(done.skipped.len(), 5);
            let (held, arqs) = picture(&store).await;
            assert!(held.contains(&("devices", 1)) && held.contains(&("deployables", 2)));
            assert_eq!(arqs.len(), 3, "{arqs:?}");
        }
    })
    .await;
}

/// Upstream Cyborg's tables on PostgreSQL, as its models declare them there (`SERIAL`
/// ids, `TIMESTAMP` times, a `BOOLEAN` `in_use`). Cyborg 17.0.0's own `cyborg-dbsync
/// upgrade` cannot make them on PostgreSQL (its migration 6c77bd6afea5 adds an Enum
/// without a type name, which PostgreSQL refuses), so this is the only check of the
/// import's and export's PostgreSQL paths on the upstream side.
async fn cyborg_postgres(parts: &[&[&str]]) -> String {
    use sqlx::Connection;
    let url = accel_store::testing::fresh_postgres_url().await.unwrap();
    let mut c = sqlx::AnyConnection::connect(&url).await.unwrap();
    for sql in parts.iter().flat_map(|p| p.iter()) {
        let sql = sql
            .replace("id INTEGER NOT NULL PRIMARY KEY", "id SERIAL PRIMARY KEY")
            .replace("DATETIME", "TIMESTAMP");
        sqlx::query(&sql).execute(&mut c).await.unwrap();
    }
    c.close().await.unwrap();
    url
}

#[tokio::test]
async fn a_cyborg_goes_back_into_and_comes_from_a_postgresql_upstream() {
    let src = cyborg_source(&[CYBORG_DDL, CYBORG_CLOUD]).await;
    let data = read(&src.url).await.unwrap();
    let store = accel_store::testing::sqlite().await;
    cyborg::import_cyborg(&store, &data, Options::default())
        .await
        .unwrap()
        .unwrap();
    let ours = cyborg::read_accel(&store).await.unwrap();
    // The same export into an upstream-shaped SQLite and PostgreSQL reads back the same.
    let lite = cyborg_source(&[CYBORG_DDL]).await;
    let pg = cyborg_postgres(&[CYBORG_DDL]).await;
    for url in [&lite.url, &pg] {
        let target = Source::open_for_write(url).await.unwrap();
        cyborg::export_cyborg(&ours, &target)
            .await
            .unwrap()
            .unwrap();
        target.close().await;
    }
    let from_pg = read(&pg).await.unwrap();
    assert_eq!(from_pg, read(&lite.url).await.unwrap());
    assert!(from_pg.handles[0].in_use && !from_pg.handles[1].in_use);
    // And imported from PostgreSQL, the same accel data as from MariaDB's stand-in.
    let again = accel_store::testing::sqlite().await;
    cyborg::import_cyborg(&again, &from_pg, Options::default())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(cyborg::read_accel(&again).await.unwrap(), ours);
    // Upstream's next rows there get fresh ids (the sequences moved past the exported ones).
    use sqlx::Connection;
    let mut c = sqlx::AnyConnection::connect(&pg).await.unwrap();
    let id: i32 = sqlx::query_scalar(
        "INSERT INTO attributes (uuid, deployable_id, key, value) \
         VALUES ('cccccccc-cccc-4ccc-8ccc-000000000002', 6, 'trait0', 'CUSTOM_Y') RETURNING id",
    )
    .fetch_one(&mut c)
    .await
    .unwrap();
    c.close().await.unwrap();
    assert_eq!(id, 10);
}

/// `accel import placement --force` onto a target holding accelerator data: refused
/// when the new Placement data lacks a provider a kept ARQ or deployable points at
/// (each named, nothing written); accepted, and the accelerator data said kept, when
/// the new data has every such provider. A stale provider of a `BindFailed` ARQ, which
/// the target never held, is not this import's orphan.
#[tokio::test]
async fn placement_force_keeps_accelerator_data_and_refuses_to_orphan_it() {
    use accel_store::import::{self, Refused};
    use accel_store::testing::upstream::source;
    const GPU_RP: &str = "INSERT INTO resource_providers (id, uuid, name, generation, root_provider_id, parent_provider_id) \
         VALUES (30, '55555555-5555-4555-8555-000000000001', 'host-a_GPU', 1, 30, NULL)";
    let placement = |extra: &'static [&'static str]| async move {
        let file = source(extra).await;
        let src = Source::open(&file.url).await.unwrap();
        let data = import::read_placement(&src).await.unwrap();
        src.close().await;
        data
    };
    let with_gpu = placement(&[GPU_RP]).await;
    let without_gpu = placement(&[]).await;
    let accel = read(&cyborg_source(&[CYBORG_DDL, CYBORG_CLOUD]).await.url)
        .await
        .unwrap();
    each_backend(|store| {
        let (with_gpu, without_gpu, accel) = (with_gpu.clone(), without_gpu.clone(), accel.clone());
        async move {
            import::import_placement(&store, &with_gpu, Options::default())
                .await
                .unwrap()
                .unwrap();
            cyborg::import_cyborg(&store, &accel, Options::default())
                .await
                .unwrap()
                .unwrap();
            let force = Options {
                force: true,
                ..Options::default()
            };
            let before = picture(&store).await;
            let refused = import::import_placement(&store, &without_gpu, force)
                .await
                .unwrap()
                .unwrap_err();
            assert_eq!(
                refused,
                Refused::Orphans(vec![
                    format!("ARQ {CYBORG_BOUND} (Bound, instance {CYBORG_VM}) is on provider {CYBORG_RP}"),
                    format!(
                        "deployable bbbbbbbb-bbbb-4bbb-8bbb-000000000001 of device \
                         99999999-9999-4999-8999-000000000001 (host host-a) is provider {CYBORG_RP}"
                    ),
                ])
            );
            assert!(
                refused.to_string().starts_with(
                    "--force replaces Placement data only, and 2 accelerator object(s) the target keeps"
                ),
                "{refused}"
            );
            assert_eq!(picture(&store).await, before, "a refusal changes nothing");
            let rps = |store: Store| async move {
                store
                    .read(|tx| {
                        Box::pin(async move {
                            Ok(sqlx::query_scalar::<_, String>("SELECT uuid FROM resource_providers ORDER BY uuid")
                                .fetch_all(&mut *tx)
                                .await?)
                        })
                    })
                    .await
                    .unwrap()
            };
            assert!(rps(store.clone()).await.contains(&CYBORG_RP.to_owned()));

            let done = import::import_placement(&store, &with_gpu, force)
                .await
                .unwrap()
                .unwrap();
            assert!(done.replaced.contains(&("resource_providers", 4)), "{:?}", done.replaced);
            assert_eq!(
                done.kept,
                vec![
                    ("device_profiles", 1),
                    ("devices", 1),
                    ("control_path_ids", 1),
                    ("deployables", 2),
                    ("attributes", 1),
                    ("attach_handles", 2),
                    ("extended_accelerator_requests", 3)
                ]
            );
            assert_eq!(picture(&store).await, before, "the accelerator data is kept");
            assert!(rps(store.clone()).await.contains(&CYBORG_RP.to_owned()));
        }
    })
    .await;
}
