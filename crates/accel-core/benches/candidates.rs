//! In-process benchmark of the allocation-candidate engine: no HTTP, no database, only
//! [`Snapshot::new`] and [`search_counted`] on forests shaped like upstream Placement's
//! performance jobs and the wide-tree cases of its test suite.
//!
//! Run with `cargo bench -p accel-core --bench candidates` (release profile). A
//! substring argument runs only the matching scenarios, e.g.
//! `cargo bench -p accel-core --bench candidates -- nested`. Results and the machine
//! they were taken on are recorded in `docs/benchmarks.md`.
//!
//! A small hand-written harness instead of criterion: per scenario a warm-up, then
//! timed iterations until a time budget or an iteration cap is reached, reporting
//! median, p95 and minimum in microseconds. Each row also prints the candidate count
//! and the deterministic work counters, so a reader can see the answer is the expected
//! one and not an early exit.
//!
//! The forests are built with the named-provider helper shared with the tests.
//!
//! The `x:` rows time `explain` (issue 16's `accel explain`): every root of a big
//! forest judged and the non-fitting ones given their reasons, run them alone with
//! `-- explain`.

#[path = "../tests/candidates_world.rs"]
mod world;

use std::hint::black_box;
use std::time::{Duration, Instant};

use accel_core::candidates::explain::{explain, ExplainOptions, Names};
use accel_core::candidates::{
    search_counted, ProviderId, RcId, Request, SearchOptions, SearchWork, Snapshot, TraitId,
};
use world::{World, SHARES};

/// Timed iterations stop at whichever comes first.
const BUDGET: Duration = Duration::from_millis(2500);
const MAX_ITERS: usize = 2000;
const MIN_ITERS: usize = 10;
const WARMUP: Duration = Duration::from_millis(300);

struct Stats {
    iters: usize,
    median: f64,
    p95: f64,
    min: f64,
}

/// Warm up, then time `f` repeatedly; `f` returns the duration of the part to measure
/// so that per-iteration setup (cloning inputs) stays out of the numbers.
fn measure(mut f: impl FnMut() -> Duration) -> Stats {
    let start = Instant::now();
    while start.elapsed() < WARMUP {
        f();
    }
    let mut samples: Vec<Duration> = Vec::new();
    let start = Instant::now();
    while samples.len() < MIN_ITERS || (samples.len() < MAX_ITERS && start.elapsed() < BUDGET) {
        samples.push(f());
    }
    samples.sort_unstable();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    Stats {
        iters: samples.len(),
        median: us(at(0.5)),
        p95: us(at(0.95)),
        min: us(samples[0]),
    }
}

/// [`measure`] the whole of `f`, its result dropped outside the timed part.
fn timed<T>(mut f: impl FnMut() -> T) -> Stats {
    measure(|| {
        let start = Instant::now();
        let result = f();
        let took = start.elapsed();
        black_box(result);
        took
    })
}

struct Row {
    name: String,
    stats: Stats,
    candidates: String,
    work: String,
}

fn print_header() {
    println!("| scenario | candidates | work (anchors searched / option checks) | iterations | median µs | p95 µs | min µs |");
    println!("|---|---:|---|---:|---:|---:|---:|");
}

fn print_row(row: &Row) {
    println!(
        "| {} | {} | {} | {} | {:.1} | {:.1} | {:.1} |",
        row.name,
        row.candidates,
        row.work,
        row.stats.iters,
        row.stats.median,
        row.stats.p95,
        row.stats.min
    );
}

/// Time one search; the answer and work counters come from a separate untimed run.
fn bench_search(name: &str, snap: &Snapshot, req: &Request) -> Row {
    let options = SearchOptions::default();
    let (out, work): (_, SearchWork) = search_counted(snap, req, &options);
    let stats = timed(|| search_counted(black_box(snap), black_box(req), &options));
    Row {
        name: name.to_owned(),
        stats,
        candidates: out.candidates.len().to_string(),
        work: format!("{} / {}", work.anchors_searched, work.option_checks),
    }
}

