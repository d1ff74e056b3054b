//! `clinic outbox list|show|retry|replay|discard|stats|sweep`: operator tooling without SQL.
//!
//! Every command connects to `DATABASE_URL` (or the local dev cluster) and prints one JSON document
//! on stdout. `retry`, `replay` and `discard` need `--actor` (who is acting, recorded in
//! `operator_actions`) and a non-blank `--reason`; both are checked before the database is touched,
//! and the action, its status check and its audit row commit in one transaction (see
//! `clinic_core::operator`). A status that does not fit the action fails with a message and records
//! nothing. Without `--workspace` the commands see every workspace.

use anyhow::{anyhow, Context};
use clinic_core::error::DomainError;
use clinic_core::events::EventType;
use clinic_core::housekeeping::retention::RetentionConfig;
use clinic_core::housekeeping::{Job, Sweep};
use clinic_core::ids::{EventId, WorkspaceId};
use clinic_core::lease::ActionKind;
use clinic_core::operator::{self, ActionRequest, Operator, OutboxFilter};
use clinic_core::outbox::OutboxStatus;
use deadpool_postgres::Pool;

#[derive(Debug, clap::Args)]
pub struct OutboxArgs {
    #[command(subcommand)]
    command: OutboxCommand,
}

#[derive(Debug, clap::Subcommand)]
enum OutboxCommand {
    /// List outbox rows, newest first (ids, types, statuses and error codes only).
    List(ListArgs),
    /// Show one row with its listener starts, receipts and operator history.
    Show(ShowArgs),
    /// Make a dead or retry row due now (same event id; a fresh attempt budget).
    Retry(ActionArgs),
    /// Start a dispatched event's listeners again under the same event id (all, or --listener ones).
    Replay(ReplayArgs),
    /// Discard a dead row for good.
    Discard(ActionArgs),
    /// Counts by status, the oldest due row's wait, dead rows by error code.
    Stats(ScopeArgs),
    /// Retry, replay or discard every row matching a filter (`--dry-run` counts only).
    Bulk(Box<super::operate::BulkArgs>),
    /// Delete finished outbox rows, listener starts and receipts older than the retention, expired
    /// idempotency keys and reminder claims of long-past start times (docs/retention.md).
    Sweep(SweepArgs),
    /// (event, listener) pairs still missing their receipt: the ones the custody reconciler gave up
    /// on, or with --all every overdue one (replay the event for that listener to start it afresh).
    Unsettled(UnsettledArgs),
}

#[derive(Debug, clap::Args)]
struct UnsettledArgs {
    /// Also the pairs the reconciler is still restarting (not only the stuck ones).
    #[arg(long)]
    all: bool,
    /// Only pairs started at least this many seconds ago.
    #[arg(long, default_value_t = 0)]
    older_than_secs: u64,
    /// Pairs listed (1–1000).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(i64).range(1..=1000))]
    limit: i64,
}

#[derive(Debug, clap::Args)]
struct ScopeArgs {
    /// Only this workspace (ULID).
    #[arg(long)]
    workspace: Option<String>,
}

#[derive(Debug, clap::Args)]
struct ListArgs {
    #[command(flatten)]
    scope: ScopeArgs,
    /// pending, claimed, dispatched, retry, dead or discarded.
    #[arg(long)]
    status: Option<String>,
    /// An event type, e.g. appointment.created.
    #[arg(long)]
    event_type: Option<String>,
    /// Only rows at least this old: seconds, or a number with unit s, m, h or d (e.g. 2h).
    #[arg(long)]
    older_than: Option<String>,
    /// Rows per page (1–1000).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(i64).range(1..=1000))]
    limit: i64,
    /// The next page: rows older than this event id (the previous page's `nextBefore`).
    #[arg(long)]
    before: Option<String>,
}

#[derive(Debug, clap::Args)]
struct ShowArgs {
    /// The event id (ULID).
    event_id: String,
    #[command(flatten)]
    scope: ScopeArgs,
}

#[derive(Debug, clap::Args)]
struct ActionArgs {
    /// The event id (ULID).
    event_id: String,
    /// Who is acting (recorded in operator_actions), e.g. `ops:alice`.
    #[arg(long)]
    actor: String,
    /// Why (required, not blank; stored in the audit log, never logged).
    #[arg(long)]
    reason: String,
    #[command(flatten)]
    scope: ScopeArgs,
}

