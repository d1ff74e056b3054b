//! The custody reconciler: restarts listener starts whose receipt is overdue, and hands the ones
//! that stay unsettled to operators (DESIGN §5a).
//!
//! Custody of an event ends when every listener it was started for has committed its receipt. The
//! dispatcher records what it started (see [`crate::outbox`]): on the outbox row (`awaiting`, the
//! listeners a dispatched row still waits for) or, for an attempt that did not finish its row, as
//! `listener_starts` rows; each receipt settles its pair in the listener's own transaction (a trigger,
//! V8 and V10). A pair still unsettled [`ReconcileConfig::due`] after it was started (or last
//! restarted) was lost somewhere after the broker accepted it: a purged queue, an expired dead-letter
//! message, a listener that reported success without committing. One pass ([`reconcile`]):
//! 1. moves the awaited pairs of up to [`ReconcileConfig::batch`] overdue events off their outbox rows
//!    into `listener_starts` (started at the dispatch time), where restarts are counted per pair;
//! 2. takes up to [`ReconcileConfig::batch`] overdue unsettled starts (`FOR UPDATE SKIP LOCKED`, one
//!    statement) and, in the same statement, settles those whose receipt is in after all (a receipt
//!    that raced the start's record), counts a restart on the others, and marks `stuck_at` on those
//!    already restarted [`ReconcileConfig::max_restarts`] times;
//! 3. restarts the counted ones through the transport under the same identity (same event, same
//!    listener: the same CloudEvents `id` and the same start/idempotency key `"{event}:{listener}"`),
//!    so a copy that does arrive later is absorbed by the receipt;
//! 4. gives the restart back when the transport refused it (an outage does not use up restarts).
//!
//! Stuck pairs stay unsettled (they keep `OldestUnsettledAgeMs` and its alarm up) and are listed by
//! [`list_unsettled`] (operator routes, `clinic outbox unsettled`); an operator `replay` of the event
//! for that listener deletes the start and the dispatcher starts it afresh.
//!
//! Invariants: no transaction is held across the transport call; a pass is bounded by its batch;
//! concurrent passes take disjoint rows (and a duplicate restart is absorbed by the receipt).

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use deadpool_postgres::{GenericClient, Pool};
use serde::Serialize;

use super::job::{too_close, Job, JobError, JobKind, JobReport};
use crate::config::{ConfigError, Env};
use crate::db::sql;
use crate::dispatch::{DispatchError, Start, Transport};
use crate::events::read::{envelope_from_row, ENVELOPE_COLUMNS};
use crate::ids::{EventId, WorkspaceId};
use crate::listeners::Listener;

/// How the reconciler decides a start is overdue, and how often it restarts one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReconcileConfig {
    /// `CLINIC_CUSTODY_DUE_SECS` (default 1200, 10–1209600): a start without its receipt this long
    /// after it was started (or last restarted) is restarted. Keep it above what SQS may still
    /// redeliver on its own: the listener queues' visibility timeout × maxReceiveCount plus a margin
    /// (template.yaml: 180 s × 5 + 300 s = 1200 s).
    pub due: Duration,
    /// `CLINIC_CUSTODY_MAX_RESTARTS` (default 3, 0–100): restarts before the pair goes to operators.
    pub max_restarts: i32,
    /// `CLINIC_CUSTODY_BATCH` (default 100, 1–1000): starts examined per pass.
    pub batch: i64,
}

impl Default for ReconcileConfig {
    fn default() -> Self {
        Self { due: Duration::from_secs(1200), max_restarts: 3, batch: 100 }
    }
}

impl ReconcileConfig {
    pub fn read(env: &Env) -> Result<Self, ConfigError> {
        Ok(Self {
            due: Duration::from_secs(env.bounded("CLINIC_CUSTODY_DUE_SECS", 1200, 10..=1_209_600)?),
            max_restarts: env.bounded("CLINIC_CUSTODY_MAX_RESTARTS", 3, 0..=100)? as i32,
            batch: env.bounded("CLINIC_CUSTODY_BATCH", 100, 1..=1000)? as i64,
        })
    }
}

/// What one pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReconcileReport {
    /// Overdue starts whose receipt was in after all.
    pub settled: u64,
    /// Starts sent again through the transport.
    pub restarted: u64,
    /// Restarts the transport refused (given back, tried again next time they are due).
    pub failed_restarts: u64,
    /// Pairs handed to operators in this pass.
    pub stuck: u64,
    /// The pass was not started: its deadline had passed (the job; the next pass takes the rows).
    pub stopped_at_deadline: bool,
}

/// The custody job: one [`reconcile`] pass through `transport`, run by the housekeeping Lambda's
/// `reconcile` mode and first in every `drain`. Not started once its deadline has passed; a pass is
/// bounded by [`ReconcileConfig::batch`] and the transport's own timeouts.
#[derive(Clone)]
pub struct Reconcile {
    pub pool: Pool,
    pub transport: Arc<dyn Transport>,
    pub config: ReconcileConfig,
}

