//! Webhook endpoints: what an admin registers, and the one repository over `webhook_endpoints` and
//! its append-only audit `webhook_endpoint_actions`. What a create or update request may say is
//! [`request`]'s.
//!
//! Invariants:
//! - Every change runs on the caller's transaction together with its audit row (action, actor, the
//!   names of the fields changed — never a URL, a description or a secret).
//! - A URL is checked by the SSRF guard ([`super::guard`]) before it is stored; the sender checks it
//!   again at every attempt.
//! - The secrets leave this module only inside [`Signing`] (for the sender) and in the one answer of
//!   create and rotate ([`Created`]); [`Endpoint`] (what lists and reads answer) has no secret.
//! - The `secret` and `previous_secret` columns hold only values sealed for their row
//!   ([`super::secret_box`]): create and rotate seal, a rotation seals a legacy clear secret it moves
//!   to `previous_secret`, and [`seal_clear`] re-seals under the current key the remaining legacy
//!   rows and the rows sealed under a previous key of the ring (the sender runs it once per
//!   process). [`signing`] opens them, legacy clear values included.
//! - A rotated-out secret lives in the row only during its overlap: none is kept for an overlap of
//!   0, and the retention sweep clears it once the overlap ended ([`clear_expired_previous`]).
//!
//! Just over 500 lines only with its tests; the code above them is under 500.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde::Serialize;
use serde_json::{json, Value};

mod request;

pub use request::{
    EndpointChange, NewEndpoint, Recovery, Rotation, DEFAULT_HEARTBEAT_SECONDS, DEFAULT_OVERLAP_HOURS,
    MAX_HEARTBEAT_SECONDS, PAYLOAD_FORMATS,
};

use super::secret_box::{OpenError, SealError, WebhookKey};
use super::signing::Secret;
use crate::contract::webhook_bodies::ENDPOINT_STATUSES;
use crate::db::sql;
use crate::domain::input::FieldError;
use crate::error::{DomainError, DomainResult};
use crate::events::EventType;
use crate::ids::{WebhookEndpointId, WorkspaceId};

/// The most endpoints one workspace may have (each costs a fan-out row per event and a heartbeat).
pub const MAX_ENDPOINTS_PER_WORKSPACE: i64 = 25;
/// The longest rotation overlap an admin may ask for.
pub const MAX_OVERLAP_HOURS: i64 = 168;

/// Why an endpoint is disabled, as `webhook_endpoints.disabled_reason` holds it (its CHECK, V12): an
/// admin disabled it, or the sender did after it kept failing.
pub const DISABLED_REASONS: [&str; 2] = ["operator", "failing"];

/// `names` and null: the values of a nullable text field that holds one of `names`.
fn or_null(names: &[&str]) -> Vec<Value> {
    names.iter().map(|name| json!(name)).chain([Value::Null]).collect()
}

/// An endpoint as answered by the API (no secret). Its schema is the component `WebhookEndpoint`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "WebhookEndpoint")]
pub struct Endpoint {
    pub id: WebhookEndpointId,
    pub workspace_id: WorkspaceId,
    pub url: String,
    pub description: String,
    /// Empty: every event type
    pub event_types: Vec<String>,
    pub enabled: bool,
    pub disabled_at: Option<DateTime<Utc>>,
    /// operator (an admin disabled it) or failing (disabled automatically after failing for days)
    #[schemars(extend("enum" = or_null(&DISABLED_REASONS)))]
    pub disabled_reason: Option<String>,
    /// While set, the previous secret still signs
    pub previous_secret_expires_at: Option<DateTime<Utc>>,
    pub failing_since: Option<DateTime<Utc>>,
    /// What the receiver is told (heartbeats carry it): off = disabled, or the workspace's webhook fan-out paused; error = failing for longer than the sender's threshold; else active. Every change is audited.
    #[schemars(extend("enum" = ENDPOINT_STATUSES))]
    pub status: String,
    /// The number of the endpoint's last delivery (0: none yet). Deliveries are numbered 1, 2, 3 … per endpoint with no gap and no reuse (the CloudEvents `sequence` extension).
    #[schemars(range(min = 0))]
    pub last_sequence: i64,
    /// A signed heartbeat (status and last number) after this many seconds without any attempt; 0 = none.
    #[schemars(range(min = 0, max = MAX_HEARTBEAT_SECONDS))]
    pub heartbeat_seconds: i32,
    /// cloudevents: the identifier-only CloudEvent (with `sequence`); fhir-id-only: a FHIR R5 Bundle of type subscription-notification whose SubscriptionStatus carries the status, the event number and focus references (identifiers only), sent as application/fhir+json. Both signed with the Standard Webhooks headers.
    #[schemars(extend("enum" = PAYLOAD_FORMATS))]
    pub payload_format: String,
    pub version: i32,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// The answer of create and rotate: the endpoint and its new secret, shown this once. Its schema is
/// the component `WebhookEndpointWithSecret`; [`Endpoint`] has no secret.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Created {
    #[serde(flatten)]
    pub endpoint: Endpoint,
    /// The signing secret, shown only in this answer
    #[schemars(extend("pattern" = format!("^{}", super::signing::PREFIX)))]
    pub secret: String,
}

