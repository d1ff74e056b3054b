//! The scheduled senders as housekeeping jobs: [`Deliver`] (notifications the listeners' fast path
//! left: leftovers, retries whose backoff ended, `uncertain` rows under the resend policy) and
//! [`WebhookRetries`] (webhook retries, leftovers and held deliveries of re-enabled endpoints).
//!
//! Invariants:
//! - Each wraps its sender's public steps and adds only the deadline: [`Deliver`] claims no batch
//!   when less than the claim's lease is left (the sender's config guarantees a batch's calls end
//!   within its lease), [`WebhookRetries`] hands the deadline to
//!   [`WebhookSender::send_due_until`], which claims no batch that one attempt could outlast.
//! - At most `max_steps` batches per run; a run ends early when nothing is due.

use std::sync::Arc;
use std::time::Instant;

use super::job::{too_close, Job, JobError, JobKind, JobReport};
use crate::delivery::{SendReport, Sender};
use crate::webhooks::WebhookSender;

/// Sends due notifications, batch by batch, within the deadline (the housekeeping `deliver` mode).
#[derive(Debug, Clone)]
pub struct Deliver {
    pub sender: Sender,
    pub max_steps: usize,
}

#[async_trait::async_trait]
impl Job for Deliver {
    fn kind(&self) -> JobKind {
        JobKind::Deliver
    }

    async fn run(&self, deadline: Option<Instant>) -> Result<JobReport, JobError> {
        let mut total = SendReport::default();
        for _ in 0..self.max_steps {
            if too_close(deadline, self.sender.config().lease) {
                tracing::info!(
                    claimed = total.claimed,
                    "deliver job stopped before its deadline; the next run goes on"
                );
                break;
            }
            let step =
                self.sender.step_due().await.map_err(|error| JobError::new(JobKind::Deliver, error))?;
            total.merge(step);
            if step.idle() {
                break;
            }
            // Short of provider tokens: wait for the next one (the step counts).
            step.wait_for_rate().await;
        }
        Ok(JobReport::Deliver(total))
    }
}

/// Disables endpoints failing for days, then sends due webhook deliveries within the deadline (the
/// housekeeping `webhooks` mode).
#[derive(Debug, Clone)]
pub struct WebhookRetries {
    pub sender: Arc<WebhookSender>,
    pub max_steps: usize,
}

#[async_trait::async_trait]
impl Job for WebhookRetries {
    fn kind(&self) -> JobKind {
        JobKind::Webhooks
    }

    async fn run(&self, deadline: Option<Instant>) -> Result<JobReport, JobError> {
        self.sender
            .send_due_until(self.max_steps, deadline)
            .await
            .map(JobReport::Webhooks)
            .map_err(|error| JobError::new(JobKind::Webhooks, error))
    }
}
