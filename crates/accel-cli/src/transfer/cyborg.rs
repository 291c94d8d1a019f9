//! `accel import cyborg`, `accel import verify-cyborg` and `accel export cyborg`: the
//! accelerator half of a cut-over, shaped as the Placement half ([`super::placement`]).

use super::{
    export_checked, exported, open_store, print_counts, print_lines, print_outcome, redacted,
    refused_exit, target_url, verify_cyborg, ExportPlacementArgs, ImportPlacementArgs, VerifyArgs,
};
use accel_store::import::{cyborg, Options, Source};
use anyhow::Context;

pub(super) async fn export(a: ExportPlacementArgs) -> anyhow::Result<()> {
    let url = target_url(a.database, a.config)?;
    let store = open_store(&url).await?;
    let started = std::time::Instant::now();
    let data = cyborg::read_accel(&store)
        .await
        .context("reading accel's accelerator data")?;
    let opened = if a.dry_run {
        Source::open(&a.to).await
    } else {
        Source::open_for_write(&a.to).await
    };
    let target =
        opened.with_context(|| format!("opening the upstream database {}", redacted(&a.to)))?;
    if a.dry_run {
        let checked = cyborg::check_target(&target).await;
        target.close().await;
        store.close().await;
        let checked = checked.with_context(|| format!("reading {}", redacted(&a.to)))?;
        return export_checked("cyborg", &a.to, &data.counts(), checked);
    }
    let done = cyborg::export_cyborg(&data, &target).await;
    target.close().await;
    let done = done.with_context(|| format!("writing {}", redacted(&a.to)))?;
    exported("cyborg", &url, &a.to, started, done)?;
    verify_after(store, a.verify).await
}

/// `--verify`: upstream Cyborg's API compared with accel's; any difference is exit
/// status 1.
async fn verify_after(store: accel_store::Store, upstream: Option<String>) -> anyhow::Result<()> {
    match upstream {
        Some(upstream) => {
            if verify_cyborg::against_local(store, &upstream).await? > 0 {
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
    let data = cyborg::read_cyborg(&source).await;
    source.close().await;
    let data = data.with_context(|| format!("reading {}", redacted(&a.from)))?;
    if a.dry_run {
        return dry_run(&a.from, &data);
    }
    let target = target_url(a.database, a.config)?;
    let store = open_store(&target).await?;
    let opts = Options {
        force: a.force,
        skip_invalid: a.skip_invalid,
    };
    let done = match cyborg::import_cyborg(&store, &data, opts)
        .await
        .context("importing")?
    {
        Ok(d) => d,
        Err(refused) => {
            store.close().await;
            refused_exit("import", "cyborg", &refused);
        }
    };
    println!(
        "imported {} into {} in {:.1} s:",
        redacted(&a.from),
        redacted(&target),
        started.elapsed().as_secs_f64()
    );
    print_counts(&done.counts);
    print_outcome(&done.replaced, &[], &done.skipped);
    verify_after(store, a.verify).await
}

/// `--dry-run`: the source read and checked, nothing opened on accel's side.
fn dry_run(from: &str, data: &cyborg::CyborgData) -> anyhow::Result<()> {
    let (problems, valid) = cyborg::check(data);
    println!(
        "dry run: nothing written; {} would be read:",
        redacted(from)
    );
    print_counts(&data.counts());
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
    std::process::exit(1);
}
