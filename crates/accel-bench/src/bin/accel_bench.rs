//! `accel-bench`: whole-cloud benchmarks (`accel-bench cloud`, see
//! `accel_bench::cloud`) and allocation candidates over partitioned GPUs
//! (`accel-bench partitions`, see `accel_bench::partitions`). The single-API load drivers are their own binaries
//! (`placement-load`, `arq-load`, `console-load`).

use clap::Parser;

#[derive(Parser)]
#[command(about = "Whole-cloud benchmarks of accel (docs/benchmarks.md)")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    /// N compute nodes with M devices each, driven as Nova 34, Cyborg's workflow and
    /// accel's agents drive them: periodic updates, reports, and boots and deletes at
    /// an open-loop rate.
    Cloud(accel_bench::cloud::CloudArgs),
    /// N compute nodes with M MIG-mode GPUs each, reported by their agents and partly
    /// held in Placement; allocation candidates for MIG profiles and for the whole GPU.
    Partitions(accel_bench::partitions::PartitionsArgs),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Cloud(args) => accel_bench::cloud::run(args).await,
        Command::Partitions(args) => accel_bench::partitions::run(args).await,
    }
}
