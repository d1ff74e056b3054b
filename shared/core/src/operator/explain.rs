//! Explain one event end to end: `GET /v1/system/events/{eventId}` and `clinic explain <eventId>`.
//!
//! The answer is a list of [`Section`]s, each produced by one small function reading one table (or
//! one view of the listener map). A new piece of state — custody receipts per listener, rejections,
//! webhook deliveries — is one more function and one more line in [`explain`]; nothing else moves.
//!
//! Invariants:
//! - Ids, type names, listener names, statuses, counters, times and codes only: no reasons (an
//!   operator's reason stays in the audit table), no error texts, no names or contact details.
//! - Scoped by the event's workspace when one is given (always over HTTP): another workspace's event
//!   answers `None`, like a missing one. The causation chain stays inside that workspace.
//! - Bounded: at most [`MAX_CHAIN`] ancestors, [`MAX_CAUSED`] caused events (depth
//!   [`MAX_CAUSED_DEPTH`]), [`MAX_ROWS`] rows in any other section.
//! - The outbox history is recorded: creation, every operator action's status before and after, the
//!   last dispatch, and the rows of `outbox_history` (V10: every failure's error code with its time
//!   and attempt, holds, burials, lease takeovers — written by a trigger whose WHEN clause keeps the
//!   happy path free). Custody (each start, its settlement, restarts, stuck), rejections and the
//!   history are read through [`super::trail`], one function each.

use deadpool_postgres::GenericClient;
use serde::Serialize;
use serde_json::{json, Value};

use crate::db::sql;
use crate::error::{DomainError, DomainResult};
use crate::events::{read, Envelope};
use crate::ids::{EventId, WorkspaceId};
use crate::listeners::listeners;

pub const MAX_CHAIN: i32 = 20;
pub const MAX_CAUSED: i64 = 100;
pub const MAX_CAUSED_DEPTH: i32 = 10;
pub const MAX_ROWS: i64 = 200;

/// One part of an explanation: what it is, which table it comes from, its rows.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "ExplainSection")]
pub struct Section {
    /// envelope, links, outbox, listeners, deliveries, causes, caused, actions (more may be added)
    pub name: &'static str,
    /// The table the rows come from
    pub source: &'static str,
    #[schemars(with = "Vec<SectionRow>")]
    pub rows: Vec<Value>,
    /// What this section cannot show on this build
    // Absent when it shows everything.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub note: Option<&'static str>,
}

/// A row of a [`Section`]: one JSON object (each section function builds its rows as objects).
struct SectionRow;

crate::inline_schema!(SectionRow, |_: &mut schemars::SchemaGenerator| {
    schemars::json_schema!({ "type": "object" })
});

/// An event's whole path.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    pub event_id: EventId,
    pub workspace_id: WorkspaceId,
    #[schemars(example = "clinic.appointment.created.v1")]
    pub published_name: String,
    /// The trace the event was committed in (absent for events committed outside a traced request).
    // 32 hex, to open it in a trace viewer; also absent for events stored before traces were.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String", pattern(r"^[0-9a-f]{32}$"))]
    pub trace_id: Option<String>,
    /// The W3C trace context stored with the event.
    // The span that committed it.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "crate::telemetry::traceparent::TraceParent")]
    pub traceparent: Option<String>,
    pub sections: Vec<Section>,
}

/// The CloudEvents `type` of an event: `clinic.<aggregate>.<fact>.v<version>`.
pub fn published_name(envelope: &Envelope) -> String {
    envelope.event_type.published_name(envelope.version)
}

/// Explains `event_id` (within `workspace` when given); `None` when there is no such event in scope.
pub async fn explain(
    client: &impl GenericClient,
    workspace: Option<WorkspaceId>,
    event_id: EventId,
) -> DomainResult<Option<Explanation>> {
    let envelope = match read::find(client, event_id).await {
        Ok(Some(envelope)) => envelope,
        Ok(None) => return Ok(None),
        Err(read::ReadError::Db(error)) => return Err(error.into()),
        Err(read::ReadError::Unreadable(error)) => {
            return Err(DomainError::Conflict(format!("the stored event cannot be read: {}", error.problem)))
        }
    };
    if workspace.is_some_and(|workspace| workspace != envelope.workspace_id) {
        return Ok(None);
    }
    let e = &envelope;
    let sections = vec![
        envelope_section(e),
        links(client, e).await?,
        outbox(client, e).await?,
        listener_paths(client, e).await?,
        custody(client, e).await?,
        rejections(client, e).await?,
        deliveries(client, e).await?,
        causes(client, e).await?,
        caused(client, e).await?,
        actions(client, e).await?,
        webhook_deliveries(client, e).await?,
    ];
    Ok(Some(Explanation {
        event_id: e.id,
        workspace_id: e.workspace_id,
        published_name: published_name(e),
        trace_id: e.traceparent.map(|trace| trace.trace_id_hex()),
        traceparent: e.traceparent.map(|trace| trace.to_string()),
        sections,
    }))
}

