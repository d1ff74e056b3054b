//! `webhook_deliveries` and `webhook_attempts`: claim, mark (fenced), recover, list. Every statement
//! on these tables lives here.

use std::sync::LazyLock;

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde::Serialize;

use crate::db::sql;
use crate::error::DomainResult;
use crate::ids::{ClaimToken, EventId, WebhookDeliveryId, WebhookEndpointId, WorkspaceId};
use crate::lease::operator::WEBHOOK_ACTIONS;
use crate::lease::ActionKind;
use crate::lease::{State, WEBHOOK_DELIVERIES};

pub use super::sequence::Sequence;

/// A claimed delivery: what one attempt needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    pub id: WebhookDeliveryId,
    pub endpoint_id: WebhookEndpointId,
    pub workspace_id: WorkspaceId,
    pub event_id: EventId,
    /// Attempts including this one.
    pub attempts: i32,
    pub url: String,
    /// The delivery's number in its endpoint's sequence (fixed at the fan-out).
    pub sequence: Sequence,
    /// The endpoint's body format and status now.
    pub payload_format: String,
    pub endpoint_status: String,
}

/// Due deliveries of enabled endpoints (pending, retry whose time came, sending whose lease ended),
/// claimed under `$2` with a lease of `$3` ms; `$4` restricts to one event (the first attempt right
/// after the fan-out), `$5` is the attempt ceiling, `$6` the cap of attempts in flight per endpoint:
/// an endpoint's due rows are ranked oldest first and only as many are taken as its leased `sending`
/// rows leave room for, so one receiver that never answers holds at most `$6` of the batch. Among
/// those, the lease queue's fair pick takes turns across workspaces (oldest first within each; the
/// per-endpoint ranking still reads every due row, so this claim's cost grows with them). All
/// deliveries have one priority: reordering a receiver's events by kind would deliver an
/// appointment's cancellation before its creation.
static CLAIM: LazyLock<String> = LazyLock::new(|| {
    let queue = WEBHOOK_DELIVERIES;
    format!(
        "WITH in_flight AS ( \
           SELECT endpoint_id, count(*) AS leased FROM webhook_deliveries \
           WHERE status = '{leased}' AND {running} GROUP BY endpoint_id), \
         ranked AS ( \
           SELECT d.id, d.workspace_id, d.available_at, \
             row_number() OVER (PARTITION BY d.endpoint_id ORDER BY d.available_at, d.id) \
                        + COALESCE(f.leased, 0) AS slot \
           FROM webhook_deliveries d JOIN webhook_endpoints w ON w.id = d.endpoint_id AND w.enabled \
           LEFT JOIN in_flight f ON f.endpoint_id = d.endpoint_id \
           WHERE {due} AND ($4::uuid IS NULL OR d.event_id = $4) AND NOT ({exhausted})), \
         due AS ({pick}), \
         charged AS ({charge}) \
         UPDATE webhook_deliveries d SET {claim} \
         FROM due, webhook_endpoints w WHERE d.id = due.id AND w.id = d.endpoint_id \
         RETURNING d.id, d.endpoint_id, d.workspace_id, d.event_id, d.attempts, w.url, d.sequence, \
           w.payload_format, {seen}",
        seen = super::endpoints::STATUS_SEEN,
        leased = queue.stored.leased,
        running = queue.lease_running(""),
        due = queue.due("d"),
        exhausted = queue.exhausted("d", "$5"),
        claim = queue.claim_set("d", "$2", "$3", None),
        charge = queue.charge("due"),
        pick = queue.fair_pick(
            "SELECT DISTINCT r.workspace_id, 0 AS priority FROM ranked r WHERE r.slot <= $6",
            "SELECT r.id, r.available_at FROM ranked r WHERE r.workspace_id = g.workspace_id AND r.slot <= $6",
            &format!("{} AND NOT ({})", queue.due("t"), queue.exhausted("t", "$5")),
            "",
            "$1"
        ),
    )
});

