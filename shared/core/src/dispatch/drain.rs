//! The drain loop: step until idle, then wait for a wake-up (`LISTEN clinic_outbox`) or the poll
//! interval, until the window ends or shutdown is requested.
//!
//! Invariants:
//! - The dispatcher registers in `outbox_waiters` only after its `LISTEN` is active, then re-scans
//!   once before waiting, so a commit that saw the registration always wakes it; commits that raced
//!   the registration are caught by the poll.
//! - It stays registered while it keeps up (no claim of a burst came back full) and unregisters
//!   after a burst that met a backlog and when the loop ends, so a dispatcher behind costs writers
//!   nothing, while one keeping up pays no re-registration per burst and hears every commit at once,
//!   also those during a burst ([`Dispatcher::burst`]'s `wake`). A burst that ended on an empty claim
//!   while registered is followed by a wait, not another claim: every later commit notifies.
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

/// The dedicated `LISTEN` connection and its notifications.
pub(crate) struct Listening {
    client: tokio_postgres::Client,
    notifications: UnboundedReceiver<tokio_postgres::Notification>,
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
        loop {
            let burst = self.burst(None, None).await?;
            report.claims += burst.claims;
            let StepOutcome::Dispatched(totals) = burst.outcome else { break };
            report.add(burst.steps, &totals);
        }
        crate::dispatch::metrics::flush_pooled(&self.metrics, &self.pool, true).await;
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
        let mut registered: Option<Instant> = None;
        loop {
            let remaining = match deadline {
                Some(deadline) => match deadline.checked_duration_since(Instant::now()) {
                    Some(remaining) if !remaining.is_zero() => Some(remaining),
                    _ => break,
                },
                None => None,
            };
            let nap = remaining.map_or(self.config.poll_interval, |r| r.min(self.config.poll_interval));
            // Registered, the drain hears commits during the burst too (see `burst`).
            let wake = match (registered, listening.as_mut()) {
                (Some(_), Some(listen)) => Some(&mut listen.notifications),
                _ => None,
            };
            let burst = self.burst(deadline, wake).await;
            if let Ok(burst) = &burst {
                report.claims += burst.claims;
            }
            match burst {
                Ok(Burst {
                    outcome: StepOutcome::Dispatched(totals),
                    steps,
                    backlog,
                    exhausted,
                    wakeups,
                    ..
                }) => {
                    report.add(steps, &totals);
                    report.wakeups += wakeups;
                    crate::dispatch::metrics::flush_pooled(&self.metrics, &self.pool, false).await;
                    // A backlog keeps the drain claiming without wake-ups: stop costing writers a
                    // NOTIFY each. A drain keeping up stays registered (see the module docs).
                    if backlog && registered.take().is_some() {
                        self.unregister().await;
                    }
                    // The transport is down: wait for the next probe instead of spinning on it.
                    if let Some(pause) = self.outage_pause() {
                        let pause = remaining.map_or(pause, |r| r.min(pause));
                        tokio::select! {
                            _ = tokio::time::sleep(pause) => {}
                            _ = &mut shutdown => break,
                        }
                        continue;
                    }
                    // Registered throughout a burst that ended on an empty claim: every later
                    // commit notifies, so wait for one instead of claiming again.
                    if !(exhausted && registered.is_some()) {
                        continue;
                    }
                }
                Ok(Burst { outcome: StepOutcome::Idle, .. }) => {
                    crate::dispatch::metrics::flush_pooled(&self.metrics, &self.pool, false).await;
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
            // Idle: make sure we will be woken, then re-scan once before waiting.
            if registered.is_none_or(|at| at.elapsed() >= REFRESH_REGISTRATION)
                && self.ensure_listening(&mut listening).await
            {
                let first = registered.is_none();
                match self.register().await {
                    Ok(()) => {
                        registered = Some(Instant::now());
                        report.registrations += 1;
                    }
                    Err(error) => {
                        tracing::warn!(dispatcher = %self.id, error = %error, "could not register as idle")
                    }
                }
                if first && registered.is_some() {
                    continue;
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
                            while listen.notifications.try_recv().is_ok() {}
                        }
                    } else {
                        tracing::warn!(dispatcher = %self.id, "LISTEN connection closed; polling until it is reopened");
                        *listening = None;
                        registered = None;
                    }
                }
                _ = tokio::time::sleep(nap) => {}
                _ = &mut shutdown => break,
            }
        }
        crate::dispatch::metrics::flush_pooled(&self.metrics, &self.pool, true).await;
        if registered.is_some() {
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
        let connected = crate::db::connect_single_as(
            &source.url,
            source.ca_file.as_deref(),
            source.login.as_ref(),
            Some(sender),
        )
        .await;
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
        *listening = Some(Listening { client, notifications });
        true
    }

    async fn register(&self) -> Result<(), DispatchError> {
        let client = self.pool.get().await?;
        waiters::register(&client, &self.id).await?;
        Ok(())
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
