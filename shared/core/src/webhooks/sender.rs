//! The webhook sender: claim (short transaction), load the event and the secrets, check the URL
//! again (SSRF guard), POST with no transaction open, record the attempt and mark the delivery,
//! fenced by the claim token. An answered attempt is always recorded: an endpoint row locked past
//! `lock_timeout` skips only the endpoint's health ([`store::record_health_unless_locked`]).
//!
//! Used right after the fan-out commits ([`WebhookSender::send_event`]: the listener Lambda, the
//! local transport of `clinic dev`) and on a schedule for retries ([`WebhookSender::send_due`]: the
//! housekeeping `webhooks` mode, `clinic webhooks send`, `clinic dev`'s loop).
//!
//! Retry schedule after attempt n fails (documented in docs/webhooks.md): 5 s, 5 min, 30 min, 2 h,
//! 5 h, 10 h, 10 h — 8 attempts in all over about 28 hours; a `Retry-After` longer than the step
//! wins (capped at 24 h). 2xx delivers; 4xx other than 408 and 429 fails for good; everything else
//! (timeouts, connection errors, 3xx, 408, 5xx, an address the guard now refuses) retries.
//! A throttling answer — 429, or 503 with a `Retry-After` — is the lease queue's hold
//! ([`crate::lease::Queue::give_back`], as for a throttling notification provider): the attempt is
//! given back and the delivery is due again at the receiver's `Retry-After`, kept within
//! [`MIN_THROTTLE_HOLD`]..=[`MAX_THROTTLE_HOLD`] ([`DEFAULT_THROTTLE_HOLD`] when it is absent or
//! unreadable), recorded as [`RECEIVER_THROTTLED`]. A throttling receiver so never walks a delivery
//! to `failed`; the endpoint's failure clock still runs, so one that throttles for days is disabled
//! like one that fails.
//! An endpoint whose attempts have failed without a success for [`WebhookConfig::disable_after`]
//! (5 days) is disabled (`failing`), audited, counted in the `WebhookEndpointDisabled` metric; its
//! pending deliveries stay and resume when it is enabled again.
//!
//! Bounded against a receiver that never answers (one slow clinic must not starve the others):
//! - one attempt lasts at most [`WebhookSender::attempt_bound`] (the resolution's connect bound plus
//!   the request's total timeout), and the attempts of one step run side by side;
//! - a claim takes at most [`MAX_IN_FLIGHT_PER_ENDPOINT`] attempts of one endpoint, counting its
//!   attempts still in flight, so a hanging endpoint holds few slots of a batch;
//! - [`WebhookSender::send_due_until`] claims no new batch when the time left before its deadline
//!   (the invocation's) cannot cover one attempt, so a run ends before its deadline;
//! - the automatic disable of failing endpoints is its own step, run first, so sending that uses up
//!   the time (or fails) cannot postpone it.
//!
//! Secrets: the sender opens them with its [`WebhookKey`] ([`super::secret_box`]). A stored secret
//! that does not open for its endpoint (moved from another row, another key) sends nothing: the
//! attempt is recorded with `secret_unreadable` and retried on the schedule (a key fixed within it
//! resumes the deliveries; after that they fail and can be recovered). The first scheduled run of
//! a process seals the legacy rows still holding a clear secret ([`endpoints::seal_clear`]).
//!
//! Over the 500-line guideline: one type, [`WebhookSender`], whose steps (claim, attempt, signed post,
//! heartbeats, re-sealing, disabling failing endpoints) share its pool, key, resolver and config; its
//! retry schedule's tests are at the end.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use deadpool_postgres::Pool;
use serde::Serialize;
use tokio::sync::watch;

use super::client::{self, Signed, Timeouts};
use super::endpoints;
use super::guard::{self, Egress, Resolve, SystemResolver};
use super::heartbeat::{self, Heartbeat};
use super::secret_box::{OpenError, WebhookKey};
use super::store::{self, AttemptRecord, Claimed, Next, Sequence};
use crate::config::{ConfigError, Env};
use crate::events::Envelope;
use crate::ids::{ClaimToken, EventId};
use crate::lease::{RetryPolicy, Verdict};

