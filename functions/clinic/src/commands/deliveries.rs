//! `clinic deliveries list|retry|discard|bulk|send`: notification deliveries without SQL, like
//! `clinic outbox`. Every command prints one JSON document; `retry` and `discard` need `--actor` and a
//! non-blank `--reason` (checked before the database is touched) and commit the change with its
//! `operator_actions` row through the lease queue's operator actions, generic over the queue
//! ([`act`] serves `clinic webhooks retry-delivery|discard-delivery` too); `bulk` is
//! `clinic outbox bulk --queue deliveries`. `send` runs the sender once over every due row with the
//! configured providers (`CLINIC_NOTIFIER`, default `file`).
//!
//! [`spawn`] is `clinic dev`'s in-process sender: the same code as the Lambdas', polling every
//! `CLINIC_DELIVERY_POLL_MS` (default 100 ms), writing files under `<data dir>/mail` by default.

use anyhow::anyhow;
use clinic_core::delivery::{DeliveryStatus, Sender};
use clinic_core::error::DomainError;
use clinic_core::ids::{NotificationId, WorkspaceId};
use clinic_core::lease::ActionKind;
use clinic_core::operator::{ActionRequest, Notifications, OperatedQueue, Operator};
use deadpool_postgres::Pool;
use tokio::sync::watch;

use super::outbox::{pool, print};

#[derive(Debug, clap::Args)]
pub struct DeliveriesArgs {
    #[command(subcommand)]
    command: DeliveriesCommand,
}

#[derive(Debug, clap::Subcommand)]
enum DeliveriesCommand {
    /// List deliveries, newest first (ids, templates, statuses, codes; never content).
    List(ListArgs),
    /// Make a dead, retry, uncertain or no_contact delivery due now (same idempotency key).
    Retry(ActionArgs),
    /// Discard a dead, retry, uncertain or no_contact delivery for good.
    Discard(ActionArgs),
    /// Retry or discard every delivery matching a filter (or count them with --dry-run).
    Bulk(Box<super::operate::BulkArgs>),
    /// Send every due delivery once through the configured providers.
    Send,
}