/// The secrets that sign a delivery now: the current one and, during an overlap, the previous.
#[derive(Debug, Clone)]
pub struct Signing {
    pub current: Secret,
    pub previous: Option<Secret>,
}

impl Signing {
    pub fn all(&self) -> Vec<&Secret> {
        std::iter::once(&self.current).chain(self.previous.as_ref()).collect()
    }
}

fn names(types: &[EventType]) -> Vec<String> {
    types.iter().map(|t| t.as_str().to_owned()).collect()
}

const COLUMNS: &str =
    "id, workspace_id, url, description, event_types, enabled, disabled_at, disabled_reason, \
     previous_expires_at, failing_since, last_sequence, heartbeat_seconds, payload_format, version, \
     created_at, \
     updated_at";

/// The status a receiver and an operator see, for a row aliased `w`: the stored status, except
/// `off` while an operator has paused the workspace's webhook fan-out (DESIGN §5f: off = disabled
/// or paused) — no new event reaches any of its endpoints then. The stored status is the sender's
/// health (`active`/`error`) or `off` when disabled; a pause does not touch it, so resume shows it
/// again. Every statement that answers or sends an endpoint's status reads it through this.
pub const STATUS_SEEN: &str = "CASE WHEN w.status <> 'off' AND EXISTS (SELECT 1 FROM listener_pauses p \
       WHERE p.workspace_id = w.workspace_id AND p.listener = 'webhook_fan_out') THEN 'off' \
       ELSE w.status END";

/// [`COLUMNS`] of the row aliased `w`, with its status as seen.
fn columns_seen() -> String {
    let columns: Vec<String> = COLUMNS.split(',').map(|c| format!("w.{}", c.trim())).collect();
    format!("{}, {STATUS_SEEN} AS status", columns.join(", "))
}

fn endpoint(row: &tokio_postgres::Row) -> Endpoint {
    Endpoint {
        id: row.get("id"),
        workspace_id: row.get("workspace_id"),
        url: row.get("url"),
        description: row.get("description"),
        event_types: row.get("event_types"),
        enabled: row.get("enabled"),
        disabled_at: row.get("disabled_at"),
        disabled_reason: row.get("disabled_reason"),
        previous_secret_expires_at: row.get("previous_expires_at"),
        failing_since: row.get("failing_since"),
        status: row.get("status"),
        last_sequence: row.get("last_sequence"),
        heartbeat_seconds: row.get("heartbeat_seconds"),
        payload_format: row.get("payload_format"),
        version: row.get("version"),
        created_at: row.get("created_at"),
        updated_at: row.get("updated_at"),
    }
}

const AUDIT: &str =
    "INSERT INTO webhook_endpoint_actions (id, workspace_id, endpoint_id, action, actor, detail) \
     VALUES ($1, $2, $3, $4, $5, $6)";

/// Appends one audit row (`detail`: field names, counts and codes only). Its id comes from the
/// process's monotonic generator, so the rows one transaction writes (same `created_at`) read back
/// in the order they were written under `ORDER BY created_at, id` (an update's own row before the
/// status change it caused).
pub async fn audit(
    client: &impl GenericClient,
    workspace: WorkspaceId,
    endpoint: WebhookEndpointId,
    action: &str,
    actor: &str,
    detail: Value,
) -> Result<(), tokio_postgres::Error> {
    let id = uuid::Uuid::from(crate::ids::new_ulid());
    sql::execute(client, AUDIT, &[&id, &workspace, &endpoint, &action, &actor, &detail]).await.map(|_| ())
}

