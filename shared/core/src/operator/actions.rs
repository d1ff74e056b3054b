//! Retry, replay and discard: one locked row, one status check, one change, one audit row — all on
//! the caller's transaction.
//!
//! Invariants:
//! - Retry and replay start a fresh attempt budget (`attempts = 0`), so they always lead to at least
//!   one real attempt: the claim never buries a row an operator just re-queued. The spent attempts
//!   stay in `outbox_history`; the action is in `operator_actions`.
//! - Retry keeps the listeners already started (`listener_starts`): only the missing ones start.
//! - A status the action does not fit (a retry of a dispatched row, a replay of a dead one, anything
//!   on a discarded row) is a `Conflict` (409) naming the status, and writes nothing.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde::Serialize;
use serde_json::Value;

use super::{Operator, Reason};
use crate::db::sql;
use crate::domain::input::{FieldError, Fields};
use crate::error::{DomainError, DomainResult};
use crate::events::EventType;
use crate::ids::{EventId, OperatorActionId, WorkspaceId};
use crate::lease::operator::OUTBOX_ACTIONS;
use crate::lease::ActionKind;
use crate::listeners::{is_routed, listeners, Listener};

/// The most listeners one replay may name (more than any event type routes to).
const MAX_LISTENERS: usize = 32;

/// A parsed action: what to do, why, and (replay only) which listeners. Its schema is a replay's
/// body as [`ActionRequest::from_body`] reads it; a retry's or discard's is [`ReasonOnly`].
#[derive(Debug, Clone, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ActionRequest {
    // The route's, not the body's.
    #[serde(skip)]
    pub action: ActionKind,
    /// Why; required and not blank. Stored in the audit log, never logged.
    pub reason: Reason,
    /// Replay only: the listeners to start again (each must be routed for the event type); omit to replay all.
    // `None` means every listener of the event type.
    #[schemars(length(min = 1, max = MAX_LISTENERS))]
    pub listeners: Option<Vec<Listener>>,
}

/// The body of a retry or a discard, as [`ActionRequest::from_body`] reads it for an action other
/// than replay (`listeners` may only be null). Only its schema is used: the parser is what reads
/// it, and the API fuzzing checks they agree.
#[derive(schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReasonOnly {
    /// Why; required and not blank. Stored in the audit log, never logged.
    #[allow(dead_code)]
    reason: Reason,
    /// Only replay takes listeners; null is accepted and means none.
    #[allow(dead_code)]
    listeners: Option<()>,
}

impl ActionRequest {
    /// Builds a request from its parts, checking the reason first, then the listener names (see
    /// [`parse_listeners`] for unknown names).
    pub fn new(action: ActionKind, reason: &str, listener_names: Option<&[String]>) -> DomainResult<Self> {
        let reason = Reason::parse(reason)?;
        let listeners = listener_names.map(|names| parse_listeners(action, names)).transpose()?;
        Ok(ActionRequest { action, reason, listeners })
    }

    /// Reads a request body `{ "reason": "…", "listeners": ["…"] }` (listeners optional, replay only).
    pub fn from_body(action: ActionKind, body: Value) -> DomainResult<Self> {
        let mut body = match body {
            Value::Object(object) => object,
            _ => return Err(FieldError::new("body", "must be a JSON object").into()),
        };
        let raw_listeners = body.remove("listeners");
        let mut fields = Fields::new(Value::Object(body))?;
        let reason = fields.required_str("reason")?;
        let reason = Reason::parse(&reason)?;
        fields.finish()?;
        let names = match raw_listeners {
            None | Some(Value::Null) => None,
            Some(Value::Array(items)) => Some(
                items
                    .into_iter()
                    .map(|item| match item {
                        Value::String(name) => Ok(name),
                        _ => Err(FieldError::new("listeners", "must be an array of listener names")),
                    })
                    .collect::<Result<Vec<String>, FieldError>>()?,
            ),
            Some(_) => return Err(FieldError::new("listeners", "must be an array of listener names").into()),
        };
        let listeners = names.map(|names| parse_listeners(action, &names)).transpose()?;
        Ok(ActionRequest { action, reason, listeners })
    }
}

