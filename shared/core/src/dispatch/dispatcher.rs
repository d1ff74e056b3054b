//! One dispatcher step: claim, start, mark — three short units of work, no transaction open across
//! the transport call.

use std::sync::Arc;

use deadpool_postgres::Pool;

use super::lifecycle::{emit, emit_unreadable_dead, Transition};
use super::transport::{Start, StartError, StartResult, Transport};
use super::{DispatchConfig, DispatchError, ListenSource, StepOutcome, StepReport};
use crate::ids::EventId;
use crate::listeners::Listener;
use crate::outbox::{self, Claim, Failure, FailureMark, StartRecord};

/// Claims due outbox rows and starts their listeners through a [`Transport`].
///
/// Build one per process (it holds the pool and, while draining, one dedicated `LISTEN`
/// connection); run at most one drain loop on it at a time. Several dispatchers may run against the
/// same database concurrently: `SKIP LOCKED` and claim tokens keep them apart.
pub struct Dispatcher {
    pub(super) pool: Pool,
    pub(super) transport: Arc<dyn Transport>,
    pub(super) config: DispatchConfig,
    pub(super) id: String,
    pub(super) listen: Option<ListenSource>,
    pub(super) listening: tokio::sync::Mutex<Option<super::drain::Listening>>,
    /// EMF metrics of the steps (see [`crate::metrics`]); flushed by the drain loops.
    pub(super) metrics: crate::metrics::Recorder,
}

impl std::fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatcher")
            .field("id", &self.id)
            .field("transport", &self.transport.name())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// What became of one claimed row's starts.
struct RowResult {
    failures: Vec<(Listener, StartError)>,
    successes: Vec<(Listener, Option<String>)>,
}

impl Dispatcher {
    /// A dispatcher with a fresh id (`dispatcher-<ULID>`); polls only, until [`Dispatcher::with_listen`].
    pub fn new(pool: Pool, transport: Arc<dyn Transport>, config: DispatchConfig) -> Self {
        Self {
            pool,
            transport,
            config,
            id: format!("dispatcher-{}", crate::ids::new_ulid()),
            listen: None,
            listening: tokio::sync::Mutex::new(None),
            metrics: crate::metrics::Recorder::default(),
        }
    }

    /// How metrics are emitted (`CLINIC_METRICS`: EMF lines on stdout, the default, or off).
    pub fn with_metrics(mut self, mode: crate::metrics::MetricsMode) -> Self {
        self.metrics = crate::metrics::Recorder::new(mode);
        self
    }

    /// Wakes on `LISTEN clinic_outbox` over a dedicated connection to `url` while idle.
    pub fn with_listen(mut self, url: impl Into<String>, ca_file: Option<String>) -> Self {
        self.listen = Some(ListenSource { url: url.into(), ca_file });
        self
    }

    /// Names this dispatcher (`claimed_by`, `outbox_waiters`); ids must be unique among live ones.
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = id.into();
        self
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn config(&self) -> &DispatchConfig {
        &self.config
    }

    /// The pool the dispatcher works on (scheduled housekeeping shares it).
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Claims one batch, starts its listeners, marks the rows. `Idle` when nothing was due.
    pub async fn step(&self) -> Result<StepOutcome, DispatchError> {
        let started = std::time::Instant::now();
        let claim = self.claim().await?;
        if claim.is_empty() {
            return Ok(StepOutcome::Idle);
        }
        let results = self.start(&claim).await;
        let report = self.mark(&claim, results).await?;
        self.metrics.batch(started.elapsed());
        Ok(StepOutcome::Dispatched(report))
    }

    /// Unit 1: one statement claims the batch.
    async fn claim(&self) -> Result<Claim, DispatchError> {
        let client = self.pool.get().await?;
        let claim = outbox::claim(&client, self.config.batch, self.config.lease, &self.id).await?;
        for row in &claim.rows {
            let (transition, outcome) = if row.lease_expired {
                (Transition::LeaseExpired, "reclaimed")
            } else {
                (Transition::Claimed, "ok")
            };
            emit(transition, &row.envelope, None, row.attempts, outcome);
        }
        Ok(claim)
    }

    /// Unit 2: the transport call, with no connection or transaction held.
    async fn start(&self, claim: &Claim) -> Vec<RowResult> {
        let mut starts = Vec::new();
        let mut owners = Vec::new();
        for (index, row) in claim.rows.iter().enumerate() {
            for listener in row.to_start() {
                starts.push(Start { envelope: &row.envelope, listener });
                owners.push(index);
            }
        }
        let mut results: Vec<RowResult> =
            claim.rows.iter().map(|_| RowResult { failures: Vec::new(), successes: Vec::new() }).collect();
        if starts.is_empty() {
            return results;
        }
        let answers = self.transport.start(&starts).await;
        let mut answers = answers.into_iter();
        for (start, owner) in starts.iter().zip(owners) {
            let answer: StartResult = answers.next().unwrap_or_else(|| {
                Err(StartError::retryable("transport_contract", "transport lost a result"))
            });
            let attempt = claim.rows[owner].attempts;
            match answer {
                Ok(message_id) => {
                    emit(Transition::Started, start.envelope, Some(start.listener), attempt, "ok");
                    results[owner].successes.push((start.listener, message_id));
                }
                Err(error) => {
                    emit(Transition::Started, start.envelope, Some(start.listener), attempt, &error.code);
                    results[owner].failures.push((start.listener, error));
                }
            }
        }
        results
    }

