//! The drain loop: step until idle, then wait for a wake-up (`LISTEN clinic_outbox`) or the poll
//! interval, until the window ends or shutdown is requested.
//!
//! Invariants:
//! - The dispatcher registers in `outbox_waiters` only while its `LISTEN` is active, when a claim
//!   came back empty, then re-scans once before waiting ([`Dispatcher::burst`]), so a commit that saw
//!   the registration always wakes it; commits that raced the registration are caught by the poll.
//! - A registration wakes it once: the first writer after it takes it away and notifies
//!   ([`crate::outbox::waiters`]), so writers pay one notifying commit per wake-up, never one per
//!   commit, and a dispatcher with a backlog (never registered while claims find work) costs them
//!   nothing. It counts itself unregistered once it has received a notification, registers again at
//!   the next empty claim, refreshes a registration older than [`REFRESH_REGISTRATION`] while idle,
//!   and unregisters when the loop ends. A burst that ended on an empty claim while registered is
//!   followed by a wait, not another claim: the next commit notifies.
//! - While the transport is down (see [`Dispatcher::outage_pause`]) the loop waits for the next probe
//!   (≤ [`super::DispatchConfig::probe_max`]) instead of claiming again at once.
//! - Work comes in bursts of overlapped steps (`overlap`): up to `steps_in_flight` batches between
//!   claim and mark, until a claim finds nothing due.
//! - No claim is issued after the deadline; the loop returns before the window ends (batches in
//!   flight at the deadline finish first — each is short: one batch).
//! - The `LISTEN` connection is opened lazily, kept across drains (never one per invocation) and
//!   reopened when it breaks; without it the loop still works, by polling.

use std::future::Future;
use std::time::Duration;

use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};
use tokio::time::Instant;

use super::overlap::Burst;
use super::{DispatchError, Dispatcher, DrainReport, StepOutcome};
use crate::events::store::OUTBOX_CHANNEL;
use crate::outbox::waiters;

/// Re-register this often while idle, so the registration never looks stale.
const REFRESH_REGISTRATION: Duration = Duration::from_secs(60);

/// The dedicated `LISTEN` connection, its notifications, and whether this dispatcher is registered.
pub(crate) struct Listening {
    client: tokio_postgres::Client,
    pub(super) notifications: UnboundedReceiver<tokio_postgres::Notification>,
    /// When this dispatcher last registered in `outbox_waiters`; `None` before the first and once a
    /// notification said a writer took the registration.
    pub(super) armed: Option<Instant>,
}

impl Listening {
    /// A notification arrived: a writer took the registration. Every notification already queued
    /// is covered by the claim that follows.
    pub(super) fn woken(&mut self) {
        self.armed = None;
        while self.notifications.try_recv().is_ok() {}
    }
}

impl Dispatcher {
    /// Drains for `window` (normally [`super::DispatchConfig::window`]), returning before it ends.
    pub async fn drain(&self, window: Duration) -> DrainReport {
        self.drain_until(Some(Instant::now() + window), std::future::pending()).await
    }

    /// Drains until `shutdown` completes (for a long-running local process such as `clinic dev`).
    pub async fn run_until(&self, shutdown: impl Future<Output = ()>) -> DrainReport {
        self.drain_until(None, shutdown).await
    }

    /// One pass: steps (overlapped) until nothing is due, without waiting for more.
    pub async fn drain_once(&self) -> Result<DrainReport, DispatchError> {
        let mut report = DrainReport::default();
        while let Burst { outcome: StepOutcome::Dispatched(totals), steps, .. } =
            self.burst(None, None).await?
        {
            report.add(steps, &totals);
        }
        crate::metrics::flush_pooled(&self.metrics, &self.pool, true).await;
        Ok(report)
    }