#[derive(Debug, clap::Args)]
struct ReplayArgs {
    #[command(flatten)]
    action: ActionArgs,
    /// Replay only this listener (repeatable); every listener of the event type when omitted.
    #[arg(long = "listener")]
    listeners: Vec<String>,
}

#[derive(Debug, clap::Args)]
struct SweepArgs {
    /// Overrides CLINIC_RETENTION_HOURS (default 360).
    #[arg(long)]
    retention_hours: Option<u64>,
    /// Overrides CLINIC_RETENTION_BATCH (default 1000): rows examined per statement.
    #[arg(long)]
    batch: Option<i64>,
    /// Overrides CLINIC_RETENTION_BUDGET_SECS (default 30).
    #[arg(long)]
    budget_secs: Option<u64>,
}

pub async fn run(args: OutboxArgs) -> anyhow::Result<()> {
    match args.command {
        OutboxCommand::List(args) => list(args).await,
        OutboxCommand::Show(args) => show(args).await,
        OutboxCommand::Retry(args) => act(ActionKind::Retry, args, None).await,
        OutboxCommand::Replay(args) => act(ActionKind::Replay, args.action, Some(args.listeners)).await,
        OutboxCommand::Discard(args) => act(ActionKind::Discard, args, None).await,
        OutboxCommand::Stats(args) => stats(args).await,
        OutboxCommand::Sweep(args) => sweep(args).await,
        OutboxCommand::Unsettled(args) => unsettled(args).await,
        OutboxCommand::Bulk(args) => super::operate::bulk(*args).await,
    }
}

/// A pool of two connections on `DATABASE_URL` (or the dev cluster, started when needed).
pub async fn pool() -> anyhow::Result<(Pool, Option<crate::local_pg::LocalPostgres>)> {
    let (url, cluster) = crate::settings::database()?;
    let settings = crate::settings::current();
    let pool =
        clinic_core::db::connect_pool_as(&url, 2, settings.ca_file.as_deref(), None, &settings.db_timeouts)
            .context("connecting to the database")?;
    Ok((pool, cluster))
}

/// Prints one JSON document on stdout.
pub fn print(value: serde_json::Value) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(&value)?);
    Ok(())
}

fn workspace(scope: &ScopeArgs) -> anyhow::Result<Option<WorkspaceId>> {
    scope
        .workspace
        .as_deref()
        .map(|raw| raw.parse().map_err(|_| anyhow!("--workspace must be a ULID")))
        .transpose()
}

fn event_id(raw: &str) -> anyhow::Result<EventId> {
    raw.parse().map_err(|_| anyhow!("the event id must be a ULID (26 characters)"))
}

/// Why an action request was refused before anything was looked up: a bad flag (`listeners` is
/// reported as `--<listener_flag>`), or a replay naming only listeners this build does not know (the
/// API's 409).
pub fn refused_request(error: DomainError, listener_flag: &str) -> anyhow::Error {
    match error {
        DomainError::Invalid(e) => {
            anyhow!(
                "invalid --{}: {}",
                if e.field == "listeners" { listener_flag } else { &e.field },
                e.message
            )
        }
        DomainError::UnknownListeners(_) => {
            anyhow!("refused (409): {error}; nothing was changed or recorded")
        }
        other => anyhow::Error::new(other),
    }
}

/// Turns a use-case error into a message an operator can act on.
fn explain(error: DomainError, event: EventId) -> anyhow::Error {
    match error {
        DomainError::NotFound => anyhow!("no outbox row for event {event} (in scope)"),
        DomainError::Conflict(detail) => anyhow!("refused: {detail}; nothing was changed or recorded"),
        DomainError::Invalid(field) => anyhow!("invalid {}: {}", field.field, field.message),
        DomainError::UnknownListeners(_) => {
            anyhow!("refused (409): {error}; nothing was changed or recorded")
        }
        other => anyhow::Error::new(other).context("the action failed; nothing was changed"),
    }
}

