//! `clinic explain <eventId>`, `clinic rejections`, `clinic outbox|deliveries|webhooks bulk
//! retry|replay|discard` (one generic bulk over the lease queue, `clinic_core::operator::bulk`) and
//! `clinic listeners list|pause|resume`: the console's use cases from the shell (see
//! `clinic_core::operator`). Each prints one JSON document; `--actor` and `--reason` are checked
//! before the database is touched. Without `--workspace`, explain and bulk see every workspace;
//! pause and resume always name one.

use anyhow::{anyhow, Context};
use clinic_core::ids::{EventId, WorkspaceId};
use clinic_core::lease::ActionKind;
use clinic_core::listeners::Listener;
use clinic_core::operator::{
    self, bulk, pause, ActionRequest, BulkRequest, OperatedQueue, Operator, Outbox, Reason,
};

use super::outbox::{pool, print};

#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    /// The event id (ULID).
    event_id: String,
    /// Only this workspace (ULID).
    #[arg(long)]
    workspace: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct RejectionsArgs {
    /// Only this workspace (ULID); without it, every workspace.
    #[arg(long)]
    workspace: Option<String>,
    /// Only deliveries that claimed this event id (ULID; it may match no event).
    #[arg(long)]
    event_id: Option<String>,
    /// Only this reason code (unknown_event, tenant_mismatch, …).
    #[arg(long)]
    reason: Option<String>,
    /// At most this many (1–1000).
    #[arg(long, default_value_t = 100)]
    limit: i64,
}