/// The body of a delivery: the event's identifier-only CloudEvent (built by the SQS transport's one
/// builder, `contract::cloudevent::to_published_event`, without the `listener` extension and with the
/// delivery's number as the `sequence` extension; injected as `clinic_sqs::webhook_body`).
pub type BodyFn = Arc<dyn Fn(Payload<'_>) -> Vec<u8> + Send + Sync>;

/// What a body is built from.
#[derive(Debug, Clone, Copy)]
pub enum Payload<'a> {
    /// A delivery: the event and the delivery's number.
    Event { envelope: &'a Envelope, sequence: Sequence },
    /// A heartbeat ([`super::heartbeat`]).
    Heartbeat(&'a Heartbeat),
}

/// Delays before attempt 2, 3, … 8.
pub const SCHEDULE: [Duration; 7] = [
    Duration::from_secs(5),
    Duration::from_secs(5 * 60),
    Duration::from_secs(30 * 60),
    Duration::from_secs(2 * 3600),
    Duration::from_secs(5 * 3600),
    Duration::from_secs(10 * 3600),
    Duration::from_secs(10 * 3600),
];
/// The deliveries' retry policy: the fixed [`SCHEDULE`].
pub const RETRY_POLICY: RetryPolicy = RetryPolicy::schedule(&SCHEDULE);
/// Attempts in all: the first and one per step of [`SCHEDULE`].
pub const MAX_ATTEMPTS: i32 = RETRY_POLICY.ceiling;
/// Failing (with no success) for longer than this: the endpoint's status is `error`.
pub const DEFAULT_ERROR_AFTER: Duration = Duration::from_secs(10 * 60);
/// At most this many attempts of one endpoint are in flight (leased) at once.
pub const MAX_IN_FLIGHT_PER_ENDPOINT: i64 = 4;
/// Time kept beyond one attempt's bound for the claim and the mark (database round trips).
const STEP_SLACK: Duration = Duration::from_secs(1);
const MAX_RETRY_AFTER: Duration = Duration::from_secs(24 * 3600);
/// The code of a delivery held because its receiver throttled (429, or 503 with `Retry-After`).
pub const RECEIVER_THROTTLED: &str = "receiver_throttled";
/// The hold of a throttling answer without a readable `Retry-After`.
pub const DEFAULT_THROTTLE_HOLD: Duration = Duration::from_secs(30);
/// A throttling receiver's `Retry-After` is kept within these bounds.
pub const MIN_THROTTLE_HOLD: Duration = Duration::from_secs(1);
pub const MAX_THROTTLE_HOLD: Duration = Duration::from_secs(3600);

/// Settings (environment variables, parsed once; docs/configuration.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WebhookConfig {
    /// `CLINIC_WEBHOOKS_ALLOW_LOOPBACK_HTTP=1`: plain http to loopback (`clinic dev` only).
    pub egress: Egress,
    /// `CLINIC_WEBHOOKS_CONNECT_TIMEOUT_MS` (default 5000) and `CLINIC_WEBHOOKS_TIMEOUT_MS` (15000).
    pub timeouts: Timeouts,
    /// Lease of a claimed delivery: above the total timeout.
    pub lease: Duration,
    /// `CLINIC_WEBHOOKS_DISABLE_AFTER_HOURS` (default 120 = 5 days).
    pub disable_after: Duration,
    /// An endpoint whose attempts have failed for longer than this (with no success) has the status
    /// `error` (default [`DEFAULT_ERROR_AFTER`]); a success makes it `active` again.
    pub error_after: Duration,
    pub batch: i64,
}

impl Default for WebhookConfig {
    fn default() -> Self {
        WebhookConfig {
            egress: Egress::default(),
            timeouts: Timeouts::default(),
            lease: Duration::from_secs(60),
            disable_after: Duration::from_secs(120 * 3600),
            error_after: DEFAULT_ERROR_AFTER,
            batch: 20,
        }
    }
}

impl WebhookConfig {
    /// From the environment; `local` is true only for `clinic dev` (the loopback setting is ignored
    /// anywhere else, so a Lambda can never be configured to reach loopback).
    pub fn read(env: &Env, local: bool) -> Result<Self, ConfigError> {
        let allow = env.var("CLINIC_WEBHOOKS_ALLOW_LOOPBACK_HTTP").is_some_and(|v| v == "1" || v == "true");
        let connect =
            Duration::from_millis(env.bounded("CLINIC_WEBHOOKS_CONNECT_TIMEOUT_MS", 5_000, 100..=30_000)?);
        let total = Duration::from_millis(env.bounded("CLINIC_WEBHOOKS_TIMEOUT_MS", 15_000, 500..=30_000)?);
        Ok(WebhookConfig {
            egress: Egress { allow_loopback_http: allow && local },
            timeouts: Timeouts { connect, total: total.max(connect) },
            lease: total.max(connect) * 4,
            disable_after: Duration::from_secs(
                3600 * env.bounded("CLINIC_WEBHOOKS_DISABLE_AFTER_HOURS", 120, 1..=2160)?,
            ),
            error_after: DEFAULT_ERROR_AFTER,
            batch: 20,
        })
    }
}

/// What happened to one claimed delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Delivered,
    Retry,
    /// The receiver throttled: due again at its `Retry-After`, the attempt given back.
    Held,
    Failed,
    /// The claim was taken over before the mark: nothing changed here.
    Fenced,
}

