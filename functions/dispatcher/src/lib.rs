//! The dispatcher Lambda: on each scheduled tick, drain the outbox for a window (or one pass), or run
//! one housekeeping job.
//!
//! Invariants:
//! - The dispatcher (pool, SQS client, `LISTEN` connection) and the housekeeping jobs are built once
//!   per container; an invocation only runs. It returns before the window ends, and the window is
//!   also clamped to the invocation's own deadline minus [`DEADLINE_MARGIN`].
//! - [`Mode`]: drain, once, or a job; the event's `detail.mode` wins over `CLINIC_DISPATCH_MODE`
//!   (default `drain`). `once` claims and dispatches until nothing is due, then returns. The jobs
//!   (`clinic_core::housekeeping::Job`: one interface, one report) run the same binary on their own
//!   schedules (see template.yaml, `HousekeepingFunction`), each done [`DEADLINE_MARGIN`] before the
//!   invocation's deadline: `reminders` emits `appointment.reminder_due` for appointments starting
//!   within the lead time (exactly once per appointment and start time), and `sweep` deletes
//!   finished outbox rows, starts and receipts past the retention. Neither starts listeners: the
//!   running dispatcher picks up new events. `deliver` sends the notifications the listeners' fast
//!   path left behind (leftovers, retries whose backoff ended, and `uncertain` rows under the resend
//!   policy; see docs/delivery.md). `reconcile` runs one custody pass: it restarts listener starts
//!   whose receipt is overdue and hands the ones that stay unsettled to operators (see
//!   `clinic_core::housekeeping::reconcile`). Every `drain` invocation runs that job first, through
//!   the same SQS transport, so the dispatcher's own one-minute schedule carries it. `webhooks` sends
//!   due webhook deliveries. After draining, every `drain` invocation also emits the gauge of rows
//!   waiting for an operator (`clinic_core::housekeeping::waiting`), which the alarms read.
//! - The answer is one [`Answer`]: the mode, the drain's counts, and the job's [`JobReport`].

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use clinic_core::config::{ConfigError, Env};
use clinic_core::dispatch::{Dispatcher, DrainReport};
use clinic_core::housekeeping::reconcile::ReconcileConfig;
use clinic_core::housekeeping::reminders::ReminderConfig;
use clinic_core::housekeeping::retention::RetentionConfig;
use clinic_core::housekeeping::{self, JobKind, JobReport, Jobs};
use lambda_runtime::{Error, LambdaEvent};
use serde::{Deserialize, Serialize};
use serde_json::Value;

mod settings;

pub use settings::Settings;

/// Time kept free between the end of draining and the function's timeout.
pub const DEADLINE_MARGIN: Duration = Duration::from_secs(5);

/// Batches of one `deliver` or `webhooks` run (each claims up to the sender's batch of rows).
pub const DELIVER_MAX_STEPS: usize = 50;

/// How one invocation dispatches: drain, once, or one housekeeping job. Named by one string (the
/// event's `detail.mode`, `CLINIC_DISPATCH_MODE`, the answer's `mode`): `drain`, `once`, or a job's
/// name ([`JobKind::as_str`]: `reminders`, `sweep`, `deliver`, `reconcile`, `webhooks`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Keep draining (waking on LISTEN, polling) until the window ends; one custody pass first.
    Drain,
    /// Dispatch until nothing is due, then return.
    Once,
    /// Run one housekeeping job within the invocation's deadline:
    /// - `reminders`: emit the reminders that have come due;
    /// - `sweep`: delete finished outbox rows, starts and receipts past the retention;
    /// - `deliver`: send due notifications (leftovers and retries) through the configured providers;
    /// - `reconcile`: restart listener starts whose receipt is overdue (custody), through this
    ///   function's transport;
    /// - `webhooks`: disable endpoints failing for days, then send due webhook deliveries (retries,
    ///   leftovers and held ones of re-enabled endpoints) until the deadline is too close for another
    ///   attempt. Its own function and schedule in template.yaml (`WebhookSenderFunction`).
    Job(JobKind),
}

