//! The schema as a step of its own (issue 29 item 3): `accel db version`, `accel db
//! sync` and `accel upgrade check`, for operators who run migrations before they roll
//! new servers out (as `placement-manage db sync` and `placement-status upgrade check`
//! do upstream) and start the servers with `--no-migrate`.
//!
//! Every command opens the database that `accel serve` would open with the same
//! `--database` / `--config` (and `ACCEL_DATABASE` / `ACCEL_CONFIG`). Only `db sync`
//! writes. `upgrade check` exits as upstream's checks do: 0 all succeeded, 1 a warning,
//! 2 a failure.

use crate::config::redact_url;
use accel_store::{Schema, Store};
use anyhow::Context;
use serde_json::json;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct DbArgs {
    #[command(subcommand)]
    pub command: DbCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum DbCommand {
    /// The database's schema version, this accel's, and the migrations between them.
    #[command(
        after_help = "Example:\n  accel db version --database postgres://accel@db/accel -f json"
    )]
    Version(Target),
    /// Apply the migrations this accel carries and the database lacks (and the standard
    /// resource classes and traits); safe while servers run and from several hosts.
    #[command(after_help = "Example:\n  accel db sync --config /etc/accel/accel.toml")]
    Sync(Target),
}

#[derive(clap::Args, Debug)]
pub struct UpgradeArgs {
    #[command(subcommand)]
    pub command: UpgradeCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum UpgradeCommand {
    /// Whether this accel can serve the database now: its configuration, the
    /// database, the schema.
    #[command(
        after_help = "Example:\n  accel upgrade check --config /etc/accel/accel.toml\n\nExit status: 0 every check succeeded; 1 a warning (the server will start); 2 a failure"
    )]
    Check(Target),
}

/// Which database, as `accel serve` finds it.
#[derive(clap::Args, Debug)]
pub struct Target {
    /// accel's database, as `accel serve --database` takes it.
    #[arg(long, env = "ACCEL_DATABASE", value_name = "URL")]
    pub database: Option<String>,
    /// accel serve's TOML configuration file, for its `database`.
    #[arg(long, env = "ACCEL_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Output format.
    #[arg(short = 'f', long, default_value = "table", value_parser = ["table", "json"])]
    pub format: String,
}

pub fn run(args: DbArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    match args.command {
        DbCommand::Version(t) => rt.block_on(version(t)),
        DbCommand::Sync(t) => rt.block_on(sync(t)),
    }
}

/// `accel upgrade check`: answers the exit status, the worst result's.
pub fn upgrade(args: UpgradeArgs) -> anyhow::Result<i32> {
    let rt = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let UpgradeCommand::Check(t) = args.command;
    rt.block_on(check(t))
}

async fn open(t: &Target) -> anyhow::Result<(Store, String)> {
    let url = crate::transfer::target_url(t.database.clone(), t.config.clone())?;
    let store = Store::open(&url)
        .await
        .with_context(|| format!("opening database {}", redact_url(&url)))?;
    Ok((store, redact_url(&url)))
}

fn versions(v: &[i64]) -> String {
    if v.is_empty() {
        return "none".to_owned();
    }
    v.iter().map(i64::to_string).collect::<Vec<_>>().join(", ")
}

fn schema_json(database: &str, s: &Schema) -> serde_json::Value {
    json!({
        "database": database,
        "current": s.current(),
        "latest": s.latest(),
        "pending": s.pending(),
        "unknown": s.unknown(),
    })
}

async fn version(t: Target) -> anyhow::Result<()> {
    let (store, shown) = open(&t).await?;
    let s = store.schema().await.context("reading the schema version")?;
    if t.format == "json" {
        println!("{}", schema_json(&shown, &s));
    } else {
        println!("database:       {shown}");
        println!(
            "schema version: {} (this accel: {})",
            s.current(),
            s.latest()
        );
        println!("to apply:       {}", versions(&s.pending()));
        if !s.unknown().is_empty() {
            println!(
                "newer:          {} (applied by a newer accel than this one)",
                versions(&s.unknown())
            );
        }
    }
    store.close().await;
    Ok(())
}