#[derive(Debug, clap::Args)]
pub struct BulkArgs {
    /// retry, replay (outbox only) or discard.
    action: String,
    /// Who is acting (recorded in operator_actions), e.g. `ops:alice`.
    #[arg(long)]
    actor: String,
    /// Why (required, not blank; stored in the audit log, never logged).
    #[arg(long)]
    reason: String,
    /// Count and sample only; change nothing.
    #[arg(long)]
    dry_run: bool,
    /// At most this many rows (1–5000).
    #[arg(long, default_value_t = 1000)]
    limit: i64,
    /// Replay only this listener (repeatable).
    #[arg(long = "listener-only")]
    only: Vec<String>,
    /// Only this workspace (ULID).
    #[arg(long)]
    workspace: Option<String>,
    #[arg(long)]
    status: Option<String>,
    #[arg(long)]
    event_type: Option<String>,
    /// Events routed to this listener.
    #[arg(long)]
    listener: Option<String>,
    #[arg(long)]
    error_code: Option<String>,
    /// Created at or after (RFC 3339).
    #[arg(long)]
    from: Option<String>,
    /// Created before (RFC 3339).
    #[arg(long)]
    to: Option<String>,
    #[arg(long)]
    older_than: Option<String>,
    /// Notifications only: this template.
    #[arg(long)]
    template: Option<String>,
    /// Webhook deliveries only: to this endpoint (ULID).
    #[arg(long)]
    endpoint_id: Option<String>,
    /// Events linked to this resource (ULID).
    #[arg(long)]
    resource_id: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct ListenersArgs {
    #[command(subcommand)]
    command: ListenersCommand,
}

#[derive(Debug, clap::Subcommand)]
enum ListenersCommand {
    /// Paused listeners and the rows each holds.
    List {
        #[arg(long)]
        workspace: Option<String>,
    },
    /// Pause a listener in one workspace (its starts are held; durable).
    Pause(PauseArgs),
    /// Resume a listener and release what it held, in event order.
    Resume(PauseArgs),
}

#[derive(Debug, clap::Args)]
struct PauseArgs {
    listener: String,
    #[arg(long)]
    workspace: String,
    #[arg(long)]
    actor: String,
    #[arg(long)]
    reason: String,
}

fn workspace(raw: Option<&str>) -> anyhow::Result<Option<WorkspaceId>> {
    raw.map(|raw| raw.parse().map_err(|_| anyhow!("--workspace must be a ULID"))).transpose()
}

pub async fn rejections(args: RejectionsArgs) -> anyhow::Result<()> {
    use clinic_core::listeners::rejections::{list, RejectionFilter};
    use clinic_core::listeners::Rejection;
    if !(1..=1000).contains(&args.limit) {
        return Err(anyhow!("--limit must be 1 to 1000"));
    }
    let filter = RejectionFilter {
        workspace: workspace(args.workspace.as_deref())?,
        event_id: args
            .event_id
            .as_deref()
            .map(|raw| raw.parse::<EventId>().map_err(|_| anyhow!("--event-id must be a ULID")))
            .transpose()?,
        reason: args
            .reason
            .as_deref()
            .map(|raw| {
                Rejection::parse(raw).ok_or_else(|| anyhow!("--reason must be a rejection reason code"))
            })
            .transpose()?,
        before: None,
    };
    let (pool, _cluster) = pool().await?;
    let client = pool.get().await?;
    let items = list(&client, &filter, args.limit).await.context("listing rejections")?;
    print(serde_json::json!({ "items": items }))
}

pub async fn explain(args: ExplainArgs) -> anyhow::Result<()> {
    let event: EventId =
        args.event_id.parse().map_err(|_| anyhow!("the event id must be a ULID (26 characters)"))?;
    let scope = workspace(args.workspace.as_deref())?;
    let (pool, _cluster) = pool().await?;
    let client = pool.get().await?;
    let explanation = operator::explain(&client, scope, event)
        .await
        .context("explaining the event")?
        .ok_or_else(|| anyhow!("no event {event} (in scope)"))?;
    print(serde_json::to_value(explanation)?)
}

/// `clinic outbox bulk`: the outbox's bulk recovery.
pub async fn bulk(args: BulkArgs) -> anyhow::Result<()> {
    bulk_of::<Outbox>(args).await
}

/// Bulk recovery of queue `Q` (`clinic outbox bulk`, `clinic deliveries bulk`, `clinic webhooks
/// bulk`): the filter flags of the queue's filter fields; a flag the queue has no field for is
/// refused by name.
pub async fn bulk_of<Q: OperatedQueue>(args: BulkArgs) -> anyhow::Result<()> {
    let action = ActionKind::parse(&args.action)
        .ok_or_else(|| anyhow!("the action must be retry, replay or discard"))?;
    let operator = Operator::parse(&args.actor).map_err(|e| anyhow!("invalid --actor: {}", e.message))?;
    let only = (!args.only.is_empty()).then_some(args.only.clone());
    let request = ActionRequest::new(action, &args.reason, only.as_deref())
        .map_err(|error| super::outbox::refused_request(error, "listener-only"))?;
    let given = [
        ("status", &args.status),
        ("eventType", &args.event_type),
        ("listener", &args.listener),
        ("errorCode", &args.error_code),
        ("from", &args.from),
        ("to", &args.to),
        ("olderThan", &args.older_than),
        ("resourceId", &args.resource_id),
        ("template", &args.template),
        ("endpointId", &args.endpoint_id),
    ];
    if let Some((name, _)) =
        given.iter().find(|(name, value)| value.is_some() && !Q::FILTER_FIELDS.contains(name))
    {
        return Err(anyhow!("{name} is not a filter of the {} queue", Q::ACTIONS.queue.name));
    }
    let field =
        |name: &str| given.iter().find(|(field, _)| *field == name).and_then(|(_, value)| (*value).clone());
    let filter = Q::parse_filter(field).map_err(|e| anyhow!("invalid filter {}: {}", e.field, e.message))?;
    anyhow::ensure!((1..=bulk::MAX_LIMIT).contains(&args.limit), "--limit must be 1-{}", bulk::MAX_LIMIT);
    let request = BulkRequest {
        filter,
        workspace: workspace(args.workspace.as_deref())?,
        action: request,
        dry_run: args.dry_run,
        limit: args.limit,
    };
    let (pool, _cluster) = pool().await?;
    let mut client = pool.get().await?;
    let answer = bulk::run::<Q>(&mut client, &request, &operator)
        .await
        .map_err(|e| anyhow!("bulk {action} failed: {e}"))?;
    print(serde_json::to_value(answer)?)
}

pub async fn listeners(args: ListenersArgs) -> anyhow::Result<()> {
    match args.command {
        ListenersCommand::List { workspace: raw } => {
            let scope = workspace(raw.as_deref())?;
            let (pool, _cluster) = pool().await?;
            let client = pool.get().await?;
            print(serde_json::json!({ "paused": pause::paused(&client, scope).await? }))
        }
        ListenersCommand::Pause(args) => toggle(args, false).await,
        ListenersCommand::Resume(args) => toggle(args, true).await,
    }
}

async fn toggle(args: PauseArgs, resume: bool) -> anyhow::Result<()> {
    let operator = Operator::parse(&args.actor).map_err(|e| anyhow!("invalid --actor: {}", e.message))?;
    let reason = Reason::parse(&args.reason).map_err(|e| anyhow!("invalid --reason: {}", e.message))?;
    let listener =
        Listener::parse(&args.listener).ok_or_else(|| anyhow!("no listener named {}", args.listener))?;
    let scope = workspace(Some(&args.workspace))?.ok_or_else(|| anyhow!("--workspace is required"))?;
    let (pool, _cluster) = pool().await?;
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    let record = if resume {
        pause::resume(&tx, scope, listener, &operator, &reason).await
    } else {
        pause::pause(&tx, scope, listener, &operator, &reason).await
    }
    .map_err(|e| anyhow!("refused: {e}; nothing was changed"))?;
    tx.commit().await?;
    print(serde_json::to_value(record)?)
}
