//! `clinic webhooks create|list|show|update|disable|enable|delete|rotate|recover|deliveries|send`:
//! a workspace's webhook endpoints without SQL, through the same functions as the admin routes
//! (`clinic_core::webhooks`). Every command prints one JSON document; changes need `--actor` and are
//! audited in `webhook_endpoint_actions`. `create` and `rotate` print the secret — the only time it
//! is shown. `send` runs the sender once over every due delivery (what the housekeeping `webhooks`
//! mode does on its schedule). URLs pass the SSRF guard before they are stored.

use anyhow::{anyhow, Context};
use clinic_core::error::DomainError;
use clinic_core::ids::{EventId, WebhookEndpointId, WorkspaceId};
use clinic_core::lease::ActionKind;
use clinic_core::operator::{Operator, WebhookDeliveries};
use clinic_core::webhooks::endpoints::{self, EndpointChange, NewEndpoint};
use clinic_core::webhooks::{guard, store, WebhookSender};
use serde_json::{json, Value};

use super::outbox::{pool, print};

#[derive(Debug, clap::Args)]
pub struct WebhooksArgs {
    #[command(subcommand)]
    command: WebhooksCommand,
}

#[derive(Debug, clap::Subcommand)]
enum WebhooksCommand {
    /// Register an endpoint; prints it with its signing secret (shown once).
    Create(CreateArgs),
    /// The workspace's endpoints (never secrets).
    List(WorkspaceArg),
    /// One endpoint.
    Show(EndpointArg),
    /// Change url, description or event types.
    Update(UpdateArgs),
    /// Stop sending to an endpoint (its pending deliveries are kept).
    Disable(ActorEndpointArg),
    /// Send to an endpoint again (clears its failure clock).
    Enable(ActorEndpointArg),
    /// Delete an endpoint with its deliveries (the audit keeps its history).
    Delete(ActorEndpointArg),
    /// New secret; the previous one keeps signing for --overlap-hours.
    Rotate(RotateArgs),
    /// Send again every failed delivery created since a time (same webhook-id).
    Recover(RecoverArgs),
    /// Deliveries, newest first (ids, statuses, codes).
    Deliveries(DeliveriesArgs),
    /// Make a failed or retrying delivery pending now with a fresh attempt budget (same webhook-id).
    RetryDelivery(super::deliveries::ActionArgs),
    /// Discard a failed or retrying delivery for good.
    DiscardDelivery(super::deliveries::ActionArgs),
    /// Retry or discard every delivery matching a filter (or count them with --dry-run).
    Bulk(Box<super::operate::BulkArgs>),
    /// Send every due delivery once.
    Send,
}

#[derive(Debug, clap::Args)]
struct WorkspaceArg {
    /// The workspace (ULID).
    #[arg(long)]
    workspace: String,
}

#[derive(Debug, clap::Args)]
struct EndpointArg {
    /// The endpoint id (ULID).
    id: String,
    #[command(flatten)]
    workspace: WorkspaceArg,
}

#[derive(Debug, clap::Args)]
struct ActorEndpointArg {
    #[command(flatten)]
    endpoint: EndpointArg,
    /// Who is acting (recorded in the audit), e.g. `ops:alice`.
    #[arg(long)]
    actor: String,
}

#[derive(Debug, clap::Args)]
struct CreateArgs {
    #[command(flatten)]
    workspace: WorkspaceArg,
    #[arg(long)]
    url: String,
    #[arg(long, default_value = "")]
    description: String,
    /// Event types to send (repeat or comma-separate; none: every type).
    #[arg(long = "event-type", value_delimiter = ',')]
    event_types: Vec<String>,
    #[command(flatten)]
    delivery: DeliveryShape,
    #[arg(long)]
    actor: String,
}

/// How deliveries reach the endpoint: its heartbeat interval and body format (unset: unchanged on
/// `update`, the defaults on `create`).
#[derive(Debug, clap::Args)]
struct DeliveryShape {
    /// Seconds without any attempt before a signed heartbeat (0: none; default 300; at most 86400).
    #[arg(long)]
    heartbeat_seconds: Option<i64>,
    /// The body format: `cloudevents` (default) or `fhir-id-only` (a FHIR R5 id-only
    /// subscription-notification Bundle).
    #[arg(long)]
    payload_format: Option<String>,
}

impl DeliveryShape {
    /// Adds the fields given to an API body (checked there, like every other field).
    fn into_body(self, body: &mut serde_json::Map<String, Value>) {
        if let Some(seconds) = self.heartbeat_seconds {
            body.insert("heartbeatSeconds".into(), seconds.into());
        }
        if let Some(format) = self.payload_format {
            body.insert("payloadFormat".into(), format.into());
        }
    }
}