async fn sync(t: Target) -> anyhow::Result<()> {
    let (store, shown) = open(&t).await?;
    let applied = store.migrate().await.context("applying migrations")?;
    store
        .sync_standards()
        .await
        .context("writing the standard resource classes and traits")?;
    let s = store.schema().await.context("reading the schema version")?;
    if t.format == "json" {
        let mut v = schema_json(&shown, &s);
        v["applied"] = json!(applied);
        println!("{v}");
    } else {
        println!(
            "applied: {}; schema version {} on {shown}",
            versions(&applied),
            s.current()
        );
    }
    store.close().await;
    Ok(())
}

/// One check's result, upstream's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Verdict {
    Success,
    Warning,
    Failure,
}

impl Verdict {
    fn as_str(self) -> &'static str {
        match self {
            Verdict::Success => "Success",
            Verdict::Warning => "Warning",
            Verdict::Failure => "Failure",
        }
    }
}

/// What the schema check says of `s`.
fn schema_verdict(s: &Schema) -> (Verdict, String) {
    if !s.unknown().is_empty() {
        return (
            Verdict::Failure,
            format!(
                "the database has schema versions this accel does not know ({}): a newer \
                 accel migrated it; run that version, or restore the backup taken before it",
                versions(&s.unknown())
            ),
        );
    }
    let pending = s.pending();
    if pending.is_empty() {
        return (
            Verdict::Success,
            format!("schema version {}, as this accel expects", s.current()),
        );
    }
    (
        Verdict::Warning,
        format!(
            "schema version {}; this accel applies {} (run `accel db sync` before starting \
             servers with --no-migrate; without it, the first server to start applies them \
             and older servers then report not ready)",
            s.current(),
            versions(&pending)
        ),
    )
}

async fn check(t: Target) -> anyhow::Result<i32> {
    let mut results: Vec<(&str, Verdict, String)> = Vec::new();
    let url = crate::config::ServeConfig::load(crate::config::ServeArgs {
        config: t.config.clone(),
        flags: crate::config::ServeFlags {
            database: t.database.clone(),
            ..Default::default()
        },
    })
    .and_then(|c| {
        c.server_config()?;
        c.database_url()
    });
    match url {
        Err(e) => results.push(("Configuration", Verdict::Failure, format!("{e:#}"))),
        Ok(url) => {
            results.push((
                "Configuration",
                Verdict::Success,
                "the configuration loads".to_owned(),
            ));
            let shown = redact_url(&url);
            match Store::open(&url).await {
                Err(e) => results.push(("Database", Verdict::Failure, format!("{shown}: {e}"))),
                Ok(store) => {
                    results.push(("Database", Verdict::Success, format!("{shown} answers")));
                    match store.schema().await {
                        Err(e) => results.push(("Schema", Verdict::Failure, e.to_string())),
                        Ok(s) => {
                            let (v, d) = schema_verdict(&s);
                            results.push(("Schema", v, d));
                        }
                    }
                    store.close().await;
                }
            }
        }
    }
    let worst = results
        .iter()
        .map(|(_, v, _)| *v)
        .max()
        .unwrap_or(Verdict::Success);
    if t.format == "json" {
        let checks: Vec<_> = results
            .iter()
            .map(|(c, v, d)| json!({"check": c, "result": v.as_str(), "details": d}))
            .collect();
        println!("{}", json!({"result": worst.as_str(), "checks": checks}));
    } else {
        for (c, v, d) in &results {
            println!("Check: {c}\n  Result: {}\n  Details: {d}", v.as_str());
        }
    }
    Ok(match worst {
        Verdict::Success => 0,
        Verdict::Warning => 1,
        Verdict::Failure => 2,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema(applied: &[i64], known: &[i64]) -> Schema {
        Schema {
            applied: applied.to_vec(),
            known: known.to_vec(),
        }
    }

    #[test]
    fn the_schema_check_says_what_to_do() {
        let (v, d) = schema_verdict(&schema(&[1, 2, 3], &[1, 2, 3]));
        assert_eq!(v, Verdict::Success, "{d}");
        let (v, d) = schema_verdict(&schema(&[1, 2], &[1, 2, 3, 4]));
        assert_eq!(v, Verdict::Warning);
        assert!(
            d.contains("applies 3, 4") && d.contains("accel db sync"),
            "{d}"
        );
        let (v, d) = schema_verdict(&schema(&[1, 2, 3, 4], &[1, 2, 3]));
        assert_eq!(v, Verdict::Failure);
        assert!(d.contains("(4)") && d.contains("newer accel"), "{d}");
        let (v, _) = schema_verdict(&schema(&[], &[1]));
        assert_eq!(v, Verdict::Warning);
    }
}