/// The workspace's endpoint-set lock (transaction-scoped): a create takes it, so the bound holds
/// under concurrent creates; a pause or a resume of the fan-out takes it, so no endpoint is created
/// unseen by it ([`audit_fan_out_pause`]).
const LOCK_ENDPOINT_SET: &str =
    "SELECT pg_advisory_xact_lock(hashtextextended('webhook_endpoints:' || $1::uuid::text, 0))";
const COUNT_FOR_CREATE: &str = "SELECT count(*) FROM webhook_endpoints WHERE workspace_id = $1";

/// Stores a new endpoint with a fresh secret; answers it with the secret (shown once). A workspace
/// that has [`MAX_ENDPOINTS_PER_WORKSPACE`] endpoints gets a conflict and nothing is written.
pub async fn create(
    client: &impl GenericClient,
    key: &WebhookKey,
    workspace: WorkspaceId,
    new: &NewEndpoint,
    actor: &str,
) -> DomainResult<Created> {
    // Creates of one workspace queue on a lock (held until commit), so the bound holds under
    // concurrent creates.
    sql::execute(client, LOCK_ENDPOINT_SET, &[&workspace]).await?;
    let count: i64 = sql::query_one(client, COUNT_FOR_CREATE, &[&workspace]).await?.get(0);
    if count >= MAX_ENDPOINTS_PER_WORKSPACE {
        return Err(DomainError::Conflict(format!(
            "a workspace has at most {MAX_ENDPOINTS_PER_WORKSPACE} webhook endpoints; delete one first"
        )));
    }
    let id = WebhookEndpointId::generate();
    let secret = Secret::generate();
    let insert = format!(
        "INSERT INTO webhook_endpoints AS w (id, workspace_id, url, description, event_types, secret, \
           heartbeat_seconds, payload_format) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING {}",
        columns_seen()
    );
    let types = names(&new.event_types);
    let sealed = key.seal(id, &secret).await.map_err(sealing)?;
    let row = sql::query_one(
        client,
        &insert,
        &[
            &id,
            &workspace,
            &new.url,
            &new.description,
            &types,
            &sealed,
            &new.heartbeat_seconds,
            &new.payload_format,
        ],
    )
    .await?;
    let created = endpoint(&row);
    // The status it shows from the start (`off` while the fan-out is paused): where its chain of
    // `status` rows begins.
    let detail = json!({ "eventTypes": types.len(), "status": created.status });
    audit(client, workspace, id, "create", actor, detail).await?;
    Ok(Created { endpoint: created, secret: secret.expose().to_owned() })
}

/// The workspace's endpoints, oldest first (a workspace has few).
pub async fn list(client: &impl GenericClient, workspace: WorkspaceId) -> DomainResult<Vec<Endpoint>> {
    let select = format!(
        "SELECT {} FROM webhook_endpoints w WHERE workspace_id = $1 ORDER BY id LIMIT 500",
        columns_seen()
    );
    Ok(sql::query(client, &select, &[&workspace]).await?.iter().map(endpoint).collect())
}

/// One endpoint of the workspace (another workspace's answers `NotFound`, like a missing one).
pub async fn get(
    client: &impl GenericClient,
    workspace: WorkspaceId,
    id: WebhookEndpointId,
) -> DomainResult<Endpoint> {
    let select =
        format!("SELECT {} FROM webhook_endpoints w WHERE workspace_id = $1 AND id = $2", columns_seen());
    sql::query_opt(client, &select, &[&workspace, &id])
        .await?
        .map(|row| endpoint(&row))
        .ok_or(DomainError::NotFound)
}

/// Locks one endpoint of the workspace, in a statement of its own: a statement run after it reads the
/// fan-out's pauses as committed once the lock was granted (a pause or a resume locks every endpoint
/// of the workspace while it audits them, [`audit_fan_out_pause`]), so the status seen before and
/// after a change is the one the audit chain has reached.
const LOCK_ONE: &str =
    "SELECT 1 FROM webhook_endpoints WHERE id = $1 AND ($2::uuid IS NULL OR workspace_id = $2) \
     FOR UPDATE";