pub async fn claim(
    client: &impl GenericClient,
    batch: i64,
    token: ClaimToken,
    lease_ms: f64,
    event: Option<EventId>,
    ceiling: i32,
    per_endpoint: i64,
) -> Result<Vec<Claimed>, tokio_postgres::Error> {
    let rows =
        sql::query(client, &CLAIM, &[&batch, &token, &lease_ms, &event, &ceiling, &per_endpoint]).await?;
    Ok(rows
        .iter()
        .map(|row| Claimed {
            id: row.get(0),
            endpoint_id: row.get(1),
            workspace_id: row.get(2),
            event_id: row.get(3),
            attempts: row.get(4),
            url: row.get(5),
            sequence: Sequence(row.get(6)),
            payload_format: row.get(7),
            endpoint_status: row.get(8),
        })
        .collect())
}

/// A `sending` row whose sender died on its last allowed attempt: failed, not claimed again.
static EXHAUSTED: LazyLock<String> = LazyLock::new(|| {
    let queue = WEBHOOK_DELIVERIES;
    format!(
        "UPDATE webhook_deliveries SET {bury} WHERE {expired} AND {exhausted}",
        bury = queue.bury_set(),
        expired = queue.expired(""),
        exhausted = queue.exhausted("", "$1"),
    )
});

pub async fn fail_exhausted(client: &impl GenericClient, ceiling: i32) -> Result<u64, tokio_postgres::Error> {
    sql::execute(client, &EXHAUSTED, &[&ceiling]).await
}

/// One attempt's result, recorded as an attempt row and folded into the delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptRecord {
    pub status_code: Option<i32>,
    pub duration_ms: i32,
    pub error_code: Option<&'static str>,
    pub excerpt: Option<String>,
}

const INSERT_ATTEMPT: &str = "INSERT INTO webhook_attempts \
       (id, delivery_id, endpoint_id, workspace_id, attempt, status_code, duration_ms, error_code, excerpt) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)";

/// The delivery's next status after an attempt, fenced by the claim token.
static MARK: LazyLock<String> = LazyLock::new(|| {
    let queue = WEBHOOK_DELIVERIES;
    format!(
        "UPDATE webhook_deliveries SET status = $3, \
           available_at = CASE WHEN $3 = '{retry}' THEN {after} ELSE available_at END, \
           attempts = CASE WHEN $7 THEN {give_back} ELSE attempts END, \
           last_status = $5, last_error_code = $6, \
           delivered_at = CASE WHEN $3 = '{done}' THEN now() ELSE delivered_at END, {release} \
         WHERE id = $1 AND {fence}",
        retry = queue.stored.retry,
        give_back = queue.give_back(""),
        after = crate::lease::sql::after_ms("$4"),
        done = queue.stored.done,
        release = queue.release_set(),
        fence = queue.fence("", "$2"),
    )
});

/// Where a delivery goes after an attempt.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Next {
    Delivered,
    Retry {
        after_ms: f64,
    },
    /// The lease queue's hold: `retry` after `after_ms`, the attempt given back (a throttling
    /// receiver, [`super::sender::RECEIVER_THROTTLED`]).
    Held {
        after_ms: f64,
    },
    Failed,
}

/// Records the attempt and marks the delivery; `false` when the claim was taken over (nothing marked,
/// the attempt still recorded: it happened).
pub async fn mark(
    client: &impl GenericClient,
    claimed: &Claimed,
    token: ClaimToken,
    attempt: &AttemptRecord,
    next: Next,
) -> Result<bool, tokio_postgres::Error> {
    let id = uuid::Uuid::from(ulid::Ulid::generate());
    sql::execute(
        client,
        INSERT_ATTEMPT,
        &[
            &id,
            &claimed.id,
            &claimed.endpoint_id,
            &claimed.workspace_id,
            &claimed.attempts,
            &attempt.status_code,
            &attempt.duration_ms,
            &attempt.error_code,
            &attempt.excerpt,
        ],
    )
    .await?;
    let (status, after, held) = match next {
        Next::Delivered => (WEBHOOK_DELIVERIES.stored.done, 0.0, false),
        Next::Retry { after_ms } => (WEBHOOK_DELIVERIES.stored.retry, after_ms, false),
        Next::Held { after_ms } => (WEBHOOK_DELIVERIES.stored.retry, after_ms, true),
        Next::Failed => (WEBHOOK_DELIVERIES.stored.dead, 0.0, false),
    };
    let marked = sql::execute(
        client,
        &MARK,
        &[&claimed.id, &token, &status, &after, &attempt.status_code, &attempt.error_code, &held],
    )
    .await?;
    Ok(marked == 1)
}

