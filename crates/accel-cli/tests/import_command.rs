//! `accel import placement` and `accel export placement` as a script runs them: the
//! counts `--dry-run` prints, the exit status and message of each refusal (unknown
//! schema, non-empty target, inconsistent rows) with the target unchanged, `--force`
//! and `--skip-invalid`; and a running accel seeing data imported under it (the
//! change log: its candidate index and usage cache were loaded before the import).
//! The upstream source is an upstream-shaped SQLite file (`accel_store::testing::upstream`);
//! scripts/import-upstream.sh runs the real upstream.

use accel_store::import::{self, write::target_contents, Options};
use accel_store::testing::upstream::{source, SHARED};
use accel_store::Store;
use std::process::{Command, Output};

fn accel(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_accel"))
        .args(args)
        .env_remove("ACCEL_DATABASE")
        .env_remove("ACCEL_CONFIG")
        .output()
        .expect("run accel")
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn target() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}", dir.path().join("accel.db").display());
    (dir, url)
}

/// The SQLite target's files (the database and its write-ahead log), as bytes.
fn dump(url: &str) -> Vec<Vec<u8>> {
    let path = url.trim_start_matches("sqlite://");
    ["", "-wal"]
        .iter()
        .map(|suffix| std::fs::read(format!("{path}{suffix}")).unwrap_or_default())
        .collect()
}

async fn held(url: &str) -> Vec<(&'static str, i64)> {
    let store = Store::connect(url).await.expect("target");
    let h = store
        .read(|tx| Box::pin(async move { target_contents(tx).await }))
        .await
        .expect("counts");
    store.close().await;
    h
}