fn section(name: &'static str, source: &'static str, rows: Vec<Value>) -> Section {
    Section { name, source, rows, note: None }
}

fn ulid_of(uuid: uuid::Uuid) -> String {
    ulid::Ulid::from(uuid).to_string()
}

/// `events`: the envelope as stored and sent (it carries its `publishedName`).
fn envelope_section(envelope: &Envelope) -> Section {
    let row = serde_json::to_value(envelope).unwrap_or(Value::Null);
    section("envelope", "events", vec![row])
}

const LINKS: &str = "SELECT resource_type, resource_id FROM event_resources \
     WHERE event_id = $1 AND workspace_id = $2 ORDER BY resource_type, resource_id LIMIT $3";

/// `event_resources`: the timelines the event appears on.
async fn links(client: &impl GenericClient, e: &Envelope) -> DomainResult<Section> {
    let rows = sql::query(client, LINKS, &[&e.id, &e.workspace_id, &MAX_ROWS]).await?;
    let rows = rows
        .iter()
        .map(|row| json!({ "resourceType": row.get::<_, String>(0), "resourceId": ulid_of(row.get(1)) }))
        .collect();
    Ok(section("links", "event_resources", rows))
}

const OUTBOX: &str = "SELECT status, attempts, available_at, last_error_code, only_listeners, \
     dispatched_at, created_at, updated_at, claimed_by FROM event_outbox WHERE event_id = $1";
const STATUS_CHANGES: &str = "SELECT created_at, status_before, status_after, action FROM operator_actions \
     WHERE event_id = $1 AND notification_id IS NULL AND webhook_delivery_id IS NULL \
     ORDER BY created_at, id LIMIT $2";

/// `event_outbox` (+ `operator_actions`): the row now and its derived history.
async fn outbox(client: &impl GenericClient, e: &Envelope) -> DomainResult<Section> {
    let Some(row) = sql::query_opt(client, OUTBOX, &[&e.id]).await? else {
        let mut gone = section("outbox", "event_outbox", Vec::new());
        gone.note = Some("no outbox row: removed by the retention sweep after it finished");
        return Ok(gone);
    };
    let created: chrono::DateTime<chrono::Utc> = row.get(6);
    let mut history = vec![(created, json!({ "at": created, "status": "pending", "by": "append" }))];
    for change in sql::query(client, STATUS_CHANGES, &[&e.id, &MAX_ROWS]).await? {
        let at: chrono::DateTime<chrono::Utc> = change.get(0);
        history.push((
            at,
            json!({
                "at": at,
                "statusBefore": change.get::<_, String>(1),
                "status": change.get::<_, String>(2),
                "by": change.get::<_, String>(3),
            }),
        ));
    }
    for entry in super::trail::history_of(client, e.id).await? {
        let mut recorded = serde_json::to_value(&entry).unwrap_or(Value::Null);
        if let Value::Object(object) = &mut recorded {
            object.insert("by".into(), json!("dispatcher"));
        }
        history.push((entry.at, recorded));
    }
    let dispatched_at: Option<chrono::DateTime<chrono::Utc>> = row.get(5);
    if let Some(at) = dispatched_at {
        history.push((at, json!({ "at": at, "status": "dispatched", "by": "dispatcher" })));
    }
    history.sort_by_key(|(at, _)| *at);
    let history: Vec<Value> = history.into_iter().map(|(_, entry)| entry).collect();
    let current = json!({
        "status": row.get::<_, String>(0),
        "attempts": row.get::<_, i32>(1),
        "availableAt": row.get::<_, chrono::DateTime<chrono::Utc>>(2),
        "lastErrorCode": row.get::<_, Option<String>>(3),
        "onlyListeners": row.get::<_, Option<Vec<String>>>(4),
        "dispatchedAt": dispatched_at,
        "createdAt": created,
        "updatedAt": row.get::<_, chrono::DateTime<chrono::Utc>>(7),
        "claimedBy": row.get::<_, Option<String>>(8),
        "history": history,
    });
    let mut answer = section("outbox", "event_outbox+outbox_history", vec![current]);
    answer.note = Some(
        "history: creation, operator actions, the last dispatch, and the recorded failures (error code, \
         time, attempt), holds (first of each code), burials and lease takeovers; plain claims and \
         successful dispatches are not recorded one by one",
    );
    Ok(answer)
}

const RECEIPTS: &str = "SELECT listener, received_at FROM listener_receipts WHERE event_id = $1";
const PAUSES: &str = "SELECT listener FROM listener_pauses WHERE workspace_id = $1";

