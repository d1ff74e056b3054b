//! `clinic workspaces create --name … [--time-zone …]` and `clinic workspaces list`: onboarding a clinic
//! without SQL (docs/onboarding.md).
//!
//! Like `clinic migrate`, both run against `DATABASE_URL` (TLS per its `sslmode`, `CLINIC_DB_CA_FILE`)
//! or the local dev cluster. `create` checks the name and the IANA time zone before it connects and
//! prints only the new workspace's id, so a script can capture it; `list` prints one JSON document.

use anyhow::{anyhow, Context};
use clinic_core::domain::values::Name;
use clinic_core::workspaces::{self, TimeZone};

#[derive(Debug, clap::Args)]
pub struct WorkspacesArgs {
    #[command(subcommand)]
    command: WorkspacesCommand,
}

#[derive(Debug, clap::Subcommand)]
enum WorkspacesCommand {
    /// Create a workspace (a clinic) and print only its id.
    Create(CreateArgs),
    /// Every workspace, oldest first, as JSON (id, name, timeZone, createdAt).
    List,
}

#[derive(Debug, clap::Args)]
struct CreateArgs {
    /// The clinic's name (1–200 characters).
    #[arg(long)]
    name: String,
    /// IANA time zone used to render times for people, e.g. Europe/Lisbon.
    #[arg(long, default_value = "UTC")]
    time_zone: String,
}

pub async fn run(args: WorkspacesArgs) -> anyhow::Result<()> {
    match args.command {
        WorkspacesCommand::Create(args) => create(args).await,
        WorkspacesCommand::List => list().await,
    }
}

async fn create(args: CreateArgs) -> anyhow::Result<()> {
    let name = Name::parse("--name", args.name).map_err(|e| anyhow!("{e}"))?;
    let time_zone = TimeZone::parse("--time-zone", &args.time_zone).map_err(|e| anyhow!("{e}"))?;
    let (pool, _cluster) = crate::commands::outbox::pool().await?;
    let client = pool.get().await.context("connecting to the database")?;
    let workspace = workspaces::create(&client, name, time_zone).await.context("creating the workspace")?;
    println!("{}", workspace.id);
    Ok(())
}

async fn list() -> anyhow::Result<()> {
    let (pool, _cluster) = crate::commands::outbox::pool().await?;
    let client = pool.get().await.context("connecting to the database")?;
    let all = workspaces::list(&client).await.context("listing workspaces")?;
    crate::commands::outbox::print(serde_json::json!({ "items": all }))
}