async fn list(args: ListArgs) -> anyhow::Result<()> {
    let status = args
        .status
        .as_deref()
        .map(|raw| OutboxStatus::parse(raw).ok_or_else(|| anyhow!("--status must be an outbox status")))
        .transpose()?;
    let event_type = args
        .event_type
        .as_deref()
        .map(|raw| EventType::parse(raw).ok_or_else(|| anyhow!("--event-type must be an event type")))
        .transpose()?;
    let older_than = args
        .older_than
        .as_deref()
        .map(|raw| {
            operator::parse_age(raw).ok_or_else(|| anyhow!("--older-than must look like 90, 15m, 2h or 7d"))
        })
        .transpose()?;
    let before = args.before.as_deref().map(event_id).transpose()?;
    let filter = OutboxFilter {
        workspace: workspace(&args.scope)?,
        status,
        event_type,
        older_than,
        before,
        ..Default::default()
    };
    let (pool, _cluster) = pool().await?;
    let client = pool.get().await?;
    let items = operator::list(&client, &filter, args.limit).await?;
    let next_before =
        (items.len() as i64 == args.limit).then(|| items.last().map(|item| item.event_id)).flatten();
    print(serde_json::json!({ "items": items, "nextBefore": next_before }))
}

async fn show(args: ShowArgs) -> anyhow::Result<()> {
    let event = event_id(&args.event_id)?;
    let scope = workspace(&args.scope)?;
    let (pool, _cluster) = pool().await?;
    let client = pool.get().await?;
    let detail =
        operator::show(&client, scope, event).await?.ok_or_else(|| explain(DomainError::NotFound, event))?;
    print(serde_json::to_value(detail)?)
}

async fn act(action: ActionKind, args: ActionArgs, listeners: Option<Vec<String>>) -> anyhow::Result<()> {
    let operator = Operator::parse(&args.actor).map_err(|e| anyhow!("invalid --actor: {}", e.message))?;
    let listeners = listeners.filter(|names| !names.is_empty());
    let request = ActionRequest::new(action, &args.reason, listeners.as_deref())
        .map_err(|error| refused_request(error, "listener"))?;
    let event = event_id(&args.event_id)?;
    let scope = workspace(&args.scope)?;
    let (pool, _cluster) = pool().await?;
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    let record = match operator::perform(&tx, scope, event, &request, &operator).await {
        Ok(record) => record,
        Err(error) => {
            tx.rollback().await?;
            return Err(explain(error, event));
        }
    };
    tx.commit().await?;
    print(serde_json::to_value(record)?)
}

async fn stats(args: ScopeArgs) -> anyhow::Result<()> {
    let scope = workspace(&args)?;
    let (pool, _cluster) = pool().await?;
    let client = pool.get().await?;
    print(serde_json::to_value(operator::stats(&client, scope).await?)?)
}

async fn sweep(args: SweepArgs) -> anyhow::Result<()> {
    let mut config: RetentionConfig = crate::settings::current().retention;
    if let Some(hours) = args.retention_hours {
        anyhow::ensure!((1..=87_600).contains(&hours), "--retention-hours must be between 1 and 87600");
        config.retention = std::time::Duration::from_secs(hours * 3600);
    }
    if let Some(batch) = args.batch {
        anyhow::ensure!((1..=10_000).contains(&batch), "--batch must be between 1 and 10000");
        config.batch = batch;
    }
    if let Some(secs) = args.budget_secs {
        anyhow::ensure!((1..=900).contains(&secs), "--budget-secs must be between 1 and 900");
        config.budget = std::time::Duration::from_secs(secs);
    }
    let (pool, _cluster) = pool().await?;
    // The housekeeping Lambda's `sweep` job, with no deadline (its own budget bounds it).
    let report = Sweep { pool, config }.run(None).await?;
    print(serde_json::to_value(report)?)
}

async fn unsettled(args: UnsettledArgs) -> anyhow::Result<()> {
    let (pool, _cluster) = pool().await?;
    let client = pool.get().await?;
    let older = std::time::Duration::from_secs(args.older_than_secs);
    let pairs =
        clinic_core::housekeeping::reconcile::list_unsettled(&client, None, older, args.all, args.limit)
            .await?;
    print(serde_json::json!({ "items": pairs }))
}
