//! The sender: claim (short transaction), renew and render (short transaction), provider call (no
//! transaction), fenced mark. Used by the listener Lambda's fast path ([`Sender::send_key`]), the
//! housekeeping `deliver` mode and `clinic dev`'s in-process loop ([`Sender::send_due`],
//! [`Sender::run`]).
//!
//! Invariants:
//! - No provider call under an expired lease: each row's lease is renewed right before its render
//!   and call (fenced by the claim token, refused once the lease ended — the call is then skipped,
//!   the row `fenced` for this sender), and the call is bounded by `provider_timeout`, below the
//!   lease. [`DeliveryConfig::validate`] refuses a batch whose sequential calls can outlive the
//!   claim's lease.
//! - A fast-path send with a deadline ([`Sender::send_key_within`]) starts no provider call it
//!   cannot finish in time.
//! - A step of the scheduled sender ([`Sender::step_due`]) reserves tokens of its paced providers
//!   ([`DeliveryConfig::pace`], the shared buckets of [`crate::lease::rate`]) *before* it claims,
//!   and claims only as many rows as it holds tokens for: no claimed row waits for the provider's
//!   rate while a more urgent row committed meanwhile waits for the next claim. Tokens it did not
//!   use (a row deferred, suppressed, stale) are given back at the end of the step. A step with no
//!   token claims nothing and says how long until the next one ([`SendReport::waiting_for_rate`]).
//! - A provider call with no reserved token left (the fast path, [`Sender::send_key`], which claims
//!   one row by key; or a row whose channel's provider had fewer tokens than the claim took, when
//!   email and SMS have different providers) takes a token from its shared bucket, waiting at most
//!   `pace_wait` (inside the renewed lease: [`DeliveryConfig::validate`] counts it); a row that gets
//!   no token in time is held. A throttling answer
//!   ([`super::provider::THROTTLED`]) is a hold too — `retry` with the attempt given back, so a
//!   throttling provider never walks a row to `dead` — and slows the provider's bucket.
//!
//! Over the 500-line guideline: one type, [`Sender`], whose steps (reserve rate tokens, claim, render,
//! provider call, fenced mark, give back) share its pool, providers, pace and config, and the report
//! its steps add up to.

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::Pool;
use serde::Serialize;
use tokio::sync::watch;

use super::provider::{Accepted, Providers};
use super::render::{self, Prepared};
use super::store::{self, ClaimedDelivery, Due, Mark};
use super::{DeliveryConfig, DeliveryStatus};
use crate::ids::NotificationId;
use crate::lease::Verdict;

/// The code of a row held because its provider's shared rate had no token for it in time.
pub const NO_TOKEN: &str = "provider_rate_limited";

/// Time a fast-path send needs besides the provider call itself: the claim, the render and the mark.
pub const SEND_MARGIN: Duration = Duration::from_secs(2);

/// Why a send step failed as a whole (per-row provider failures are outcomes, not errors).
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("database error: {0}")]
    Db(#[from] tokio_postgres::Error),
    #[error("no database connection")]
    Pool(#[from] deadpool_postgres::PoolError),
}

/// What happened to one claimed row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeliveryOutcome {
    Sent {
        id: NotificationId,
        provider_message_id: String,
        /// The contact policy let it through inside quiet hours (recorded on the row).
        bypassed_quiet_hours: bool,
    },
    Retry {
        id: NotificationId,
        code: String,
        delay: Duration,
    },
    /// The provider was not available for it (throttled, or no token in time): due again after
    /// `delay`, its attempt given back.
    Held {
        id: NotificationId,
        code: String,
        delay: Duration,
    },
    Dead {
        id: NotificationId,
        code: String,
    },
    NoContact {
        id: NotificationId,
        code: &'static str,
    },
    /// The contact policy said not now: due again at `until`, the attempt given back.
    Deferred {
        id: NotificationId,
        until: chrono::DateTime<chrono::Utc>,
    },
    /// The contact policy said never: final, with its reason; accounted like a send.
    Suppressed {
        id: NotificationId,
        reason: &'static str,
    },
    /// The current state made it untrue (freshness at send time): never sent, final.
    Stale {
        id: NotificationId,
        code: &'static str,
    },
    /// The claim was taken over before the mark: this sender changed nothing.
    Fenced {
        id: NotificationId,
    },
}