impl Mode {
    pub const fn as_str(self) -> &'static str {
        match self {
            Mode::Drain => "drain",
            Mode::Once => "once",
            Mode::Job(kind) => kind.as_str(),
        }
    }

    pub fn parse(name: &str) -> Option<Mode> {
        match name {
            "drain" => Some(Mode::Drain),
            "once" => Some(Mode::Once),
            other => JobKind::parse(other).map(Mode::Job),
        }
    }

    /// `CLINIC_DISPATCH_MODE` (default `drain`; see [`Mode`]); an event's `detail.mode` overrides it
    /// per invocation.
    pub fn read(env: &Env) -> Result<Mode, ConfigError> {
        let Some(name) = env.var("CLINIC_DISPATCH_MODE") else { return Ok(Mode::Drain) };
        Mode::parse(&name).ok_or_else(|| ConfigError::Invalid {
            name: "CLINIC_DISPATCH_MODE",
            value: name.clone(),
            message: format!(
                "expected `drain`, `once` or a job: {}",
                JobKind::ALL.iter().map(|kind| format!("`{kind}`")).collect::<Vec<_>>().join(", ")
            ),
        })
    }
}

impl Serialize for Mode {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Mode {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        Mode::parse(&name).ok_or_else(|| serde::de::Error::custom(format!("unknown mode {name:?}")))
    }
}

/// Everything an invocation needs, built once per container.
#[derive(Debug)]
pub struct State {
    pub dispatcher: Dispatcher,
    pub window: Duration,
    pub mode: Mode,
    /// The housekeeping jobs this function can run (`deliver` and `webhooks` only with their senders).
    pub jobs: Jobs,
}

impl State {
    /// The jobs are built here, once, on the dispatcher's pool and transport.
    pub fn new(dispatcher: Dispatcher, window: Duration, mode: Mode, housekeeping: Housekeeping) -> Self {
        let jobs = housekeeping.jobs(&dispatcher);
        Self { dispatcher, window, mode, jobs }
    }
}

/// Settings of the housekeeping jobs.
#[derive(Debug, Clone, Default)]
pub struct Housekeeping {
    pub reminders: ReminderConfig,
    pub retention: RetentionConfig,
    /// The `deliver` job's sender (`None`: this function has no such job).
    pub delivery: Option<clinic_core::delivery::Sender>,
    pub reconcile: ReconcileConfig,
    /// The `webhooks` job's sender (`None`: this function has no such job).
    pub webhooks: Option<Arc<clinic_core::webhooks::WebhookSender>>,
}

impl Housekeeping {
    /// `CLINIC_REMINDER_LEAD_HOURS`, `CLINIC_RETENTION_*` and `CLINIC_CUSTODY_*`.
    pub fn read(env: &Env) -> Result<Self, ConfigError> {
        Ok(Self {
            reminders: ReminderConfig::read(env)?,
            retention: RetentionConfig::read(env)?,
            delivery: None,
            reconcile: ReconcileConfig::read(env)?,
            webhooks: None,
        })
    }

    /// The jobs, on `dispatcher`'s pool (and, for custody, its transport).
    pub fn jobs(self, dispatcher: &Dispatcher) -> Jobs {
        let pool = dispatcher.pool().clone();
        let mut jobs = Jobs::default()
            .with(housekeeping::Reminders { pool: pool.clone(), config: self.reminders })
            .with(housekeeping::Sweep { pool: pool.clone(), config: self.retention })
            .with(housekeeping::Reconcile {
                pool,
                transport: dispatcher.transport().clone(),
                config: self.reconcile,
            });
        if let Some(sender) = self.delivery {
            jobs = jobs.with(housekeeping::Deliver { sender, max_steps: DELIVER_MAX_STEPS });
        }
        if let Some(sender) = self.webhooks {
            jobs = jobs.with(housekeeping::WebhookRetries { sender, max_steps: DELIVER_MAX_STEPS });
        }
        jobs
    }
}

/// What the invocation answers (also logged): the mode, the drain's counts (zero for a job), and the
/// job's report (a job mode's, or the custody pass a drain runs first).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Answer {
    pub mode: Mode,
    #[serde(flatten)]
    pub report: DrainReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job: Option<JobReport>,
    /// `drain`: the rows waiting for an operator per queue (the `WaitingForOperator` gauge).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting: Option<clinic_core::housekeeping::waiting::Waiting>,
}

fn requested_mode(detail: &Value) -> Option<Mode> {
    detail.get("mode").and_then(|mode| serde_json::from_value(mode.clone()).ok())
}

/// The window, clamped to the invocation deadline (epoch milliseconds; 0 when unknown).
fn window_for(configured: Duration, deadline_ms: u64) -> Duration {
    if deadline_ms == 0 {
        return configured;
    }
    let now_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    let left = Duration::from_millis(deadline_ms.saturating_sub(now_ms));
    configured.min(left.saturating_sub(DEADLINE_MARGIN))
}

