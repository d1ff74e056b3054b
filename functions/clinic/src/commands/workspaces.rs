//! `clinic workspaces create --name … [--time-zone …]`, `clinic workspaces list`,
//! `clinic workspaces quiet-hours <id> --start HH:MM --end HH:MM [--bypass change_notice]` and
//! `clinic workspaces weight <id> <1–100>`: onboarding a clinic, setting its contact policy and its
//! share of the senders' claims without SQL (docs/onboarding.md, docs/delivery.md).
//!
//! Like `clinic migrate`, both run against `DATABASE_URL` (TLS per its `sslmode`, `CLINIC_DB_CA_FILE`)
//! or the local dev cluster. `create` checks the name and the IANA time zone before it connects and
//! prints only the new workspace's id, so a script can capture it; `list` prints one JSON document.

use anyhow::{anyhow, Context};
use clinic_core::domain::contact::MessageKind;
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
    /// Set a workspace's quiet hours (wall-clock, in each patient's zone; start = end: none) and the
    /// kinds that may bypass them (only `change_notice`, a same-day change by the clinic).
    QuietHours(QuietHoursArgs),
    /// Set a workspace's delivery weight: its share of every notification and webhook claim among
    /// the clinics with due work (1–100; default 1; 3 = three rows per turn of a clinic at 1).
    Weight(WeightArgs),
}

#[derive(Debug, clap::Args)]
struct WeightArgs {
    /// The workspace's id.
    workspace: String,
    /// The weight, a whole number from 1 to 100.
    weight: String,
}

#[derive(Debug, clap::Args)]
struct QuietHoursArgs {
    /// The workspace's id.
    workspace: String,
    /// Start of the quiet hours, HH:MM (default 21:00).
    #[arg(long, default_value = "21:00")]
    start: String,
    /// End of the quiet hours, HH:MM (default 08:00).
    #[arg(long, default_value = "08:00")]
    end: String,
    /// A kind that may bypass quiet hours when it changes the patient's today: only `change_notice`.
    #[arg(long)]
    bypass: Vec<String>,
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
        WorkspacesCommand::QuietHours(args) => quiet_hours(args).await,
        WorkspacesCommand::Weight(args) => weight(args).await,
    }
}

async fn weight(args: WeightArgs) -> anyhow::Result<()> {
    let workspace: clinic_core::ids::WorkspaceId =
        args.workspace.parse().map_err(|_| anyhow!("<workspace>: must be a workspace id"))?;
    let weight = workspaces::DeliveryWeight::parse("<weight>", &args.weight).map_err(|e| anyhow!("{e}"))?;
    let (pool, _cluster) = crate::commands::outbox::pool().await?;
    let client = pool.get().await.context("connecting to the database")?;
    let stored = workspaces::set_delivery_weight(&client, workspace, weight)
        .await
        .context("setting the delivery weight")?
        .ok_or_else(|| anyhow!("<workspace>: no workspace {workspace}"))?;
    crate::commands::outbox::print(serde_json::json!({ "id": workspace, "deliveryWeight": stored }))
}

async fn quiet_hours(args: QuietHoursArgs) -> anyhow::Result<()> {
    let workspace: clinic_core::ids::WorkspaceId =
        args.workspace.parse().map_err(|_| anyhow!("<workspace>: must be a workspace id"))?;
    let time = |flag: &str, raw: &str| {
        chrono::NaiveTime::parse_from_str(raw, "%H:%M")
            .map_err(|_| anyhow!("{flag}: must be HH:MM, e.g. 21:00"))
    };
    let (start, end) = (time("--start", &args.start)?, time("--end", &args.end)?);
    let mut bypass = Vec::new();
    for raw in &args.bypass {
        match MessageKind::parse(raw) {
            Some(kind) if kind == clinic_core::delivery::policy::BYPASSABLE => bypass.push(kind),
            _ => return Err(anyhow!("--bypass: only `change_notice` may bypass quiet hours, not {raw:?}")),
        }
    }
    let (pool, _cluster) = crate::commands::outbox::pool().await?;
    let client = pool.get().await.context("connecting to the database")?;
    if !workspaces::set_quiet_hours(&client, workspace, start, end, &bypass)
        .await
        .context("setting quiet hours")?
    {
        return Err(anyhow!("<workspace>: no workspace {workspace}"));
    }
    let settings = workspaces::contact_settings(&client, workspace).await.context("reading them back")?;
    let settings = settings.ok_or_else(|| anyhow!("<workspace>: no workspace {workspace}"))?;
    crate::commands::outbox::print(serde_json::json!({
        "id": workspace,
        "quietHoursStart": settings.quiet_hours_start.format("%H:%M").to_string(),
        "quietHoursEnd": settings.quiet_hours_end.format("%H:%M").to_string(),
        "quietHoursBypass": settings.quiet_hours_bypass,
    }))
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