impl DeliveryOutcome {
    fn mark(&self) -> Option<(DeliveryStatus, Option<&str>, Due)> {
        Some(match self {
            DeliveryOutcome::Sent { .. } => (DeliveryStatus::Sent, None, Due::Unchanged),
            DeliveryOutcome::Retry { code, delay, .. } | DeliveryOutcome::Held { code, delay, .. } => {
                (DeliveryStatus::Retry, Some(code), Due::After(*delay))
            }
            DeliveryOutcome::Dead { code, .. } => (DeliveryStatus::Dead, Some(code), Due::Unchanged),
            DeliveryOutcome::NoContact { code, .. } => {
                (DeliveryStatus::NoContact, Some(*code), Due::Unchanged)
            }
            DeliveryOutcome::Deferred { until, .. } => {
                (DeliveryStatus::Deferred, Some(super::policy::QUIET_HOURS), Due::At(*until))
            }
            DeliveryOutcome::Suppressed { reason, .. } => {
                (DeliveryStatus::Suppressed, Some(*reason), Due::Unchanged)
            }
            DeliveryOutcome::Stale { code, .. } => (DeliveryStatus::Stale, Some(*code), Due::Unchanged),
            DeliveryOutcome::Fenced { .. } => return None,
        })
    }
}

/// Counts of one or more steps (also the housekeeping answer).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SendReport {
    pub claimed: usize,
    pub sent: usize,
    pub retried: usize,
    /// Rows held (throttled, or no token in time): due again, no attempt spent.
    pub held: usize,
    pub dead: usize,
    pub no_contact: usize,
    /// Rows the contact policy deferred to the end of the recipient's quiet hours.
    pub deferred: usize,
    /// Rows the contact policy suppressed for good (opted out, channel not allowed, no consent).
    pub suppressed: usize,
    /// Sends that went out inside quiet hours because their kind may bypass them (also in `sent`).
    pub bypassed_quiet_hours: usize,
    /// Rows the render found stale (never sent).
    pub stale: usize,
    pub fenced: usize,
    /// Rows found with an expired lease and moved to `uncertain`.
    pub uncertain: usize,
    /// Claimed rows that were `uncertain` (sent again under the `resend` policy).
    pub resent: usize,
    /// The step claimed nothing because its providers' shared rate had no token at hand; the next
    /// one comes in about this long (not in the answer: a loop's hint to wait, not a count).
    #[serde(skip)]
    pub waiting_for_rate: Option<Duration>,
}

impl SendReport {
    fn add(&mut self, outcome: &DeliveryOutcome) {
        match outcome {
            DeliveryOutcome::Sent { bypassed_quiet_hours, .. } => {
                self.sent += 1;
                self.bypassed_quiet_hours += usize::from(*bypassed_quiet_hours);
            }
            DeliveryOutcome::Retry { .. } => self.retried += 1,
            DeliveryOutcome::Held { .. } => self.held += 1,
            DeliveryOutcome::Dead { .. } => self.dead += 1,
            DeliveryOutcome::NoContact { .. } => self.no_contact += 1,
            DeliveryOutcome::Deferred { .. } => self.deferred += 1,
            DeliveryOutcome::Suppressed { .. } => self.suppressed += 1,
            DeliveryOutcome::Stale { .. } => self.stale += 1,
            DeliveryOutcome::Fenced { .. } => self.fenced += 1,
        }
    }

    /// Adds `other`'s counts (the steps of one run).
    pub fn merge(&mut self, other: SendReport) {
        self.claimed += other.claimed;
        self.sent += other.sent;
        self.retried += other.retried;
        self.held += other.held;
        self.dead += other.dead;
        self.no_contact += other.no_contact;
        self.deferred += other.deferred;
        self.suppressed += other.suppressed;
        self.bypassed_quiet_hours += other.bypassed_quiet_hours;
        self.stale += other.stale;
        self.fenced += other.fenced;
        self.uncertain += other.uncertain;
        self.resent += other.resent;
        self.waiting_for_rate = other.waiting_for_rate;
    }

    /// Nothing was due: a loop may stop (a step short of tokens is not idle: rows are due).
    pub fn idle(&self) -> bool {
        self.claimed == 0 && self.waiting_for_rate.is_none()
    }

    /// Sleeps until the next token when the step was short of them (at least a millisecond).
    pub async fn wait_for_rate(&self) {
        if let Some(wait) = self.waiting_for_rate {
            tokio::time::sleep(wait.clamp(Duration::from_millis(1), Duration::from_secs(1))).await;
        }
    }
}