#[async_trait::async_trait]
impl Job for Reconcile {
    fn kind(&self) -> JobKind {
        JobKind::Reconcile
    }

    async fn run(&self, deadline: Option<Instant>) -> Result<JobReport, JobError> {
        if too_close(deadline, Duration::ZERO) {
            return Ok(JobReport::Reconcile(ReconcileReport {
                stopped_at_deadline: true,
                ..Default::default()
            }));
        }
        reconcile(&self.pool, self.transport.as_ref(), &self.config)
            .await
            .map(JobReport::Reconcile)
            .map_err(|error| JobError::new(JobKind::Reconcile, error))
    }
}

/// Takes the overdue unsettled starts (see the module docs, step 1). `$1` due (ms), `$2` batch,
/// `$3` max restarts (`{CEILING}`: the lease queue's ceiling rule on `restarts`).
const TAKE_OVERDUE: &str = "WITH overdue AS ( \
         SELECT s.event_id, s.listener FROM listener_starts s \
         WHERE s.settled_at IS NULL AND s.stuck_at IS NULL \
           AND s.started_at <= now() - $1::float8 * interval '1 millisecond' \
           AND coalesce(s.restarted_at, s.started_at) <= now() - $1::float8 * interval '1 millisecond' \
         ORDER BY s.started_at LIMIT $2 FOR UPDATE OF s SKIP LOCKED \
     ), taken AS ( \
         UPDATE listener_starts s \
         SET settled_at = rc.received_at, \
             restarts = CASE WHEN rc.received_at IS NULL AND NOT ({CEILING}) \
                             THEN s.restarts + 1 ELSE s.restarts END, \
             restarted_at = CASE WHEN rc.received_at IS NULL AND NOT ({CEILING}) \
                                 THEN now() ELSE s.restarted_at END, \
             stuck_at = CASE WHEN rc.received_at IS NULL AND {CEILING} THEN now() END \
         FROM overdue o LEFT JOIN listener_receipts rc \
              ON rc.event_id = o.event_id AND rc.listener = o.listener \
         WHERE s.event_id = o.event_id AND s.listener = o.listener \
         RETURNING s.event_id, s.listener, s.settled_at IS NOT NULL AS settled, \
                   s.stuck_at IS NOT NULL AS stuck \
     ) \
     SELECT t.listener, t.settled, t.stuck, {ENVELOPE_COLUMNS} \
     FROM taken t JOIN events e ON e.id = t.event_id";

/// Step 1: moves the awaited pairs of overdue dispatched events (`$1` due in ms, `$2` events) into
/// `listener_starts`, keeping the dispatch time as their start. A pair that already has a start row
/// keeps that one.
const ADOPT_OVERDUE: &str = "WITH overdue AS ( \
         SELECT event_id, awaiting, dispatched_at FROM event_outbox \
         WHERE awaiting IS NOT NULL AND dispatched_at <= now() - $1::float8 * interval '1 millisecond' \
         ORDER BY dispatched_at LIMIT $2 FOR UPDATE SKIP LOCKED \
     ), cleared AS ( \
         UPDATE event_outbox o SET awaiting = NULL FROM overdue d WHERE o.event_id = d.event_id \
     ) \
     INSERT INTO listener_starts (event_id, listener, started_at) \
     SELECT d.event_id, a.listener, d.dispatched_at \
     FROM overdue d CROSS JOIN LATERAL unnest(d.awaiting) AS a (listener) \
     ON CONFLICT (event_id, listener) DO NOTHING";

/// Gives back the restart of starts the transport refused.
const GIVE_BACK: &str = "UPDATE listener_starts s \
     SET restarts = greatest(s.restarts - 1, 0) \
     FROM unnest($1::uuid[], $2::text[]) AS f (event_id, listener) \
     WHERE s.event_id = f.event_id AND s.listener = f.listener AND s.settled_at IS NULL";

fn take_overdue_sql() -> &'static str {
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SQL.get_or_init(|| {
        // The lease queue's ceiling rule, on the restarts counter (`$3`: max restarts).
        TAKE_OVERDUE
            .replace("{ENVELOPE_COLUMNS}", ENVELOPE_COLUMNS)
            .replace("{CEILING}", &crate::lease::sql::reached("s.restarts", "$3"))
    })
}