/// The listener map + `listener_starts` + `listener_receipts` + `listener_pauses`: each routed
/// listener's start, receipt, outcome and pause.
async fn listener_paths(client: &impl GenericClient, e: &Envelope) -> DomainResult<Section> {
    let starts = super::trail::custody_of(client, e.id).await?;
    let rejected = super::trail::rejections_of(client, e.workspace_id, e.id).await?;
    let receipts = sql::query(client, RECEIPTS, &[&e.id]).await?;
    let paused: Vec<String> =
        sql::query(client, PAUSES, &[&e.workspace_id]).await?.iter().map(|row| row.get(0)).collect();
    let outbox_status: Option<String> =
        sql::query_opt(client, "SELECT status FROM event_outbox WHERE event_id = $1", &[&e.id])
            .await?
            .map(|row| row.get(0));
    let rows = listeners(e.event_type)
        .iter()
        .map(|listener| {
            let name = listener.as_str();
            let start = starts.iter().find(|start| start.listener == name);
            let rejection = rejected.iter().rev().find(|r| r.listener == name);
            let receipt = receipts.iter().find(|row| row.get::<_, &str>(0) == name);
            let received_at: Option<chrono::DateTime<chrono::Utc>> = receipt.map(|row| row.get(1));
            // A fully successful attempt goes straight to `dispatched` without start rows.
            let started = start.is_some() || outbox_status.as_deref() == Some("dispatched");
            let outcome = match (received_at.is_some(), rejection.is_some(), started) {
                (true, _, _) => "applied",
                (false, true, _) => "rejected",
                (false, false, true) => "awaiting_receipt",
                (false, false, false) => "not_started",
            };
            json!({
                "listener": name,
                "started": started,
                "startedAt": start.map(|start| start.started_at),
                "transportMessageId": start.and_then(|start| start.transport_message_id.clone()),
                "rejectedReason": rejection.map(|r| r.reason.clone()),
                "receivedAt": received_at,
                "outcome": outcome,
                "paused": paused.iter().any(|p| p == name),
            })
        })
        .collect();
    let mut answer = section("listeners", "listener_starts+listener_receipts", rows);
    answer.note = Some(
        "a receipt records that the listener committed (applied, stale or duplicate are not told apart on \
         this build); rejected = a delivery was refused and no receipt is in (its latest reason shown)",
    );
    Ok(answer)
}

/// [`super::trail::custody_of`]: each listener start, settled by its receipt or not, restarts, stuck.
async fn custody(client: &impl GenericClient, e: &Envelope) -> DomainResult<Section> {
    let rows = super::trail::custody_of(client, e.id).await?;
    let rows = rows.iter().map(|start| serde_json::to_value(start).unwrap_or(Value::Null)).collect();
    Ok(section("custody", "listener_starts", rows))
}

/// [`super::trail::rejections_of`]: deliveries that claimed this event's id and were refused.
async fn rejections(client: &impl GenericClient, e: &Envelope) -> DomainResult<Section> {
    let rows = super::trail::rejections_of(client, e.workspace_id, e.id).await?;
    let rows = rows.iter().map(|rejection| serde_json::to_value(rejection).unwrap_or(Value::Null)).collect();
    Ok(section("rejections", "listener_rejections", rows))
}

const DELIVERIES: &str = "SELECT id, listener, recipient_kind, recipient_id, template, channel, status, \
     attempts, last_error_code, provider_message_id IS NOT NULL, created_at, sent_at \
     FROM notifications WHERE event_id = $1 AND workspace_id = $2 ORDER BY created_at, id LIMIT $3";

/// `notifications`: the deliveries the event's listeners produced.
async fn deliveries(client: &impl GenericClient, e: &Envelope) -> DomainResult<Section> {
    let rows = sql::query(client, DELIVERIES, &[&e.id, &e.workspace_id, &MAX_ROWS]).await?;
    let rows = rows
        .iter()
        .map(|row| {
            json!({
                "id": ulid_of(row.get(0)),
                "listener": row.get::<_, String>(1),
                "recipientKind": row.get::<_, String>(2),
                "recipientId": ulid_of(row.get(3)),
                "template": row.get::<_, String>(4),
                "channel": row.get::<_, String>(5),
                "status": row.get::<_, String>(6),
                "attempts": row.get::<_, i32>(7),
                "lastErrorCode": row.get::<_, Option<String>>(8),
                "providerAccepted": row.get::<_, bool>(9),
                "createdAt": row.get::<_, chrono::DateTime<chrono::Utc>>(10),
                "sentAt": row.get::<_, Option<chrono::DateTime<chrono::Utc>>>(11),
            })
        })
        .collect();
    Ok(section("deliveries", "notifications", rows))
}