    async fn drain_until(
        &self,
        deadline: Option<Instant>,
        shutdown: impl Future<Output = ()>,
    ) -> DrainReport {
        tokio::pin!(shutdown);
        let mut listening = self.listening.lock().await;
        let mut report = DrainReport::default();
        loop {
            let remaining = match deadline {
                Some(deadline) => match deadline.checked_duration_since(Instant::now()) {
                    Some(remaining) if !remaining.is_zero() => Some(remaining),
                    _ => break,
                },
                None => None,
            };
            let nap = remaining.map_or(self.config.poll_interval, |r| r.min(self.config.poll_interval));
            let wake = if self.ensure_listening(&mut listening).await { listening.as_mut() } else { None };
            match self.burst(deadline, wake).await {
                Ok(Burst { outcome, steps, exhausted, wakeups, registrations }) => {
                    if let StepOutcome::Dispatched(totals) = outcome {
                        report.add(steps, &totals);
                    }
                    report.wakeups += wakeups;
                    report.registrations += registrations;
                    crate::metrics::flush_pooled(&self.metrics, &self.pool, false).await;
                    // The transport is down: wait for the next probe instead of spinning on it.
                    if let Some(pause) = self.outage_pause() {
                        let pause = remaining.map_or(pause, |r| r.min(pause));
                        tokio::select! {
                            _ = tokio::time::sleep(pause) => {}
                            _ = &mut shutdown => break,
                        }
                        continue;
                    }
                    // The deadline ended the burst: the loop's top ends the drain.
                    if !exhausted {
                        continue;
                    }
                }
                Err(error) => {
                    report.errors += 1;
                    tracing::warn!(dispatcher = %self.id, error = %error, "dispatcher step failed; backing off");
                    tokio::select! {
                        _ = tokio::time::sleep(nap) => continue,
                        _ = &mut shutdown => break,
                    }
                }
            }
            // Nothing due (and registered, when listening): refresh an old registration, then wait
            // for the next commit's notification or the poll.
            if let Some(listen) = listening.as_mut() {
                if listen.armed.is_some_and(|at| at.elapsed() >= REFRESH_REGISTRATION)
                    && self.arm(listen).await
                {
                    report.registrations += 1;
                }
            }
            let woken = async {
                match listening.as_mut() {
                    Some(listen) => listen.notifications.recv().await.is_some(),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                received = woken => {
                    if received {
                        report.wakeups += 1;
                        if let Some(listen) = listening.as_mut() {
                            listen.woken();
                        }
                    } else {
                        tracing::warn!(dispatcher = %self.id, "LISTEN connection closed; polling until it is reopened");
                        *listening = None;
                    }
                }
                _ = tokio::time::sleep(nap) => {}
                _ = &mut shutdown => break,
            }
        }
        crate::metrics::flush_pooled(&self.metrics, &self.pool, true).await;
        if listening.as_ref().is_some_and(|listen| listen.armed.is_some()) {
            self.unregister().await;
        }
        report
    }

    /// Opens the `LISTEN` connection when configured and not open; true when listening.
    async fn ensure_listening(&self, listening: &mut Option<Listening>) -> bool {
        let Some(source) = &self.listen else {
            return false;
        };
        if listening.as_ref().is_some_and(|l| !l.client.is_closed()) {
            return true;
        }
        let (sender, notifications) = unbounded_channel();
        let connected = crate::db::connect_single(&source.url, source.ca_file.as_deref(), Some(sender)).await;
        let client = match connected {
            Ok(client) => client,
            Err(error) => {
                tracing::warn!(dispatcher = %self.id, error = %error, "could not open the LISTEN connection");
                *listening = None;
                return false;
            }
        };
        if let Err(error) = client.batch_execute(&format!("LISTEN {OUTBOX_CHANNEL}")).await {
            tracing::warn!(dispatcher = %self.id, error = %error, "LISTEN failed");
            *listening = None;
            return false;
        }
        *listening = Some(Listening { client, notifications, armed: None });
        true
    }

    /// Registers in `outbox_waiters` (or refreshes the registration): the next writer wakes this
    /// dispatcher. False when that failed (the drain then relies on the poll until the next try).
    pub(super) async fn arm(&self, listen: &mut Listening) -> bool {
        let registered = async {
            let client = self.pool.get().await?;
            waiters::register(&client, &self.id).await?;
            Ok::<(), DispatchError>(())
        }
        .await;
        match registered {
            Ok(()) => {
                listen.armed = Some(Instant::now());
                true
            }
            Err(error) => {
                tracing::warn!(dispatcher = %self.id, error = %error, "could not register as idle");
                false
            }
        }
    }

    async fn unregister(&self) {
        let result = async {
            let client = self.pool.get().await?;
            waiters::unregister(&client, &self.id).await?;
            Ok::<(), DispatchError>(())
        }
        .await;
        if let Err(error) = result {
            tracing::warn!(dispatcher = %self.id, error = %error, "could not unregister as idle");
        }
    }
}
