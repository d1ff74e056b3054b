//! The dispatcher Lambda: on each scheduled tick, drain the outbox for a window (or one pass).
//!
//! Invariants:
//! - The dispatcher (pool, SQS client, `LISTEN` connection) is built once per container; an
//!   invocation only drains. It returns before the window ends, and the window is also clamped to
//!   the invocation's own deadline minus [`DEADLINE_MARGIN`].
//! - Mode: the event's `detail.mode` wins over `CLINIC_DISPATCH_MODE` (default `drain`). `once`
//!   claims and dispatches until nothing is due, then returns. The housekeeping modes run the same
//!   binary on their own schedules (see template.yaml, `HousekeepingFunction`): `reminders` emits
//!   `appointment.reminder_due` for appointments starting within the lead time (exactly once per
//!   appointment and start time), and `sweep` deletes finished outbox rows, starts and receipts past
//!   the retention. Neither starts listeners: the running dispatcher picks up new events. `deliver`
//!   sends the notifications the listeners' fast path left behind (leftovers, retries whose backoff
//!   ended, and `uncertain` rows under the resend policy; see docs/delivery.md).
//!   `reconcile` runs one custody pass: it restarts listener starts whose receipt is overdue and
//!   hands the ones that stay unsettled to operators (see `clinic_core::housekeeping::reconcile`).
//!   Every `drain` invocation runs one such pass first, through the same SQS transport, so the
//!   dispatcher's own one-minute schedule carries it; and after draining it emits the gauge of rows
//!   waiting for an operator (`clinic_core::housekeeping::waiting`), which the alarms read.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use clinic_core::config::ConfigError;
use clinic_core::dispatch::{Dispatcher, DrainReport};
use clinic_core::housekeeping::reconcile::{reconcile, ReconcileConfig, ReconcileReport};
use clinic_core::housekeeping::reminders::{ReminderConfig, ReminderReport};
use clinic_core::housekeeping::retention::{RetentionConfig, SweepReport};
use lambda_runtime::{Error, LambdaEvent};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Time kept free between the end of draining and the function's timeout.
pub const DEADLINE_MARGIN: Duration = Duration::from_secs(5);

/// Steps of one `deliver` invocation (each claims up to `CLINIC_DELIVERY_BATCH` rows).
pub const DELIVER_MAX_STEPS: usize = 50;

/// How one invocation dispatches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Keep draining (waking on LISTEN, polling) until the window ends.
    Drain,
    /// Dispatch until nothing is due, then return.
    Once,
    /// Emit the reminders that have come due.
    Reminders,
    /// Delete finished outbox rows, starts and receipts past the retention.
    Sweep,
    /// Send due notifications (leftovers and retries) through the configured providers.
    Deliver,
    /// Restart listener starts whose receipt is overdue (custody), through this function's transport.
    Reconcile,
    /// Disable endpoints failing for days, then send due webhook deliveries (retries, leftovers and
    /// held ones of re-enabled endpoints) until the invocation's deadline is too close for another
    /// attempt. Its own function and schedule in template.yaml (`WebhookSenderFunction`).
    Webhooks,
}

impl Mode {
    /// `CLINIC_DISPATCH_MODE`: `drain` (default), `once`, `reminders`, `sweep`, `deliver`,
    /// `reconcile` or `webhooks` (see [`Mode`]); an event's `detail.mode` overrides it per invocation.
    pub fn from_env() -> Result<Mode, ConfigError> {
        match clinic_core::config::var("CLINIC_DISPATCH_MODE").as_deref() {
            None | Some("drain") => Ok(Mode::Drain),
            Some("once") => Ok(Mode::Once),
            Some("reminders") => Ok(Mode::Reminders),
            Some("sweep") => Ok(Mode::Sweep),
            Some("deliver") => Ok(Mode::Deliver),
            Some("reconcile") => Ok(Mode::Reconcile),
            Some("webhooks") => Ok(Mode::Webhooks),
            Some(other) => Err(ConfigError::Invalid {
                name: "CLINIC_DISPATCH_MODE",
                value: other.to_owned(),
                message:
                    "expected `drain`, `once`, `reminders`, `sweep`, `deliver`, `reconcile` or `webhooks`"
                        .into(),
            }),
        }
    }
}

/// Everything an invocation needs, built once per container.
#[derive(Debug)]
pub struct State {
    pub dispatcher: Dispatcher,
    pub window: Duration,
    pub mode: Mode,
    pub housekeeping: Housekeeping,
}