const CAUSES: &str = "WITH RECURSIVE chain (id, causation_id, depth) AS ( \
         SELECT e.id, e.causation_id, 1 FROM events e WHERE e.id = $1 AND e.workspace_id = $2 \
         UNION ALL \
         SELECT e.id, e.causation_id, c.depth + 1 FROM events e JOIN chain c ON e.id = c.causation_id \
         WHERE c.depth <= $3 AND e.workspace_id = $2) \
     SELECT e.id, e.type, e.resource_type, e.resource_id, c.depth - 1 FROM chain c JOIN events e ON e.id = c.id \
     WHERE c.depth > 1 ORDER BY c.depth";

/// `events` upwards: the event that caused this one, its cause, … (a request id ends the chain).
async fn causes(client: &impl GenericClient, e: &Envelope) -> DomainResult<Section> {
    let rows = sql::query(client, CAUSES, &[&e.id, &e.workspace_id, &MAX_CHAIN]).await?;
    let mut answer: Vec<Value> = rows.iter().map(chain_row).collect();
    if answer.is_empty() {
        answer.push(json!({ "causationId": e.causation_id.0.to_string(), "kind": "request", "depth": 1 }));
    }
    Ok(section("causes", "events", answer))
}

const CAUSED: &str = "WITH RECURSIVE chain (id, depth) AS ( \
         SELECT e.id, 1 FROM events e WHERE e.causation_id = $1 AND e.workspace_id = $2 \
         UNION ALL \
         SELECT e.id, c.depth + 1 FROM events e JOIN chain c ON e.causation_id = c.id \
         WHERE c.depth < $3 AND e.workspace_id = $2) \
     SELECT e.id, e.type, e.resource_type, e.resource_id, c.depth FROM chain c JOIN events e ON e.id = c.id \
     ORDER BY c.depth, e.id LIMIT $4";

/// `events` downwards: the events this one caused (listener-originated mutations), and theirs.
async fn caused(client: &impl GenericClient, e: &Envelope) -> DomainResult<Section> {
    let cause = uuid::Uuid::from(e.id.ulid());
    let rows = sql::query(client, CAUSED, &[&cause, &e.workspace_id, &MAX_CAUSED_DEPTH, &MAX_CAUSED]).await?;
    Ok(section("caused", "events", rows.iter().map(chain_row).collect()))
}

fn chain_row(row: &tokio_postgres::Row) -> Value {
    json!({
        "eventId": row.get::<_, EventId>(0),
        "type": row.get::<_, String>(1),
        "resourceType": row.get::<_, String>(2),
        "resourceId": ulid_of(row.get(3)),
        "depth": row.get::<_, i32>(4),
    })
}

const ACTIONS: &str = "SELECT id, action, actor, status_before, status_after, listeners, batch_id, \
     notification_id, created_at, webhook_delivery_id FROM operator_actions \
     WHERE event_id = $1 AND workspace_id = $2 ORDER BY created_at, id LIMIT $3";

/// `operator_actions`: every operator action on the event's outbox row, its deliveries or its webhook
/// deliveries (the reason is not shown here: it is free text).
async fn actions(client: &impl GenericClient, e: &Envelope) -> DomainResult<Section> {
    let rows = sql::query(client, ACTIONS, &[&e.id, &e.workspace_id, &MAX_ROWS]).await?;
    let rows = rows
        .iter()
        .map(|row| {
            json!({
                "id": ulid_of(row.get(0)),
                "action": row.get::<_, String>(1),
                "actor": row.get::<_, String>(2),
                "statusBefore": row.get::<_, String>(3),
                "statusAfter": row.get::<_, String>(4),
                "listeners": row.get::<_, Option<Vec<String>>>(5),
                "batchId": row.get::<_, Option<uuid::Uuid>>(6).map(ulid_of),
                "notificationId": row.get::<_, Option<uuid::Uuid>>(7).map(ulid_of),
                "createdAt": row.get::<_, chrono::DateTime<chrono::Utc>>(8),
                "webhookDeliveryId": row.get::<_, Option<uuid::Uuid>>(9).map(ulid_of),
            })
        })
        .collect();
    Ok(section("actions", "operator_actions", rows))
}

/// `webhook_deliveries`: one row per endpoint the event was sent to (ids, statuses, codes).
async fn webhook_deliveries(client: &impl GenericClient, e: &Envelope) -> DomainResult<Section> {
    let items =
        super::listing::webhook_deliveries(client, e.workspace_id, None, Some(e.id), None, MAX_ROWS).await?;
    let rows = items.iter().map(|item| serde_json::to_value(item).unwrap_or_default()).collect();
    Ok(section("webhook deliveries", "webhook_deliveries", rows))
}
