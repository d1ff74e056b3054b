//! The `clinic` binary: `clinic dev` runs the whole service as one local process; the other
//! subcommands are operator tools (migrate, workspaces, token, outbox, deliveries, reminders,
//! webhooks). `clinic bench` and `clinic chaos` forward to the drills' own binary, `clinic-drill`
//! (functions/drill), found beside this one, so the operator's tool links no test code.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use clinic::commands;

#[derive(Debug, Parser)]
#[command(name = "clinic", version, about = "Clinic event dispatcher: local runner and operator commands")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run API, dispatcher and listeners in one process on 127.0.0.1 (own PostgreSQL unless DATABASE_URL).
    Dev(commands::dev::DevArgs),
    /// Apply pending database migrations to DATABASE_URL (or the local dev cluster).
    Migrate,
    /// Print a bearer token for the local API (and nothing else).
    Token(commands::token::TokenArgs),
    /// Onboarding: create a workspace (prints its id), list workspaces.
    Workspaces(commands::workspaces::WorkspacesArgs),
    /// Operator tooling: list, show, retry, replay, discard, stats, sweep (retention).
    Outbox(commands::outbox::OutboxArgs),
    /// Explain one event end to end: envelope, links, outbox and its history, listeners, custody,
    /// rejections, deliveries, causes, actions.
    Explain(commands::operate::ExplainArgs),
    /// Recorded listener rejections (forged or altered messages), newest first; ids and codes only.
    Rejections(commands::operate::RejectionsArgs),
    /// Pause, resume and list paused listeners (durable, audited).
    Listeners(commands::operate::ListenersArgs),
    /// Notification deliveries: list, retry, discard, send (docs/delivery.md).
    Deliveries(commands::deliveries::DeliveriesArgs),
    /// Webhook endpoints and deliveries: create, list, show, update, disable, enable, delete, rotate,
    /// recover, deliveries, send (docs/webhooks.md).
    Webhooks(commands::webhooks::WebhooksArgs),
    /// Scheduled jobs run by hand: `reminders run`.
    Reminders(commands::reminders::RemindersArgs),
    /// Benchmarks beside the raw-SQL limit (runs `clinic-drill bench …`; build it with
    /// `cargo build -p clinic-drill`).
    #[command(disable_help_flag = true)]
    Bench {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Fault-injection run (runs `clinic-drill chaos …`; build it with `cargo build -p clinic-drill`).
    #[command(disable_help_flag = true)]
    Chaos {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // Every variable any subcommand uses, read once (a bad value stops here, naming it).
    clinic::settings::install(clinic::settings::Settings::read(&clinic_core::config::Env::capture())?);
    match cli.command {
        Command::Dev(args) => commands::dev::run(args).await,
        Command::Migrate => commands::migrate::run().await,
        Command::Token(args) => commands::token::run(args),
        Command::Workspaces(args) => commands::workspaces::run(args).await,
        Command::Outbox(args) => commands::outbox::run(args).await,
        Command::Explain(args) => commands::operate::explain(args).await,
        Command::Rejections(args) => commands::operate::rejections(args).await,
        Command::Listeners(args) => commands::operate::listeners(args).await,
        Command::Deliveries(args) => commands::deliveries::run(args).await,
        Command::Reminders(args) => commands::reminders::run(args).await,
        Command::Webhooks(args) => commands::webhooks::run(args).await,
        Command::Bench { args } => forward_to_drill("bench", &args),
        Command::Chaos { args } => forward_to_drill("chaos", &args),
    }
}

/// Replaces this process with `clinic-drill <command> <args…>` from beside this binary (same
/// profile), or says the one command that builds it.
fn forward_to_drill(command: &str, args: &[String]) -> anyhow::Result<()> {
    use std::os::unix::process::CommandExt;
    let drill = drill_binary()?;
    let error = std::process::Command::new(&drill).arg(command).args(args).exec();
    Err(error).with_context(|| format!("running {}", drill.display()))
}

fn drill_binary() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("locating the clinic binary")?;
    let beside = exe.with_file_name("clinic-drill");
    anyhow::ensure!(
        beside.exists(),
        "{} does not exist: build the drills first (cargo build{} -p clinic-drill)",
        beside.display(),
        if cfg!(debug_assertions) { "" } else { " --release" }
    );
    Ok(beside)
}