/// The named listeners of a replay. Names this build does not know are refused before anything is
/// written: when ALL of them are unknown (a replay sent to a build older than the one it was written
/// for, during a rolling deploy) it is [`DomainError::UnknownListeners`] (409, naming them); when some
/// are known and some are not, it is a 422 on `listeners` naming the unknown ones — nothing is
/// replayed, not even the known ones, so the operator resends exactly what they mean.
fn parse_listeners(action: ActionKind, names: &[String]) -> DomainResult<Vec<Listener>> {
    if action != ActionKind::Replay {
        return Err(FieldError::new("listeners", "only replay takes listeners").into());
    }
    if names.is_empty() || names.len() > MAX_LISTENERS {
        return Err(FieldError::new(
            "listeners",
            format!("must name 1 to {MAX_LISTENERS} listeners (omit it to replay all of them)"),
        )
        .into());
    }
    let mut parsed = Vec::with_capacity(names.len());
    let mut unknown: Vec<&str> = Vec::new();
    for name in names {
        match Listener::parse(name.trim()) {
            Some(listener) if !parsed.contains(&listener) => parsed.push(listener),
            Some(_) => {}
            None => unknown.push(name.trim()),
        }
    }
    // Refused before anything is written: a replay of names this build does not know would
    // otherwise reach a dispatcher that cannot start them. The names are listener identifiers, not
    // data, so they are echoed.
    if !unknown.is_empty() {
        let shown: Vec<String> =
            unknown.iter().take(MAX_LISTENERS).map(|n| n.chars().take(64).collect()).collect();
        if parsed.is_empty() {
            return Err(DomainError::UnknownListeners(shown));
        }
        return Err(FieldError::new(
            "listeners",
            format!("names listeners this build does not know: {}", shown.join(", ")),
        )
        .into());
    }
    Ok(parsed)
}

/// The audit row of one action, as answered by the API and the CLI (the reason is not echoed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ActionRecord {
    pub id: OperatorActionId,
    pub workspace_id: WorkspaceId,
    pub event_id: EventId,
    pub event_type: String,
    pub action: ActionKind,
    /// The acting admin's member id
    pub actor: String,
    #[schemars(with = "crate::outbox::OutboxStatus")]
    pub status_before: String,
    #[schemars(with = "crate::outbox::OutboxStatus")]
    pub status_after: String,
    /// Replay: the listeners started again (all of the event type's when none were named).
    pub listeners: Option<Vec<String>>,
    // The bulk request this action was part of (absent for single-row actions). Not in the schema:
    // the API answers single-row actions only, whose records have none (the CLI prints it).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(skip)]
    pub batch_id: Option<ulid::Ulid>,
    pub created_at: DateTime<Utc>,
}

const LOCK_ROW: &str = "SELECT o.status, e.type, e.workspace_id \
     FROM event_outbox o JOIN events e ON e.id = o.event_id \
     WHERE o.event_id = $1 AND ($2::uuid IS NULL OR e.workspace_id = $2) \
     FOR UPDATE OF o";

/// The starts of replayed listeners are forgotten, or the claim would skip them as already started.
const FORGET_STARTS: &str = "DELETE FROM listener_starts \
     WHERE event_id = $1 AND ($2::text[] IS NULL OR listener = ANY ($2))";

const INSERT_ACTION: &str = "INSERT INTO operator_actions \
     (id, workspace_id, event_id, action, actor, reason, status_before, status_after, listeners, batch_id) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
     RETURNING created_at";

/// Performs `request` on the outbox row of `event_id` and records it, on the caller's transaction
/// (which the caller commits). `workspace` scopes the lookup (`None`: any workspace, CLI only).
///
/// Errors: `NotFound` (no such row in scope), `Invalid` (named listeners not routed for the event
/// type), `Conflict` (the status does not fit the action); none of them writes anything.
pub async fn perform(
    tx: &impl GenericClient,
    workspace: Option<WorkspaceId>,
    event_id: EventId,
    request: &ActionRequest,
    operator: &Operator,
) -> DomainResult<ActionRecord> {
    perform_in_batch(tx, workspace, event_id, request, operator, None).await
}

