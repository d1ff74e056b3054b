//! One dispatcher step: claim, start, mark — three short units of work, no transaction open across
//! the transport call.

use std::sync::Arc;

use deadpool_postgres::Pool;

use std::collections::HashSet;

use super::lifecycle::{emit, emit_outcome, Transition};
use super::outage::Outage;
use super::outcome::{Fate, RowOutcome};
use super::transport::{Start, StartError, StartResult, Transport};
use super::{DispatchConfig, DispatchError, ListenSource, StepOutcome, StepReport};
use crate::ids::EventId;
use crate::lease::Verdict;
use crate::listeners::Listener;
use crate::outbox::{self, Claim, Claimed, DispatchedRow, Failure, FailureMark, StartRecord};
use crate::telemetry::spans;

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
    /// EMF metrics of the steps (see [`super::metrics`]); flushed by the drain loops.
    pub(super) metrics: super::metrics::Recorder,
    /// The transport outage in progress, if any (see [`super::outage`]).
    pub(super) outage: Outage,
    /// FIFO groups being started by batches in flight (see [`super::overlap`]).
    pub(super) order: super::overlap::StartOrder,
    /// Where the next claim starts its scan while a backlog lasts (see [`super::floor`]); never
    /// used when the transport delivers some listener in order (a FIFO queue).
    floor: Option<super::floor::ClaimFloor>,
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

impl RowResult {
    /// Every failure said the transport was unavailable (none was about the message).
    fn only_unavailable(&self) -> bool {
        !self.failures.is_empty() && self.failures.iter().all(|(_, e)| e.unavailable)
    }
}

/// What the mark intends for one row, before the fenced statements say whether it landed.
struct Plan {
    outcome: RowOutcome,
    /// `None`: dispatched; `Some`: the failure mark to write.
    failure: Option<FailureMark>,
}

impl Dispatcher {
    /// A dispatcher with a fresh id (`dispatcher-<ULID>`); polls only, until [`Dispatcher::with_listen`].
    pub fn new(pool: Pool, transport: Arc<dyn Transport>, config: DispatchConfig) -> Self {
        let ordered = Listener::ALL.iter().any(|listener| transport.ordered(*listener));
        Self {
            pool,
            transport,
            config,
            id: format!("dispatcher-{}", crate::ids::new_ulid()),
            listen: None,
            listening: tokio::sync::Mutex::new(None),
            metrics: super::metrics::Recorder::default(),
            outage: Outage::default(),
            order: Default::default(),
            floor: (!ordered).then(Default::default),
        }
    }

    /// How metrics are emitted (`CLINIC_METRICS`: EMF lines on stdout, the default, or off).
    pub fn with_metrics(mut self, mode: crate::telemetry::emf::MetricsMode) -> Self {
        self.metrics = super::metrics::Recorder::new(mode);
        self
    }

    /// Whether this dispatcher prints EMF metrics.
    pub fn metrics_mode(&self) -> crate::telemetry::emf::MetricsMode {
        self.metrics.mode()
    }

    /// Wakes on `LISTEN clinic_outbox` over a dedicated connection to `url` while idle.
    pub fn with_listen(mut self, url: impl Into<String>, ca_file: Option<String>) -> Self {
        self.listen = Some(ListenSource { url: url.into(), ca_file, login: None });
        self
    }

