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

mod cyborg;
mod placement;
pub mod verify;
pub mod verify_cyborg;

use accel_store::import::write::describe;
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
    /// Read accel's data and check the upstream database (its schema, and that it
    /// is empty); print the counts that would be written; write nothing (the
    /// upstream database is opened read-only).
    #[arg(long, conflicts_with = "verify")]
    pub dry_run: bool,
    /// After exporting, compare the upstream API already running on the upstream
    /// database (noauth2 `x-auth-token: admin`, or $OS_TOKEN) with accel's answers on
    /// accel's; every difference is printed and makes the exit status 1.
    #[arg(long, value_name = "UPSTREAM_API_URL")]
    pub verify: Option<String>,
}

pub fn export(args: ExportArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    match args.what {
        ExportWhat::Placement(a) => rt.block_on(placement::export(a)),
        ExportWhat::Cyborg(a) => rt.block_on(cyborg::export(a)),
    }
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
        ImportWhat::Placement(a) => rt.block_on(placement::import(a)),
        ImportWhat::Verify(a) => rt.block_on(placement::verify_only(a)),
        ImportWhat::Cyborg(a) => rt.block_on(cyborg::import(a)),
        ImportWhat::VerifyCyborg(a) => rt.block_on(cyborg::verify_only(a)),
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

/// accel's database at `url`, opened as `accel serve` opens it.
async fn open_store(url: &str) -> anyhow::Result<accel_store::Store> {
    accel_store::Store::connect(url)
        .await
        .with_context(|| format!("opening accel's database {}", redacted(url)))
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
        Err(refused) => refused_exit("export", what, &refused),
    }
}

/// An export's dry run: the target checked read-only, the counts that would go in.
fn export_checked<R: std::fmt::Display>(
    what: &str,
    to: &str,
    counts: &[(&str, usize)],
    checked: Result<(), R>,
) -> anyhow::Result<()> {
    if let Err(refused) = checked {
        refused_exit("export", what, &refused);
    }
    println!(
        "dry run: nothing written; {} is ready and would receive:",
        redacted(to)
    );
    print_counts(counts);
    Ok(())
}

/// A refusal's last words: the message on stderr, exit status 1.
fn refused_exit(verb: &str, what: &str, refused: &dyn std::fmt::Display) -> ! {
    eprintln!("accel {verb} {what}: refused: {refused}");
    std::process::exit(1);
}

fn print_counts(counts: &[(&str, usize)]) {
    for (table, n) in counts {
        println!("  {table:<30} {n}");
    }
}

/// A dry run's or an import's list of problems (rows refused or left out).
fn print_lines<T: std::fmt::Display>(heading: &str, items: &[T]) {
    if items.is_empty() {
        return;
    }
    println!("{heading}");
    for p in items {
        println!("  {p}");
    }
}

/// What an import did beyond its counts: replaced, kept, left out.
fn print_outcome<P: std::fmt::Display>(
    replaced: &[(&str, i64)],
    kept: &[(&str, i64)],
    skipped: &[P],
) {
    if !replaced.is_empty() {
        println!("replaced (--force): {}", describe(replaced));
    }
    if !kept.is_empty() {
        println!(
            "kept (accelerator data; none of it loses its provider): {}",
            describe(kept)
        );
    }
    let heading = format!("skipped (--skip-invalid), {} problem(s):", skipped.len());
    print_lines(&heading, skipped);
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