/// The row is locked first so the status it had before the change can be audited.
/// The status it had is the one seen ([`STATUS_SEEN`]), like the one answered.
const UPDATE: &str = "WITH before AS ( \
       SELECT w.id, {STATUS_SEEN} AS previous_status FROM webhook_endpoints w \
       WHERE w.workspace_id = $1 AND w.id = $2 FOR UPDATE OF w) \
     UPDATE webhook_endpoints w SET \
       url = COALESCE($3, url), description = COALESCE($4, description), \
       event_types = COALESCE($5, event_types), \
       heartbeat_seconds = COALESCE($7, heartbeat_seconds), \
       payload_format = COALESCE($8, payload_format), \
       enabled = COALESCE($6, enabled), \
       status = CASE WHEN $6 IS NULL THEN status WHEN $6 THEN 'active' ELSE 'off' END, \
       disabled_at = CASE WHEN $6 IS NULL THEN disabled_at WHEN $6 THEN NULL ELSE COALESCE(disabled_at, now()) END, \
       disabled_reason = CASE WHEN $6 IS NULL THEN disabled_reason WHEN $6 THEN NULL \
                              ELSE COALESCE(disabled_reason, 'operator') END, \
       failing_since = CASE WHEN $6 THEN NULL ELSE failing_since END, \
       version = version + 1, updated_at = now() \
     FROM before WHERE w.id = before.id RETURNING before.previous_status, ";

/// Applies `change`; enabling clears the failure clock, disabling keeps pending deliveries.
pub async fn update(
    client: &impl GenericClient,
    workspace: WorkspaceId,
    id: WebhookEndpointId,
    change: &EndpointChange,
    actor: &str,
) -> DomainResult<Endpoint> {
    let types = change.event_types.as_deref().map(names);
    if !lock_for_status(client, id, Some(workspace)).await? {
        return Err(DomainError::NotFound);
    }
    static STATEMENT: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        format!("{}{}", UPDATE.replace("{STATUS_SEEN}", STATUS_SEEN), columns_seen())
    });
    let row = sql::query_opt(
        client,
        &STATEMENT,
        &[
            &workspace,
            &id,
            &change.url,
            &change.description,
            &types,
            &change.enabled,
            &change.heartbeat_seconds,
            &change.payload_format,
        ],
    )
    .await?
    .ok_or(DomainError::NotFound)?;
    let action = match (change.enabled, change.fields().len()) {
        (Some(true), 1) => "enable",
        (Some(false), 1) => "disable",
        _ => "update",
    };
    audit(client, workspace, id, action, actor, json!({ "fields": change.fields() })).await?;
    let updated = endpoint(&row);
    let previous: String = row.get("previous_status");
    audit_status(client, workspace, id, &previous, &updated.status, actor).await?;
    Ok(updated)
}

/// Audits a status change (`from` → `to`, codes only); nothing when the status stayed.
pub async fn audit_status(
    client: &impl GenericClient,
    workspace: WorkspaceId,
    id: WebhookEndpointId,
    from: &str,
    to: &str,
    actor: &str,
) -> Result<(), tokio_postgres::Error> {
    if from == to {
        return Ok(());
    }
    audit(client, workspace, id, "status", actor, json!({ "from": from, "to": to })).await
}

/// The workspace's endpoints with their stored status, each locked (in id order), so none changes
/// its status between this read and the pause's or the resume's commit.
const PAUSE_AFFECTED: &str =
    "SELECT id, status FROM webhook_endpoints WHERE workspace_id = $1 ORDER BY id FOR UPDATE";

/// Audits the status change a pause (`paused`) or a resume of the workspace's webhook fan-out makes
/// each endpoint show ([`STATUS_SEEN`]): `{from: <stored>, to: off}` or back, actor the operator,
/// for every endpoint not `off` by itself. Called on the pause's transaction; answers how many
/// endpoints changed.
///
/// It takes the endpoint-set lock (no endpoint is created meanwhile) and locks every endpoint, so a
/// concurrent change of one (an enable, a disable, an attempt's health) runs wholly before the pause
/// (which then reads its result) or wholly after it (and reads the pause): each change of the status
/// seen is audited once, by whoever made it.
pub async fn audit_fan_out_pause(
    client: &impl GenericClient,
    workspace: WorkspaceId,
    paused: bool,
    actor: &str,
) -> Result<usize, tokio_postgres::Error> {
    sql::execute(client, LOCK_ENDPOINT_SET, &[&workspace]).await?;
    let rows = sql::query(client, PAUSE_AFFECTED, &[&workspace]).await?;
    let mut changed = 0;
    for row in &rows {
        let (id, stored): (WebhookEndpointId, String) = (row.get(0), row.get(1));
        if stored == "off" {
            continue;
        }
        let (from, to) = if paused { (stored.as_str(), "off") } else { ("off", stored.as_str()) };
        audit_status(client, workspace, id, from, to, actor).await?;
        changed += 1;
    }
    Ok(changed)
}

