//! `accel import placement` (and, beside it, `accel export placement`): moving a
//! running cloud's Placement data from upstream's database into accel's and back
//! (issue 28, docs/migrating.md).
//!
//! The command is a thin shell: the store reads, checks and writes
//! (`accel_store::import`); this module resolves the URLs as `accel serve` does,
//! prints counts and problems, and exits non-zero on every refusal. `--verify` starts
//! accel's own Placement API in this process over the imported database (port 0,
//! noauth) and compares it with the upstream service still running on the old one
//! ([`verify`]).

pub mod verify;
pub mod verify_cyborg;

use accel_store::import::{self, cyborg, write::describe, Options, Source};
use anyhow::Context;
use std::path::PathBuf;

/// `accel import ...`.
#[derive(clap::Args, Debug)]
pub struct ImportArgs {
    #[command(subcommand)]
    pub what: ImportWhat,
}

#[derive(clap::Subcommand, Debug)]
pub enum ImportWhat {
    /// Import an upstream Placement database (schema of 2023.1 to 16.0.0) into accel's.
    #[command(
        after_help = "Examples:\n  accel import placement --from mysql://placement:secret@db/placement --dry-run\n  accel import placement --from mysql://placement:secret@db/placement --database postgres://accel@db/accel --verify http://placement.internal:8778\n\nExit status: 0 imported (and verified); 1 refused, failed, or differences found"
    )]
    Placement(ImportPlacementArgs),
    /// Compare a running upstream Placement with accel's answers on accel's database
    /// (what --verify does after an import; after `accel export`, with upstream
    /// started on the exported database).
    #[command(
        after_help = "Example:\n  accel import verify http://127.0.0.1:8778 --database sqlite:///var/lib/accel/accel.db\n\nExit status: 0 no difference; 1 differences (each printed) or an error"
    )]
    Verify(VerifyArgs),
    /// Import an upstream Cyborg database (schema of Cyborg 17.0.0, MariaDB/MySQL)
    /// into accel's accelerator tables; import Placement first.
    #[command(
        after_help = "Examples:\n  accel import cyborg --from mysql://cyborg:secret@db/cyborg --dry-run\n  accel import cyborg --from mysql://cyborg:secret@db/cyborg --database postgres://accel@db/accel --verify http://cyborg.internal:6666\n\nExit status: 0 imported (and verified); 1 refused, failed, or differences found"
    )]
    Cyborg(ImportPlacementArgs),
    /// Compare a running upstream Cyborg API with accel's accelerator API on accel's
    /// database (what `import cyborg --verify` does; after `accel export cyborg`, with
    /// upstream started on the exported database).
    #[command(
        after_help = "Example:\n  accel import verify-cyborg http://127.0.0.1:6666 --database sqlite:///var/lib/accel/accel.db\n\nExit status: 0 no difference; 1 differences (each printed) or an error"
    )]
    VerifyCyborg(VerifyArgs),
}

#[derive(clap::Args, Debug)]
pub struct VerifyArgs {
    /// The upstream Placement API (noauth2 `x-auth-token: admin`, or $OS_TOKEN).
    #[arg(value_name = "UPSTREAM_API_URL")]
    pub upstream: String,
    /// accel's database, as `accel serve --database` takes it.
    #[arg(long, env = "ACCEL_DATABASE", value_name = "URL")]
    pub database: Option<String>,
    /// accel serve's TOML configuration file, for its `database`.
    #[arg(long, env = "ACCEL_CONFIG")]
    pub config: Option<PathBuf>,
}

/// `accel export ...`.
#[derive(clap::Args, Debug)]
pub struct ExportArgs {
    #[command(subcommand)]
    pub what: ExportWhat,
}

