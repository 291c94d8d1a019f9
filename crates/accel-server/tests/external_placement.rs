//! Device providers pushed to an external Placement, on both backends. The "external
//! Placement" is a second accel server's Placement API (upstream's API), reached with
//! a static token; only it has the compute node. The agent reports to the first
//! server, and tests run the pusher's `step` with chosen times.

mod common;

use accel_agent::config::Settings;
use accel_agent::testing::{self, FakeSysfs};
use accel_agent::Agent;
use accel_server::external::{ExternalPlacement, PlacementConfig, Pusher};
use accel_store::accelerator::pushes::Push;
use common::accel::{
    allocate_gpu, compute_node, delete_allocations, get, placement, tree, Server, TempDb,
};
use common::BACKENDS;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::sync::oneshot;

fn agent(srv: &Server, node: &str, root: &std::path::Path) -> Agent {
    Agent::new(Settings::new(&srv.accel, node, root)).unwrap()
}

fn external(url: &str) -> Arc<ExternalPlacement> {
    ExternalPlacement::new(PlacementConfig {
        endpoint_override: Some(url.to_owned()),
        token: Some("admin".into()),
        timeout: Some(5),
        ..Default::default()
    })
    .unwrap()
}

async fn remote_compute_node(remote: &Server, name: &str) -> String {
    compute_node(remote, name).await["uuid"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn push_row(srv: &Server, host: &str) -> Push {
    srv.store
        .pushes()
        .get(host)
        .await
        .unwrap()
        .expect("the host was marked")
}

fn uuid3(name: &str) -> String {
    accel_store::accelerator::report::provider_uuid(name)
}

/// A proxy in front of a Placement that answers 503 while `up` is false.
struct Gate {
    url: String,
    up: Arc<AtomicBool>,
    _stop: oneshot::Sender<()>,
}

async fn gate(target: &str) -> Gate {
    let up = Arc::new(AtomicBool::new(true));
    let (u, target) = (up.clone(), target.to_owned());
    let client = reqwest::Client::new();
    let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
        let (u, target, client) = (u.clone(), target.clone(), client.clone());
        async move {
            if !u.load(Ordering::SeqCst) {
                return (axum::http::StatusCode::SERVICE_UNAVAILABLE, String::new());
            }
            let (parts, body) = req.into_parts();
            let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
            let mut r = client.request(
                parts.method.clone(),
                format!("{target}{}", parts.uri.path_and_query().unwrap()),
            );
            for h in ["x-auth-token", "openstack-api-version", "content-type"] {
                if let Some(v) = parts.headers.get(h) {
                    r = r.header(h, v.to_str().unwrap());
                }
            }
            let resp = r.body(body).send().await.unwrap();
            let status = axum::http::StatusCode::from_u16(resp.status().as_u16()).unwrap();
            (status, resp.text().await.unwrap())
        }
    });
    let (addr, stop) = common::serve_fake(app).await;
    Gate {
        url: format!("http://{addr}"),
        up,
        _stop: stop,
    }
}