/// Locks endpoint `id` (of `workspace` when given) in a statement of its own, for a change whose next
/// statement computes the status seen before and after it (see [`LOCK_ONE`]); false when there is
/// no such endpoint.
pub(crate) async fn lock_for_status(
    client: &impl GenericClient,
    id: WebhookEndpointId,
    workspace: Option<WorkspaceId>,
) -> Result<bool, tokio_postgres::Error> {
    Ok(sql::query_opt(client, LOCK_ONE, &[&id, &workspace]).await?.is_some())
}

/// Deletes the endpoint with its deliveries and attempts (the audit keeps its history).
pub async fn delete(
    client: &impl GenericClient,
    workspace: WorkspaceId,
    id: WebhookEndpointId,
    actor: &str,
) -> DomainResult<()> {
    let deleted = sql::execute(
        client,
        "DELETE FROM webhook_endpoints WHERE workspace_id = $1 AND id = $2",
        &[&workspace, &id],
    )
    .await?;
    if deleted == 0 {
        return Err(DomainError::NotFound);
    }
    audit(client, workspace, id, "delete", actor, json!({})).await?;
    Ok(())
}

const CURRENT: &str = "SELECT secret FROM webhook_endpoints WHERE workspace_id = $1 AND id = $2 FOR UPDATE";

const ROTATE: &str = "UPDATE webhook_endpoints w SET \
       previous_secret = CASE WHEN $4::float8 > 0 THEN $5 END, secret = $3, \
       previous_expires_at = CASE WHEN $4::float8 > 0 THEN now() + $4::float8 * interval '1 hour' END, \
       version = version + 1, updated_at = now() \
     WHERE workspace_id = $1 AND id = $2 RETURNING ";

/// Makes a new secret current; the old one keeps signing for `overlap_hours` (0: it is dropped at
/// once, not kept in the row). When the overlap ends the retention sweep clears it from the row
/// ([`clear_expired_previous`]); until then [`signing`] already ignores it.
pub async fn rotate(
    client: &impl GenericClient,
    key: &WebhookKey,
    workspace: WorkspaceId,
    id: WebhookEndpointId,
    overlap_hours: i64,
    actor: &str,
) -> DomainResult<Created> {
    if !(0..=MAX_OVERLAP_HOURS).contains(&overlap_hours) {
        return Err(FieldError::new("overlapHours", format!("must be 0 to {MAX_OVERLAP_HOURS}")).into());
    }
    let current: String =
        sql::query_opt(client, CURRENT, &[&workspace, &id]).await?.ok_or(DomainError::NotFound)?.get(0);
    // The rotated-out secret is kept sealed: a legacy clear one is sealed now; a sealed one stays
    // as it is (the API may be unable to open it: it only seals with a key service).
    let previous = match current.starts_with("whsec_") {
        true => key.reseal(id, &current).await.map_err(unreadable)?,
        false => current,
    };
    let secret = Secret::generate();
    let statement = format!("{ROTATE}{}", columns_seen());
    let hours = overlap_hours as f64;
    let sealed = key.seal(id, &secret).await.map_err(sealing)?;
    let row = sql::query_opt(client, &statement, &[&workspace, &id, &sealed, &hours, &previous])
        .await?
        .ok_or(DomainError::NotFound)?;
    audit(client, workspace, id, "rotate", actor, json!({ "overlapHours": overlap_hours })).await?;
    Ok(Created { endpoint: endpoint(&row), secret: secret.expose().to_owned() })
}

/// Clears, in one bounded batch of `$1`, the previous secrets whose rotation overlap has ended: a
/// rotated-out secret (rotated perhaps because it leaked) does not stay in the row and its backups.
const CLEAR_EXPIRED_PREVIOUS: &str = "UPDATE webhook_endpoints SET previous_secret = NULL, \
       previous_expires_at = NULL \
     WHERE id IN (SELECT id FROM webhook_endpoints WHERE previous_expires_at <= now() LIMIT $1)";

/// The retention sweep's step: answers how many previous secrets it cleared.
pub async fn clear_expired_previous(
    client: &impl GenericClient,
    batch: i64,
) -> Result<u64, tokio_postgres::Error> {
    sql::execute(client, CLEAR_EXPIRED_PREVIOUS, &[&batch]).await
}

fn sealing(error: SealError) -> DomainError {
    tracing::warn!(error = %error, "a webhook secret could not be sealed; nothing stored");
    DomainError::SealingUnavailable
}