/// The fold of one step.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookReport {
    pub delivered: u64,
    pub retried: u64,
    /// Deliveries held because their receiver throttled (no attempt spent).
    pub held: u64,
    pub failed: u64,
    pub fenced: u64,
    pub disabled_endpoints: u64,
    /// Heartbeats sent (answered 2xx).
    pub heartbeats: u64,
    /// The run stopped claiming because its deadline was too close for another attempt.
    pub stopped_at_deadline: bool,
}

impl WebhookReport {
    fn add(&mut self, outcome: Outcome) {
        match outcome {
            Outcome::Delivered => self.delivered += 1,
            Outcome::Retry => self.retried += 1,
            Outcome::Held => self.held += 1,
            Outcome::Failed => self.failed += 1,
            Outcome::Fenced => self.fenced += 1,
        }
    }

    pub fn claimed(&self) -> u64 {
        self.delivered + self.retried + self.held + self.failed + self.fenced
    }
}

/// Why a step failed as a whole (per-delivery failures are outcomes).
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error("database error: {0}")]
    Db(#[from] tokio_postgres::Error),
    #[error("no database connection")]
    Pool(#[from] deadpool_postgres::PoolError),
    #[error(transparent)]
    Domain(#[from] crate::error::DomainError),
}

/// Sends webhook deliveries.
pub struct WebhookSender {
    pool: Pool,
    config: WebhookConfig,
    key: WebhookKey,
    body: BodyFn,
    resolver: Arc<dyn Resolve>,
    /// The legacy clear rows were sealed by this process.
    sealed_legacy: AtomicBool,
}

impl std::fmt::Debug for WebhookSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookSender").field("config", &self.config).finish_non_exhaustive()
    }
}

/// What the next status is after an answer (or no answer) of attempt `attempts`.
pub fn next_after(attempts: i32, status: Option<u16>, retry_after: Option<Duration>) -> Next {
    match (status, retry_after) {
        (Some(200..=299), _) => return Next::Delivered,
        // Throttled: a hold, not a failure (the attempt is given back).
        (Some(429), _) | (Some(503), Some(_)) => {
            let hold = retry_after
                .map_or(DEFAULT_THROTTLE_HOLD, |asked| asked.clamp(MIN_THROTTLE_HOLD, MAX_THROTTLE_HOLD));
            return Next::Held { after_ms: hold.as_secs_f64() * 1000.0 };
        }
        (Some(code @ 400..=499), _) if code != 408 => return Next::Failed,
        _ => {}
    }
    let Verdict::Retry(step) = RETRY_POLICY.after_failure(attempts, true) else {
        return Next::Failed;
    };
    let delay = retry_after.map_or(step, |asked| asked.min(MAX_RETRY_AFTER).max(step));
    Next::Retry { after_ms: delay.as_secs_f64() * 1000.0 }
}

impl WebhookSender {
    pub fn new(pool: Pool, config: WebhookConfig, key: WebhookKey, body: BodyFn) -> Self {
        WebhookSender {
            pool,
            config,
            key,
            body,
            resolver: Arc::new(SystemResolver),
            sealed_legacy: AtomicBool::new(false),
        }
    }

