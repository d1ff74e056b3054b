//! The sender's statements on `notifications`: expire leases to `uncertain`, claim due rows, renew
//! one row's lease before its provider call, mark one row (fenced). Each is one statement; claim runs
//! in its own short transaction.

use std::sync::LazyLock;
use std::time::Duration;

use deadpool_postgres::GenericClient;
use ulid::Ulid;

use super::{DeliveryStatus, RecipientKind, UncertainPolicy};
use crate::db::sql;
use crate::ids::{ClaimToken, EventId, NotificationId, WorkspaceId};
use crate::lease::sql::ClaimOrder;
use crate::lease::NOTIFICATIONS;

/// `sending` rows whose lease ended: their sender died between claiming and marking, perhaps after
/// the provider accepted the message. They become `uncertain` (a state that says so) — or `dead`
/// once they used up the attempt ceiling, so a sender that keeps dying cannot resend for ever.
static EXPIRE_LEASES: LazyLock<String> = LazyLock::new(|| {
    let queue = NOTIFICATIONS;
    format!(
        "UPDATE notifications n SET {expiry} \
         FROM (SELECT id FROM notifications WHERE {expired} \
               ORDER BY available_at LIMIT 100 FOR UPDATE SKIP LOCKED) AS expired \
         WHERE n.id = expired.id RETURNING n.id, n.status",
        expiry = queue.expiry_set("n", "$1"),
        expired = queue.expired(""),
    )
});

/// The statuses a claim can find due (`uncertain` too, when the policy resends): the predicate of
/// the partial index `notifications_fair_idx` on `(workspace_id, priority, available_at, id)` (V25),
/// whose skip scan finds the (workspace, priority) pairs of the fair pick.
pub(crate) fn claimable(alias: &str) -> String {
    let queue = NOTIFICATIONS;
    let column = if alias.is_empty() { "status".to_owned() } else { format!("{alias}.status") };
    let mut names: Vec<String> = [Some(queue.stored.ready), Some(queue.stored.retry), queue.stored.uncertain]
        .into_iter()
        .flatten()
        .chain(
            queue
                .stored
                .others
                .iter()
                .filter(|(_, state)| *state == crate::lease::State::Held)
                .map(|(n, _)| *n),
        )
        .map(|name| format!("'{name}'"))
        .collect();
    names.sort();
    format!("{column} IN ({})", names.join(", "))
}

/// The claim. Rows are due by the lease queue's rule, and `uncertain` rows are due too when `$4`
/// (the policy resends them). [`ClaimOrder::Fair`]: the lease queue's fair pick — by priority (the
/// kind's, [`super::priority`]), then in turns across workspaces, then oldest first — over the
/// first due rows of each (workspace, priority) pair. [`ClaimOrder::OldestFirst`] (the bench's
/// comparison) and a claim by idempotency key (`$5`, the fast path: one row) take the oldest.
fn claim_sql(order: ClaimOrder, by_key: bool) -> String {
    let queue = NOTIFICATIONS;
    let uncertain = queue.stored.uncertain.unwrap_or_default();
    let due = |alias: &str| {
        let column = |name: &str| if alias.is_empty() { name.to_owned() } else { format!("{alias}.{name}") };
        format!(
            "({due} OR ($4 AND {status} = '{uncertain}' AND {available_at} <= now()))",
            due = queue.due(alias),
            status = column("status"),
            available_at = column("available_at"),
        )
    };
    let filter = if by_key { "AND idempotency_key = $5" } else { "AND $5::text IS NULL" };
    let (recheck, columns) = (due("t"), "t.status AS previous_status");
    let fair = order == ClaimOrder::Fair && !by_key;
    let pick = match fair {
        true => queue.fair_pick(
            &queue.groups(&claimable("")),
            &format!(
                "SELECT id, available_at FROM notifications \
                 WHERE workspace_id = g.workspace_id AND priority = g.priority AND {claimable} AND {due} {filter}",
                claimable = claimable(""),
                due = due(""),
            ),
            &recheck,
            columns,
            "$1",
        ),
        false => queue.oldest_first_pick(
            &format!("SELECT id, available_at FROM notifications WHERE {due} {filter}", due = due("")),
            &recheck,
            columns,
            "$1",
        ),
    };
    // The fair pick moves the claimed workspaces' turns on, in the same statement.
    let charge = if fair { format!(", charged AS ({})", queue.charge("due")) } else { String::new() };
    format!(
        "WITH due AS ({pick}){charge} \
         UPDATE notifications n SET {claim} \
         FROM due WHERE n.id = due.id \
         RETURNING n.id, n.workspace_id, n.event_id, n.listener, n.idempotency_key, n.recipient_kind, \
             n.recipient_id, n.template, n.attempts, due.previous_status, \
             (SELECT e.traceparent FROM events e WHERE e.id = n.event_id)",
        claim = queue.claim_set("n", "$2", "$3", None),
    )
}