/// The tokens one step reserved, per paced provider, and what is left of them.
#[derive(Debug)]
struct Tokens {
    held: Vec<(crate::lease::rate::Pace, u32)>,
    /// With none at hand: when the next one comes (the soonest of the providers).
    next_in: Duration,
}

impl Tokens {
    /// Rows a claim may take: the batch when nothing is paced, else as many as the provider with
    /// the most tokens can send now (a row of the other provider, when they differ, takes its
    /// token at its call).
    fn claimable(&self, batch: i64) -> i64 {
        match self.held.iter().map(|(_, count)| i64::from(*count)).max() {
            None => batch,
            Some(most) => most.min(batch),
        }
    }

    /// Uses one reserved token of `provider`; `false` when none is left.
    fn spend(&mut self, provider: &str) -> bool {
        match self.held.iter_mut().find(|(pace, left)| pace.provider == provider && *left > 0) {
            Some((_, left)) => {
                *left -= 1;
                true
            }
            None => false,
        }
    }
}

/// Claims and delivers notifications through the configured providers.
#[derive(Clone)]
pub struct Sender {
    pool: Pool,
    providers: Providers,
    config: Arc<DeliveryConfig>,
}

impl std::fmt::Debug for Sender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sender").field("providers", &self.providers).finish_non_exhaustive()
    }
}

impl Sender {
    pub fn new(pool: Pool, providers: Providers, config: DeliveryConfig) -> Self {
        Self { pool, providers, config: Arc::new(config) }
    }

    pub fn config(&self) -> &DeliveryConfig {
        &self.config
    }

    /// The fast path: delivers the row with this idempotency key now, when it is due and not held by
    /// another sender (right after the listener committed it).
    pub async fn send_key(&self, idempotency_key: &str) -> Result<SendReport, SendError> {
        self.step(Some(idempotency_key)).await
    }

    /// [`Sender::send_key`] for a caller that must be done within `budget` (the listener Lambda
    /// before its deadline): when a provider call could not end in time (`budget` below the provider
    /// timeout, the longest wait for a provider token and [`SEND_MARGIN`] for the render and the mark), nothing is claimed and the row stays
    /// due for the housekeeping sender — a call cut off after the provider accepted the message would
    /// leave it to be sent again.
    pub async fn send_key_within(
        &self,
        idempotency_key: &str,
        budget: Duration,
    ) -> Result<SendReport, SendError> {
        if budget < self.config.provider_timeout + self.config.pace_wait + SEND_MARGIN {
            tracing::info!(
                budget_ms = budget.as_millis() as u64,
                "too close to the deadline for a provider call; leaving the delivery to housekeeping"
            );
            return Ok(SendReport::default());
        }
        self.send_key(idempotency_key).await
    }

    /// One step: claims up to a batch of due rows and delivers them.
    pub async fn step_due(&self) -> Result<SendReport, SendError> {
        self.step(None).await
    }

    /// Steps until nothing is due (at most `max_steps`; a step short of tokens waits for the next
    /// one and counts), e.g. for the CLI.
    pub async fn send_due(&self, max_steps: usize) -> Result<SendReport, SendError> {
        let mut total = SendReport::default();
        for _ in 0..max_steps {
            let report = self.step_due().await?;
            total.merge(report);
            if report.idle() {
                break;
            }
            report.wait_for_rate().await;
        }
        Ok(total)
    }

    /// Runs until `stop` turns true: steps while rows are due, polls every `config.poll` otherwise.
    pub async fn run(&self, mut stop: watch::Receiver<bool>) {
        while !*stop.borrow() {
            let idle = match self.step_due().await {
                Ok(report) if report.waiting_for_rate.is_some() => {
                    report.wait_for_rate().await;
                    false
                }
                Ok(report) => report.claimed == 0,
                Err(error) => {
                    tracing::warn!(error = %error, "delivery step failed; trying again");
                    true
                }
            };
            if idle {
                tokio::select! {
                    _ = tokio::time::sleep(self.config.poll) => {}
                    _ = stop.changed() => {}
                }
            }
        }
    }

