//! `accel import placement`, `accel import verify` and `accel export placement`: the
//! Placement half of a cut-over, each a read, a check or a write in the store and
//! what it says about it.

use super::{
    export_checked, exported, open_store, print_counts, print_lines, print_outcome, redacted,
    refused_exit, target_url, verify, ExportPlacementArgs, ImportPlacementArgs, VerifyArgs,
};
use accel_store::import::{self, Checked, Options, PlacementData, Source};
use anyhow::Context;

pub(super) async fn export(a: ExportPlacementArgs) -> anyhow::Result<()> {
    let url = target_url(a.database, a.config)?;
    let store = open_store(&url).await?;
    let started = std::time::Instant::now();
    let data = import::export::read_accel(&store)
        .await
        .context("reading accel's Placement data")?;
    let opened = if a.dry_run {
        Source::open(&a.to).await
    } else {
        Source::open_for_write(&a.to).await
    };
    let target =
        opened.with_context(|| format!("opening the upstream database {}", redacted(&a.to)))?;
    if a.dry_run {
        let checked = import::export::check_target(&target).await;
        target.close().await;
        store.close().await;
        let checked = checked.with_context(|| format!("reading {}", redacted(&a.to)))?;
        return export_checked("placement", &a.to, &data.counts(), checked);
    }
    let done = import::export::export_placement(&data, &target).await;
    target.close().await;
    let done = done.with_context(|| format!("writing {}", redacted(&a.to)))?;
    exported("placement", &url, &a.to, started, done)?;
    verify_after(store, a.verify).await
}

/// `--verify`: the upstream API compared with accel's answers; any difference is
/// exit status 1.
async fn verify_after(store: accel_store::Store, upstream: Option<String>) -> anyhow::Result<()> {
    match upstream {
        Some(upstream) => {
            if verify::against_local(store, &upstream).await? > 0 {
                std::process::exit(1);
            }
        }
        None => store.close().await,
    }
    Ok(())
}

pub(super) async fn verify_only(a: VerifyArgs) -> anyhow::Result<()> {
    let url = target_url(a.database, a.config)?;
    verify_after(open_store(&url).await?, Some(a.upstream)).await
}

pub(super) async fn import(a: ImportPlacementArgs) -> anyhow::Result<()> {
    let source = Source::open(&a.from)
        .await
        .with_context(|| format!("opening the upstream database {}", redacted(&a.from)))?;
    let started = std::time::Instant::now();
    let data = import::read_placement(&source).await;
    source.close().await;
    let data = data.with_context(|| format!("reading {}", redacted(&a.from)))?;
    let read_s = started.elapsed().as_secs_f64();
    if a.dry_run {
        return dry_run(&a.from, &data);
    }
    let target = target_url(a.database, a.config)?;
    let store = open_store(&target).await?;
    let opts = Options {
        force: a.force,
        skip_invalid: a.skip_invalid,
    };
    let done = import::import_placement(&store, &data, opts).await;
    let done = match done.context("importing")? {
        Ok(d) => d,
        Err(refused) => {
            store.close().await;
            refused_exit("import", "placement", &refused);
        }
    };
    println!(
        "imported {} into {} in {:.1} s (read {:.1} s):",
        redacted(&a.from),
        redacted(&target),
        started.elapsed().as_secs_f64(),
        read_s
    );
    print_counts(&done.counts);
    print_warnings(&done.warnings);
    print_outcome(&done.replaced, &done.kept, &done.skipped);
    let heading = "left out whole (--skip-invalid), with every allocation each held:";
    print_lines(heading, &done.left_out);
    verify_after(store, a.verify).await
}

/// Over-capacity providers, each a warning line: imported as upstream holds them.
fn print_warnings(warnings: &[import::OverCapacity]) {
    for w in warnings {
        println!("warning: {w}");
    }
}

/// `--dry-run`: the source read and checked, nothing opened on accel's side.
fn dry_run(from: &str, data: &PlacementData) -> anyhow::Result<()> {
    let Checked {
        problems,
        warnings,
        valid,
        left_out,
    } = import::check(data);
    println!(
        "dry run: nothing written; {} would be read:",
        redacted(from)
    );
    print_counts(&data.counts());
    print_warnings(&warnings);
    if problems.is_empty() {
        println!("no problems found");
        return Ok(());
    }
    let heading = format!(
        "{} problem(s) found (the import refuses them; --skip-invalid would write these counts):",
        problems.len()
    );
    print_lines(&heading, &problems);
    print_counts(&valid.counts());
    let heading = "--skip-invalid would leave out whole, with every allocation each holds:";
    print_lines(heading, &left_out);
    std::process::exit(1);
}
