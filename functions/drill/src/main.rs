//! `clinic-drill`: the drills, kept out of the operator's `clinic` binary because they need the test
//! transports and the testkit (`testing` features). `clinic bench …` and `clinic chaos …` forward here.
//!
//! - `bench`: benchmarks beside the raw-SQL limit ([`bench`], docs/benchmarks.md);
//! - `chaos`: the fault-injection run ([`chaos`], docs/chaos.md);
//! - `dispatch-loop` (hidden): the dispatcher as its own process, for `chaos` to kill.

mod bench;
mod chaos;
mod settings;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "clinic-drill", version, about = "Clinic event dispatcher: benchmarks and fault injection")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Benchmarks beside the raw-SQL limit: write, dispatch, latency, lists, all (`--smoke` for a quick check).
    Bench(bench::BenchArgs),
    /// Fault-injection run: writers under dispatcher kills and a PostgreSQL restart, then every check.
    Chaos(chaos::ChaosArgs),
    /// The dispatcher as its own process, for `chaos` to kill (internal).
    #[command(hide = true)]
    DispatchLoop,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let command = Cli::parse().command;
    if let Command::Chaos(_) = command {
        chaos::prepare_environment();
    }
    // The environment, read once: the `clinic` tree the shared code uses, and the drills' own.
    let env = clinic_core::config::Env::capture();
    clinic::settings::install(clinic::settings::Settings::read(&env)?);
    settings::install(settings::Settings::read(&env));
    match command {
        Command::Bench(args) => bench::run(args).await,
        Command::Chaos(args) => chaos::run(args).await,
        Command::DispatchLoop => chaos::dispatch_loop().await,
    }
}