/// [`perform`] as one target of a bulk request: the audit row carries `batch` (the one code path of
/// single-row and bulk actions).
pub async fn perform_in_batch(
    tx: &impl GenericClient,
    workspace: Option<WorkspaceId>,
    event_id: EventId,
    request: &ActionRequest,
    operator: &Operator,
    batch: Option<ulid::Ulid>,
) -> DomainResult<ActionRecord> {
    let row = sql::query_opt(tx, LOCK_ROW, &[&event_id, &workspace]).await?.ok_or(DomainError::NotFound)?;
    let status_name: String = row.get(0);
    let type_name: String = row.get(1);
    let workspace_id: WorkspaceId = row.get(2);
    // The state check and the change (a fresh attempt budget for retry and replay) are the lease
    // queue's, written once for every queue: a retry at the ceiling always leads to an attempt, so
    // the claim never buries a row an operator just re-queued; the spent attempts stay in
    // `outbox_history`, the action in `operator_actions`.
    let decision = OUTBOX_ACTIONS.decide(request.action, &status_name)?;
    let (before, after) = (decision.before, decision.after);
    let replayed = match request.action {
        ActionKind::Retry | ActionKind::Discard => {
            let statement = format!("UPDATE event_outbox SET {} WHERE event_id = $1", decision.set);
            sql::execute(tx, &statement, &[&event_id]).await?;
            None
        }
        ActionKind::Replay => {
            let event_type = EventType::parse(&type_name).ok_or_else(|| {
                DomainError::Conflict(format!("cannot replay an event of unknown type {type_name}"))
            })?;
            let replayed = replay_listeners(event_type, request.listeners.as_deref())?;
            let only: Option<Vec<&str>> =
                request.listeners.as_ref().map(|named| named.iter().map(|l| l.as_str()).collect());
            sql::execute(tx, FORGET_STARTS, &[&event_id, &only]).await?;
            let statement =
                format!("UPDATE event_outbox SET only_listeners = $2, {} WHERE event_id = $1", decision.set);
            sql::execute(tx, &statement, &[&event_id, &only]).await?;
            Some(replayed)
        }
    };

    let id = OperatorActionId::generate();
    let listener_names: Option<Vec<&str>> =
        replayed.as_ref().map(|names: &Vec<Listener>| names.iter().map(|l| l.as_str()).collect());
    let inserted = sql::query_one(
        tx,
        INSERT_ACTION,
        &[
            &id,
            &workspace_id,
            &event_id,
            &request.action.as_str(),
            &operator.as_str(),
            &request.reason.as_str(),
            &before,
            &after,
            &listener_names,
            &batch.map(uuid::Uuid::from),
        ],
    )
    .await?;
    tracing::info!(
        action_id = %id,
        event_id = %event_id,
        action = request.action.as_str(),
        status_before = before,
        status_after = after,
        "operator action recorded"
    );
    Ok(ActionRecord {
        id,
        workspace_id,
        event_id,
        event_type: type_name,
        action: request.action,
        actor: operator.as_str().to_owned(),
        status_before: before.to_owned(),
        status_after: after.to_owned(),
        listeners: listener_names.map(|names| names.into_iter().map(str::to_owned).collect()),
        batch_id: batch,
        created_at: inserted.get(0),
    })
}

const RECORDED: &str =
    "SELECT a.id, a.workspace_id, a.event_id, e.type, a.action, a.actor, a.status_before, \
     a.status_after, a.listeners, a.batch_id, a.created_at \
     FROM operator_actions a JOIN events e ON e.id = a.event_id \
     WHERE a.id = $1 AND a.workspace_id = $2 AND a.notification_id IS NULL \
     AND a.webhook_delivery_id IS NULL";

/// The audit record of an earlier outbox action `id` of `workspace`, as [`perform`] answered it (what
/// a request repeated with its `Idempotency-Key` answers); `None` when there is none.
pub async fn recorded(
    client: &impl GenericClient,
    workspace: WorkspaceId,
    id: OperatorActionId,
) -> DomainResult<Option<ActionRecord>> {
    let Some(row) = sql::query_opt(client, RECORDED, &[&id, &workspace]).await? else {
        return Ok(None);
    };
    let action: String = row.get(4);
    let action = ActionKind::parse(&action)
        .ok_or_else(|| DomainError::Conflict(format!("the audit row has an unknown action {action}")))?;
    Ok(Some(ActionRecord {
        id: row.get(0),
        workspace_id: row.get(1),
        event_id: row.get(2),
        event_type: row.get(3),
        action,
        actor: row.get(5),
        status_before: row.get(6),
        status_after: row.get(7),
        listeners: row.get(8),
        batch_id: row.get::<_, Option<uuid::Uuid>>(9).map(ulid::Ulid::from),
        created_at: row.get(10),
    }))
}

