//! Slow and hostile clients (`accel_server::listen`): bodies over the limit answered
//! 413 in each API's own format, bodies that never finish answered 408, clients that
//! trickle their headers cut off without slowing anyone else down, and a shutdown that
//! a half-sent request cannot hold past its drain timeout. Also the 503 (not 500)
//! both APIs answer while the database is gone.

use accel_server::listen::HttpLimits;
use accel_server::ServerConfig;
use accel_testkit::server::{builder, store, Backend, TestServer, BACKENDS};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn limits() -> HttpLimits {
    HttpLimits {
        header_read_timeout: Duration::from_secs(2),
        body_timeout: Duration::from_secs(1),
        max_body_bytes: 1024,
        max_connections: 1000,
        shutdown_timeout: Duration::from_secs(1),
    }
}

async fn server(backend: Backend, http: HttpLimits) -> TestServer {
    TestServer::start(builder(store(backend).await).config(ServerConfig {
        allocation_conflict_retry_count: 10,
        max_allocation_candidates: 1000,
        http,
        ..Default::default()
    }))
    .await
}

/// Sends `head` (and `body`) on a raw connection and returns the whole answer.
async fn raw(base: &str, head: &str, body: &[u8]) -> String {
    let mut s = TcpStream::connect(base.trim_start_matches("http://"))
        .await
        .unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(body).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

fn status_of(answer: &str) -> u16 {
    answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn body_of(answer: &str) -> &str {
    answer.split_once("\r\n\r\n").map_or("", |(_, b)| b)
}

const PLACEMENT_POST: &str = "POST /resource_providers HTTP/1.1\r\nhost: x\r\n\
    x-auth-token: admin\r\nopenstack-api-version: placement 1.39\r\n\
    content-type: application/json\r\nconnection: close\r\n";
const ACCEL_POST: &str = "POST /v2/device_profiles HTTP/1.1\r\nhost: x\r\n\
    x-auth-token: admin\r\nx-roles: admin\r\nx-project-id: p1\r\n\
    content-type: application/json\r\nconnection: close\r\n";

#[tokio::test]
async fn bodies_over_the_limit_are_413_in_each_apis_format() {
    let big = vec![b' '; 4096];
    let s = server(Backend::Sqlite, limits()).await;
    // Declared length over the limit, then a chunked body that grows past it.
    for framing in [
        "content-length: 4096\r\n\r\n",
        "transfer-encoding: chunked\r\n\r\n",
    ] {
        let body = if framing.contains("chunked") {
            let mut b = format!("{:x}\r\n", big.len()).into_bytes();
            b.extend_from_slice(&big);
            b.extend_from_slice(b"\r\n0\r\n\r\n");
            b
        } else {
            big.clone()
        };
        let a = raw(&s.placement, &format!("{PLACEMENT_POST}{framing}"), &body).await;
        assert_eq!(status_of(&a), 413, "{a}");
        let v: serde_json::Value = serde_json::from_str(body_of(&a)).unwrap();
        let e = &v["errors"][0];
        assert_eq!(e["status"], 413, "{v}");
        assert_eq!(e["title"], "Payload Too Large", "{v}");
        assert_eq!(e["code"], "placement.undefined_code", "{v}");
        assert!(e["detail"].as_str().unwrap().contains("1024 bytes"), "{v}");
        assert!(e["request_id"].as_str().unwrap().starts_with("req-"), "{v}");

        let a = raw(&s.accel, &format!("{ACCEL_POST}{framing}"), &body).await;
        assert_eq!(status_of(&a), 413, "{a}");
        let v: serde_json::Value = serde_json::from_str(body_of(&a)).unwrap();
        let inner: serde_json::Value =
            serde_json::from_str(v["error_message"].as_str().unwrap()).unwrap();
        assert_eq!(inner["faultcode"], "Client", "{inner}");
        assert!(inner["faultstring"]
            .as_str()
            .unwrap()
            .contains("1024 bytes"));
    }
    // A body within the limit still works.
    let ok = raw(
        &s.placement,
        &format!("{PLACEMENT_POST}content-length: 13\r\n\r\n"),
        br#"{"name":"r1"}"#,
    )
    .await;
    assert_eq!(status_of(&ok), 200, "{ok}");
    s.stop().await;
}

#[tokio::test]
async fn a_body_that_never_finishes_is_408() {
    let s = server(Backend::Sqlite, limits()).await;
    let t = Instant::now();
    let a = raw(
        &s.placement,
        &format!("{PLACEMENT_POST}content-length: 100\r\n\r\n"),
        b"{\"name\":",
    )
    .await;
    assert_eq!(status_of(&a), 408, "{a}");
    assert!(body_of(&a).contains("\"errors\""), "{a}");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    let a = raw(
        &s.accel,
        &format!("{ACCEL_POST}content-length: 100\r\n\r\n"),
        b"[{",
    )
    .await;
    assert_eq!(status_of(&a), 408, "{a}");
    assert!(body_of(&a).contains("error_message"), "{a}");
    s.stop().await;
}

/// One client sending a request's first bytes, then a byte every 250 ms.
async fn trickle(base: String) -> Duration {
    let t = Instant::now();
    let Ok(mut s) = TcpStream::connect(base.trim_start_matches("http://")).await else {
        return t.elapsed();
    };
    let _ = s.write_all(b"GET / HTTP/1.1\r\n").await;
    for _ in 0..200 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        if s.write_all(b"x").await.is_err() {
            break;
        }
        // The server closing shows as a read of 0 bytes (or an error).
        let mut buf = [0u8; 256];
        match tokio::time::timeout(Duration::from_millis(1), s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            _ => {}
        }
    }
    t.elapsed()
}

async fn timed_get(client: &reqwest::Client, url: &str) -> Duration {
    let t = Instant::now();
    let r = client
        .get(url)
        .header("x-auth-token", "admin")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.bytes().await.unwrap();
    t.elapsed()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[tokio::test]
async fn two_hundred_trickling_clients_slow_no_one_and_are_cut_off() {
    let s = server(Backend::Sqlite, limits()).await;
    let url = format!("{}/resource_providers", s.placement);
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let mut before = Vec::new();
    for _ in 0..20 {
        before.push(timed_get(&client, &url).await);
    }
    let tricklers: Vec<_> = (0..200)
        .map(|_| tokio::spawn(trickle(s.placement.clone())))
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut during = Vec::new();
    for _ in 0..20 {
        during.push(timed_get(&client, &url).await);
    }
    let (b, d) = (median(before), median(during.clone()));
    let worst = during.iter().max().copied().unwrap();
    assert!(
        d < b * 10 + Duration::from_millis(50) && worst < Duration::from_secs(1),
        "median before {b:?}, during {d:?}, worst {worst:?}"
    );
    // Every trickler is cut off by the 2 s header-read timeout, not after its 50 s.
    for t in tricklers {
        let held = t.await.unwrap();
        assert!(held < Duration::from_secs(6), "held {held:?}");
    }
    s.stop().await;
}

#[tokio::test]
async fn a_half_sent_request_cannot_hold_shutdown_past_the_drain_timeout() {
    let s = server(
        Backend::Sqlite,
        HttpLimits {
            // Long enough that only the drain timeout can end the connection.
            header_read_timeout: Duration::from_secs(60),
            shutdown_timeout: Duration::from_secs(1),
            ..limits()
        },
    )
    .await;
    let mut half = TcpStream::connect(s.placement.trim_start_matches("http://"))
        .await
        .unwrap();
    half.write_all(b"GET /resource_providers HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    let mut body = TcpStream::connect(s.accel.trim_start_matches("http://"))
        .await
        .unwrap();
    body.write_all(format!("{ACCEL_POST}content-length: 500\r\n\r\n[").as_bytes())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let t = Instant::now();
    s.stop().await;
    let took = t.elapsed();
    assert!(took < Duration::from_secs(3), "shutdown took {took:?}");
    // The half-sent request's connection was closed by the server.
    let mut buf = Vec::new();
    let n = tokio::time::timeout(Duration::from_secs(2), half.read_to_end(&mut buf)).await;
    assert!(matches!(n, Ok(Ok(_)) | Ok(Err(_))), "connection left open");
}

#[tokio::test]
async fn a_database_gone_is_503_in_each_apis_format_not_500() {
    for backend in BACKENDS {
        let s = server(backend, limits()).await;
        // What a database that went away looks like to a request: no connection.
        s.store.close().await;
        let url = format!("{}/resource_providers", s.placement);
        let r = accel_testkit::placement_request(reqwest::Method::GET, &url, "admin", "1.39")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 503, "{backend:?}");
        let v: serde_json::Value = r.json().await.unwrap();
        let detail = v["errors"][0]["detail"].as_str().unwrap().to_owned();
        assert!(detail.contains("database is unavailable"), "{v}");
        assert!(
            !detail.to_lowercase().contains("pool"),
            "driver words leak: {v}"
        );
        let r = reqwest::Client::new()
            .get(format!("{}/v2/device_profiles", s.accel))
            .header("x-auth-token", "admin")
            .header("x-roles", "admin")
            .header("x-project-id", "p1")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 503, "{backend:?}");
        let v: serde_json::Value = r.json().await.unwrap();
        let inner: serde_json::Value =
            serde_json::from_str(v["error_message"].as_str().unwrap()).unwrap();
        assert_eq!(inner["faultcode"], "Server", "{inner}");
        assert!(
            inner["faultstring"]
                .as_str()
                .unwrap()
                .contains("database is unavailable"),
            "{inner}"
        );
        s.stop().await;
    }
}