fn unreadable(error: OpenError) -> DomainError {
    match error {
        OpenError::Unavailable => DomainError::SealingUnavailable,
        other => DomainError::Conflict(other.to_string()),
    }
}

const SIGNING: &str = "SELECT secret, CASE WHEN previous_expires_at > now() THEN previous_secret END \
     FROM webhook_endpoints WHERE id = $1";

/// The secrets that sign for `id` now (`None`: the endpoint is gone; `Some(Err)`: a stored secret
/// does not open for this endpoint under this key — nothing may be sent).
pub async fn signing(
    client: &impl GenericClient,
    key: &WebhookKey,
    id: WebhookEndpointId,
) -> DomainResult<Option<Result<Signing, OpenError>>> {
    let Some(row) = sql::query_opt(client, SIGNING, &[&id]).await? else {
        return Ok(None);
    };
    let (current, previous): (String, Option<String>) = (row.get(0), row.get(1));
    let opened = async {
        let current = key.open(id, &current).await?;
        let previous = match previous {
            Some(stored) => Some(key.open(id, &stored).await?),
            None => None,
        };
        Ok(Signing { current, previous })
    };
    Ok(Some(opened.await))
}

/// Rows holding a value not sealed as it must be now (`$2` is [`WebhookKey::sealed_prefix`]): legacy
/// clear values, `enc1:` values, values under a previous key, and keyring values once a key
/// service seals; locked.
const CLEAR_ROWS: &str = "SELECT id, secret, previous_secret FROM webhook_endpoints \
     WHERE NOT starts_with(secret, $2) OR NOT starts_with(previous_secret, $2) \
     ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED";

const SEAL_ROW: &str = "UPDATE webhook_endpoints SET secret = $2, previous_secret = $3 WHERE id = $1";

/// Seals under the current key, in one batch of at most `batch`, the rows whose secrets are stored
/// in clear (legacy rows) or sealed under another key of the ring (after a key rotation); answers how
/// many it sealed (a row whose value does not open is left as it is and logged: its deliveries fail
/// with `secret_unreadable`).
pub async fn seal_clear(
    client: &impl GenericClient,
    key: &WebhookKey,
    batch: i64,
) -> Result<u64, tokio_postgres::Error> {
    let mut sealed = 0;
    let prefix = key.sealed_prefix();
    for row in sql::query(client, CLEAR_ROWS, &[&batch, &prefix]).await? {
        let id: WebhookEndpointId = row.get(0);
        let current = key.reseal(id, row.get(1)).await;
        let previous = match row.get::<_, Option<String>>(2) {
            Some(stored) => key.reseal(id, &stored).await.map(Some),
            None => Ok(None),
        };
        let (Ok(current), Ok(previous)) = (current, previous) else {
            tracing::warn!(endpoint_id = %id, "webhook secret could not be sealed again now; left as it is");
            continue;
        };
        sealed += sql::execute(client, SEAL_ROW, &[&id, &current, &previous]).await?;
    }
    Ok(sealed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_parse_or_name_the_field() {
        let ok = NewEndpoint::try_from(&json!({"url": "https://hooks.example.com/x",
            "eventTypes": ["appointment.created", "appointment.created"]}))
        .unwrap();
        assert_eq!(ok.event_types, vec![EventType::AppointmentCreated]);
        assert_eq!(ok.description, "");
        for (body, field) in [
            (json!({}), "url"),
            (json!({"url": 3}), "url"),
            (json!({"url": "https://u:p@x.example/"}), "url"),
            (json!({"url": "https://x.example/", "eventTypes": ["appointment.exploded"]}), "eventTypes"),
            (json!({"url": "https://x.example/", "eventTypes": "appointment.created"}), "eventTypes"),
            (json!({"url": "https://x.example/", "description": "a\u{7}"}), "description"),
            (json!({"url": "https://x.example/", "secret": "whsec_mine"}), "secret"),
            (json!([]), "body"),
        ] {
            assert_eq!(NewEndpoint::try_from(&body).unwrap_err().field, field, "{body}");
        }
        assert_eq!(EndpointChange::try_from(&json!({})).unwrap_err().field, "body");
        assert_eq!(EndpointChange::try_from(&json!({"enabled": "yes"})).unwrap_err().field, "enabled");
        let change = EndpointChange::try_from(&json!({"enabled": false, "description": "x"})).unwrap();
        assert_eq!(change.fields(), vec!["description", "enabled"]);
    }
}