    /// Replaces the system resolver (tests).
    pub fn with_resolver(mut self, resolver: Arc<dyn Resolve>) -> Self {
        self.resolver = resolver;
        self
    }

    /// The first attempt of `event`'s deliveries, right after the fan-out committed.
    pub async fn send_event(&self, event: EventId) -> Result<WebhookReport, WebhookError> {
        self.step(Some(event)).await
    }

    /// Disables failing endpoints, then sends due deliveries until none is due or `max_steps`
    /// batches ran (no deadline: the CLI and `clinic dev`'s loop).
    pub async fn send_due(&self, max_steps: usize) -> Result<WebhookReport, WebhookError> {
        self.send_due_until(max_steps, None).await
    }

    /// The longest one attempt can take: the resolution (bounded by the connect timeout) and the
    /// request (bounded by the total timeout).
    pub fn attempt_bound(&self) -> Duration {
        self.config.timeouts.connect + self.config.timeouts.total
    }

    /// The time one step needs: one attempt ([`WebhookSender::attempt_bound`]) and its claim and
    /// marks. No step starts with less time left before its caller's deadline.
    pub fn step_bound(&self) -> Duration {
        self.attempt_bound() + STEP_SLACK
    }

    /// [`WebhookSender::send_due`] bounded by `deadline`: first the automatic disable of failing
    /// endpoints (its own step, whatever sending does next), then batches until none is due,
    /// `max_steps` ran, or the time left cannot cover one more attempt and its marks (no claim is
    /// taken that could outlive the deadline; the report says `stoppedAtDeadline`).
    pub async fn send_due_until(
        &self,
        max_steps: usize,
        deadline: Option<Instant>,
    ) -> Result<WebhookReport, WebhookError> {
        self.seal_legacy_once().await?;
        let mut total =
            WebhookReport { disabled_endpoints: self.disable_failing().await?, ..WebhookReport::default() };
        {
            let client = self.pool.get().await?;
            store::fail_exhausted(&client, MAX_ATTEMPTS).await?;
        }
        if deadline
            .is_none_or(|deadline| deadline.saturating_duration_since(Instant::now()) >= self.step_bound())
        {
            total.heartbeats = self.send_heartbeats().await?;
        }
        let needed = self.step_bound();
        for _ in 0..max_steps {
            if deadline.is_some_and(|deadline| deadline.saturating_duration_since(Instant::now()) < needed) {
                total.stopped_at_deadline = true;
                break;
            }
            let report = self.step(None).await?;
            total.delivered += report.delivered;
            total.retried += report.retried;
            total.held += report.held;
            total.failed += report.failed;
            total.fenced += report.fenced;
            if report.claimed() == 0 {
                break;
            }
        }
        Ok(total)
    }

