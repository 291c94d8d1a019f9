//! Agent benchmark (docs/benchmarks.md, "Agent"): discovery over a fake sysfs tree of
//! 1024 PCI functions (64 devices), the first report of those 64 devices applied by the
//! real server, and an unchanged report, on SQLite (file) and PostgreSQL.
//!
//! `cargo bench -p accel-bench --bench agent` (PostgreSQL from `ACCEL_TEST_PG`; set
//! `AGENT_BENCH_PG=0` to skip it).

use accel_agent::client::Client;
use accel_agent::config::DriverSettings;
use accel_agent::drivers;
use accel_agent::model::Report;
use accel_agent::sysfs::Sysfs;
use accel_agent::testing::{self, bdf, FakeSysfs};
use accel_testkit::server::TestServer;
use std::time::{Duration, Instant};

/// 8 GPUs, 8 PACs with 15 VFs, 40 QAT cards with 15 VFs, 8 NVMe: 64 devices on 784
/// functions, plus 240 functions nothing claims (USB, audio, bridges).
fn build(fs: &FakeSysfs) -> usize {
    testing::eight_gpus(fs);
    for i in 0..8u8 {
        testing::pac_dfl(fs, 0x01 + i, 15);
    }
    for i in 0..40u8 {
        testing::qat(fs, 0x70 + i, 15);
    }
    for i in 0..8u8 {
        testing::nvme(fs, 0x50 + i, "vfio-pci");
    }
    for i in 0..240usize {
        let class = [0x0c0330, 0x040300, 0x060400][i % 3];
        fs.function(
            &bdf(0xf0 + (i / 32) as u8, (i % 32) as u8, 0),
            0x8086,
            0xa000,
            class,
        );
    }
    std::fs::read_dir(fs.root.join("bus/pci/devices"))
        .unwrap()
        .count()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

async fn reports(label: &str, store: accel_store::Store, body: &serde_json::Value) {
    const HOSTS: usize = 5;
    let server = TestServer::start(accel_testkit::server::builder(store.clone())).await;
    let url = server.accel.clone();
    for h in 0..HOSTS {
        let name = format!("cn{h}");
        store
            .write(move |tx| {
                Box::pin(async move {
                    accel_store::placement::providers::create(tx, &uuid_of(h), &name, None).await
                })
            })
            .await
            .unwrap();
    }
    let client = Client::new(&url, "admin").unwrap();
    let mut first = Vec::new();
    for h in 0..HOSTS {
        // Each host's names differ, so each first report creates 72 providers.
        let text = body.to_string().replace("cnX_", &format!("cn{h}_"));
        let b: accel_api::agent::DeviceReport = serde_json::from_str(&text).unwrap();
        let t = Instant::now();
        let o = client.report(&format!("cn{h}"), &b, false).await.unwrap();
        first.push(t.elapsed());
        assert_eq!(o.added, 64);
    }
    let text = body.to_string().replace("cnX_", "cn0_");
    let b: accel_api::agent::DeviceReport = serde_json::from_str(&text).unwrap();
    let mut same = Vec::new();
    for _ in 0..50 {
        let t = Instant::now();
        let o = client.report("cn0", &b, false).await.unwrap();
        same.push(t.elapsed());
        assert!(o.unchanged);
    }
    let mut forced = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let o = client.report("cn0", &b, true).await.unwrap();
        forced.push(t.elapsed());
        assert_eq!(o.kept, 64);
    }
    println!(
        "{label:<10} first report (64 devices, 72 providers): median {} (max {}) over {HOSTS} hosts",
        ms(median(first.clone())),
        ms(*first.iter().max().unwrap())
    );
    println!(
        "{label:<10} unchanged report: median {} over 50; forced full re-apply of the same: median {}",
        ms(median(same)),
        ms(median(forced))
    );
}

fn uuid_of(h: usize) -> String {
    format!("00000000-0000-4000-8000-{h:012}")
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FakeSysfs::new(dir.path());
    let functions = build(&fs);
    let cfg = DriverSettings::default();
    let all = drivers::select(&cfg, None).unwrap();
    let mut times = Vec::new();
    let mut devices = Vec::new();
    for _ in 0..20 {
        let sysfs = Sysfs::new(&fs.root);
        let t = Instant::now();
        let d = drivers::discover(&sysfs, &cfg, &all, None);
        times.push(t.elapsed());
        devices = d.devices;
    }
    println!(
        "discovery: {functions} PCI functions, {} devices: median {} over 20 (min {})",
        devices.len(),
        ms(median(times.clone())),
        ms(*times.iter().min().unwrap())
    );
    assert_eq!(devices.len(), 64);
    let body = Report::new("cnX", devices).to_json();
    println!("report body: {} bytes", body.to_string().len());

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let db = dir.path().join("bench.db");
        let store = accel_store::Store::connect(&format!("sqlite://{}", db.display()))
            .await
            .unwrap();
        reports("sqlite", store, &body).await;
        if std::env::var("AGENT_BENCH_PG").as_deref() != Ok("0") {
            reports("postgres", accel_store::testing::postgres().await, &body).await;
        }
    });
}
