//! The `clinic` binary: `clinic dev` runs the whole service as one local process; the other
//! subcommands are operator tools and drills (migrate, workspaces, token, outbox, deliveries,
//! reminders, webhooks, bench, chaos).

mod commands;
mod dev_dispatcher;
mod local_pg;
mod settings;
mod sqs_consumer;

use clap::{Parser, Subcommand};

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
    /// Benchmarks beside the raw-SQL limit: write, dispatch, latency, lists, all (`--smoke` for a quick check).
    Bench(commands::bench::BenchArgs),
    /// Fault-injection run: writers under dispatcher kills and a PostgreSQL restart, then every check.
    Chaos(commands::chaos::ChaosArgs),
    /// The dispatcher as its own process, for `clinic chaos` to kill (internal).
    #[command(hide = true)]
    DispatchLoop,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
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
        Command::Bench(args) => commands::bench::run(args).await,
        Command::Chaos(args) => commands::chaos::run(args).await,
        Command::DispatchLoop => commands::chaos::dispatch_loop().await,
    }
}
