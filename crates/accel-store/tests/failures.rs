//! Failure behaviour of the store, on SQLite and PostgreSQL: leases of a dead server
//! taken over once its heartbeat expires (and not before), and the database faults
//! the server turns into 503s or start-up retries; pooled connections the database
//! server dropped, replaced once they sat idle; on MariaDB (`ACCEL_TEST_MYSQL`), a
//! write the server chose as a deadlock's victim rerun from scratch.

use accel_core::accelerator::DeviceProfile;
use accel_store::accelerator::binds::{self, Outcome};
use accel_store::accelerator::{arqs, heartbeats, profiles, report, Scope};
use accel_store::testing::each_backend;
use accel_store::{db_cause, Store, StoreError};
use std::time::{Duration, Instant};

/// A profile, one ARQ of it in BindStarted, and the id of its bind job.
async fn pending_job(store: &Store, name: &str) -> i64 {
    let name = name.to_owned();
    store
        .write(move |tx| {
            Box::pin(async move {
                let groups = vec![[("resources:FPGA".to_owned(), "1".to_owned())]
                    .into_iter()
                    .collect()];
                let p = DeviceProfile::parse(&name, None, None, groups).unwrap();
                let p = profiles::create(tx, &p).await?;
                let a = arqs::create_for_profile(tx, &p, None, Some("p1")).await?;
                let binding = arqs::Binding {
                    hostname: "host1".into(),
                    device_rp_uuid: report::provider_uuid("host1_FakeDevice"),
                    instance_uuid: uuid::Uuid::new_v4().to_string(),
                    project_id: None,
                };
                let scope = Scope::Project("p1".into());
                arqs::start_bind(tx, &scope, &a[0].uuid, &binding, 5000).await?;
                Ok(binds::job_of(tx, &a[0].uuid).await?.unwrap().id)
            })
        })
        .await
        .unwrap()
}

async fn due_ids(store: &Store, now: i64) -> Vec<i64> {
    binds::due_now(store, now, 64)
        .await
        .unwrap()
        .into_iter()
        .map(|j| j.id)
        .collect()
}

#[tokio::test]
async fn a_dead_holders_leases_are_taken_over_a_live_ones_are_not() {
    each_backend(|store| async move {
        let job = pending_job(&store, "dp1").await;
        // "a" claims with a 30 s lease and beats a heartbeat that lasts until 1003.
        heartbeats::beat(&store, "a", 1000, 3).await.unwrap();
        let got = binds::claim_all(&store, vec![job], "a", 1000, 1030)
            .await
            .unwrap();
        assert_eq!(got, [job]);

        // While "a" is alive, its lease holds.
        assert!(due_ids(&store, 1002).await.is_empty());
        assert_eq!(heartbeats::orphaned_work(&store, 1002).await.unwrap(), 0);
        let got = binds::claim_all(&store, vec![job], "b", 1002, 1032)
            .await
            .unwrap();
        assert!(got.is_empty(), "a live holder's lease was taken");

        // "a" stops beating: from 1004 on its lease is free although it runs to 1030.
        assert_eq!(due_ids(&store, 1004).await, [job]);
        assert_eq!(heartbeats::orphaned_work(&store, 1004).await.unwrap(), 1);
        let got = binds::claim_all(&store, vec![job], "b", 1004, 1034)
            .await
            .unwrap();
        assert_eq!(got, [job]);
        assert_eq!(heartbeats::orphaned_work(&store, 1004).await.unwrap(), 0);

        // "a" comes back (a stalled process, not a dead one): it changes nothing.
        heartbeats::beat(&store, "a", 1005, 3).await.unwrap();
        let done = binds::perform_all(&store, "a", vec![job], 1005)
            .await
            .unwrap();
        assert_eq!(done[0].outcome, Outcome::Skipped);
        let done = binds::perform_all(&store, "b", vec![job], 1005)
            .await
            .unwrap();
        assert_ne!(done[0].outcome, Outcome::Skipped, "the taker performs it");
        let left = store
            .read(|tx| Box::pin(async move { binds::job_of(tx, &done[0].arq_uuid).await }))
            .await
            .unwrap()
            .unwrap();
        assert!(matches!(left.state.as_str(), "done" | "failed"), "{left:?}");
        assert_eq!(left.attempts, 2, "taken twice: by a, then by b");

        // A holder that stops cleanly frees its leases at once.
        let job2 = pending_job(&store, "dp2").await;
        heartbeats::beat(&store, "c", 2000, 3).await.unwrap();
        let got = binds::claim_all(&store, vec![job2], "c", 2000, 2030)
            .await
            .unwrap();
        assert_eq!(got, [job2]);
        assert!(due_ids(&store, 2001).await.is_empty());
        heartbeats::retire(&store, "c", 2001).await.unwrap();
        assert_eq!(due_ids(&store, 2001).await, [job2]);

        // A holder without a heartbeat row (never beat) keeps the plain lease rule.
        let job3 = pending_job(&store, "dp3").await;
        let got = binds::claim_all(&store, vec![job3], "d", 3000, 3030)
            .await
            .unwrap();
        assert_eq!(got, [job3]);
        assert!(!due_ids(&store, 3029).await.contains(&job3));
        assert!(due_ids(&store, 3031).await.contains(&job3));

        // Rows of long-dead holders go.
        let rows = heartbeats::list(&store).await.unwrap();
        assert_eq!(rows.len(), 2, "a and c beat, d never did: {rows:?}");
        let gone = heartbeats::forget_dead(&store, 2001 + 100, 100)
            .await
            .unwrap();
        assert_eq!(gone, 2, "a (alive until 1008) and c (retired) go");
    })
    .await;
}