    /// The shared buckets of the providers this sender's channels go to, when paced (each once).
    fn paced_providers(&self) -> Vec<&crate::lease::rate::Pace> {
        let mut paced: Vec<&crate::lease::rate::Pace> = Vec::new();
        for channel in [super::Channel::Email, super::Channel::Sms] {
            let pace = self.providers.for_channel(channel).and_then(|p| self.config.pace_of(p.name()));
            if let Some(pace) = pace.filter(|pace| !paced.iter().any(|p| p.provider == pace.provider)) {
                paced.push(pace);
            }
        }
        paced
    }

    /// Reserves up to a batch of tokens of each paced provider (none on the fast path, `key`).
    async fn reserve(&self, key: Option<&str>) -> Result<Tokens, SendError> {
        let paced = if key.is_some() { Vec::new() } else { self.paced_providers() };
        let mut tokens = Tokens { held: Vec::with_capacity(paced.len()), next_in: Duration::MAX };
        if paced.is_empty() {
            return Ok(tokens);
        }
        let want = u32::try_from(self.config.batch.max(1)).unwrap_or(u32::MAX);
        let conn = self.pool.get().await?;
        for pace in paced {
            let reserved = crate::lease::rate::reserve(&conn, pace, want).await?;
            tokens.next_in = tokens.next_in.min(reserved.next_in);
            tokens.held.push((pace.clone(), reserved.granted));
        }
        Ok(tokens)
    }

    /// Gives back the tokens a step did not use.
    async fn give_back(&self, tokens: &Tokens) -> Result<(), SendError> {
        if tokens.held.iter().all(|(_, left)| *left == 0) {
            return Ok(());
        }
        let conn = self.pool.get().await?;
        for (pace, left) in &tokens.held {
            crate::lease::rate::give_back(&conn, pace, *left).await?;
        }
        Ok(())
    }

    async fn step(&self, key: Option<&str>) -> Result<SendReport, SendError> {
        let mut tokens = self.reserve(key).await?;
        let batch = tokens.claimable(self.config.batch);
        if batch == 0 {
            // No token at hand: claim nothing (a claimed row would wait for the rate).
            return Ok(SendReport { waiting_for_rate: Some(tokens.next_in), ..SendReport::default() });
        }
        let claim = match self.claim(key, batch).await {
            Ok(claim) => claim,
            Err(error) => {
                self.give_back(&tokens).await?;
                return Err(error);
            }
        };
        for id in &claim.uncertain {
            tracing::warn!(notification_id = %id, "delivery lease expired after claim: uncertain");
        }
        let mut report =
            SendReport { claimed: claim.rows.len(), uncertain: claim.uncertain.len(), ..Default::default() };
        let mut failed = None;
        for row in &claim.rows {
            report.resent += usize::from(row.resend);
            match self.deliver(row, claim.token, &mut tokens).await {
                Ok(outcome) => report.add(&outcome),
                Err(error) => {
                    failed = Some(error);
                    break;
                }
            }
        }
        // Unused tokens go back (a database error on the way loses them: the rate is under-spent).
        let given_back = self.give_back(&tokens).await;
        match failed {
            Some(error) => Err(error),
            None => given_back.map(|()| report),
        }
    }

    async fn claim(&self, key: Option<&str>, batch: i64) -> Result<store::DeliveryClaim, SendError> {
        let mut conn = self.pool.get().await?;
        let tx = conn.transaction().await?;
        let claim = {
            let config = &self.config;
            let rules = store::ClaimRules {
                batch,
                lease: config.lease,
                max_attempts: config.max_attempts,
                policy: config.uncertain,
                order: config.claim_order,
            };
            store::claim(&tx, rules, key).await?
        };
        tx.commit().await?;
        Ok(claim)
    }

