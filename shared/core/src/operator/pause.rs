//! Durable pause and resume of one listener in one workspace (`listener_pauses`, audited in
//! `listener_pause_actions`).
//!
//! Invariants:
//! - A pause is a row, so it survives restarts and deploys. While it exists, the dispatcher's claim
//!   returns the workspace's paused listeners with each row and does not start them
//!   ([`crate::outbox::Claimed::to_start`]); the other listeners of the same event start. The row is
//!   then *held* ([`crate::outbox::hold`]): it stays live (`retry`, code [`HELD_CODE`]), its
//!   attempt is given back, and the listeners that did start are remembered in `listener_starts`.
//! - Resume deletes the pause and makes the workspace's held rows of event types routed to the
//!   listener due at their creation time, so the claim scan (ordered by `available_at`) releases them
//!   in event order, before anything newer. Both run on the caller's transaction with their audit
//!   row; pausing a paused listener or resuming a running one is a conflict and writes nothing.
//! - Pausing the webhook fan-out ([`Listener::WebhookFanOut`]) makes the workspace's endpoints show
//!   `off` to receivers and operators while it lasts (`crate::webhooks::endpoints::STATUS_SEEN`);
//!   the pause and the resume audit each endpoint's status change on the same transaction.
//! - Ids, listener names and counts only; the reason is stored in the audit row, never logged.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde::Serialize;

use super::{Operator, Reason};
use crate::db::sql;
use crate::error::{DomainError, DomainResult};
use crate::events::EventType;
use crate::ids::WorkspaceId;
use crate::listeners::{listeners, Listener};

pub use crate::outbox::HELD_CODE;

/// A paused listener and what it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "PausedListener")]
pub struct Paused {
    pub listener: String,
    pub paused_by: String,
    pub paused_at: DateTime<Utc>,
    /// Outbox rows held because of this listener (live rows of its event types held for a pause).
    pub held: i64,
}

/// The answer to a pause or a resume.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PauseRecord {
    pub id: crate::ids::OperatorActionId,
    pub workspace_id: WorkspaceId,
    pub listener: String,
    #[schemars(with = "PauseAction")]
    pub action: &'static str,
    pub actor: String,
    /// Resume: held rows made due again.
    pub released: i64,
    pub created_at: DateTime<Utc>,
}

/// A [`PauseRecord`]'s `action`: `pause` or `resume` (the names [`pause`] and [`resume`] record).
struct PauseAction;

crate::inline_schema!(PauseAction, |_: &mut schemars::SchemaGenerator| {
    schemars::json_schema!({ "type": "string", "enum": ["pause", "resume"] })
});

const PAUSE: &str = "INSERT INTO listener_pauses (workspace_id, listener, paused_by) VALUES ($1, $2, $3) \
     ON CONFLICT DO NOTHING";
const UNPAUSE: &str = "DELETE FROM listener_pauses WHERE workspace_id = $1 AND listener = $2";
const RELEASE: &str = "UPDATE event_outbox o SET available_at = o.created_at, updated_at = now() \
     FROM events e \
     WHERE e.id = o.event_id AND e.workspace_id = $1 AND e.type = ANY ($2) \
       AND o.status = 'retry' AND o.last_error_code = $3";
const AUDIT: &str =
    "INSERT INTO listener_pause_actions (id, workspace_id, listener, action, actor, reason, released) \
     VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING created_at";
const PAUSED: &str = "SELECT p.listener, p.paused_by, p.paused_at FROM listener_pauses p \
     WHERE ($1::uuid IS NULL OR p.workspace_id = $1) ORDER BY p.listener";
const HELD: &str = "SELECT count(*) FROM event_outbox o JOIN events e ON e.id = o.event_id \
     WHERE ($1::uuid IS NULL OR e.workspace_id = $1) AND e.type = ANY ($2) \
       AND o.status = 'retry' AND o.last_error_code = $3";
const TOTALS: &str = "SELECT (SELECT count(*) FROM listener_pauses), \
     (SELECT count(*) FROM event_outbox WHERE status = 'retry' AND last_error_code = $1)";

fn routed_types(listener: Listener) -> Vec<&'static str> {
    EventType::ALL.iter().filter(|t| listeners(**t).contains(&listener)).map(|t| t.as_str()).collect()
}

/// Pauses `listener` in `workspace`, on the caller's transaction.
pub async fn pause(
    tx: &impl GenericClient,
    workspace: WorkspaceId,
    listener: Listener,
    operator: &Operator,
    reason: &Reason,
) -> DomainResult<PauseRecord> {
    if sql::execute(tx, PAUSE, &[&workspace, &listener.as_str(), &operator.as_str()]).await? == 0 {
        return Err(DomainError::Conflict(format!("{listener} is already paused")));
    }
    if listener == Listener::WebhookFanOut {
        crate::webhooks::endpoints::audit_fan_out_pause(tx, workspace, true, operator.as_str()).await?;
    }
    audit(tx, workspace, listener, "pause", operator, reason, 0).await
}