#[tokio::test]
async fn a_closed_or_unreachable_database_is_unavailable_not_a_failure() {
    each_backend(|store| async move {
        store.close().await;
        let e = store
            .read(|tx| {
                Box::pin(async move {
                    Ok(sqlx::query("SELECT 1")
                        .execute(&mut *tx)
                        .await?
                        .rows_affected())
                })
            })
            .await
            .unwrap_err();
        assert!(e.is_unavailable(), "{e:?}");
    })
    .await;
    // Data errors are not.
    assert!(!StoreError::NotFound("x".into()).is_unavailable());
}

#[tokio::test]
async fn start_up_retries_for_the_time_given_and_names_the_cause() {
    // A port nothing listens on: refused at once, retried, given up after ~1 s.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let t = Instant::now();
    let e = Store::connect_retrying(
        &format!("postgres://postgres@127.0.0.1:{port}/accel"),
        Duration::from_secs(1),
    )
    .await
    .unwrap_err();
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(4),
        "{took:?}"
    );
    let StoreError::Db(db) = &e else {
        panic!("{e:?}")
    };
    assert!(db_cause(db).contains("refused"), "{}", db_cause(db));

    // A database that does not exist: the server's own words.
    let admin = accel_store::testing::pg_admin_url();
    let base = admin.rsplit_once('/').unwrap().0;
    let e = Store::connect_retrying(
        &format!("{base}/accel_no_such_database"),
        Duration::from_millis(300),
    )
    .await
    .unwrap_err();
    let StoreError::Db(db) = &e else {
        panic!("{e:?}")
    };
    assert!(db_cause(db).contains("does not exist"), "{}", db_cause(db));

    // A bad URL is not waited for.
    let t = Instant::now();
    let e = Store::connect_retrying("mysql2://x", Duration::from_secs(5))
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::Config(_)), "{e:?}");
    assert!(t.elapsed() < Duration::from_secs(1));

    // And a reachable one connects at the first attempt.
    let url = accel_store::testing::fresh_postgres_url().await.unwrap();
    Store::connect_retrying(&url, Duration::from_secs(5))
        .await
        .unwrap();
}