#[tokio::test]
async fn the_remote_gets_the_same_tree_and_loses_removed_devices() {
    for backend in BACKENDS {
        let (db, remote_db) = (TempDb::fresh(backend).await, TempDb::fresh(backend).await);
        let remote = Server::start(&remote_db.url, None, None).await;
        let ext = external(&remote.placement);
        let srv = Server::start_with(&db.url, None, None, Some(ext.clone())).await;
        let cn = remote_compute_node(&remote, "cn1").await;

        // The agent's start-up check finds the node in the external Placement only.
        let dir = tempfile::tempdir().unwrap();
        let fs = FakeSysfs::new(dir.path());
        let gpus = testing::eight_gpus(&fs);
        let pac = testing::pac_dfl(&fs, 0xaf, 2);
        let a = agent(&srv, "cn1", dir.path());
        assert_eq!(a.check_node().await.unwrap().compute_node_uuid, cn);
        let err = agent(&srv, "cn9", dir.path())
            .check_node()
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("external Placement"), "{err}");

        let o = a.step().await.unwrap();
        assert_eq!((o.added, o.unchanged), (9, false));
        let local = get(&srv, &format!("/resource_providers/{cn}")).await;
        assert_eq!(local["name"], "cn1", "a placeholder with the remote uuid");
        assert!(push_row(&srv, "cn1").await.pending());

        let pusher = Pusher::new(srv.store.clone(), ext.clone(), "pusher-1");
        let now = accel_store::now();
        let r = pusher.step(now).await.unwrap();
        assert_eq!(
            (r.due, r.pushed, r.retrying),
            (1, 1, 0),
            "{:?}",
            push_row(&srv, "cn1").await
        );
        let t = tree(&remote, &cn).await;
        // compute node + 8 GPUs + the PAC card and its region.
        assert_eq!(t.len(), 11, "{:#?}", t.keys());
        assert_eq!(
            t,
            tree(&srv, &cn).await,
            "same uuids, names, parents, traits, inventories"
        );
        let region = &t[&format!("cn1_{pac}_region0")];
        assert_eq!(region.0, uuid3(&format!("cn1_{pac}_region0")));
        assert_eq!(region.1.as_deref(), Some(format!("cn1_{pac}").as_str()));
        assert!(
            t["cn1"].2.is_empty() && t["cn1"].3.is_empty(),
            "never modified"
        );
        let row = push_row(&srv, "cn1").await;
        assert!(!row.pending() && row.last_error.is_none(), "{row:?}");
        assert_eq!(pusher.step(now).await.unwrap().due, 0);

        // Disable: reserved in both.
        let (_, devices) = srv.admin_get("/v2/devices").await;
        let dev = devices["devices"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["type"] == "GPU")
            .unwrap_or_else(|| panic!("{devices}"))["uuid"]
            .as_str()
            .unwrap()
            .to_owned();
        let resp = reqwest::Client::new()
            .post(format!("{}/v2/devices/{dev}/disable", srv.accel))
            .header("x-auth-token", "admin")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(pusher.step(accel_store::now()).await.unwrap().pushed, 1);
        let t = tree(&remote, &cn).await;
        let reserved: Vec<&String> = t
            .iter()
            .filter(|(_, p)| p.2.get("CUSTOM_ACCELERATOR_GPU") == Some(&(1, 1)))
            .map(|(n, _)| n)
            .collect();
        assert_eq!(reserved.len(), 1, "{reserved:?}");
        assert_eq!(t, tree(&srv, &cn).await);

        // A device goes: deleted remotely too; the card and its region go children first.
        fs.remove(&gpus[1]);
        fs.remove(&pac);
        let o = a.step().await.unwrap();
        assert_eq!(o.removed, 2);
        assert_eq!(pusher.step(accel_store::now()).await.unwrap().pushed, 1);
        let t = tree(&remote, &cn).await;
        assert_eq!(t.len(), 8, "{:#?}", t.keys());
        assert_eq!(t, tree(&srv, &cn).await);
        srv.stop().await;
        remote.stop().await;
    }
}

#[tokio::test]
async fn a_device_allocated_remotely_stays_reserved_until_free() {
    for backend in BACKENDS {
        let (db, remote_db) = (TempDb::fresh(backend).await, TempDb::fresh(backend).await);
        let remote = Server::start(&remote_db.url, None, None).await;
        let ext = external(&remote.placement);
        let srv = Server::start_with(&db.url, None, None, Some(ext.clone())).await;
        let cn = remote_compute_node(&remote, "cn2").await;
        let dir = tempfile::tempdir().unwrap();
        let fs = FakeSysfs::new(dir.path());
        let gpus = testing::eight_gpus(&fs);
        let a = agent(&srv, "cn2", dir.path());
        a.step().await.unwrap();
        let pusher = Pusher::new(srv.store.clone(), ext.clone(), "pusher-1");
        let now = accel_store::now();
        assert_eq!(pusher.step(now).await.unwrap().pushed, 1);

        // Nova allocates in its Placement; accel's own has no allocation.
        let busy = format!("cn2_{}", gpus[0]);
        let consumer = "7c9e6679-7425-40de-944b-e07fc1f90ae7";
        allocate_gpu(&remote, consumer, &uuid3(&busy)).await;

        fs.remove(&gpus[0]);
        assert_eq!(a.step().await.unwrap().removed, 1);
        // Times from here on are relative to the mark the report made.
        let now = accel_store::now();
        let r = pusher.step(now).await.unwrap();
        assert_eq!((r.pushed, r.retrying), (0, 1));
        let t = tree(&remote, &cn).await;
        assert_eq!(t.len(), 9);
        assert_eq!(
            t[&busy].2,
            BTreeMap::from([("CUSTOM_ACCELERATOR_GPU".into(), (1, 1))]),
            "kept, reserved = total"
        );
        let row = push_row(&srv, "cn2").await;
        assert!(row.pending(), "{row:?}");
        assert!(
            row.last_error.as_deref().unwrap_or("").contains(&busy),
            "{row:?}"
        );
        assert_eq!(pusher.step(now).await.unwrap().due, 0, "backing off");
        // Still allocated at the next attempt: still there.
        assert_eq!(pusher.step(now + 5).await.unwrap().retrying, 1);
        assert!(tree(&remote, &cn).await.contains_key(&busy));

        delete_allocations(&remote, consumer).await;
        let r = pusher.step(now + 120).await.unwrap();
        assert_eq!((r.pushed, r.retrying), (1, 0));
        let t = tree(&remote, &cn).await;
        assert_eq!(t.len(), 8);
        assert_eq!(t, tree(&srv, &cn).await);
        assert!(!push_row(&srv, "cn2").await.pending());
        srv.stop().await;
        remote.stop().await;
    }
}