#[derive(Debug, clap::Args)]
struct UpdateArgs {
    #[command(flatten)]
    target: ActorEndpointArg,
    #[arg(long)]
    url: Option<String>,
    #[arg(long)]
    description: Option<String>,
    /// Replaces the filter (comma-separated; `--event-type ''` clears it: every type).
    #[arg(long = "event-type", value_delimiter = ',')]
    event_types: Option<Vec<String>>,
    #[command(flatten)]
    delivery: DeliveryShape,
}

#[derive(Debug, clap::Args)]
struct RotateArgs {
    #[command(flatten)]
    target: ActorEndpointArg,
    /// Hours the previous secret keeps signing (0–168).
    #[arg(long, default_value_t = 24)]
    overlap_hours: i64,
}

#[derive(Debug, clap::Args)]
struct RecoverArgs {
    #[command(flatten)]
    target: ActorEndpointArg,
    /// RFC 3339 time, e.g. 2026-12-01T00:00:00Z.
    #[arg(long)]
    since: String,
}

#[derive(Debug, clap::Args)]
struct DeliveriesArgs {
    #[command(flatten)]
    workspace: WorkspaceArg,
    #[arg(long)]
    endpoint: Option<String>,
    #[arg(long)]
    event: Option<String>,
    /// pending, sending, delivered, retry or failed.
    #[arg(long)]
    status: Option<String>,
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(i64).range(1..=1000))]
    limit: i64,
}

fn ulid<T: std::str::FromStr>(raw: &str, name: &str) -> anyhow::Result<T> {
    raw.parse().map_err(|_| anyhow!("{name} must be a ULID (26 characters)"))
}

fn actor(raw: &str) -> anyhow::Result<String> {
    Ok(Operator::parse(raw).map_err(|e| anyhow!("invalid --actor: {}", e.message))?.as_str().to_owned())
}

fn explain(error: DomainError) -> anyhow::Error {
    match error {
        DomainError::NotFound => anyhow!("no such endpoint in that workspace"),
        DomainError::Invalid(field) => anyhow!("invalid {}: {}", field.field, field.message),
        other => anyhow::Error::new(other),
    }
}

async fn check_url(url: &str) -> anyhow::Result<()> {
    let egress = crate::settings::current().webhooks.egress;
    guard::check_url(url, egress, &guard::SystemResolver)
        .await
        .map_err(|refused| anyhow!("invalid --url: {refused}"))
}

fn types_body(types: &[String]) -> Value {
    Value::from(types.iter().filter(|t| !t.is_empty()).map(|t| Value::from(t.as_str())).collect::<Vec<_>>())
}