/// Two transactions lock two rows in opposite orders on MariaDB: InnoDB rolls back the
/// lighter one (the store's, which changed one row) with 1213, and
/// `Store::write_rerunning` runs it again once the other has committed.
#[tokio::test]
async fn a_deadlock_victim_is_rerun_on_mariadb() {
    use sqlx::{Connection, Executor};
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;
    let Some(url) = accel_store::testing::fresh_mysql_url().await.unwrap() else {
        eprintln!("ACCEL_TEST_MYSQL unset: the MariaDB deadlock test did not run");
        return;
    };
    let store = Store::connect(&url).await.unwrap();
    let mut other = sqlx::MySqlConnection::connect(&url).await.unwrap();
    let mut watch = sqlx::MySqlConnection::connect(&url).await.unwrap();
    other
        .execute("CREATE TABLE deadlock_probe (id INT PRIMARY KEY, v INT NOT NULL) ENGINE=InnoDB")
        .await
        .unwrap();
    other
        .execute(
            "INSERT INTO deadlock_probe (id, v) WITH RECURSIVE n(i) AS \
             (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200) SELECT i, 0 FROM n",
        )
        .await
        .unwrap();
    let retries_before = store.counters().write_retries;

    // The other transaction holds rows 2..200 (heavy: InnoDB will not choose it).
    other.execute("BEGIN").await.unwrap();
    other
        .execute("UPDATE deadlock_probe SET v = v + 10 WHERE id >= 2")
        .await
        .unwrap();
    // The store's write takes row 1, then waits for row 2.
    let runs = Arc::new(AtomicU32::new(0));
    let write = tokio::spawn({
        let (store, runs) = (store.clone(), runs.clone());
        async move {
            store
                .write_rerunning(|| {
                    let runs = runs.clone();
                    move |tx| {
                        Box::pin(async move {
                            runs.fetch_add(1, Ordering::SeqCst);
                            sqlx::query("UPDATE deadlock_probe SET v = v + 1 WHERE id = $1")
                                .bind(1i32)
                                .execute(&mut *tx)
                                .await?;
                            sqlx::query("UPDATE deadlock_probe SET v = v + 1 WHERE id = $1")
                                .bind(2i32)
                                .execute(&mut *tx)
                                .await?;
                            Ok(())
                        })
                    }
                })
                .await
        }
    });
    // Row 1 locked by someone else means the store's write has taken it (and then asks
    // for row 2, held above). MariaDB 10.11 reports that wait neither in INNODB_TRX's
    // trx_state nor in INNODB_LOCK_WAITS, so probe the row itself with NOWAIT.
    let waiting = Instant::now();
    loop {
        watch.execute("BEGIN").await.unwrap();
        let probe = watch
            .execute("SELECT v FROM deadlock_probe WHERE id = 1 FOR UPDATE NOWAIT")
            .await;
        watch.execute("ROLLBACK").await.unwrap();
        if probe.is_err() {
            break;
        }
        assert!(
            waiting.elapsed() < Duration::from_secs(20),
            "the store's write never took row 1"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Closing the cycle: the store's transaction is the victim, this one goes on.
    other
        .execute("UPDATE deadlock_probe SET v = v + 100 WHERE id = 1")
        .await
        .unwrap();
    other.execute("COMMIT").await.unwrap();

    tokio::time::timeout(Duration::from_secs(20), write)
        .await
        .expect("the rerun finished")
        .unwrap()
        .unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 2, "one deadlock, one rerun");
    assert_eq!(store.counters().write_retries, retries_before + 1);
    let rows: Vec<(i32, i32)> =
        sqlx::query_as("SELECT id, v FROM deadlock_probe WHERE id <= 3 ORDER BY id")
            .fetch_all(&mut watch)
            .await
            .unwrap();
    // Both transactions' changes, the store's once: nothing of the victim's run stayed.
    assert_eq!(rows, [(1, 101), (2, 11), (3, 10)]);
}

/// Every other connection of this store's database closed by the server, as a restart
/// or a failover does; how many.
async fn drop_other_connections(store: &Store) -> usize {
    store
        .write(|tx| {
            Box::pin(async move {
                if tx.backend() == accel_store::Backend::Postgres {
                    let n: i64 = sqlx::query_scalar(
                        "SELECT CAST(COUNT(*) AS BIGINT) FROM (SELECT pg_terminate_backend(pid) \
                         FROM pg_stat_activity WHERE datname = current_database() \
                         AND pid <> pg_backend_pid()) t",
                    )
                    .fetch_one(&mut *tx)
                    .await?;
                    return Ok(n as usize);
                }
                let ids: Vec<i64> = sqlx::query_scalar(
                    "SELECT CAST(ID AS SIGNED) FROM information_schema.PROCESSLIST \
                     WHERE DB = DATABASE() AND ID <> CONNECTION_ID()",
                )
                .fetch_all(&mut *tx)
                .await?;
                for id in &ids {
                    sqlx::query(&format!("KILL CONNECTION {id}"))
                        .execute(&mut *tx)
                        .await?;
                }
                Ok(ids.len())
            })
        })
        .await
        .unwrap()
}

async fn count_profiles(store: &Store) -> Result<i64, StoreError> {
    store
        .read(|tx| {
            Box::pin(async move {
                Ok(sqlx::query_scalar::<_, i64>(
                    "SELECT CAST(COUNT(*) AS BIGINT) FROM device_profiles",
                )
                .fetch_one(&mut *tx)
                .await?)
            })
        })
        .await
}

#[tokio::test]
async fn connections_the_server_dropped_are_replaced_once_they_sat_idle() {
    each_backend(|store| async move {
        if store.backend() == accel_store::Backend::Sqlite {
            return;
        }
        // Several pooled connections, idle now.
        let reads: Vec<_> = (0..4).map(|_| count_profiles(&store)).collect();
        for r in futures::future::join_all(reads).await {
            r.unwrap();
        }
        assert!(drop_other_connections(&store).await >= 1);
        // A connection idle for PING_WHEN_IDLE is pinged before use: the dead ones are
        // discarded and the read succeeds at its first try.
        tokio::time::sleep(accel_store::PING_WHEN_IDLE + Duration::from_millis(200)).await;
        for _ in 0..4 {
            count_profiles(&store).await.unwrap();
        }

        // Within the window a dead connection is handed out unpinged: its transaction
        // fails as unavailable (a 503), the connection is closed, and the next one works.
        let reads: Vec<_> = (0..4).map(|_| count_profiles(&store)).collect();
        for r in futures::future::join_all(reads).await {
            r.unwrap();
        }
        assert!(drop_other_connections(&store).await >= 1);
        let mut failures = 0;
        let ok = loop {
            match count_profiles(&store).await {
                Ok(_) => break true,
                Err(e) => {
                    assert!(e.is_unavailable(), "{e}");
                    failures += 1;
                    if failures > 16 {
                        break false;
                    }
                }
            }
        };
        assert!(ok, "every pooled connection failed: {failures}");
    })
    .await;
}