/// One reconciler pass (see the module docs).
pub async fn reconcile(
    pool: &Pool,
    transport: &dyn Transport,
    config: &ReconcileConfig,
) -> Result<ReconcileReport, DispatchError> {
    let due_ms = config.due.as_secs_f64() * 1000.0;
    let rows = {
        let client = pool.get().await?;
        sql::execute(&client, ADOPT_OVERDUE, &[&due_ms, &config.batch]).await?;
        sql::query(&client, take_overdue_sql(), &[&due_ms, &config.batch, &config.max_restarts]).await?
    };
    let mut report = ReconcileReport::default();
    let mut envelopes = Vec::new();
    for row in &rows {
        let name: &str = row.get(0);
        let (settled, stuck): (bool, bool) = (row.get(1), row.get(2));
        let envelope = envelope_from_row(row, 3);
        if settled {
            report.settled += 1;
            continue;
        }
        let event_id = envelope.as_ref().map_or_else(|e| e.event_id, |e| e.id);
        if stuck {
            report.stuck += 1;
            tracing::error!(target: "clinic::custody", event_id = %event_id, listener = name,
                restarts = config.max_restarts, "receipt still missing after every restart; handed to operators");
            continue;
        }
        match (envelope, Listener::parse(name)) {
            (Ok(envelope), Some(listener)) => envelopes.push((envelope, listener)),
            _ => {
                // A newer build's event or listener: leave it for a build that knows it.
                tracing::warn!(target: "clinic::custody", event_id = %event_id, listener = name,
                    "overdue start names something this build does not know; leaving it");
                report.failed_restarts += 1;
                give_back(pool, &[(event_id, name.to_owned())]).await?;
            }
        }
    }
    if envelopes.is_empty() {
        return Ok(report);
    }
    let starts: Vec<Start<'_>> =
        envelopes.iter().map(|(envelope, listener)| Start { envelope, listener: *listener }).collect();
    // One span for the restarts, linked to each restarted event's committing trace (with its age).
    let span = tracing::info_span!("reconcile.restart", starts = starts.len());
    crate::telemetry::spans::link_events(&span, crate::telemetry::spans::OUTBOX_WAIT, || {
        let now = Utc::now();
        starts.iter().map(move |start| crate::telemetry::spans::Handled {
            event_id: start.envelope.id,
            trace: start.envelope.traceparent,
            wait_ms: crate::telemetry::spans::wait_ms(start.envelope.recorded_at, now),
        })
    });
    let results = tracing::Instrument::instrument(transport.start(&starts), span).await;
    let mut refused = Vec::new();
    for (start, result) in starts.iter().zip(results) {
        match result {
            Ok(_) => {
                report.restarted += 1;
                tracing::warn!(target: "clinic::custody", event_id = %start.envelope.id,
                    listener = %start.listener, "receipt overdue; restarted under the same identity");
            }
            Err(error) => {
                report.failed_restarts += 1;
                tracing::warn!(target: "clinic::custody", event_id = %start.envelope.id,
                    listener = %start.listener, code = %error.code, "restart refused; trying again when due");
                refused.push((start.envelope.id, start.listener.as_str().to_owned()));
            }
        }
    }
    give_back(pool, &refused).await?;
    Ok(report)
}

async fn give_back(pool: &Pool, pairs: &[(EventId, String)]) -> Result<(), DispatchError> {
    if pairs.is_empty() {
        return Ok(());
    }
    let ids: Vec<EventId> = pairs.iter().map(|(id, _)| *id).collect();
    let listeners: Vec<&str> = pairs.iter().map(|(_, l)| l.as_str()).collect();
    let client = pool.get().await?;
    sql::execute(&client, GIVE_BACK, &[&ids, &listeners]).await?;
    Ok(())
}

/// An (event, listener) pair still missing its receipt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(inline, deny_unknown_fields)]
pub struct Unsettled {
    pub event_id: EventId,
    pub listener: String,
    pub started_at: DateTime<Utc>,
    pub restarts: i32,
    pub restarted_at: Option<DateTime<Utc>>,
    /// Set once the reconciler gave up restarting it: an operator's turn (replay the event for this listener).
    pub stuck_at: Option<DateTime<Utc>>,
}

const LIST_UNSETTLED: &str = "SELECT s.event_id, s.listener, s.started_at, s.restarts, s.restarted_at, \
            s.stuck_at \
     FROM listener_custody s \
     WHERE s.started_at <= now() - $1::float8 * interval '1 millisecond' \
       AND ($2 OR s.stuck_at IS NOT NULL) \
       AND ($4::uuid IS NULL OR EXISTS (SELECT 1 FROM events e \
                                        WHERE e.id = s.event_id AND e.workspace_id = $4)) \
       AND NOT EXISTS (SELECT 1 FROM listener_receipts r \
                       WHERE r.listener = s.listener AND r.event_id = s.event_id) \
     ORDER BY s.started_at LIMIT $3";

/// Up to `limit` unsettled pairs older than `older_than`, oldest first; only stuck ones unless
/// `include_restarting`; only `workspace`'s events when given.
pub async fn list_unsettled(
    client: &impl GenericClient,
    workspace: Option<WorkspaceId>,
    older_than: Duration,
    include_restarting: bool,
    limit: i64,
) -> Result<Vec<Unsettled>, tokio_postgres::Error> {
    let older_ms = older_than.as_secs_f64() * 1000.0;
    let rows =
        sql::query(client, LIST_UNSETTLED, &[&older_ms, &include_restarting, &limit, &workspace]).await?;
    Ok(rows
        .iter()
        .map(|row| Unsettled {
            event_id: row.get(0),
            listener: row.get(1),
            started_at: row.get(2),
            restarts: row.get(3),
            restarted_at: row.get(4),
            stuck_at: row.get(5),
        })
        .collect())
}