/// Settings of the scheduled housekeeping modes.
#[derive(Debug, Clone, Default)]
pub struct Housekeeping {
    pub reminders: ReminderConfig,
    pub retention: RetentionConfig,
    /// The `deliver` mode's sender (`None`: that mode sends nothing).
    pub delivery: Option<clinic_core::delivery::Sender>,
    pub reconcile: ReconcileConfig,
    /// The `webhooks` mode's sender (`None`: that mode sends nothing).
    pub webhooks: Option<std::sync::Arc<clinic_core::webhooks::WebhookSender>>,
}

impl Housekeeping {
    /// `CLINIC_REMINDER_LEAD_HOURS`, `CLINIC_RETENTION_*` and `CLINIC_CUSTODY_*`.
    pub fn from_env() -> Result<Self, ConfigError> {
        Ok(Self {
            reminders: ReminderConfig::from_env()?,
            retention: RetentionConfig::from_env()?,
            delivery: None,
            reconcile: ReconcileConfig::from_env()?,
            webhooks: None,
        })
    }
}

/// What the invocation answers (also logged).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Answer {
    pub mode: Mode,
    #[serde(flatten)]
    pub report: DrainReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reminders: Option<ReminderReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub swept: Option<SweepReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delivered: Option<clinic_core::delivery::SendReport>,
    pub reconciled: Option<ReconcileReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub webhooks: Option<clinic_core::webhooks::WebhookReport>,
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
    let mut answer = Answer {
        mode,
        report: DrainReport::default(),
        reminders: None,
        swept: None,
        delivered: None,
        reconciled: None,
        webhooks: None,
        waiting: None,
    };
    let pool = state.dispatcher.pool();
    match mode {
        Mode::Drain => {
            // One custody pass per scheduled drain (the function's reserved slots are taken by the
            // overlapping drains almost all the time, so a separate schedule would mostly be throttled). A failed pass
            // is logged and the drain goes on.
            let transport = state.dispatcher.transport();
            match reconcile(pool, transport.as_ref(), &state.housekeeping.reconcile).await {
                Ok(report) => answer.reconciled = Some(report),
                Err(error) => {
                    tracing::warn!(error = %error, "custody reconcile pass failed; draining anyway")
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
        Mode::Reminders => {
            let lead = state.housekeeping.reminders.lead;
            answer.reminders =
                Some(clinic_core::housekeeping::reminders::run(pool, lead, chrono::Utc::now()).await?);
        }
        Mode::Sweep => {
            let retention = &state.housekeeping.retention;
            answer.swept =
                Some(clinic_core::housekeeping::retention::sweep(pool, retention, chrono::Utc::now()).await?);
        }
        Mode::Deliver => {
            if let Some(sender) = &state.housekeeping.delivery {
                answer.delivered = Some(sender.send_due(DELIVER_MAX_STEPS).await?);
            }
        }
        Mode::Webhooks => {
            if let Some(sender) = &state.housekeeping.webhooks {
                // Bounded by the invocation's deadline (minus the margin): a receiver that never
                // answers cannot keep the run past it; the automatic disable runs first.
                let deadline = (event.context.deadline != 0)
                    .then(|| Instant::now() + window_for(Duration::MAX, event.context.deadline));
                answer.webhooks = Some(sender.send_due_until(DELIVER_MAX_STEPS, deadline).await?);
            }
        }
        Mode::Reconcile => {
            let config = &state.housekeeping.reconcile;
            let transport = state.dispatcher.transport();
            answer.reconciled = Some(reconcile(pool, transport.as_ref(), config).await?);
        }
    }
    let report = answer.report;
    tracing::info!(
        mode = ?answer.mode,
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
        assert_eq!(requested_mode(&serde_json::json!({"mode": "reminders"})), Some(Mode::Reminders));
        assert_eq!(requested_mode(&serde_json::json!({"mode": "sweep"})), Some(Mode::Sweep));
        assert_eq!(requested_mode(&serde_json::json!({"mode": "deliver"})), Some(Mode::Deliver));
        assert_eq!(requested_mode(&serde_json::json!({"mode": "reconcile"})), Some(Mode::Reconcile));
        assert_eq!(requested_mode(&serde_json::json!({"mode": "webhooks"})), Some(Mode::Webhooks));
        assert_eq!(requested_mode(&serde_json::json!({})), None);
        assert_eq!(requested_mode(&serde_json::json!({"mode": "sideways"})), None);
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