/// After any attempt to the endpoint (a delivery's or a heartbeat's; `$2`: it succeeded): a success
/// clears the failure clock and makes the status `active`; a failure starts the clock (when not
/// running) and makes the status `error` once the clock is older than `$3` seconds. Every attempt
/// restarts the heartbeat clock (`last_contact_at`). Answers the workspace and the status before and
/// after (the caller audits a change).
/// Both statuses are the ones seen ([`super::endpoints::STATUS_SEEN`]).
static HEALTH: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH before AS (SELECT w.id, {seen} AS status FROM webhook_endpoints w WHERE w.id = $1 FOR UPDATE OF w) \
     UPDATE webhook_endpoints w SET \
       failing_since = CASE WHEN $2 THEN NULL ELSE COALESCE(w.failing_since, now()) END, \
       last_contact_at = now(), \
       status = CASE WHEN NOT w.enabled THEN 'off' WHEN $2 THEN 'active' \
                     WHEN COALESCE(w.failing_since, now()) <= now() - $3::float8 * interval '1 second' \
                       THEN 'error' \
                     ELSE w.status END \
     FROM before WHERE w.id = before.id \
     RETURNING w.workspace_id, before.status, {seen}",
        seen = super::endpoints::STATUS_SEEN
    )
});

/// Disables endpoints failing for longer than `$1` hours (status `off`); answers the ones it
/// disabled with the status each showed ([`super::endpoints::STATUS_SEEN`]: `off` already while the
/// fan-out is paused, so the audit records no change). An endpoint a pause holds is skipped until
/// the next round, never waited for.
static AUTO_DISABLE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH before AS ( \
       SELECT w.id, {seen} AS status FROM webhook_endpoints w \
       WHERE w.enabled AND w.failing_since < now() - $1::float8 * interval '1 hour' FOR UPDATE OF w SKIP LOCKED) \
     UPDATE webhook_endpoints w SET enabled = false, disabled_at = now(), status = 'off', \
       disabled_reason = 'failing', version = version + 1, updated_at = now() \
     FROM before WHERE w.id = before.id \
     RETURNING w.id, w.workspace_id, before.status",
        seen = super::endpoints::STATUS_SEEN
    )
});

/// Records an attempt's health and audits a status change it caused (actor `system`).
pub async fn record_health(
    client: &impl GenericClient,
    endpoint: WebhookEndpointId,
    ok: bool,
    error_after: std::time::Duration,
) -> Result<(), tokio_postgres::Error> {
    let seconds = error_after.as_secs_f64();
    // Locked first, on its own: the statement below then reads a pause of the fan-out committed
    // while it waited (endpoints::audit_fan_out_pause holds every endpoint's lock).
    super::endpoints::lock_for_status(client, endpoint, None).await?;
    if let Some(row) = sql::query_opt(client, &HEALTH, &[&endpoint, &ok, &seconds]).await? {
        let (workspace, from, to): (WorkspaceId, String, String) = (row.get(0), row.get(1), row.get(2));
        super::endpoints::audit_status(client, workspace, endpoint, &from, &to, "system").await?;
        if from != to {
            tracing::info!(endpoint_id = %endpoint, from = %from, to = %to, "webhook endpoint status changed");
        }
    }
    Ok(())
}