#[derive(Debug, clap::Args)]
struct ListArgs {
    /// Only this workspace (ULID).
    #[arg(long)]
    workspace: Option<String>,
    /// pending, sending, uncertain, sent, retry, deferred, dead, no_contact, suppressed, opted_out, discarded or stale.
    #[arg(long)]
    status: Option<String>,
    /// Rows per page (1–1000).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(i64).range(1..=1000))]
    limit: i64,
    /// The next page: deliveries older than this id (the previous page's `nextBefore`).
    #[arg(long)]
    before: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct ActionArgs {
    /// The row id (ULID): the notification or webhook delivery.
    id: String,
    /// Who is acting (recorded in operator_actions), e.g. `ops:alice`.
    #[arg(long)]
    actor: String,
    /// Why (required, not blank; stored in the audit log, never logged).
    #[arg(long)]
    reason: String,
    /// Only this workspace (ULID).
    #[arg(long)]
    workspace: Option<String>,
}

pub async fn run(args: DeliveriesArgs) -> anyhow::Result<()> {
    match args.command {
        DeliveriesCommand::List(args) => list(args).await,
        DeliveriesCommand::Retry(args) => act::<Notifications>(ActionKind::Retry, args).await,
        DeliveriesCommand::Discard(args) => act::<Notifications>(ActionKind::Discard, args).await,
        DeliveriesCommand::Bulk(args) => super::operate::bulk_of::<Notifications>(*args).await,
        DeliveriesCommand::Send => send().await,
    }
}

fn ulid_arg<T: std::str::FromStr>(raw: Option<&str>, name: &str) -> anyhow::Result<Option<T>> {
    raw.map(|raw| raw.parse().map_err(|_| anyhow!("{name} must be a ULID (26 characters)"))).transpose()
}

async fn list(args: ListArgs) -> anyhow::Result<()> {
    let status = args
        .status
        .as_deref()
        .map(|raw| DeliveryStatus::parse(raw).ok_or_else(|| anyhow!("--status must be a delivery status")))
        .transpose()?;
    let workspace: Option<WorkspaceId> = ulid_arg(args.workspace.as_deref(), "--workspace")?;
    let before: Option<NotificationId> = ulid_arg(args.before.as_deref(), "--before")?;
    let (pool, _cluster) = pool().await?;
    let client = pool.get().await?;
    let items =
        clinic_core::operator::listing::notifications(&client, workspace, status, before, args.limit).await?;
    let next_before = (items.len() as i64 == args.limit).then(|| items.last().map(|item| item.id)).flatten();
    print(serde_json::json!({ "items": items, "nextBefore": next_before }))
}

/// `action` on one row of queue `Q`, committed with its audit row (or refused, changing nothing).
pub async fn act<Q: OperatedQueue>(action: ActionKind, args: ActionArgs) -> anyhow::Result<()> {
    let operator = Operator::parse(&args.actor).map_err(|e| anyhow!("invalid --actor: {}", e.message))?;
    let request = ActionRequest::new(action, &args.reason, None)
        .map_err(|error| super::outbox::refused_request(error, "listener-only"))?;
    let noun = Q::ACTIONS.noun;
    let id: Q::Id = ulid_arg(Some(&args.id), &format!("the {noun} id"))?
        .ok_or_else(|| anyhow!("a {noun} id is required"))?;
    let workspace: Option<WorkspaceId> = ulid_arg(args.workspace.as_deref(), "--workspace")?;
    let (pool, _cluster) = pool().await?;
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    let record = match Q::perform(&tx, workspace, id, &request, &operator, None).await {
        Ok(record) => record,
        Err(error) => {
            tx.rollback().await?;
            return Err(match error {
                DomainError::NotFound => anyhow!("no {noun} {id} (in scope)"),
                DomainError::Conflict(detail) => {
                    anyhow!("refused: {detail}; nothing was changed or recorded")
                }
                other => anyhow::Error::new(other).context("the action failed; nothing was changed"),
            });
        }
    };
    tx.commit().await?;
    print(serde_json::to_value(record)?)
}

/// The sender with `clinic dev`'s defaults: files under `<data dir>/mail` unless configured; emails'
/// one-click unsubscribe links point at `CLINIC_PUBLIC_BASE_URL`, else at `base` (`clinic dev`'s own
/// address; `clinic deliveries send`: `http://127.0.0.1:<CLINIC_PORT, 3000>`), signed with the local
/// key (`CLINIC_UNSUBSCRIBE_KEY`, else derived from the JWT secret, as the API verifies).
pub async fn sender(pool: Pool, base: &str) -> anyhow::Result<Sender> {
    let settings = crate::settings::current();
    let mut config = settings.delivery.clone();
    let secret = crate::settings::jwt_secret()?;
    let keys =
        settings.local_keys.unsubscribe.clone().unwrap_or_else(|| {
            clinic_core::delivery::unsubscribe::UnsubscribeKeys::new(secret.as_bytes(), None)
        });
    config.unsubscribe = clinic_core::delivery::unsubscribe::UnsubscribeLinks::configure(
        &settings.links,
        Some(keys),
        Some(base),
    )?;
    let providers = clinic_notify_aws::providers(&config, settings.aws_endpoint.as_deref()).await;
    Ok(Sender::new(pool, providers, config))
}

async fn send() -> anyhow::Result<()> {
    let (pool, _cluster) = pool().await?;
    let port = crate::settings::current().port;
    let report = sender(pool, &format!("http://127.0.0.1:{port}")).await?.send_due(1000).await?;
    print(serde_json::to_value(report)?)
}

/// `clinic dev`'s in-process sender loop.
pub struct Running {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

/// Starts the sender loop (retries, and what the listeners' fast path left); prints where messages
/// go.
pub fn spawn(sender: Sender) -> Running {
    println!("  messages:   {:?} under {}", sender.config().notifiers, sender.config().file_dir.display());
    let (stop, stopped) = watch::channel(false);
    let task = tokio::spawn(async move { sender.run(stopped).await });
    Running { stop, task }
}

impl Running {
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}