/// One claimed delivery: ids and the template only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedDelivery {
    pub id: NotificationId,
    pub workspace_id: WorkspaceId,
    pub event_id: EventId,
    pub listener: String,
    pub idempotency_key: String,
    pub recipient_kind: Option<RecipientKind>,
    pub recipient_id: Ulid,
    pub template: String,
    /// Attempts including this one.
    pub attempts: i32,
    /// The row was `uncertain`: an earlier attempt may have reached the recipient.
    pub resend: bool,
    /// The trace that committed the event (its provider call links to it).
    pub trace: Option<crate::telemetry::TraceParent>,
}

/// The token fencing every mark of this claim, and its rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryClaim {
    pub token: ClaimToken,
    pub rows: Vec<ClaimedDelivery>,
    /// Rows found with an expired lease and moved to `uncertain` by this claim.
    pub uncertain: Vec<NotificationId>,
    /// Rows found with an expired lease past the attempt ceiling, moved to `dead`.
    pub buried: Vec<NotificationId>,
}

/// How a claim is made.
#[derive(Debug, Clone, Copy)]
pub struct ClaimRules {
    pub batch: i64,
    pub lease: Duration,
    pub max_attempts: i32,
    pub policy: UncertainPolicy,
    pub order: ClaimOrder,
}

/// Moves expired leases to `uncertain` (or `dead` past the ceiling), then claims up to `batch` due
/// rows (only the one with `key` when given) under a fresh token and lease. Run on its own
/// transaction and commit it at once.
pub async fn claim(
    client: &impl GenericClient,
    rules: ClaimRules,
    key: Option<&str>,
) -> Result<DeliveryClaim, tokio_postgres::Error> {
    let ClaimRules { batch, lease, max_attempts, policy, order } = rules;
    let expired = sql::query(client, &EXPIRE_LEASES, &[&max_attempts]).await?;
    let (mut uncertain, mut buried) = (Vec::new(), Vec::new());
    for row in &expired {
        let status: &str = row.get(1);
        if status == NOTIFICATIONS.stored.dead {
            buried.push(row.get(0))
        } else {
            uncertain.push(row.get(0))
        }
    }
    let token = ClaimToken::generate();
    let lease_ms = lease.as_secs_f64() * 1000.0;
    let resend = policy == UncertainPolicy::Resend;
    static ALL: LazyLock<String> = LazyLock::new(|| claim_sql(ClaimOrder::Fair, false));
    static ALL_OLDEST_FIRST: LazyLock<String> = LazyLock::new(|| claim_sql(ClaimOrder::OldestFirst, false));
    static BY_KEY: LazyLock<String> = LazyLock::new(|| claim_sql(ClaimOrder::OldestFirst, true));
    let statement: &str = match (key, order) {
        (Some(_), _) => &BY_KEY,
        (None, ClaimOrder::Fair) => &ALL,
        (None, ClaimOrder::OldestFirst) => &ALL_OLDEST_FIRST,
    };
    let rows = sql::query(client, statement, &[&batch, &token, &lease_ms, &resend, &key]).await?;
    let rows = rows
        .iter()
        .map(|row| {
            let recipient_id: uuid::Uuid = row.get(6);
            let previous: &str = row.get(9);
            ClaimedDelivery {
                id: row.get(0),
                workspace_id: row.get(1),
                event_id: row.get(2),
                listener: row.get(3),
                idempotency_key: row.get(4),
                recipient_kind: RecipientKind::parse(row.get(5)),
                recipient_id: Ulid::from(recipient_id),
                template: row.get(7),
                attempts: row.get(8),
                resend: Some(previous) == NOTIFICATIONS.stored.uncertain,
                trace: row.get::<_, Option<&str>>(10).and_then(crate::telemetry::TraceParent::parse),
            }
        })
        .collect();
    Ok(DeliveryClaim { token, rows, uncertain, buried })
}