/// [`record_health`] in a savepoint of `tx`, for a caller whose transaction also records what
/// happened (an attempt and its mark, a heartbeat): when the endpoint's row stays locked past the
/// session's `lock_timeout` (a pause of the fan-out, an update or an operator session that does not
/// end), the health is left unrecorded, `false` is answered, and the rest of `tx` still commits, so
/// an attempt the receiver has answered is never rolled back and sent again. The status and its
/// audit row move together or not at all; the endpoint's next attempt records its health. (A
/// skipped success leaves `failing_since` set until then, so an endpoint failing for nearly
/// [`super::WebhookConfig::disable_after`] may be disabled although this attempt succeeded.)
pub async fn record_health_unless_locked(
    tx: &mut crate::db::Tx<'_>,
    endpoint: WebhookEndpointId,
    ok: bool,
    error_after: std::time::Duration,
) -> Result<bool, tokio_postgres::Error> {
    let savepoint = tx.savepoint("endpoint_health").await?;
    match record_health(&savepoint, endpoint, ok, error_after).await {
        Ok(()) => savepoint.commit().await.map(|()| true),
        Err(error) if error.code() == Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE) => {
            savepoint.rollback().await?;
            tracing::warn!(endpoint_id = %endpoint, ok,
                "webhook endpoint locked past lock_timeout; its health waits for the next attempt");
            Ok(false)
        }
        Err(error) => Err(error),
    }
}

/// An endpoint the automatic disable turned off, with the status it had.
pub struct AutoDisabled {
    pub endpoint: WebhookEndpointId,
    pub workspace: WorkspaceId,
    pub previous_status: String,
}

pub async fn auto_disable(
    client: &impl GenericClient,
    after_hours: f64,
) -> Result<Vec<AutoDisabled>, tokio_postgres::Error> {
    let rows = sql::query(client, &AUTO_DISABLE, &[&after_hours]).await?;
    Ok(rows
        .iter()
        .map(|row| AutoDisabled { endpoint: row.get(0), workspace: row.get(1), previous_status: row.get(2) })
        .collect())
}

/// An operator retry (the lease queue's, [`WEBHOOK_ACTIONS`]: a fresh attempt budget) of every
/// delivery of the endpoint created since `$3` that a retry accepts and that is dead (`failed`);
/// `retry` rows keep their schedule.
static RECOVER: LazyLock<String> = LazyLock::new(|| {
    let accepted: Vec<String> = WEBHOOK_ACTIONS
        .accepted_statuses(ActionKind::Retry)
        .into_iter()
        .filter(|name| WEBHOOK_DELIVERIES.state_of(name) == Some(State::Dead))
        .map(|name| format!("'{name}'"))
        .collect();
    format!(
        "UPDATE webhook_deliveries d SET {retry} \
         FROM webhook_endpoints w \
         WHERE w.id = d.endpoint_id AND w.workspace_id = $1 AND d.endpoint_id = $2 \
           AND d.status IN ({accepted}) AND d.created_at >= $3",
        retry = WEBHOOK_DELIVERIES.retry_set(),
        accepted = accepted.join(", "),
    )
});

/// Makes every failed delivery of the endpoint created since `since` pending again (same id).
pub async fn recover(
    client: &impl GenericClient,
    workspace: WorkspaceId,
    endpoint: WebhookEndpointId,
    since: DateTime<Utc>,
) -> Result<u64, tokio_postgres::Error> {
    sql::execute(client, &RECOVER, &[&workspace, &endpoint, &since]).await
}