    /// Logs the `LISTEN` connection in as `login` (the pool's, when it is not in the URL).
    pub fn with_listen_login(mut self, login: Option<crate::db::DbLogin>) -> Self {
        if let Some(listen) = &mut self.listen {
            listen.login = login;
        }
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

    /// The transport the dispatcher starts listeners through (the custody reconciler restarts
    /// through the same one).
    pub fn transport(&self) -> &Arc<dyn Transport> {
        &self.transport
    }

    /// The pool the dispatcher works on (scheduled housekeeping shares it).
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// While the transport is down: how long until the next probe (the drain loops wait this long
    /// before the next step). `None` when the transport answered last time.
    pub fn outage_pause(&self) -> Option<std::time::Duration> {
        self.outage.pause()
    }

    /// Claims one batch, starts its listeners, marks the rows. `Idle` when nothing was due.
    /// One step alone, nothing overlapped (the drains overlap steps: [`Dispatcher::drain_once`]).
    pub async fn step(&self) -> Result<StepOutcome, DispatchError> {
        let started = tokio::time::Instant::now();
        let (claim, _) = self.claim().await?;
        if claim.is_empty() {
            return Ok(StepOutcome::Idle);
        }
        Ok(StepOutcome::Dispatched(self.finish(&claim, started, None).await?))
    }

    /// Units 2 and 3 of a claimed batch: start (after earlier batches of its FIFO groups, when
    /// `turn` is given), then mark.
    pub(super) async fn finish(
        &self,
        claim: &Claim,
        started: tokio::time::Instant,
        turn: Option<super::overlap::Turn<'_>>,
    ) -> Result<StepReport, DispatchError> {
        if let Some(turn) = &turn {
            turn.wait().await;
        }
        let results = self.start(claim).await;
        drop(turn);
        let report = self.mark(claim, results).await?;
        self.metrics.batch(started.elapsed());
        Ok(report)
    }

    /// Unit 1: one statement claims the batch (from the claim floor while a backlog lasts). Also
    /// answers whether the claim took every row that was due: it scanned the whole index and came
    /// back short of the batch.
    #[tracing::instrument(skip_all, name = "dispatch.claim", fields(dispatcher = %self.id))]
    pub(super) async fn claim(&self) -> Result<(Claim, bool), DispatchError> {
        let client = self.pool.get().await?;
        let config = &self.config;
        let claim_above = |floor| {
            outbox::claim_above(&client, config.batch, config.lease, &self.id, config.max_attempts, floor)
        };
        let mut floor = self.floor.as_ref().and_then(|floor| floor.next(config.full_scan_every));
        let mut claim = claim_above(floor).await?;
        if floor.is_some() && claim.is_empty() {
            // "Nothing due" must come from a scan of the whole index (it ends a burst).
            floor = None;
            claim = claim_above(None).await?;
        }
        let took_every_due_row = floor.is_none() && (claim.len() as i64) < config.batch;
        if let Some(floor) = &self.floor {
            floor.claimed(config.batch, claim.len(), claim.oldest_due);
        }
        link_rows(&tracing::Span::current(), &claim);
        for row in &claim.rows {
            let (transition, outcome) = if row.lease_expired {
                (Transition::LeaseExpired, "reclaimed")
            } else {
                (Transition::Claimed, "ok")
            };
            emit(transition, &row.envelope, None, row.attempts, outcome);
        }
        Ok((claim, took_every_due_row))
    }

    /// Unit 2: the transport call, with no connection or transaction held.
    #[tracing::instrument(skip_all, name = "dispatch.start", fields(dispatcher = %self.id, rows = claim.len()))]
    async fn start(&self, claim: &Claim) -> Vec<RowResult> {
        link_rows(&tracing::Span::current(), claim);
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

    /// Unit 3: fenced marks. A fully successful batch is one statement (`dispatched`, with each row's
    /// awaited listeners recorded on the row); failures add the starts of the unfinished rows
    /// (`listener_starts`) and one statement for the rows to retry, hold or bury, in one transaction.
    /// One [`RowOutcome`] per row comes out; report, metrics and facts are folds over them.
    #[tracing::instrument(skip_all, name = "dispatch.mark", fields(dispatcher = %self.id, rows = results.len()))]
    async fn mark(&self, claim: &Claim, results: Vec<RowResult>) -> Result<StepReport, DispatchError> {
        let outage = self.outage_of(&results);
        let mut plans: Vec<Plan> = Vec::with_capacity(claim.len());
        let mut done: Vec<DispatchedRow> = Vec::with_capacity(claim.rows.len());
        let mut starts: Vec<StartRecord> = Vec::new();
        // Custody: a finished row awaits the receipts of the listeners it started, unless the
        // transport's success already meant the receipt (local). An unfinished row's starts become
        // `listener_starts` rows whatever the transport, so its retry skips them.
        let settled = self.transport.settles_on_start();
        for (row, result) in claim.rows.iter().zip(results) {
            let plan = self.plan(row, &result, outage);
            let event_id = row.envelope.id;
            if plan.failure.is_none() {
                let awaiting =
                    if settled { Vec::new() } else { result.successes.iter().map(|(l, _)| *l).collect() };
                done.push(DispatchedRow { event_id, awaiting });
            } else {
                starts.extend(result.successes.iter().map(|(listener, message_id)| StartRecord {
                    event_id,
                    listener: *listener,
                    message_id: message_id.clone(),
                }));
            }
            plans.push(plan);
        }
        plans.extend(claim.unreadable.iter().map(|row| self.plan_unreadable(row)));
        let failed: Vec<FailureMark> = plans.iter().filter_map(|p| p.failure.clone()).collect();

        let mut client = self.pool.get().await?;
        let marked: HashSet<EventId> = if failed.is_empty() {
            outbox::mark_dispatched_awaiting(&client, claim.token, &done).await?.into_iter().collect()
        } else {
            let tx = client.transaction().await?;
            let mut marked = outbox::mark_dispatched_awaiting(&tx, claim.token, &done).await?;
            outbox::record_starts(&tx, &starts).await?;
            marked.extend(outbox::mark_failed(&tx, claim.token, &failed).await?);
            tx.commit().await?;
            marked.into_iter().collect()
        };
        drop(client);

        let mut outcomes: Vec<RowOutcome> = plans
            .into_iter()
            .map(|plan| {
                let mut outcome = plan.outcome;
                if !marked.contains(&outcome.event_id) {
                    outcome.fate = Fate::Fenced { intended: outcome.fate.name() };
                }
                outcome
            })
            .collect();
        outcomes.extend(claim.buried.iter().map(|row| RowOutcome {
            event_id: row.event_id,
            event_type: row.envelope.as_ref().map(|e| e.event_type),
            recorded_at: row.envelope.as_ref().map(|e| e.recorded_at),
            attempts: row.attempts,
            lease_expired: true,
            started: 0,
            failed_starts: 0,
            fate: Fate::Dead { code: "attempts_exhausted".into() },
        }));

        self.metrics.record(&outcomes);
        for outcome in &outcomes {
            emit_outcome(outcome);
        }
        Ok(StepReport::of(&outcomes))
    }

    /// When every start of the step failed as unavailable, the outage's probe wait; otherwise the
    /// outage (if any) is over.
    fn outage_of(&self, results: &[RowResult]) -> Option<std::time::Duration> {
        let attempted = results.iter().any(|r| !r.failures.is_empty() || !r.successes.is_empty());
        let all_down = attempted
            && results
                .iter()
                .all(|r| r.successes.is_empty() && (r.failures.is_empty() || r.only_unavailable()));
        if all_down {
            let wait = self.outage.failed(self.config.backoff.base, self.config.probe_max);
            tracing::warn!(dispatcher = %self.id, wait_ms = wait.as_millis() as u64,
                "transport unavailable for every start of the step; holding the rows and probing again later");
            Some(wait)
        } else {
            if attempted && self.outage.recovered() {
                tracing::info!(dispatcher = %self.id, "transport answers again; resuming");
            }
            None
        }
    }

    fn plan(&self, row: &Claimed, result: &RowResult, outage: Option<std::time::Duration>) -> Plan {
        let event_id = row.envelope.id;
        let outcome = |fate| RowOutcome {
            event_id,
            event_type: Some(row.envelope.event_type),
            recorded_at: Some(row.envelope.recorded_at),
            attempts: row.attempts,
            lease_expired: row.lease_expired,
            started: result.successes.len(),
            failed_starts: result.failures.len(),
            fate,
        };
        let mark = |next, code: &str, message: String| FailureMark {
            event_id,
            next,
            code: code.to_owned(),
            message,
        };
        let paused: Vec<&str> = row.held().map(|listener| listener.as_str()).collect();
        if result.failures.is_empty() && row.unknown_listeners.is_empty() && paused.is_empty() {
            return Plan { outcome: outcome(Fate::Dispatched), failure: None };
        }
        if result.failures.is_empty() && row.unknown_listeners.is_empty() {
            // Paused listeners (operator::pause): the row stays in custody, its attempt given back;
            // resume makes it due at once, in event order.
            let delay = outbox::HOLD_RECHECK;
            let message = format!("held for paused listeners: {}", paused.join(", "));
            return Plan {
                outcome: outcome(Fate::Held { delay, code: outbox::HELD_CODE.into() }),
                failure: Some(mark(Failure::Hold(delay), outbox::HELD_CODE, message)),
            };
        }
        if result.failures.is_empty() {
            let names = row.unknown_listeners.join(", ");
            tracing::warn!(event_id = %event_id, listeners = %names,
                "replay names listeners this build does not know; holding the row for a build that does");
            let delay = self.config.backoff.jittered(self.config.unknown_retry);
            let message = format!("listeners unknown to this build: {names}");
            return Plan {
                outcome: outcome(Fate::Held { delay, code: "unknown_listener".into() }),
                failure: Some(mark(Failure::Hold(delay), "unknown_listener", message)),
            };
        }
        let code = result.failures[0].1.code.clone();
        let message = result
            .failures
            .iter()
            .map(|(listener, e)| format!("{listener}: {} {}", e.code, e.message))
            .collect::<Vec<_>>()
            .join("; ");
        if result.only_unavailable() {
            let delay = outage
                .unwrap_or_else(|| self.outage.hold_delay(self.config.backoff.base, self.config.probe_max));
            return Plan {
                outcome: outcome(Fate::Held { delay, code: code.clone() }),
                failure: Some(mark(Failure::Hold(delay), &code, message)),
            };
        }
        let permanent = result.failures.iter().any(|(_, e)| e.permanent);
        let (fate, next) = match self.config.retry_policy().after_failure(row.attempts, !permanent) {
            Verdict::Dead => (Fate::Dead { code: code.clone() }, Failure::Dead),
            Verdict::Retry(delay) => (Fate::Retry { delay, code: code.clone() }, Failure::Retry(delay)),
        };
        Plan { outcome: outcome(fate), failure: Some(mark(next, &code, message)) }
    }

    fn plan_unreadable(&self, row: &outbox::Unreadable) -> Plan {
        let (fate, next, code) = if row.unknown_to_build {
            tracing::warn!(event_id = %row.event_id, problem = %row.problem,
                "event unknown to this build; holding it for a build that knows it");
            let delay = self.config.backoff.jittered(self.config.unknown_retry);
            (
                Fate::Held { delay, code: "unknown_event_type".into() },
                Failure::Hold(delay),
                "unknown_event_type",
            )
        } else {
            (Fate::Dead { code: "unreadable_event".into() }, Failure::Dead, "unreadable_event")
        };
        Plan {
            outcome: RowOutcome {
                event_id: row.event_id,
                event_type: None,
                recorded_at: None,
                attempts: row.attempts,
                lease_expired: false,
                started: 0,
                failed_starts: 0,
                fate,
            },
            failure: Some(FailureMark {
                event_id: row.event_id,
                next,
                code: code.into(),
                message: row.problem.clone(),
            }),
        }
    }
}

/// Links `span` (a claim or a start: one span per batch) to the committing trace of each claimed row,
/// with how long the row waited in the outbox (commit → now). Nothing is done with the export off.
fn link_rows(span: &tracing::Span, claim: &Claim) {
    spans::link_events(span, spans::OUTBOX_WAIT, || {
        let now = chrono::Utc::now();
        claim.rows.iter().map(move |row| spans::Handled {
            event_id: row.envelope.id,
            trace: row.envelope.traceparent,
            wait_ms: spans::wait_ms(row.envelope.recorded_at, now),
        })
    });
}