#[tokio::test]
async fn a_remote_that_is_down_keeps_the_push_pending_and_a_restart_resumes_it() {
    for backend in BACKENDS {
        let (db, remote_db) = (TempDb::fresh(backend).await, TempDb::fresh(backend).await);
        let remote = Server::start(&remote_db.url, None, None).await;
        let g = gate(&remote.placement).await;
        let ext = external(&g.url);
        let srv = Server::start_with(&db.url, None, None, Some(ext.clone())).await;
        let cn = remote_compute_node(&remote, "cn3").await;
        let dir = tempfile::tempdir().unwrap();
        let fs = FakeSysfs::new(dir.path());
        testing::eight_gpus(&fs);
        agent(&srv, "cn3", dir.path()).step().await.unwrap();

        g.up.store(false, Ordering::SeqCst);
        let now = accel_store::now();
        let pusher = Pusher::new(srv.store.clone(), ext.clone(), "pusher-1");
        let r = pusher.step(now).await.unwrap();
        assert_eq!((r.pushed, r.retrying), (0, 1));
        let row = push_row(&srv, "cn3").await;
        assert!(row.pending() && row.attempts == 1, "{row:?}");
        assert!(
            row.last_error.as_deref().unwrap_or("").contains("HTTP 503"),
            "{row:?}"
        );
        assert_eq!(tree(&remote, &cn).await.len(), 1, "nothing pushed");

        // The remote is back; a server claims the push and dies before finishing.
        g.up.store(true, Ordering::SeqCst);
        let claimed = srv
            .store
            .pushes()
            .claim("cn3", "crashed", now + 2, now + 122)
            .await
            .unwrap();
        assert!(claimed.is_some());
        srv.stop().await;

        let ext = external(&g.url);
        let srv = Server::start_with(&db.url, None, None, Some(ext.clone())).await;
        let pusher = Pusher::new(srv.store.clone(), ext, "pusher-2");
        assert_eq!(pusher.step(now + 3).await.unwrap().due, 0, "leased");
        let r = pusher.step(now + 123).await.unwrap();
        assert_eq!((r.due, r.pushed), (1, 1));
        let t = tree(&remote, &cn).await;
        assert_eq!(t.len(), 9);
        assert_eq!(t, tree(&srv, &cn).await);
        let row = push_row(&srv, "cn3").await;
        assert!(!row.pending() && row.last_error.is_none(), "{row:?}");
        srv.stop().await;
        remote.stop().await;
    }
}

/// Waits (at most 20 s) until the server's pusher has pushed `host`'s latest change.
async fn wait_pushed(srv: &Server, host: &str) {
    let what = format!("{host} to be pushed");
    common::eventually(std::time::Duration::from_secs(20), &what, || async {
        let row = srv.store.pushes().get(host).await.unwrap();
        match &row {
            Some(r) if !r.pending() => Ok(()),
            _ => Err(format!("{row:?}")),
        }
    })
    .await
}

#[tokio::test]
async fn the_running_server_pushes_what_it_had_before_and_each_change() {
    for backend in BACKENDS {
        let (db, remote_db) = (TempDb::fresh(backend).await, TempDb::fresh(backend).await);
        let remote = Server::start(&remote_db.url, None, None).await;
        let cn = remote_compute_node(&remote, "cn4").await;
        // Devices reported while accel had no [placement] (its own compute node).
        let srv = Server::start(&db.url, None, None).await;
        let (s, _) = placement(
            &srv,
            reqwest::Method::POST,
            "/resource_providers",
            Some(json!({"name": "cn4"})),
        )
        .await;
        assert_eq!(s, 200);
        let dir = tempfile::tempdir().unwrap();
        let fs = FakeSysfs::new(dir.path());
        let gpus = testing::eight_gpus(&fs);
        agent(&srv, "cn4", dir.path()).step().await.unwrap();
        srv.stop().await;

        // Restarted with [placement] and its workers: every host is checked once.
        let ext = external(&remote.placement);
        let srv =
            Server::start_with(&db.url, None, Some(common::accel::workers(None)), Some(ext)).await;
        wait_pushed(&srv, "cn4").await;
        let t = tree(&remote, &cn).await;
        assert_eq!(t.len(), 9);
        assert_eq!(t[&format!("cn4_{}", gpus[3])].1.as_deref(), Some("cn4"));
        // A report wakes the pusher.
        fs.remove(&gpus[3]);
        let a = agent(&srv, "cn4", dir.path());
        assert_eq!(a.step().await.unwrap().removed, 1);
        wait_pushed(&srv, "cn4").await;
        let t = tree(&remote, &cn).await;
        assert_eq!(t.len(), 8);
        assert!(!t.contains_key(&format!("cn4_{}", gpus[3])));
        srv.stop().await;
        remote.stop().await;
    }
}