/// One delivery as listed (ids, codes and counters only). Its schema is the component
/// `WebhookDelivery`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "WebhookDelivery")]
pub struct DeliveryItem {
    pub id: WebhookDeliveryId,
    pub endpoint_id: WebhookEndpointId,
    /// The delivery's number in its endpoint's sequence
    #[schemars(range(min = 1))]
    pub sequence: i64,
    pub event_id: EventId,
    pub event_type: String,
    #[schemars(extend("enum" = WEBHOOK_DELIVERIES.statuses()))]
    pub status: String,
    pub attempts: i32,
    pub last_status: Option<i32>,
    pub last_error_code: Option<String>,
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub delivered_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

/// The columns of a [`DeliveryItem`] (from `webhook_deliveries d`), as [`delivery_item`] reads them.
pub const LIST_COLUMNS: &str =
    "SELECT d.id, d.endpoint_id, d.sequence, d.event_id, d.event_type, d.status, d.attempts, \
       d.last_status, d.last_error_code, CASE WHEN d.status IN ('pending', 'retry') THEN d.available_at END, \
       d.delivered_at, d.created_at \
     FROM webhook_deliveries d";

/// A row of [`LIST_COLUMNS`].
pub fn delivery_item(row: &tokio_postgres::Row) -> DeliveryItem {
    DeliveryItem {
        id: row.get(0),
        endpoint_id: row.get(1),
        sequence: row.get(2),
        event_id: row.get(3),
        event_type: row.get(4),
        status: row.get(5),
        attempts: row.get(6),
        last_status: row.get(7),
        last_error_code: row.get(8),
        next_attempt_at: row.get(9),
        delivered_at: row.get(10),
        created_at: row.get(11),
    }
}

/// Retention: delivered and discarded rows (and their attempts, by cascade) whose last change is
/// older than `$1` hours, in one bounded batch of `$2`. Answers how many went.
const SWEEP: &str = "DELETE FROM webhook_deliveries WHERE id IN ( \
       SELECT id FROM webhook_deliveries WHERE status IN ('delivered', 'discarded') \
         AND updated_at < now() - $1::float8 * interval '1 hour' ORDER BY updated_at LIMIT $2)";

pub async fn sweep_delivered(
    client: &impl GenericClient,
    retention_hours: f64,
    batch: i64,
) -> Result<u64, tokio_postgres::Error> {
    sql::execute(client, SWEEP, &[&retention_hours, &batch]).await
}

/// One numbered delivery as a receiver replays it (ids, codes and times only). Its schema is the
/// component `WebhookNumberedDelivery`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "WebhookNumberedDelivery")]
pub struct Numbered {
    /// The delivery's number (the CloudEvents `sequence` of its body, there zero-padded)
    #[schemars(range(min = 1))]
    pub sequence: i64,
    /// The `webhook-id` the delivery is (or was) sent with
    pub webhook_id: WebhookDeliveryId,
    pub event_id: EventId,
    /// The CloudEvents type, e.g. clinic.appointment.created.v1
    #[serde(rename = "type")]
    pub event_type: String,
    /// The event's resource (appointment, patient, practitioner)
    pub resource_type: Option<String>,
    /// The event's resource id (a ULID, like every id the API answers)
    pub resource_id: Option<String>,
    pub occurred_at: Option<DateTime<Utc>>,
    /// The delivery's state now
    #[schemars(extend("enum" = WEBHOOK_DELIVERIES.statuses()))]
    pub status: String,
}

/// The endpoint's deliveries numbered after `$3`, in number order, at most `$4` (the endpoint of
/// the workspace `$1` only; the scan is the `(endpoint_id, sequence)` index).
const REPLAY: &str = "SELECT d.sequence, d.id, d.event_id, d.event_type, e.version, e.resource_type, \
       e.resource_id, e.occurred_at, d.status \
     FROM webhook_deliveries d LEFT JOIN events e ON e.id = d.event_id \
     WHERE d.workspace_id = $1 AND d.endpoint_id = $2 AND d.sequence > $3 \
     ORDER BY d.sequence LIMIT $4";

/// Replay by number: the numbered deliveries of `endpoint` after `after`, whatever their state.
/// Delivered rows are kept for `CLINIC_RETENTION_HOURS` (the sweep), so a replay reaches back that far.
pub async fn replay(
    client: &impl GenericClient,
    workspace: WorkspaceId,
    endpoint: WebhookEndpointId,
    after: i64,
    limit: i64,
) -> DomainResult<Vec<Numbered>> {
    let rows = sql::query(client, REPLAY, &[&workspace, &endpoint, &after, &limit]).await?;
    Ok(rows
        .iter()
        .map(|row| {
            let stored: String = row.get(3);
            let version: Option<i32> = row.get(4);
            let event_type = match (crate::events::EventType::parse(&stored), version) {
                (Some(known), Some(version)) => known.published_name(version),
                _ => stored,
            };
            Numbered {
                sequence: row.get(0),
                webhook_id: row.get(1),
                event_id: row.get(2),
                event_type,
                resource_type: row.get(5),
                resource_id: row.get::<_, Option<uuid::Uuid>>(6).map(|id| ulid::Ulid::from(id).to_string()),
                occurred_at: row.get(7),
                status: row.get(8),
            }
        })
        .collect())
}