/// Handles one scheduled tick.
pub async fn handle(state: &State, event: LambdaEvent<EventBridgeEvent<Value>>) -> Result<Answer, Error> {
    let mode = requested_mode(&event.payload.detail).unwrap_or(state.mode);
    // A job is done [`DEADLINE_MARGIN`] before the invocation's deadline (none when it is unknown).
    let deadline = (event.context.deadline != 0)
        .then(|| Instant::now() + window_for(Duration::MAX, event.context.deadline));
    let mut answer = Answer { mode, report: DrainReport::default(), job: None, waiting: None };
    let pool = state.dispatcher.pool();
    match mode {
        Mode::Drain => {
            // One custody pass per scheduled drain (the function's reserved slots are taken by the
            // overlapping drains almost all the time, so a separate schedule would mostly be throttled). A failed pass
            // is logged and the drain goes on.
            if let Some(custody) = state.jobs.get(JobKind::Reconcile) {
                match custody.run(deadline).await {
                    Ok(report) => answer.job = Some(report),
                    Err(error) => {
                        tracing::warn!(error = %error, "custody reconcile pass failed; draining anyway")
                    }
                }
            }
            answer.report = state.dispatcher.drain(window_for(state.window, event.context.deadline)).await;
            // The gauge of rows waiting for an operator, once per minute whatever the drain did: the
            // alarms on it stay up while such rows exist (clinic_core::housekeeping::waiting).
            match pool.get().await {
                Ok(client) => {
                    let mode = state.dispatcher.metrics_mode();
                    answer.waiting = clinic_core::housekeeping::waiting::emit(&client, mode).await;
                }
                Err(error) => tracing::warn!(error = %error, "no connection for the waiting-rows gauge"),
            }
        }
        Mode::Once => answer.report = state.dispatcher.drain_once().await?,
        Mode::Job(kind) => match state.jobs.get(kind) {
            Some(job) => answer.job = Some(job.run(deadline).await?),
            None => {
                tracing::warn!(job = kind.as_str(), "this function has no such job configured; nothing ran")
            }
        },
    }
    let report = answer.report;
    tracing::info!(
        mode = answer.mode.as_str(),
        steps = report.steps,
        dispatched = report.totals.dispatched,
        retried = report.totals.retried,
        dead = report.totals.dead,
        fenced = report.totals.fenced,
        errors = report.errors,
        "dispatcher invocation done"
    );
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detail_mode_is_read_when_valid() {
        assert_eq!(requested_mode(&serde_json::json!({"mode": "once"})), Some(Mode::Once));
        assert_eq!(requested_mode(&serde_json::json!({"mode": "drain"})), Some(Mode::Drain));
        let job = |kind| Some(Mode::Job(kind));
        assert_eq!(requested_mode(&serde_json::json!({"mode": "reminders"})), job(JobKind::Reminders));
        assert_eq!(requested_mode(&serde_json::json!({"mode": "sweep"})), job(JobKind::Sweep));
        assert_eq!(requested_mode(&serde_json::json!({"mode": "deliver"})), job(JobKind::Deliver));
        assert_eq!(requested_mode(&serde_json::json!({"mode": "reconcile"})), job(JobKind::Reconcile));
        assert_eq!(requested_mode(&serde_json::json!({"mode": "webhooks"})), job(JobKind::Webhooks));
        assert_eq!(requested_mode(&serde_json::json!({})), None);
        assert_eq!(requested_mode(&serde_json::json!({"mode": "sideways"})), None);
    }

    #[test]
    fn every_mode_round_trips_by_its_name() {
        let modes =
            [Mode::Drain, Mode::Once].into_iter().chain(JobKind::ALL.iter().map(|kind| Mode::Job(*kind)));
        for mode in modes {
            assert_eq!(serde_json::to_value(mode).unwrap(), mode.as_str());
            assert_eq!(serde_json::from_value::<Mode>(serde_json::json!(mode.as_str())).unwrap(), mode);
        }
    }

    #[test]
    fn window_is_clamped_to_the_deadline() {
        assert_eq!(window_for(Duration::from_secs(50), 0), Duration::from_secs(50));
        let now_ms = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
        let window = window_for(Duration::from_secs(50), now_ms + 20_000);
        assert!(window <= Duration::from_secs(15) && window > Duration::from_secs(13), "{window:?}");
        assert_eq!(window_for(Duration::from_secs(50), now_ms + 1_000), Duration::ZERO);
    }
}