/// Provider names by id (the world's own lookup is a linear scan).
struct Indexed<'w> {
    providers: Vec<String>,
    world: &'w World,
}

impl Names for Indexed<'_> {
    fn provider(&self, id: ProviderId) -> String {
        self.providers[id.index()].clone()
    }
    fn resource_class(&self, rc: RcId) -> String {
        self.world.rc_name(rc)
    }
    fn trait_name(&self, t: TraitId) -> String {
        self.world.trait_name(t)
    }
}

/// Time one explanation; verdict counts come from a separate untimed run.
fn bench_explain(
    name: &str,
    snap: &Snapshot,
    req: &Request,
    names: &Indexed<'_>,
    options: &ExplainOptions,
) -> Row {
    let ex = explain(snap, req, names, options);
    let fits = ex.roots.iter().filter(|r| r.fits).count();
    let reasons: usize = ex.roots.iter().map(|r| r.reasons.len()).sum();
    let stats = timed(|| explain(black_box(snap), black_box(req), names, options));
    Row {
        name: name.to_owned(),
        stats,
        candidates: format!("{fits} of {} roots fit", ex.roots.len()),
        work: format!("{reasons} reasons"),
    }
}

/// (x) `roots` computes (VCPU 32, MEMORY_MB 65536), each with 4 Intel FPGA devices of
/// one unit; on `busy` roots in 1000, `used` of them are in use.
fn fpga_estate(roots: usize, busy: usize, used: usize) -> (World, Vec<String>) {
    let mut w = World::new();
    let mut names = Vec::new();
    for i in 0..roots {
        let cn = format!("cn{i}");
        w.rp(&cn, None, &[]);
        w.inv(&cn, "VCPU", 32);
        w.inv(&cn, "MEMORY_MB", 65536);
        names.push(cn.clone());
        for j in 0..4 {
            let dev = format!("{cn}_fpga{j}");
            w.rp(&dev, Some(&cn), &[]);
            w.inv(&dev, "CUSTOM_ACCELERATOR_FPGA", 1);
            w.traits(&dev, &["CUSTOM_FPGA_INTEL"]);
            if i % 1000 < busy && j < used {
                w.use_(&dev, "CUSTOM_ACCELERATOR_FPGA", 1);
            }
            names.push(dev);
        }
    }
    (w, names)
}

/// (d) one compute with `n` single-unit children and `n` single-unit granular groups.
fn wide(n: usize, policy: &str) -> (Snapshot, Request) {
    let mut w = World::new();
    w.rp("cn", None, &[]);
    w.inv("cn", "VCPU", 64);
    for i in 0..n {
        let dev = format!("pci{i}");
        w.rp(&dev, Some("cn"), &[]);
        w.inv(&dev, "CUSTOM_PCI", 1);
    }
    let mut qs: Vec<String> = (1..=n)
        .map(|i| format!("resources{i}=CUSTOM_PCI:1"))
        .collect();
    qs.push(format!("group_policy={policy}&limit=1000"));
    let req = w.query(&qs.join("&"), true);
    (w.snapshot(), req)
}

/// (e) `roots` computes with VCPU and memory, each with `children` SR-IOV VF providers.
fn many_roots(roots: usize, children: usize) -> World {
    let mut w = World::new();
    for i in 0..roots {
        let cn = format!("cn{i}");
        w.rp(&cn, None, &[]);
        w.inv(&cn, "VCPU", 16);
        w.inv(&cn, "MEMORY_MB", 4096);
        for j in 0..children {
            let dev = format!("{cn}_vf{j}");
            w.rp(&dev, Some(&cn), &[]);
            w.inv(&dev, "SRIOV_NET_VF", 4);
        }
    }
    w
}