#[tokio::test]
async fn dry_run_prints_counts_and_problems_and_writes_nothing() {
    let src = source(&[]).await;
    let o = accel(&["import", "placement", "--from", &src.url, "--dry-run"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    assert!(
        out.contains("\n  resource_providers             3\n"),
        "{out}"
    );
    assert!(
        out.contains("\n  allocations                    5\n"),
        "{out}"
    );
    assert!(out.ends_with("no problems found\n"), "{out}");
    let bad = source(&["DELETE FROM inventories WHERE resource_class_id = 2"]).await;
    let o = accel(&["import", "placement", "--from", &bad.url, "--dry-run"]);
    let (out, _) = text(&o);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        out.contains(&format!(
            "consumer 22222222-2222-4222-8222-000000000001: allocation of DISK_GB on provider {SHARED}, which has no DISK_GB inventory"
        )),
        "{out}"
    );
}

#[tokio::test]
async fn refusals_exit_1_with_their_message_and_leave_the_target_as_it_was() {
    let (_dir, db) = target();
    // An unknown schema version, named.
    let old = source(&["UPDATE alembic_version SET version_num = 'b5c396305c25'"]).await;
    let o = accel(&["import", "placement", "--from", &old.url, "--database", &db]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}{err}");
    assert!(
        err.contains("unsupported upstream Placement schema: alembic_version is b5c396305c25"),
        "{err}"
    );

    // A good import, then the same into the now non-empty target.
    let src = source(&[]).await;
    let url = src.url.as_str();
    let o = accel(&["import", "placement", "--from", url, "--database", &db]);
    assert!(o.status.success(), "{:?}", text(&o));
    let before = held(&db).await;
    assert!(before.contains(&("resource_providers", 3)));
    let dumped = dump(&db);
    let o = accel(&["import", "placement", "--from", url, "--database", &db]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        err.contains("refused: the target database is not empty (3 resource_providers, 4 inventories, 2 consumers, 5 allocations, 1 placement_aggregates, 2 projects, 1 users, 1 consumer_types, 1 custom resource_classes, 1 custom traits); pass --force"),
        "{err}"
    );
    // Nothing written, change log included: the file is byte for byte as it was.
    assert!(
        dump(&db) == dumped,
        "a refused import changed the target's file"
    );
    // Nor does a verify (this one finds no upstream) or a dry run.
    let o = accel(&["import", "verify", "http://127.0.0.1:9", "--database", &db]);
    assert_ne!(o.status.code(), Some(0), "{:?}", text(&o));
    let o = accel(&[
        "import",
        "placement",
        "--from",
        url,
        "--database",
        &db,
        "--dry-run",
    ]);
    assert!(o.status.success(), "{:?}", text(&o));
    assert!(
        dump(&db) == dumped,
        "a verify or a dry run changed the target's file"
    );
    assert_eq!(held(&db).await, before);

    // Inconsistent rows: refused, named; then skipped and listed.
    let bad = source(&[
        "INSERT INTO consumers (id, uuid, project_id, user_id, generation) VALUES (12, '22222222-2222-4222-8222-000000000003', 3, 2, 0)",
        "INSERT INTO allocations (resource_provider_id, consumer_id, resource_class_id, used) VALUES (77, '22222222-2222-4222-8222-000000000003', 0, 1)",
    ])
    .await;
    let o = accel(&[
        "import",
        "placement",
        "--from",
        &bad.url,
        "--database",
        &db,
        "--force",
    ]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        err.contains("\n  consumer 22222222-2222-4222-8222-000000000003: allocation on missing provider id 77"),
        "{err}"
    );
    assert_eq!(held(&db).await, before);
    let o = accel(&[
        "import",
        "placement",
        "--from",
        &bad.url,
        "--database",
        &db,
        "--force",
        "--skip-invalid",
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    assert!(
        out.contains("replaced (--force): 3 resource_providers, 4 inventories, 2 consumers"),
        "{out}"
    );
    assert!(!out.contains("kept"), "no accelerator data to keep: {out}");
    assert!(
        out.contains("skipped (--skip-invalid), 1 problem(s):\n  consumer 22222222-2222-4222-8222-000000000003: allocation on missing provider id 77"),
        "{out}"
    );
}

#[tokio::test]
async fn a_running_accel_sees_what_is_imported_under_it() {
    let store = Store::connect("sqlite::memory:").await.expect("store");
    let app = accel_server::app::App::builder(store.clone())
        .workers(None)
        .build()
        .await
        .expect("app");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(app.serve(listener, None, async move {
        let _ = stopped.await;
    }));
    let client = reqwest::Client::new();
    let get = |path: &'static str| {
        let (client, base) = (client.clone(), base.clone());
        async move {
            client
                .get(format!("{base}{path}"))
                .header("x-auth-token", "admin")
                .header("openstack-api-version", "placement 1.39")
                .send()
                .await
                .expect("get")
                .json::<serde_json::Value>()
                .await
                .expect("json")
        }
    };
    // Load the candidate index and the usage cache on the empty database.
    let c = get("/allocation_candidates?resources=VCPU:1").await;
    assert_eq!(c["allocation_requests"].as_array().map(Vec::len), Some(0));
    let u = get("/usages?project_id=proj-a").await;
    assert_eq!(u["usages"], serde_json::json!({}));

    let data = {
        let file = source(&[]).await;
        let src = import::Source::open(&file.url).await.expect("source");
        let d = import::read_placement(&src).await.expect("read");
        src.close().await;
        d
    };
    import::import_placement(&store, &data, Options::default())
        .await
        .expect("import")
        .expect("not refused");

    let c = get("/allocation_candidates?resources=VCPU:1").await;
    assert_eq!(
        c["allocation_requests"].as_array().map(Vec::len),
        Some(1),
        "{c}"
    );
    let u = get("/usages?project_id=proj-a").await;
    assert_eq!(
        u["usages"],
        serde_json::json!({"INSTANCE": {"VCPU": 2, "CUSTOM_GOLD": 2, "MEMORY_MB": 1024, "DISK_GB": 100, "consumer_count": 1}}),
        "{u}"
    );
    let _ = stop.send(());
    server.await.expect("server task").expect("server");
}

/// `accel import cyborg`, `accel export cyborg`: the dry run's counts, each refusal's
/// exit status and message (unknown schema, inconsistent rows, a target holding
/// accelerator data), an import into a target that holds Placement data, and the way
/// back into an empty upstream-shaped database.
#[tokio::test]
async fn cyborg_import_and_export_as_a_script_runs_them() {
    use accel_store::testing::upstream::{cyborg_source, CYBORG_CLOUD, CYBORG_DDL};
    let src = cyborg_source(&[CYBORG_DDL, CYBORG_CLOUD]).await;
    let o = accel(&["import", "cyborg", "--from", &src.url, "--dry-run"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    assert!(
        out.contains("\n  extended_accelerator_requests  3\n"),
        "{out}"
    );
    assert!(out.ends_with("no problems found\n"), "{out}");

    let old = cyborg_source(&[
        CYBORG_DDL,
        &["UPDATE alembic_version SET version_num = '9625668549b5'"],
    ])
    .await;
    let (_dir, db) = target();
    let o = accel(&["import", "cyborg", "--from", &old.url, "--database", &db]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("unsupported upstream Cyborg schema: alembic_version is 9625668549b5"),
        "{err}"
    );

    let bad = cyborg_source(&[
        CYBORG_DDL,
        CYBORG_CLOUD,
        &["UPDATE extended_accelerator_requests SET deployable_id = 40 WHERE id = 21"],
    ])
    .await;
    let o = accel(&["import", "cyborg", "--from", &bad.url, "--database", &db]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(
            "\n  accelerator request 66666666-6666-4666-8666-000000000002: bound to deployable 40, which does not exist"
        ),
        "{err}"
    );

    // Placement first (a provider), then Cyborg: accepted; a second Cyborg import refused.
    let placement = source(&[]).await;
    let o = accel(&[
        "import",
        "placement",
        "--from",
        &placement.url,
        "--database",
        &db,
    ]);
    assert!(o.status.success(), "{:?}", text(&o));
    let o = accel(&["import", "cyborg", "--from", &src.url, "--database", &db]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    assert!(
        out.contains("\n  attach_handles                 2\n"),
        "{out}"
    );
    let o = accel(&["import", "cyborg", "--from", &src.url, "--database", &db]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(
            "accel import cyborg: refused: the target database holds accelerator data (1 device_profiles"
        ),
        "{err}"
    );

    // Placement again with --force: the accelerator data is kept, and said so.
    let args = [
        "import",
        "placement",
        "--from",
        &placement.url,
        "--database",
        &db,
        "--force",
    ];
    let o = accel(&args);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    assert!(
        out.contains("\nkept (accelerator data; none of it loses its provider): 1 device_profiles, 1 devices, 1 control_path_ids, 2 deployables, 1 attributes, 2 attach_handles, 3 extended_accelerator_requests\n"),
        "{out}"
    );

    let back = cyborg_source(&[CYBORG_DDL]).await;
    let before = dump(&back.url);
    let o = accel(&[
        "export",
        "cyborg",
        "--database",
        &db,
        "--to",
        &back.url,
        "--dry-run",
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    assert!(
        out.contains("\n  deployables                    2\n"),
        "{out}"
    );
    assert!(
        dump(&back.url) == before,
        "a dry run wrote into the upstream database"
    );
    let o = accel(&["export", "cyborg", "--database", &db, "--to", &back.url]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    assert!(
        out.contains("\n  deployables                    2\n"),
        "{out}"
    );
    let o = accel(&["export", "cyborg", "--database", &db, "--to", &back.url]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("the upstream database is not empty"), "{err}");
}

/// An over-capacity provider (upstream's API leaves one after a lowered ratio):
/// the dry run and the import print the warning and import every consumer whole.
#[tokio::test]
async fn over_capacity_is_a_warning_in_the_dry_run_and_the_import() {
    let src =
        source(&["UPDATE inventories SET allocation_ratio = 0.05 WHERE resource_provider_id = 9"])
            .await;
    let warning = format!(
        "warning: provider {SHARED}: usage of DISK_GB is 100, over its capacity 50 ((total 1000 - reserved 0) * allocation_ratio 0.05); imported as it stands"
    );
    let o = accel(&["import", "placement", "--from", &src.url, "--dry-run"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    assert!(
        out.contains(&warning) && out.ends_with("no problems found\n"),
        "{out}"
    );
    let (_dir, db) = target();
    let o = accel(&["import", "placement", "--from", &src.url, "--database", &db]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    assert!(out.contains(&warning), "{out}");
    assert!(
        out.contains("\n  allocations                    5\n"),
        "{out}"
    );
}

/// `accel export placement --dry-run`: the counts that would go in, the upstream
/// database only read (its file unchanged); refused, exit 1, when it holds data.
#[tokio::test]
async fn export_dry_run_checks_the_target_and_writes_nothing() {
    let src = source(&[]).await;
    let (_dir, db) = target();
    let o = accel(&["import", "placement", "--from", &src.url, "--database", &db]);
    assert!(o.status.success(), "{:?}", text(&o));
    let empty = accel_store::testing::upstream::empty_upstream().await;
    let before = dump(&empty.url);
    let args = [
        "export",
        "placement",
        "--database",
        &db,
        "--to",
        &empty.url,
        "--dry-run",
    ];
    let o = accel(&args);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    assert!(
        out.contains("is ready and would receive:")
            && out.contains("\n  allocations                    5\n"),
        "{out}"
    );
    assert!(
        dump(&empty.url) == before,
        "a dry run wrote into the upstream database"
    );
    let o = accel(&[
        "export",
        "placement",
        "--database",
        &db,
        "--to",
        &src.url,
        "--dry-run",
    ]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("accel export placement: refused: the upstream database is not empty (3 resource_providers"), "{err}");
}