    /// `clinic dev`: sends due deliveries every `every` until `stop`.
    pub async fn run(&self, mut stop: watch::Receiver<bool>, every: Duration) {
        loop {
            if let Err(error) = self.send_due(50).await {
                tracing::warn!(error = %error, "webhook step failed; trying again");
            }
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = stop.changed() => return,
            }
        }
    }

    async fn step(&self, event: Option<EventId>) -> Result<WebhookReport, WebhookError> {
        let token = ClaimToken::generate();
        let claimed = {
            let client = self.pool.get().await?;
            let lease_ms = self.config.lease.as_secs_f64() * 1000.0;
            let (batch, cap) = (self.config.batch, MAX_IN_FLIGHT_PER_ENDPOINT);
            store::claim(&client, batch, token, lease_ms, event, MAX_ATTEMPTS, cap).await?
        };
        let mut report = WebhookReport::default();
        let attempts = claimed.iter().map(|delivery| self.attempt(delivery, token));
        for outcome in futures::future::join_all(attempts).await {
            report.add(outcome?);
        }
        Ok(report)
    }

    async fn attempt(&self, delivery: &Claimed, token: ClaimToken) -> Result<Outcome, WebhookError> {
        let (envelope, signing) = {
            let client = self.pool.get().await?;
            let envelope =
                crate::events::read::find(&client, delivery.event_id).await.map_err(|e| match e {
                    crate::events::read::ReadError::Db(db) => WebhookError::Db(db),
                    crate::events::read::ReadError::Unreadable(_) => WebhookError::Domain(
                        crate::error::DomainError::Conflict("stored event cannot be read".into()),
                    ),
                })?;
            (envelope, endpoints::signing(&client, &self.key, delivery.endpoint_id).await?)
        };
        let started = Instant::now();
        let result = match (envelope, signing) {
            (Some(envelope), Some(Ok(signing))) => self.post(delivery, &envelope, &signing).await,
            // Never sent unsigned nor under another endpoint's secret; retried in case the key is fixed.
            (Some(_), Some(Err(error))) => {
                tracing::warn!(delivery_id = %delivery.id, endpoint_id = %delivery.endpoint_id,
                    error = %error, "webhook secret does not open; nothing sent");
                match error {
                    OpenError::Unavailable => Err(("key_service_unavailable", true)),
                    _ => Err(("secret_unreadable", true)),
                }
            }
            // The event or the endpoint vanished: nothing to send, ever.
            _ => Err(("gone", false)),
        };
        let duration_ms = i32::try_from(started.elapsed().as_millis()).unwrap_or(i32::MAX);
        let (record, next) = match result {
            Ok(answer) => {
                let next = next_after(delivery.attempts, Some(answer.status), answer.retry_after);
                let error_code = match next {
                    Next::Held { .. } => Some(RECEIVER_THROTTLED),
                    _ => (!(200..300).contains(&answer.status)).then_some("http_status"),
                };
                let status_code = Some(i32::from(answer.status));
                (AttemptRecord { status_code, duration_ms, error_code, excerpt: answer.excerpt }, next)
            }
            Err((code, retryable)) => (
                AttemptRecord { status_code: None, duration_ms, error_code: Some(code), excerpt: None },
                if retryable { next_after(delivery.attempts, None, None) } else { Next::Failed },
            ),
        };
        let mut client = self.pool.get().await?;
        let mut tx = client.transaction().await?;
        let marked = store::mark(&tx, delivery, token, &record, next).await?;
        let (endpoint, ok) = (delivery.endpoint_id, next == Next::Delivered);
        store::record_health_unless_locked(&mut tx, endpoint, ok, self.config.error_after).await?;
        tx.commit().await?;
        let outcome = match (marked, next) {
            (false, _) => Outcome::Fenced,
            (true, Next::Delivered) => Outcome::Delivered,
            (true, Next::Retry { .. }) => Outcome::Retry,
            (true, Next::Held { .. }) => Outcome::Held,
            (true, Next::Failed) => Outcome::Failed,
        };
        tracing::info!(
            delivery_id = %delivery.id,
            endpoint_id = %delivery.endpoint_id,
            event_id = %delivery.event_id,
            attempt = delivery.attempts,
            status = ?record.status_code,
            error_code = record.error_code.unwrap_or(""),
            outcome = ?outcome,
            "webhook attempt"
        );
        Ok(outcome)
    }

    #[tracing::instrument(
        skip_all,
        name = "webhook.post",
        fields(delivery_id = %delivery.id, endpoint_id = %delivery.endpoint_id, event_id = %delivery.event_id)
    )]
    async fn post(
        &self,
        delivery: &Claimed,
        envelope: &Envelope,
        signing: &endpoints::Signing,
    ) -> Result<client::Answer, (&'static str, bool)> {
        crate::telemetry::spans::link_trace(&tracing::Span::current(), envelope.id, envelope.traceparent);
        let resolve = guard::resolve_target(&delivery.url, self.config.egress, self.resolver.as_ref());
        let target = tokio::time::timeout(self.config.timeouts.connect, resolve)
            .await
            .map_err(|_| ("resolve_timeout", true))?
            .map_err(|refused| (refused.code(), true))?;
        if delivery.payload_format == super::fhir::FORMAT {
            let bundle = super::fhir::event_notification(
                envelope,
                delivery.sequence,
                delivery.endpoint_id,
                &delivery.endpoint_status,
            );
            let body = serde_json::to_vec(&bundle).unwrap_or_default();
            return self
                .post_signed(target, &delivery.id.to_string(), &body, signing, super::fhir::CONTENT_TYPE)
                .await;
        }
        let body = (self.body)(Payload::Event { envelope, sequence: delivery.sequence });
        self.post_signed(target, &delivery.id.to_string(), &body, signing, "application/json").await
    }

    /// Signs `body` with every current secret and posts it to the checked `target`.
    async fn post_signed(
        &self,
        target: guard::Target,
        id: &str,
        body: &[u8],
        signing: &endpoints::Signing,
        content_type: &str,
    ) -> Result<client::Answer, (&'static str, bool)> {
        #[cfg(feature = "testing")]
        crate::contract::capture::record(
            if content_type == super::fhir::CONTENT_TYPE { "fhir" } else { "webhook" },
            || body,
        );
        let timestamp = chrono::Utc::now().timestamp();
        let signature = super::signing::signature_header(&signing.all(), id, timestamp, body);
        let signed = Signed { id, timestamp, signature: &signature, body, content_type };
        client::post(&target, &signed, self.config.timeouts).await.map_err(|error| (error.code(), true))
    }

    /// Sends the heartbeats due now (one claim; each endpoint at most once); answers how many were
    /// answered 2xx. Each records the endpoint's health like a delivery attempt (status changes are
    /// audited); a failed heartbeat is only logged (never retried).
    async fn send_heartbeats(&self) -> Result<u64, WebhookError> {
        let due = {
            let client = self.pool.get().await?;
            heartbeat::claim(&client, self.config.batch).await?
        };
        let sent = futures::future::join_all(due.iter().map(|beat| self.heartbeat(beat))).await;
        let mut delivered = 0;
        for outcome in sent {
            delivered += u64::from(outcome?);
        }
        Ok(delivered)
    }

    #[tracing::instrument(skip_all, name = "webhook.heartbeat", fields(endpoint_id = %beat.endpoint_id))]
    async fn heartbeat(&self, beat: &Heartbeat) -> Result<bool, WebhookError> {
        let signing = {
            let client = self.pool.get().await?;
            endpoints::signing(&client, &self.key, beat.endpoint_id).await?
        };
        let Some(Ok(signing)) = signing else {
            tracing::warn!(endpoint_id = %beat.endpoint_id, "webhook heartbeat not sent: no readable secret");
            return Ok(false);
        };
        let posted = async {
            let resolve = guard::resolve_target(&beat.url, self.config.egress, self.resolver.as_ref());
            let target = tokio::time::timeout(self.config.timeouts.connect, resolve)
                .await
                .map_err(|_| ("resolve_timeout", true))?
                .map_err(|refused| (refused.code(), true))?;
            let (body, content_type) = if beat.payload_format == super::fhir::FORMAT {
                (
                    serde_json::to_vec(&super::fhir::heartbeat(beat)).unwrap_or_default(),
                    super::fhir::CONTENT_TYPE,
                )
            } else {
                ((self.body)(Payload::Heartbeat(beat)), "application/json")
            };
            self.post_signed(target, &beat.id.to_string(), &body, &signing, content_type).await
        }
        .await;
        let ok = matches!(&posted, Ok(answer) if (200..300).contains(&answer.status));
        let mut client = self.pool.get().await?;
        let mut tx = client.transaction().await?;
        store::record_health_unless_locked(&mut tx, beat.endpoint_id, ok, self.config.error_after).await?;
        tx.commit().await?;
        tracing::info!(
            endpoint_id = %beat.endpoint_id,
            last_sequence = beat.last_sequence.0,
            status = ?posted.as_ref().ok().map(|answer| answer.status),
            error_code = posted.as_ref().err().map_or("", |error| error.0),
            "webhook heartbeat"
        );
        Ok(ok)
    }

    /// Seals the legacy rows holding a clear secret, once per process (batches until none is left).
    async fn seal_legacy_once(&self) -> Result<(), WebhookError> {
        if self.sealed_legacy.load(Ordering::Acquire) {
            return Ok(());
        }
        const BATCH: i64 = 200;
        loop {
            let mut client = self.pool.get().await?;
            let tx = client.transaction().await?;
            let sealed = endpoints::seal_clear(&tx, &self.key, BATCH).await?;
            tx.commit().await?;
            if sealed > 0 {
                tracing::info!(sealed, "webhook secrets stored in clear were sealed");
            }
            if sealed < BATCH as u64 {
                break;
            }
        }
        self.sealed_legacy.store(true, Ordering::Release);
        Ok(())
    }

    async fn disable_failing(&self) -> Result<u64, WebhookError> {
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        let disabled = store::auto_disable(&tx, self.config.disable_after.as_secs_f64() / 3600.0).await?;
        for off in &disabled {
            let (endpoint, workspace) = (off.endpoint, off.workspace);
            let detail = serde_json::json!({ "failingForHours": self.config.disable_after.as_secs() / 3600 });
            endpoints::audit(&tx, workspace, endpoint, "auto_disable", "system", detail).await?;
            endpoints::audit_status(&tx, workspace, endpoint, &off.previous_status, "off", "system").await?;
            tracing::warn!(endpoint_id = %endpoint, workspace_id = %workspace, "webhook endpoint disabled: failing");
        }
        tx.commit().await?;
        if !disabled.is_empty() {
            emit_disabled_metric(disabled.len());
        }
        Ok(disabled.len() as u64)
    }
}