/// Where one claimed row goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark<'a> {
    pub status: DeliveryStatus,
    /// `email`, `sms` or `none`, once chosen.
    pub channel: Option<&'a str>,
    pub provider_message_id: Option<&'a str>,
    pub error_code: Option<&'a str>,
    /// When it is due again (`retry`: after its backoff; `deferred`: at the policy's instant).
    pub due: Due,
    /// The contact policy let it through inside quiet hours (`sent` only).
    pub bypassed_quiet_hours: bool,
    /// A hold (`retry` only): the provider was unavailable or throttling, the attempt is given back.
    pub held: bool,
}

/// When a marked row is due again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    /// Final or waiting for an operator: `available_at` stays.
    Unchanged,
    /// A retry's backoff from now.
    After(Duration),
    /// A deferral's instant (the lease queue's delay; the attempt is given back: not a failure).
    At(chrono::DateTime<chrono::Utc>),
}

/// Renews one claimed row's lease right before its provider call, fenced by the claim token and by
/// the lease still running: a row whose lease already ended (another claim may have found it and
/// moved it to `uncertain`, or may do so any moment) is not renewed, and its call is skipped.
static RENEW: LazyLock<String> = LazyLock::new(|| {
    let queue = NOTIFICATIONS;
    format!(
        "UPDATE notifications SET {renew} WHERE id = $1 AND {fence} AND {running} RETURNING id",
        renew = queue.renew_set("$3"),
        fence = queue.fence("", "$2"),
        running = queue.lease_running(""),
    )
});

/// Renews the lease of one claimed row for `lease` from now; `false` when the claim was taken over
/// or its lease already ended (then no provider call may start for it).
pub async fn renew(
    client: &impl GenericClient,
    id: NotificationId,
    token: ClaimToken,
    lease: Duration,
) -> Result<bool, tokio_postgres::Error> {
    let lease_ms = lease.as_secs_f64() * 1000.0;
    Ok(!sql::query(client, &RENEW, &[&id, &token, &lease_ms]).await?.is_empty())
}

static MARK: LazyLock<String> = LazyLock::new(|| {
    let queue = NOTIFICATIONS;
    format!(
        "UPDATE notifications SET status = $3, channel = coalesce($4, channel), \
             provider_message_id = coalesce($5, provider_message_id), last_error_code = $6, \
             sent_at = CASE WHEN $3 = '{done}' THEN now() ELSE sent_at END, \
             available_at = CASE WHEN $3 = '{retry}' THEN {after} \
                 WHEN $3 = '{held}' THEN $8::timestamptz ELSE available_at END, \
             attempts = CASE WHEN $3 = '{held}' OR $10 THEN {give_back} ELSE attempts END, \
             quiet_hours_bypassed = quiet_hours_bypassed OR $9, {release} \
         WHERE id = $1 AND {fence} RETURNING id",
        done = queue.stored.done,
        retry = queue.stored.retry,
        held = queue.stored_name(crate::lease::State::Held).unwrap_or_default(),
        give_back = queue.give_back(""),
        after = crate::lease::sql::after_ms("$7"),
        release = queue.release_set(),
        fence = queue.fence("", "$2"),
    )
});

/// Marks one row, fenced by `token`; `false` when the claim was taken over (nothing changed).
pub async fn mark(
    client: &impl GenericClient,
    id: NotificationId,
    token: ClaimToken,
    mark: &Mark<'_>,
) -> Result<bool, tokio_postgres::Error> {
    let (delay_ms, at) = match mark.due {
        Due::Unchanged => (0.0, None),
        Due::After(delay) => (delay.as_secs_f64() * 1000.0, None),
        Due::At(at) => (0.0, Some(at)),
    };
    let code: Option<String> = mark.error_code.map(|code| code.chars().take(100).collect());
    let provider_id: Option<String> = mark.provider_message_id.map(|id| id.chars().take(200).collect());
    let rows = sql::query(
        client,
        &MARK,
        &[
            &id,
            &token,
            &mark.status.as_str(),
            &mark.channel,
            &provider_id,
            &code,
            &delay_ms,
            &at,
            &mark.bypassed_quiet_hours,
            &mark.held,
        ],
    )
    .await?;
    Ok(!rows.is_empty())
}