/// (a) `roots` computes, each with one FPGA child; vendors alternate, so the required
/// trait keeps half of them.
fn fpga(roots: usize) -> (Snapshot, Request) {
    let mut w = World::new();
    for i in 0..roots {
        let cn = format!("cn{i}");
        w.rp(&cn, None, &[]);
        w.inv(&cn, "VCPU", 32);
        let dev = format!("{cn}_fpga");
        w.rp(&dev, Some(&cn), &[]);
        w.inv(&dev, "CUSTOM_ACCELERATOR_FPGA", 1);
        let vendor = if i % 2 == 0 { "INTEL" } else { "XILINX" };
        w.traits(
            &dev,
            &[&format!("CUSTOM_FPGA_{vendor}"), "CUSTOM_PROGRAMMABLE"],
        );
    }
    let req = w.query(
        "resources=VCPU:1&resources1=CUSTOM_ACCELERATOR_FPGA:1&required1=CUSTOM_FPGA_INTEL",
        true,
    );
    (w.snapshot(), req)
}

/// (b) `placeload`: 1000 roots with VCPU / MEMORY_MB / DISK_GB, 1, 2 or 3 of 3
/// aggregates (always the first), traits cycling [AVX2], [AVX2, SSE2],
/// [AVX2, SSE2, STORAGE_DISK_SSD].
fn placeload(roots: usize) -> World {
    let mut w = World::new();
    let aggs = ["agg0", "agg1", "agg2"];
    let traits: [&[&str]; 3] = [
        &["HW_CPU_X86_AVX2"],
        &["HW_CPU_X86_AVX2", "HW_CPU_X86_SSE2"],
        &["HW_CPU_X86_AVX2", "HW_CPU_X86_SSE2", "STORAGE_DISK_SSD"],
    ];
    for i in 0..roots {
        let cn = format!("cn{i}");
        w.rp(&cn, None, &aggs[..i % 3 + 1]);
        w.inv(&cn, "VCPU", 32).limits.max_unit = 16;
        w.inv(&cn, "MEMORY_MB", 8192).limits.min_unit = 128;
        w.inv(&cn, "DISK_GB", 8192).limits.min_unit = 5;
        w.traits(&cn, traits[i % 3]);
    }
    w
}

/// (c) `nested-perfload`: 1000 trees of 7 providers (cn1 -> numa0 -> fpga0, pgpu0;
/// cn1 -> numa1 -> fpga1_0, fpga1_1).
fn nested_perfload(trees: usize) -> World {
    let mut w = World::new();
    for i in 0..trees {
        let cn = format!("cn{i}");
        w.rp(&cn, None, &[]);
        w.inv(&cn, "DISK_GB", 20480);
        w.traits(&cn, &["COMPUTE_VOLUME_MULTI_ATTACH"]);
        let numa0 = format!("{cn}_numa0");
        w.rp(&numa0, Some(&cn), &[]);
        w.traits(&numa0, &["HW_NUMA_ROOT"]);
        w.inv(&numa0, "VCPU", 4).limits.reserved = 2;
        let mem = w.inv(&numa0, "MEMORY_MB", 2048);
        mem.limits.min_unit = 512;
        mem.limits.step_size = 256;
        let fpga0 = format!("{cn}_fpga0");
        w.rp(&fpga0, Some(&numa0), &[]);
        w.inv(&fpga0, "FPGA", 1);
        let pgpu0 = format!("{cn}_pgpu0");
        w.rp(&pgpu0, Some(&numa0), &[]);
        w.inv(&pgpu0, "VGPU", 8);
        let numa1 = format!("{cn}_numa1");
        w.rp(&numa1, Some(&cn), &[]);
        w.traits(&numa1, &["HW_NUMA_ROOT", "CUSTOM_FOO"]);
        w.inv(&numa1, "VCPU", 4);
        let mem = w.inv(&numa1, "MEMORY_MB", 2048);
        mem.limits.min_unit = 256;
        mem.limits.max_unit = 1024;
        for j in 0..2 {
            let fpga = format!("{cn}_fpga1_{j}");
            w.rp(&fpga, Some(&numa1), &[]);
            w.inv(&fpga, "FPGA", 1);
        }
    }
    w
}