    async fn deliver(
        &self,
        row: &ClaimedDelivery,
        token: crate::ids::ClaimToken,
        tokens: &mut Tokens,
    ) -> Result<DeliveryOutcome, SendError> {
        let prepared = {
            let mut conn = self.pool.get().await?;
            let tx = conn.transaction().await?;
            // No provider call under an expired lease: this row's lease is renewed first, fenced by
            // the token and refused once it ended; the call that follows is bounded by the provider
            // timeout, below the lease.
            if !store::renew(&tx, row.id, token, self.config.lease).await? {
                tx.rollback().await?;
                tracing::warn!(
                    notification_id = %row.id,
                    event_id = %row.event_id,
                    "delivery lease ended or was taken over before its turn; not sending"
                );
                return Ok(DeliveryOutcome::Fenced { id: row.id });
            }
            let prepared = render::prepare(&tx, row, &self.providers, &self.config).await?;
            tx.commit().await?;
            prepared
        };
        // The hold of a row whose provider had no token for it in time.
        let mut no_token = Duration::ZERO;
        let (outcome, channel) = match prepared {
            Prepared::Send { message, bypassed_quiet_hours } => {
                let channel = message.channel.as_str();
                let result = match (message.headers_are_safe(), self.providers.for_channel(message.channel)) {
                    (false, _) => Err(super::ProviderError::permanent("invalid_address")),
                    (true, None) => Err(super::ProviderError::permanent("no_provider_for_channel")),
                    (true, Some(provider)) if self.turn(provider.name(), tokens, &mut no_token).await? => {
                        Err(super::ProviderError::retryable(NO_TOKEN))
                    }
                    (true, Some(provider)) => {
                        // One span per provider call (SES, SNS, …): ids and codes only.
                        let span = tracing::info_span!(
                            "provider.send",
                            provider = provider.name(),
                            channel,
                            notification_id = %row.id,
                            event_id = %row.event_id,
                            listener = %row.listener,
                        );
                        // Linked to the committing trace, whoever sends it (the listener's fast path or
                        // a housekeeping `deliver` run).
                        crate::telemetry::spans::link_trace(&span, row.event_id, row.trace);
                        let call = tracing::Instrument::instrument(provider.send(&message), span);
                        match tokio::time::timeout(self.config.provider_timeout, call).await {
                            Ok(result) => result,
                            Err(_) => Err(super::ProviderError::retryable("provider_timeout")),
                        }
                    }
                };
                let message_channel = message.channel;
                drop(message);
                if matches!(&result, Err(error) if error.code == super::RECIPIENT_OPTED_OUT) {
                    // The channel's own opt-out list (an SMS STOP reply): honoured at once.
                    self.record_provider_opt_out(row, message_channel).await?;
                    let reason = super::policy::SuppressReason::OptedOut.code();
                    (DeliveryOutcome::Suppressed { id: row.id, reason }, Some(channel))
                } else {
                    (self.after_call(row, result, bypassed_quiet_hours, no_token), Some(channel))
                }
            }
            Prepared::NoContact(code) => (DeliveryOutcome::NoContact { id: row.id, code }, Some("none")),
            Prepared::Deferred(until) => (DeliveryOutcome::Deferred { id: row.id, until }, None),
            Prepared::Suppressed(reason) => {
                (DeliveryOutcome::Suppressed { id: row.id, reason: reason.code() }, Some("none"))
            }
            Prepared::Stale(code) => (DeliveryOutcome::Stale { id: row.id, code }, None),
            Prepared::NotRenderable(code) => (self.failed(row, code.to_owned(), true), None),
        };
        let throttled =
            matches!(&outcome, DeliveryOutcome::Held { code, .. } if code == super::provider::THROTTLED);
        if let (true, Some(pace)) = (throttled, self.paced(channel)) {
            let conn = self.pool.get().await?;
            crate::lease::rate::slow(&conn, pace, self.config.throttle_factor, self.config.throttle_period)
                .await?;
            tracing::warn!(provider = %pace.provider, region = %pace.region, "provider throttled; slowing its shared rate");
        }
        self.finish(row, token, outcome, channel).await
    }

    /// The shared rate of the provider of `channel`, when it is paced.
    fn paced(&self, channel: Option<&str>) -> Option<&crate::lease::rate::Pace> {
        let channel = match channel? {
            "email" => super::Channel::Email,
            "sms" => super::Channel::Sms,
            _ => return None,
        };
        self.config.pace_of(self.providers.for_channel(channel)?.name())
    }

    /// Uses a token this step reserved for `provider`, else takes one from its shared bucket when it
    /// is paced, waiting for it up to `pace_wait` (the lease, just renewed, covers that wait and the
    /// call); `true` when no token comes in time — then `no_token` is how long the row is held.
    async fn turn(
        &self,
        provider: &str,
        tokens: &mut Tokens,
        no_token: &mut Duration,
    ) -> Result<bool, SendError> {
        let Some(pace) = self.config.pace_of(provider) else { return Ok(false) };
        if tokens.spend(provider) {
            return Ok(false);
        }
        let conn = self.pool.get().await?;
        let turn = crate::lease::rate::take(&conn, pace, self.config.pace_wait).await?;
        drop(conn);
        match turn {
            crate::lease::rate::Turn::Go(wait) => {
                if !wait.is_zero() {
                    tokio::time::sleep(wait).await;
                }
                Ok(false)
            }
            crate::lease::rate::Turn::Hold(wait) => {
                *no_token = wait.max(self.config.backoff.delay(1));
                Ok(true)
            }
        }
    }