/// The listeners a replay starts: the named ones, each of which must be routed for `event_type`, or
/// all routed ones. An event type without listeners has nothing to replay.
fn replay_listeners(event_type: EventType, named: Option<&[Listener]>) -> DomainResult<Vec<Listener>> {
    match named {
        Some(named) => {
            if let Some(stranger) = named.iter().find(|listener| !is_routed(event_type, **listener)) {
                return Err(FieldError::new(
                    "listeners",
                    format!("{stranger} is not a listener of {event_type}; it has {}", names(event_type)),
                )
                .into());
            }
            Ok(named.to_vec())
        }
        None if listeners(event_type).is_empty() => {
            Err(DomainError::Conflict(format!("{event_type} has no listeners; there is nothing to replay")))
        }
        None => Ok(listeners(event_type).to_vec()),
    }
}

fn names(event_type: EventType) -> String {
    let names: Vec<&str> = listeners(event_type).iter().map(|l| l.as_str()).collect();
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The field a refused request names (every refusal but the all-unknown replay is a field error).
    fn field_of(error: DomainError) -> String {
        match error {
            DomainError::Invalid(field) => field.field,
            DomainError::UnknownListeners(_) => "listeners (409)".into(),
            other => panic!("{other}"),
        }
    }

    #[test]
    fn the_reason_is_checked_before_anything_else() {
        let error =
            ActionRequest::from_body(ActionKind::Retry, json!({"reason": " ", "listeners": 3})).unwrap_err();
        assert_eq!(field_of(error), "reason");
        let error = ActionRequest::from_body(ActionKind::Discard, json!({})).unwrap_err();
        assert_eq!(field_of(error), "reason");
        let error = ActionRequest::from_body(ActionKind::Discard, json!("why")).unwrap_err();
        assert_eq!(field_of(error), "body");
    }

    #[test]
    fn listeners_are_for_replay_and_must_exist() {
        let ok = ActionRequest::from_body(
            ActionKind::Replay,
            json!({"reason": "lost", "listeners": ["patient_reminder", "patient_reminder"]}),
        )
        .unwrap();
        assert_eq!(ok.listeners, Some(vec![Listener::PatientReminder]));
        for body in [
            json!({"reason": "x", "listeners": []}),
            json!({"reason": "x", "listeners": ["send_fax", "patient_reminder"]}),
            json!({"reason": "x", "listeners": [1]}),
            json!({"reason": "x", "listeners": "patient_reminder"}),
        ] {
            let error = ActionRequest::from_body(ActionKind::Replay, body).unwrap_err();
            assert_eq!(field_of(error), "listeners");
        }
        let error = ActionRequest::from_body(
            ActionKind::Replay,
            json!({"reason": "x", "listeners": ["send_fax", "fax"]}),
        )
        .unwrap_err();
        assert!(
            matches!(&error, DomainError::UnknownListeners(names) if names == &["send_fax", "fax"]),
            "{error}"
        );
        let error = ActionRequest::from_body(
            ActionKind::Retry,
            json!({"reason": "x", "listeners": ["patient_reminder"]}),
        )
        .unwrap_err();
        assert_eq!(field_of(error), "listeners");
        let error =
            ActionRequest::from_body(ActionKind::Retry, json!({"reason": "x", "force": true})).unwrap_err();
        assert_eq!(field_of(error), "force");
    }

    #[test]
    fn replay_checks_listeners_against_the_map() {
        let all = replay_listeners(EventType::AppointmentCreated, None).unwrap();
        assert_eq!(all, listeners(EventType::AppointmentCreated));
        assert!(replay_listeners(EventType::AppointmentCreated, Some(&[Listener::PatientReminder])).is_err());
        assert!(matches!(replay_listeners(EventType::PatientCreated, None), Err(DomainError::Conflict(_))));
    }
}