fn main() {
    // `cargo bench` passes `--bench`; any other argument filters scenarios by name.
    let filter: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let wanted = |name: &str| filter.as_deref().is_none_or(|f| name.contains(f));
    let started = Instant::now();
    print_header();

    for (n, policy) in [(8, "none"), (8, "isolate"), (64, "none"), (64, "isolate")] {
        let name = format!(
            "d: 1 compute, {n} children x 1, {n} groups, group_policy={policy}, limit=1000"
        );
        if wanted(&name) {
            let (snap, req) = wide(n, policy);
            print_row(&bench_search(&name, &snap, &req));
        }
    }

    let e_names = [
        "e: Snapshot::new, 10,000 roots x 10 children (110,000 providers)",
        "e: 10,000 roots x 10 children, VCPU+MEMORY_MB & VF group, limit=1000",
        "e: 10,000 roots x 10 children, nothing fits (every root rejected)",
    ];
    if e_names.iter().any(|n| wanted(n)) {
        let mut w = many_roots(10_000, 10);
        let sharing = Some(w.t(SHARES));
        if wanted(e_names[0]) {
            let stats = measure(|| {
                let providers = w.providers.clone();
                let start = Instant::now();
                let snap = Snapshot::new(black_box(providers), sharing).expect("valid forest");
                let took = start.elapsed();
                drop(black_box(snap));
                took
            });
            print_row(&Row {
                name: e_names[0].to_owned(),
                stats,
                candidates: "-".into(),
                work: format!("{} providers", w.providers.len()),
            });
        }
        let snap = w.snapshot();
        if wanted(e_names[1]) {
            let req = w.query(
                "resources=VCPU:1,MEMORY_MB:512&resources_NET=SRIOV_NET_VF:1&limit=1000",
                true,
            );
            print_row(&bench_search(e_names[1], &snap, &req));
        }
        if wanted(e_names[2]) {
            let req = w.query(
                "resources=VCPU:1&resources_NET=SRIOV_NET_VF:5&limit=1000",
                true,
            );
            print_row(&bench_search(e_names[2], &snap, &req));
        }
    }

    let name = "a: 200 roots x 1 FPGA child, required1=CUSTOM_FPGA_INTEL (half match)";
    if wanted(name) {
        let (snap, req) = fpga(200);
        print_row(&bench_search(name, &snap, &req));
    }

    let b_names = [
        "b: placeload 1000 roots, member_of + required=AVX2",
        "b: placeload 1000 roots, same query, randomized",
        "b: placeload 1000 roots, same query, limit=5, randomized",
    ];
    if b_names.iter().any(|n| wanted(n)) {
        let mut w = placeload(1000);
        let snap = w.snapshot();
        let qs =
            "resources=VCPU:1,DISK_GB:10,MEMORY_MB:256&member_of=agg0&required=HW_CPU_X86_AVX2";
        let plain = w.query(qs, true);
        let random = Request {
            randomize: Some(0x5eed),
            ..plain.clone()
        };
        let limited = Request {
            limit: Some(5),
            ..random.clone()
        };
        for (name, req) in b_names.iter().zip([plain, random, limited]) {
            if wanted(name) {
                print_row(&bench_search(name, &snap, &req));
            }
        }
    }

    let name = "c: nested-perfload 1000 trees x 7, same_subtree=_COMPUTE,_FPGA";
    if wanted(name) {
        let mut w = nested_perfload(1000);
        let snap = w.snapshot();
        let req = w.query(
            "resources=DISK_GB:10&required=COMPUTE_VOLUME_MULTI_ATTACH\
             &resources_COMPUTE=VCPU:1,MEMORY_MB:256&required_COMPUTE=CUSTOM_FOO\
             &resources_FPGA=FPGA:1&group_policy=none&same_subtree=_COMPUTE,_FPGA",
            true,
        );
        print_row(&bench_search(name, &snap, &req));
    }

    let nova = "resources=VCPU:1,MEMORY_MB:512&resources1=CUSTOM_ACCELERATOR_FPGA:1\
                &required1=CUSTOM_FPGA_INTEL&group_policy=isolate";
    let two = "resources=VCPU:1&resources1=CUSTOM_ACCELERATOR_FPGA:1&required1=CUSTOM_FPGA_INTEL\
               &resources2=CUSTOM_ACCELERATOR_FPGA:1&required2=CUSTOM_FPGA_INTEL&group_policy=isolate";
    // (name, roots in 1000 that are busy, devices in use on a busy root, query, --root)
    let x_rows = [
        ("x: explain 10,000 roots x 4 FPGAs (50,000 providers), 90% full, Nova FPGA request", 900, 4, nova, None),
        ("x: explain 10,000 roots x 4 FPGAs, all full (every root explained)", 1000, 4, nova, None),
        ("x: explain one root (--root) of 10,000 x 4 FPGAs, all full", 1000, 4, nova, Some("cn5000")),
        ("x: explain 10,000 roots x 4 FPGAs, 3 in use each, two isolated FPGA groups (every root blamed on isolate)", 1000, 3, two, None),
    ];
    for (name, busy, used, qs, root) in x_rows {
        if !wanted(name) {
            continue;
        }
        let (mut w, providers) = fpga_estate(10_000, busy, used);
        let req = w.query(qs, true);
        let snap = w.snapshot();
        let options = ExplainOptions {
            only_root: root.map(|r| w.id(r)),
            ..ExplainOptions::default()
        };
        let names = Indexed {
            providers,
            world: &w,
        };
        print_row(&bench_explain(name, &snap, &req, &names, &options));
        if busy == 900 {
            let name = "x: (for comparison) search, unlimited, same forest and request";
            print_row(&bench_search(name, &snap, &req));
        }
    }

    // (h32) the query `accel-bench cloud` sends per boot, on its forest: does the
    // search stop at `limit`, or does it grow with the 40,000 matching devices?
    let cloud = "resources=VCPU:1,MEMORY_MB:512&resources1=CUSTOM_ACCELERATOR_FPGA:1\
                 &required1=CUSTOM_FPGA_INTEL&group_policy=none&limit=1000";
    let h_names = [
        "h32: 10,000 roots x 4 FPGAs (50,000 providers), cloud query, limit=1000",
        "h32: 10,000 roots x 4 FPGAs, cloud query, limit=1000, randomized",
        "h32: 10,000 roots x 4 FPGAs, cloud query, unlimited",
    ];
    if h_names.iter().any(|n| wanted(n)) {
        let (mut w, _) = fpga_estate(10_000, 0, 0);
        let limited = w.query(cloud, true);
        let unlimited = w.query(&cloud.replace("&limit=1000", ""), true);
        let snap = w.snapshot();
        let randomized = Request {
            randomize: Some(32),
            ..limited.clone()
        };
        for (name, req) in h_names.iter().zip([&limited, &randomized, &unlimited]) {
            if wanted(name) {
                print_row(&bench_search(name, &snap, req));
            }
        }
    }

    let name = "x: explain 10,000 roots sharing one DISK_GB pool (full), VCPU+DISK_GB";
    if wanted(name) {
        let mut w = World::new();
        let mut providers = Vec::new();
        w.rp("pool", None, &["agg"]);
        w.traits("pool", &[SHARES]);
        w.inv("pool", "DISK_GB", 100_000);
        w.use_("pool", "DISK_GB", 99_995);
        providers.push("pool".to_owned());
        for i in 0..10_000 {
            let cn = format!("cn{i}");
            w.rp(&cn, None, &["agg"]);
            w.inv(&cn, "VCPU", 32);
            providers.push(cn);
        }
        let req = w.query("resources=VCPU:1,DISK_GB:10", true);
        let snap = w.snapshot();
        let names = Indexed {
            providers,
            world: &w,
        };
        print_row(&bench_explain(
            name,
            &snap,
            &req,
            &names,
            &ExplainOptions::default(),
        ));
    }

    eprintln!("total {:.1} s", started.elapsed().as_secs_f64());
}