#[derive(clap::Subcommand, Debug)]
pub enum ExportWhat {
    /// Write accel's Placement data into an empty upstream Placement database (one
    /// `placement-manage db sync` created): the way back.
    #[command(
        after_help = "Example:\n  placement-manage db sync    # upstream's empty schema\n  accel export placement --database postgres://accel@db/accel --to mysql://placement:secret@db/placement\n\nExit status: 0 exported; 1 refused (the upstream database holds data, or another schema) or failed"
    )]
    Placement(ExportPlacementArgs),
    /// Write accel's accelerator data into an empty upstream Cyborg database (one
    /// `cyborg-dbsync upgrade` created): the way back.
    #[command(
        after_help = "Example:\n  cyborg-dbsync --config-file cyborg.conf upgrade    # upstream's empty schema\n  accel export cyborg --database postgres://accel@db/accel --to mysql://cyborg:secret@db/cyborg\n\nExit status: 0 exported; 1 refused (the upstream database holds data, or another schema) or failed"
    )]
    Cyborg(ExportPlacementArgs),
}

#[derive(clap::Args, Debug)]
pub struct ExportPlacementArgs {
    /// The empty upstream database: sqlite://ABSOLUTE_PATH, postgres://, mysql:// or
    /// mariadb://. Written in one transaction.
    #[arg(long = "to", value_name = "URL")]
    pub to: String,
    /// accel's database, as `accel serve --database` takes it.
    #[arg(long, env = "ACCEL_DATABASE", value_name = "URL")]
    pub database: Option<String>,
    /// accel serve's TOML configuration file, for its `database`.
    #[arg(long, env = "ACCEL_CONFIG")]
    pub config: Option<PathBuf>,
}

pub fn export(args: ExportArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    match args.what {
        ExportWhat::Placement(a) => rt.block_on(export_placement(a)),
        ExportWhat::Cyborg(a) => rt.block_on(export_cyborg(a)),
    }
}

async fn export_placement(a: ExportPlacementArgs) -> anyhow::Result<()> {
    let url = target_url(a.database, a.config)?;
    let store = accel_store::Store::connect(&url)
        .await
        .with_context(|| format!("opening accel's database {}", redacted(&url)))?;
    let started = std::time::Instant::now();
    let data = import::export::read_accel(&store).await;
    store.close().await;
    let data = data.context("reading accel's Placement data")?;
    let target = Source::open_for_write(&a.to)
        .await
        .with_context(|| format!("opening the upstream database {}", redacted(&a.to)))?;
    let done = import::export::export_placement(&data, &target).await;
    target.close().await;
    let done = done.with_context(|| format!("writing {}", redacted(&a.to)))?;
    exported("placement", &url, &a.to, started, done)
}

async fn verify_only(a: VerifyArgs) -> anyhow::Result<()> {
    let url = target_url(a.database, a.config)?;
    let store = accel_store::Store::connect(&url)
        .await
        .with_context(|| format!("opening accel's database {}", redacted(&url)))?;
    if verify::against_local(store, &a.upstream).await? > 0 {
        std::process::exit(1);
    }
    Ok(())
}

#[derive(clap::Args, Debug)]
pub struct ImportPlacementArgs {
    /// The upstream database: sqlite://ABSOLUTE_PATH, postgres://, mysql:// or
    /// mariadb://. Only read, in one read-only transaction.
    #[arg(long = "from", value_name = "URL")]
    pub from: String,
    /// accel's database, as `accel serve --database` takes it [default: the config
    /// file's `database`, else accel serve's default].
    #[arg(long, env = "ACCEL_DATABASE", value_name = "URL")]
    pub database: Option<String>,
    /// accel serve's TOML configuration file, for its `database`.
    #[arg(long, env = "ACCEL_CONFIG")]
    pub config: Option<PathBuf>,
    /// Read and check the source, print the counts per table and the problems found;
    /// write nothing (the target is not opened).
    #[arg(long, conflicts_with_all = ["force", "skip_invalid", "verify"])]
    pub dry_run: bool,
    /// Replace the data the target already holds (Placement's; for `import cyborg`,
    /// the accelerator data).
    #[arg(long)]
    pub force: bool,
    /// Leave inconsistent rows out (each listed) instead of refusing the import.
    #[arg(long)]
    pub skip_invalid: bool,
    /// After importing, compare the upstream Placement API still running on the old
    /// database (noauth2 `x-auth-token: admin`, or $OS_TOKEN) with accel's answers on
    /// the new one; every difference is printed and makes the exit status 1.
    #[arg(long, value_name = "UPSTREAM_API_URL")]
    pub verify: Option<String>,
}