/// Resumes `listener` in `workspace` and releases what it held, on the caller's transaction.
pub async fn resume(
    tx: &impl GenericClient,
    workspace: WorkspaceId,
    listener: Listener,
    operator: &Operator,
    reason: &Reason,
) -> DomainResult<PauseRecord> {
    if sql::execute(tx, UNPAUSE, &[&workspace, &listener.as_str()]).await? == 0 {
        return Err(DomainError::Conflict(format!("{listener} is not paused")));
    }
    let released =
        sql::execute(tx, RELEASE, &[&workspace, &routed_types(listener), &HELD_CODE]).await? as i64;
    if listener == Listener::WebhookFanOut {
        crate::webhooks::endpoints::audit_fan_out_pause(tx, workspace, false, operator.as_str()).await?;
    }
    audit(tx, workspace, listener, "resume", operator, reason, released).await
}

async fn audit(
    tx: &impl GenericClient,
    workspace: WorkspaceId,
    listener: Listener,
    action: &'static str,
    operator: &Operator,
    reason: &Reason,
    released: i64,
) -> DomainResult<PauseRecord> {
    let id = crate::ids::OperatorActionId::generate();
    let released_i32 = i32::try_from(released).unwrap_or(i32::MAX);
    let row = sql::query_one(
        tx,
        AUDIT,
        &[&id, &workspace, &listener.as_str(), &action, &operator.as_str(), &reason.as_str(), &released_i32],
    )
    .await?;
    tracing::info!(action_id = %id, listener = listener.as_str(), action, released, "listener pause action recorded");
    Ok(PauseRecord {
        id,
        workspace_id: workspace,
        listener: listener.as_str().to_owned(),
        action,
        actor: operator.as_str().to_owned(),
        released,
        created_at: row.get(0),
    })
}

const RECORDED: &str = "SELECT id, workspace_id, listener, action, actor, released, created_at \
     FROM listener_pause_actions WHERE id = $1 AND workspace_id = $2";

/// The audit record of an earlier pause or resume `id` of `workspace`, as [`pause`] or [`resume`]
/// answered it (what a request repeated with its `Idempotency-Key` answers); `None` when there is none.
pub async fn recorded(
    client: &impl GenericClient,
    workspace: WorkspaceId,
    id: crate::ids::OperatorActionId,
) -> DomainResult<Option<PauseRecord>> {
    let Some(row) = sql::query_opt(client, RECORDED, &[&id, &workspace]).await? else {
        return Ok(None);
    };
    let action = match row.get::<_, &str>(3) {
        "pause" => "pause",
        _ => "resume",
    };
    Ok(Some(PauseRecord {
        id: row.get(0),
        workspace_id: row.get(1),
        listener: row.get(2),
        action,
        actor: row.get(4),
        released: i64::from(row.get::<_, i32>(5)),
        created_at: row.get(6),
    }))
}

/// The paused listeners (of `workspace` when given) with the rows each holds.
pub async fn paused(
    client: &impl GenericClient,
    workspace: Option<WorkspaceId>,
) -> Result<Vec<Paused>, tokio_postgres::Error> {
    let mut answer = Vec::new();
    for row in sql::query(client, PAUSED, &[&workspace]).await? {
        let name: String = row.get(0);
        let types = Listener::parse(&name).map(routed_types).unwrap_or_default();
        let held: i64 = sql::query_one(client, HELD, &[&workspace, &types, &HELD_CODE]).await?.get(0);
        answer.push(Paused { listener: name, paused_by: row.get(1), paused_at: row.get(2), held });
    }
    Ok(answer)
}

/// `PausedListeners` and `HeldStarts` (rows held for a pause) over every workspace: the gauges the
/// dispatcher emits beside its other metrics.
pub async fn totals(client: &impl GenericClient) -> Result<(i64, i64), tokio_postgres::Error> {
    let row = sql::query_one(client, TOTALS, &[&HELD_CODE]).await?;
    Ok((row.get(0), row.get(1)))
}

/// Prints the EMF line of [`totals`] (namespace [`crate::dispatch::metrics::NAMESPACE`]); a failed read is
/// logged and nothing is printed.
pub async fn emit_metrics(client: &impl GenericClient) {
    match totals(client).await {
        Ok((paused, held)) => crate::telemetry::emf::print(
            &[],
            &[("PausedListeners", "Count", paused), ("HeldStarts", "Count", held)],
        ),
        Err(error) => tracing::warn!(error = %error, "could not read the paused listeners"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The endpoints' status as seen reads the pauses of the listener [`pause`] writes for the fan-out.
    #[test]
    fn the_status_seen_reads_the_pauses_of_the_fan_out_listener() {
        let seen = crate::webhooks::endpoints::STATUS_SEEN;
        assert!(seen.contains(&format!("'{}'", Listener::WebhookFanOut.as_str())), "{seen}");
    }
}