    /// Marks `row` with `outcome` (fenced by `token`) and logs it.
    async fn finish(
        &self,
        row: &ClaimedDelivery,
        token: crate::ids::ClaimToken,
        outcome: DeliveryOutcome,
        channel: Option<&str>,
    ) -> Result<DeliveryOutcome, SendError> {
        let Some((status, code, due)) = outcome.mark() else { return Ok(outcome) };
        let (provider_id, bypassed_quiet_hours) = match &outcome {
            DeliveryOutcome::Sent { provider_message_id, bypassed_quiet_hours, .. } => {
                (Some(provider_message_id.as_str()), *bypassed_quiet_hours)
            }
            _ => (None, false),
        };
        let held = matches!(outcome, DeliveryOutcome::Held { .. });
        let mark = Mark {
            status,
            channel,
            provider_message_id: provider_id,
            error_code: code,
            due,
            bypassed_quiet_hours,
            held,
        };
        let conn = self.pool.get().await?;
        let marked = store::mark(&conn, row.id, token, &mark).await?;
        tracing::info!(
            notification_id = %row.id,
            event_id = %row.event_id,
            listener = %row.listener,
            template = %row.template,
            attempts = row.attempts,
            status = if marked { status.as_str() } else { "fenced" },
            bypassed_quiet_hours,
            code = code.unwrap_or(""),
            "delivery marked"
        );
        Ok(if marked { outcome } else { DeliveryOutcome::Fenced { id: row.id } })
    }

    /// Records on the patient that the provider found them on `channel`'s opt-out list: one
    /// `patient.updated` event (actor the patient), none when already recorded.
    async fn record_provider_opt_out(
        &self,
        row: &ClaimedDelivery,
        channel: super::Channel,
    ) -> Result<(), SendError> {
        if row.recipient_kind != Some(super::RecipientKind::Patient) {
            return Ok(());
        }
        let patient = crate::ids::PatientId::from_ulid(row.recipient_id);
        let ctx = crate::patients::patient_ctx(row.workspace_id, patient, row.event_id);
        let mut conn = self.pool.get().await?;
        let tx = conn.transaction().await?;
        let opt_out = crate::patients::OptOut::Channel(channel);
        match crate::patients::record_opt_out(&tx, &ctx, patient, opt_out).await {
            Ok(recorded) => {
                tx.commit().await?;
                tracing::info!(
                    notification_id = %row.id,
                    patient_id = %patient,
                    channel = channel.as_str(),
                    recorded = recorded.is_some(),
                    "the provider reports the recipient opted out; recorded on the patient"
                );
            }
            // A patient gone since the render: nothing to record; the message is suppressed anyway.
            Err(_) => {
                tracing::warn!(notification_id = %row.id, "provider opt-out not recorded (patient gone)");
            }
        }
        Ok(())
    }

    fn after_call(
        &self,
        row: &ClaimedDelivery,
        result: Result<Accepted, super::ProviderError>,
        bypassed_quiet_hours: bool,
        no_token: Duration,
    ) -> DeliveryOutcome {
        match result {
            Ok(accepted) => DeliveryOutcome::Sent {
                id: row.id,
                provider_message_id: accepted.provider_message_id,
                bypassed_quiet_hours,
            },
            Err(error) if error.code == NO_TOKEN => {
                DeliveryOutcome::Held { id: row.id, code: error.code, delay: no_token }
            }
            Err(error) if error.code == super::provider::THROTTLED => {
                DeliveryOutcome::Held { id: row.id, code: error.code, delay: self.config.backoff.delay(1) }
            }
            Err(error) => self.failed(row, error.code, error.retryable),
        }
    }

    fn failed(&self, row: &ClaimedDelivery, code: String, retryable: bool) -> DeliveryOutcome {
        match self.config.retry_policy().after_failure(row.attempts, retryable) {
            Verdict::Retry(delay) => DeliveryOutcome::Retry { id: row.id, code, delay },
            Verdict::Dead => DeliveryOutcome::Dead { id: row.id, code },
        }
    }
}