    /// Unit 3: fenced marks. A fully successful batch is one statement; failures add one statement
    /// each for the starts to remember and the rows to retry or bury, in one transaction.
    async fn mark(&self, claim: &Claim, results: Vec<RowResult>) -> Result<StepReport, DispatchError> {
        let mut report =
            StepReport { claimed: claim.rows.len() + claim.unreadable.len(), ..StepReport::default() };
        let mut done: Vec<EventId> = Vec::new();
        let mut starts: Vec<StartRecord> = Vec::new();
        let mut failed: Vec<FailureMark> = Vec::new();
        // Rows holding a paused listener's start (and nothing failed): kept live, attempt given back.
        let mut held: Vec<EventId> = Vec::new();
        for (row, result) in claim.rows.iter().zip(results) {
            report.lease_expired += usize::from(row.lease_expired);
            report.started += result.successes.len();
            report.failed_starts += result.failures.len();
            let holds = row.held().next().is_some();
            if result.failures.is_empty() && !holds {
                done.push(row.envelope.id);
                continue;
            }
            starts.extend(result.successes.into_iter().map(|(listener, message_id)| StartRecord {
                event_id: row.envelope.id,
                listener,
                message_id,
            }));
            if result.failures.is_empty() {
                held.push(row.envelope.id);
                continue;
            }
            let permanent = result.failures.iter().any(|(_, e)| e.permanent);
            let next = if permanent || row.attempts >= self.config.max_attempts {
                Failure::Dead
            } else {
                Failure::Retry(self.config.backoff.delay(row.attempts))
            };
            let message = result
                .failures
                .iter()
                .map(|(listener, e)| format!("{listener}: {} {}", e.code, e.message))
                .collect::<Vec<_>>()
                .join("; ");
            failed.push(FailureMark {
                event_id: row.envelope.id,
                next,
                code: result.failures[0].1.code.clone(),
                message,
            });
        }
        for row in &claim.unreadable {
            failed.push(FailureMark {
                event_id: row.event_id,
                next: Failure::Dead,
                code: "unreadable_event".into(),
                message: row.problem.clone(),
            });
        }

        let mut client = self.pool.get().await?;
        let (dispatched, marked_failed) = if failed.is_empty() && held.is_empty() {
            (outbox::mark_dispatched(&client, claim.token, &done).await?, Vec::new())
        } else {
            let tx = client.transaction().await?;
            outbox::record_starts(&tx, &starts).await?;
            let marked_failed = outbox::mark_failed(&tx, claim.token, &failed).await?;
            outbox::mark_held(&tx, claim.token, &held).await?;
            let dispatched = outbox::mark_dispatched(&tx, claim.token, &done).await?;
            tx.commit().await?;
            (dispatched, marked_failed)
        };
        drop(client);

        self.metrics.record_marks(claim, &dispatched, &failed, &marked_failed);
        self.report_marks(claim, &done, &dispatched, &failed, &marked_failed, &mut report);
        Ok(report)
    }

    fn report_marks(
        &self,
        claim: &Claim,
        done: &[EventId],
        dispatched: &[EventId],
        failed: &[FailureMark],
        marked_failed: &[EventId],
        report: &mut StepReport,
    ) {
        let row_of = |id: EventId| claim.rows.iter().find(|row| row.envelope.id == id);
        // Fast path: everything marked, no lookups needed beyond the facts themselves.
        let all_done = dispatched.len() == done.len();
        for row in &claim.rows {
            let id = row.envelope.id;
            if done.contains(&id) {
                if all_done || dispatched.contains(&id) {
                    report.dispatched += 1;
                    emit(Transition::Dispatched, &row.envelope, None, row.attempts, "ok");
                } else {
                    report.fenced += 1;
                    emit(Transition::Fenced, &row.envelope, None, row.attempts, "dispatched");
                }
            }
        }
        for mark in failed {
            let marked = marked_failed.contains(&mark.event_id);
            match (row_of(mark.event_id), marked, mark.next) {
                (Some(row), true, Failure::Retry(delay)) => {
                    report.retried += 1;
                    let outcome = format!("{} retry_in_ms={}", mark.code, delay.as_millis());
                    emit(Transition::Retry, &row.envelope, None, row.attempts, &outcome);
                }
                (Some(row), true, Failure::Dead) => {
                    report.dead += 1;
                    emit(Transition::Dead, &row.envelope, None, row.attempts, &mark.code);
                }
                (Some(row), false, _) => {
                    report.fenced += 1;
                    emit(Transition::Fenced, &row.envelope, None, row.attempts, &mark.code);
                }
                (None, true, _) => {
                    report.dead += 1;
                    let attempts = claim
                        .unreadable
                        .iter()
                        .find(|u| u.event_id == mark.event_id)
                        .map_or(0, |u| u.attempts);
                    emit_unreadable_dead(mark.event_id, attempts);
                }
                (None, false, _) => report.fenced += 1,
            }
        }
    }
}