pub async fn run(args: WebhooksArgs) -> anyhow::Result<()> {
    use WebhooksCommand as C;
    let command = match args.command {
        C::RetryDelivery(args) => {
            return super::deliveries::act::<WebhookDeliveries>(ActionKind::Retry, args).await
        }
        C::DiscardDelivery(args) => {
            return super::deliveries::act::<WebhookDeliveries>(ActionKind::Discard, args).await
        }
        C::Bulk(args) => return super::operate::bulk_of::<WebhookDeliveries>(*args).await,
        command => command,
    };
    let args = WebhooksArgs { command };
    if let C::Send = args.command {
        let (pool, _cluster) = pool().await?;
        let settings = crate::settings::current();
        let source = &settings.listener.source_prefix;
        let key = crate::settings::webhook_key()?;
        let sender = WebhookSender::new(pool, settings.webhooks, key, clinic_sqs::webhook_body(source));
        return print(serde_json::to_value(sender.send_due(1000).await?)?);
    }
    let (pool, _cluster) = pool().await?;
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    let answer: Value = match args.command {
        C::Create(a) => {
            let workspace: WorkspaceId = ulid(&a.workspace.workspace, "--workspace")?;
            let mut body = serde_json::Map::new();
            body.insert("url".into(), a.url.into());
            body.insert("description".into(), a.description.into());
            body.insert("eventTypes".into(), types_body(&a.event_types));
            a.delivery.into_body(&mut body);
            let new = NewEndpoint::try_from(&Value::Object(body)).map_err(invalid)?;
            check_url(&new.url).await?;
            serde_json::to_value(
                endpoints::create(&tx, &crate::settings::webhook_key()?, workspace, &new, &actor(&a.actor)?)
                    .await
                    .map_err(explain)?,
            )?
        }
        C::List(a) => {
            let workspace: WorkspaceId = ulid(&a.workspace, "--workspace")?;
            json!({ "items": endpoints::list(&tx, workspace).await.map_err(explain)? })
        }
        C::Show(a) => {
            let (workspace, id) = target(&a)?;
            serde_json::to_value(endpoints::get(&tx, workspace, id).await.map_err(explain)?)?
        }
        C::Update(a) => {
            let (workspace, id) = target(&a.target.endpoint)?;
            let mut body = serde_json::Map::new();
            if let Some(url) = &a.url {
                check_url(url).await?;
                body.insert("url".into(), url.as_str().into());
            }
            if let Some(description) = &a.description {
                body.insert("description".into(), description.as_str().into());
            }
            if let Some(types) = &a.event_types {
                body.insert("eventTypes".into(), types_body(types));
            }
            a.delivery.into_body(&mut body);
            let change = EndpointChange::try_from(&Value::Object(body)).map_err(invalid)?;
            let actor = actor(&a.target.actor)?;
            serde_json::to_value(
                endpoints::update(&tx, workspace, id, &change, &actor).await.map_err(explain)?,
            )?
        }
        C::Disable(a) => enable(&tx, &a, false).await?,
        C::Enable(a) => enable(&tx, &a, true).await?,
        C::Delete(a) => {
            let (workspace, id) = target(&a.endpoint)?;
            endpoints::delete(&tx, workspace, id, &actor(&a.actor)?).await.map_err(explain)?;
            json!({ "deleted": id })
        }
        C::Rotate(a) => {
            let (workspace, id) = target(&a.target.endpoint)?;
            let actor = actor(&a.target.actor)?;
            serde_json::to_value(
                endpoints::rotate(
                    &tx,
                    &crate::settings::webhook_key()?,
                    workspace,
                    id,
                    a.overlap_hours,
                    &actor,
                )
                .await
                .map_err(explain)?,
            )?
        }
        C::Recover(a) => {
            let (workspace, id) = target(&a.target.endpoint)?;
            let since = chrono::DateTime::parse_from_rfc3339(&a.since)
                .context("--since must be an RFC 3339 time")?
                .with_timezone(&chrono::Utc);
            let actor = actor(&a.target.actor)?;
            endpoints::get(&tx, workspace, id).await.map_err(explain)?;
            let recovered = store::recover(&tx, workspace, id, since).await?;
            endpoints::audit(&tx, workspace, id, "recover", &actor, json!({ "recovered": recovered }))
                .await?;
            json!({ "endpointId": id, "since": since, "recovered": recovered })
        }
        C::Deliveries(a) => {
            let workspace: WorkspaceId = ulid(&a.workspace.workspace, "--workspace")?;
            let endpoint: Option<WebhookEndpointId> =
                a.endpoint.as_deref().map(|raw| ulid(raw, "--endpoint")).transpose()?;
            let event: Option<EventId> = a.event.as_deref().map(|raw| ulid(raw, "--event")).transpose()?;
            let items = clinic_core::operator::listing::webhook_deliveries(
                &tx,
                workspace,
                endpoint,
                event,
                a.status.as_deref(),
                a.limit,
            )
            .await
            .map_err(explain)?;
            json!({ "items": items })
        }
        C::Send | C::RetryDelivery(_) | C::DiscardDelivery(_) | C::Bulk(_) => unreachable!("handled above"),
    };
    tx.commit().await?;
    print(answer)
}

/// A field the API would refuse, named by the flag that gave it.
fn invalid(error: clinic_core::domain::input::FieldError) -> anyhow::Error {
    let flag = match error.field.as_str() {
        "eventTypes" => "--event-type".to_owned(),
        "body" => "the flags (none names a change)".to_owned(),
        field => format!("--{}", kebab(field)),
    };
    anyhow!("invalid {flag}: {}", error.message)
}

/// `heartbeatSeconds` → `heartbeat-seconds`.
fn kebab(field: &str) -> String {
    field.chars().fold(String::new(), |mut out, c| {
        if c.is_ascii_uppercase() {
            out.push('-');
        }
        out.push(c.to_ascii_lowercase());
        out
    })
}

fn target(arg: &EndpointArg) -> anyhow::Result<(WorkspaceId, WebhookEndpointId)> {
    Ok((ulid(&arg.workspace.workspace, "--workspace")?, ulid(&arg.id, "the endpoint id")?))
}

async fn enable(
    tx: &clinic_core::db::Tx<'_>,
    arg: &ActorEndpointArg,
    enabled: bool,
) -> anyhow::Result<Value> {
    let (workspace, id) = target(&arg.endpoint)?;
    let change = EndpointChange { enabled: Some(enabled), ..EndpointChange::default() };
    let endpoint =
        endpoints::update(tx, workspace, id, &change, &actor(&arg.actor)?).await.map_err(explain)?;
    Ok(serde_json::to_value(endpoint)?)
}