/// One EMF line: `WebhookEndpointDisabled` (count) in the dispatcher's namespace; the template's
/// alarm watches it.
fn emit_disabled_metric(count: usize) {
    let count = i64::try_from(count).unwrap_or(i64::MAX);
    crate::telemetry::emf::print(&[], &[("WebhookEndpointDisabled", "Count", count)]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn after(next: Next) -> Duration {
        match next {
            Next::Retry { after_ms } => Duration::from_secs_f64(after_ms / 1000.0),
            other => panic!("expected a retry, got {other:?}"),
        }
    }

    #[test]
    fn the_schedule_and_the_final_answers() {
        assert_eq!(next_after(1, Some(200), None), Next::Delivered);
        assert_eq!(next_after(1, Some(204), None), Next::Delivered);
        assert_eq!(next_after(1, Some(400), None), Next::Failed);
        assert_eq!(next_after(1, Some(410), None), Next::Failed);
        assert_eq!(after(next_after(1, Some(408), None)), Duration::from_secs(5));
        assert_eq!(after(next_after(2, Some(500), None)), Duration::from_secs(300));
        assert_eq!(after(next_after(3, Some(503), None)), Duration::from_secs(1800));
        assert_eq!(after(next_after(4, None, None)), Duration::from_secs(7200));
        assert_eq!(after(next_after(7, Some(302), None)), Duration::from_secs(36000));
        assert_eq!(next_after(MAX_ATTEMPTS, Some(500), None), Next::Failed);
        // Retry-After: longer wins, shorter does not shorten the schedule, capped at a day.
        assert_eq!(after(next_after(1, Some(500), Some(Duration::from_secs(60)))), Duration::from_secs(60));
        assert_eq!(after(next_after(2, Some(500), Some(Duration::from_secs(1)))), Duration::from_secs(300));
        assert_eq!(after(next_after(1, Some(500), Some(Duration::from_secs(999_999)))), MAX_RETRY_AFTER);
        assert_eq!(after(next_after(1, Some(503), None)), Duration::from_secs(5));
    }

    fn held(next: Next) -> Duration {
        match next {
            Next::Held { after_ms } => Duration::from_secs_f64(after_ms / 1000.0),
            other => panic!("expected a hold, got {other:?}"),
        }
    }

    #[test]
    fn a_throttling_answer_is_a_hold_at_its_bounded_retry_after() {
        assert_eq!(held(next_after(1, Some(429), Some(Duration::from_secs(60)))), Duration::from_secs(60));
        assert_eq!(held(next_after(MAX_ATTEMPTS, Some(429), None)), DEFAULT_THROTTLE_HOLD);
        assert_eq!(held(next_after(3, Some(503), Some(Duration::from_secs(999_999)))), MAX_THROTTLE_HOLD);
        assert_eq!(held(next_after(3, Some(429), Some(Duration::ZERO))), MIN_THROTTLE_HOLD);
    }
}