pub fn run(args: ImportArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    match args.what {
        ImportWhat::Placement(a) => rt.block_on(import_placement(a)),
        ImportWhat::Verify(a) => rt.block_on(verify_only(a)),
        ImportWhat::Cyborg(a) => rt.block_on(import_cyborg(a)),
        ImportWhat::VerifyCyborg(a) => rt.block_on(verify_cyborg_only(a)),
    }
}

/// The database URL `accel serve` would open with this `--database` and `--config`.
pub fn target_url(database: Option<String>, config: Option<PathBuf>) -> anyhow::Result<String> {
    let cfg = crate::config::ServeConfig::load(crate::config::ServeArgs {
        config,
        flags: crate::config::ServeFlags {
            database,
            ..Default::default()
        },
    })?;
    cfg.database_url()
}

/// A URL without its password, for messages.
fn redacted(url: &str) -> String {
    crate::config::redact_url(url)
}

/// An export's end: what was written, or the refusal (exit status 1).
fn exported<R: std::fmt::Display>(
    what: &str,
    url: &str,
    to: &str,
    started: std::time::Instant,
    done: Result<Vec<(&'static str, usize)>, R>,
) -> anyhow::Result<()> {
    match done {
        Ok(counts) => {
            println!(
                "exported {} into {} in {:.1} s:",
                redacted(url),
                redacted(to),
                started.elapsed().as_secs_f64()
            );
            print_counts(&counts);
            Ok(())
        }
        Err(refused) => {
            eprintln!("accel export {what}: refused: {refused}");
            std::process::exit(1);
        }
    }
}

fn print_counts(counts: &[(&str, usize)]) {
    for (table, n) in counts {
        println!("  {table:<30} {n}");
    }
}

async fn import_placement(a: ImportPlacementArgs) -> anyhow::Result<()> {
    let source = Source::open(&a.from)
        .await
        .with_context(|| format!("opening the upstream database {}", redacted(&a.from)))?;
    let started = std::time::Instant::now();
    let data = import::read_placement(&source).await;
    source.close().await;
    let data = data.with_context(|| format!("reading {}", redacted(&a.from)))?;
    let read_s = started.elapsed().as_secs_f64();
    if a.dry_run {
        let (problems, valid) = import::check(&data);
        println!(
            "dry run: nothing written; {} would be read:",
            redacted(&a.from)
        );
        print_counts(&data.counts());
        if problems.is_empty() {
            println!("no problems found");
        } else {
            println!(
                "{} problem(s) found (the import refuses them; --skip-invalid would write these counts):",
                problems.len()
            );
            for p in &problems {
                println!("  {p}");
            }
            print_counts(&valid.counts());
            std::process::exit(1);
        }
        return Ok(());
    }
    let target = target_url(a.database, a.config)?;
    let store = accel_store::Store::connect(&target)
        .await
        .with_context(|| format!("opening accel's database {}", redacted(&target)))?;
    let opts = Options {
        force: a.force,
        skip_invalid: a.skip_invalid,
    };
    let done = import::import_placement(&store, &data, opts)
        .await
        .context("importing")?;
    let done = match done {
        Ok(d) => d,
        Err(refused) => {
            store.close().await;
            eprintln!("accel import placement: refused: {refused}");
            std::process::exit(1);
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
    if !done.replaced.is_empty() {
        println!("replaced (--force): {}", describe(&done.replaced));
    }
    if !done.skipped.is_empty() {
        println!(
            "skipped (--skip-invalid), {} problem(s):",
            done.skipped.len()
        );
        for p in &done.skipped {
            println!("  {p}");
        }
    }
    if let Some(upstream) = a.verify {
        let differences = verify::against_local(store, &upstream).await?;
        if differences > 0 {
            std::process::exit(1);
        }
    } else {
        store.close().await;
    }
    Ok(())
}

async fn export_cyborg(a: ExportPlacementArgs) -> anyhow::Result<()> {
    let url = target_url(a.database, a.config)?;
    let store = accel_store::Store::connect(&url)
        .await
        .with_context(|| format!("opening accel's database {}", redacted(&url)))?;
    let started = std::time::Instant::now();
    let data = cyborg::read_accel(&store).await;
    store.close().await;
    let data = data.context("reading accel's accelerator data")?;
    let target = Source::open_for_write(&a.to)
        .await
        .with_context(|| format!("opening the upstream database {}", redacted(&a.to)))?;
    let done = cyborg::export_cyborg(&data, &target).await;
    target.close().await;
    let done = done.with_context(|| format!("writing {}", redacted(&a.to)))?;
    exported("cyborg", &url, &a.to, started, done)
}

async fn verify_cyborg_only(a: VerifyArgs) -> anyhow::Result<()> {
    let url = target_url(a.database, a.config)?;
    let store = accel_store::Store::connect(&url)
        .await
        .with_context(|| format!("opening accel's database {}", redacted(&url)))?;
    if verify_cyborg::against_local(store, &a.upstream).await? > 0 {
        std::process::exit(1);
    }
    Ok(())
}

async fn import_cyborg(a: ImportPlacementArgs) -> anyhow::Result<()> {
    let source = Source::open(&a.from)
        .await
        .with_context(|| format!("opening the upstream database {}", redacted(&a.from)))?;
    let started = std::time::Instant::now();
    let data = cyborg::read_cyborg(&source).await;
    source.close().await;
    let data = data.with_context(|| format!("reading {}", redacted(&a.from)))?;
    if a.dry_run {
        let (problems, valid) = cyborg::check(&data);
        println!(
            "dry run: nothing written; {} would be read:",
            redacted(&a.from)
        );
        print_counts(&data.counts());
        if problems.is_empty() {
            println!("no problems found");
            return Ok(());
        }
        println!(
            "{} problem(s) found (the import refuses them; --skip-invalid would write these counts):",
            problems.len()
        );
        for p in &problems {
            println!("  {p}");
        }
        print_counts(&valid.counts());
        std::process::exit(1);
    }
    let target = target_url(a.database, a.config)?;
    let store = accel_store::Store::connect(&target)
        .await
        .with_context(|| format!("opening accel's database {}", redacted(&target)))?;
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
            eprintln!("accel import cyborg: refused: {refused}");
            std::process::exit(1);
        }
    };
    println!(
        "imported {} into {} in {:.1} s:",
        redacted(&a.from),
        redacted(&target),
        started.elapsed().as_secs_f64()
    );
    print_counts(&done.counts);
    if !done.replaced.is_empty() {
        println!("replaced (--force): {}", describe(&done.replaced));
    }
    if !done.skipped.is_empty() {
        println!(
            "skipped (--skip-invalid), {} problem(s):",
            done.skipped.len()
        );
        for p in &done.skipped {
            println!("  {p}");
        }
    }
    if let Some(upstream) = a.verify {
        if verify_cyborg::against_local(store, &upstream).await? > 0 {
            std::process::exit(1);
        }
    } else {
        store.close().await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn passwords_are_not_printed() {
        assert_eq!(
            super::redacted("mysql://placement:secret@db:3306/placement"),
            "mysql://placement:***@db:3306/placement"
        );
        assert_eq!(
            super::redacted("sqlite:///var/lib/p.db"),
            "sqlite:///var/lib/p.db"
        );
        assert_eq!(super::redacted("postgres://u@h/d"), "postgres://u@h/d");
    }
}
