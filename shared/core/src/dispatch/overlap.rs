//! Overlapped steps: a drain keeps up to [`super::DispatchConfig::steps_in_flight`] batches between
//! claim and mark, so the next batch is claimed while earlier ones are still starting (an SQS round
//! trip) or being marked.
//!
//! Invariants:
//! - Claims are issued one at a time, in order. Each batch has its own claim token and lease, and
//!   batches are disjoint: a claim takes only due rows, and a claimed row is due again only once its
//!   lease has expired — the earlier batch's mark is then fenced, exactly as between two dispatchers.
//! - At most `steps_in_flight` batches are claimed and not yet marked. Every claimed batch is carried
//!   to its fenced mark, also when the burst stops early (an error, the deadline): a claim is never
//!   dropped between claim and mark, where its rows would wait for the lease.
//! - Order per FIFO group: for listeners the transport delivers in order ([`Transport::ordered`], a
//!   FIFO queue), a batch starts a (listener, resource) group only after every earlier batch in
//!   flight has finished starting that group, so overlap never lets a later event of a group reach
//!   the broker first. (A failed start is retried later, as without overlap.)
//! - No claim is issued after the deadline, nor — after the burst's first — while the transport is
//!   in an outage pause: the drain loop waits for the probe instead.
//! - An empty claim ends the burst once its batches in flight are marked; until then, a NOTIFY on
//!   the drain's `LISTEN` (while it is registered) makes it claim again, so a commit made meanwhile
//!   does not wait for those marks. Each wake-up costs one claim, however many commits it covers.
//! - While the drain is registered, a claim that scanned the whole index and came back short of the
//!   batch ends the burst like an empty one, without the empty claim after it: it took every row
//!   due, and every commit after it notifies. (Rows that become due with time — a backoff or a lease
//!   ending — are the poll's, after an empty claim as after a short one.)
//!
//! [`Transport::ordered`]: super::Transport::ordered

use std::collections::HashSet;
use std::sync::Mutex;

use futures::stream::{FuturesUnordered, StreamExt};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_postgres::Notification;
use ulid::Ulid;

use super::{DispatchError, Dispatcher, StepOutcome, StepReport};
use crate::listeners::Listener;
use crate::outbox::Claim;

/// One FIFO group: a listener's queue and the resource (MessageGroupId).
type Group = (Listener, Ulid);

/// The FIFO groups each batch in flight is still starting, by claim sequence.
#[derive(Debug, Default)]
pub(super) struct StartOrder {
    starting: Mutex<Vec<(u64, HashSet<Group>)>>,
    released: Notify,
}

impl StartOrder {
    /// Registers batch `seq` (in claim order) with the ordered groups it will start.
    fn enter(&self, seq: u64, groups: HashSet<Group>) -> Turn<'_> {
        if !groups.is_empty() {
            self.lock().push((seq, groups));
        }
        Turn { order: self, seq }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(u64, HashSet<Group>)>> {
        self.starting.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// True when an earlier batch is still starting one of `seq`'s groups.
    fn blocked(&self, seq: u64) -> bool {
        let starting = self.lock();
        let Some((_, mine)) = starting.iter().find(|(s, _)| *s == seq) else { return false };
        starting.iter().any(|(s, groups)| *s < seq && !groups.is_disjoint(mine))
    }
}

/// A batch's place in the start order; dropping it (its starts returned, or the batch was abandoned)
/// lets later batches of the same groups go.
pub(super) struct Turn<'a> {
    order: &'a StartOrder,
    seq: u64,
}

impl Turn<'_> {
    /// Waits until no earlier batch is still starting one of this batch's groups.
    pub(super) async fn wait(&self) {
        loop {
            let released = self.order.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            if !self.order.blocked(self.seq) {
                return;
            }
            released.await;
        }
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let mut starting = self.order.lock();
        let before = starting.len();
        starting.retain(|(s, _)| *s != self.seq);
        if starting.len() != before {
            drop(starting);
            self.order.released.notify_waiters();
        }
    }
}

impl Dispatcher {
    /// The ordered groups `claim`'s starts belong to.
    fn groups(&self, claim: &Claim) -> HashSet<Group> {
        let mut groups = HashSet::new();
        for row in &claim.rows {
            for listener in row.to_start() {
                if self.transport.ordered(listener) {
                    groups.insert((listener, row.envelope.resource_id));
                }
            }
        }
        groups
    }

    /// Steps until a claim finds nothing due (or the deadline passes, or the transport is down) with
    /// up to `steps_in_flight` batches in flight (see the module docs). `Idle` when the first claim
    /// found nothing; otherwise the summed report of every batch.
    ///
    /// `wake`: the drain's notifications while it is registered as a waiter. A claim that found
    /// nothing while earlier batches are still in flight does not end the burst for a commit that
    /// notifies meanwhile: the burst claims again at once instead of after its last mark.
    pub(super) async fn burst(
        &self,
        deadline: Option<Instant>,
        mut wake: Option<&mut UnboundedReceiver<Notification>>,
    ) -> Result<Burst, DispatchError> {
        let limit = self.config.steps_in_flight.max(1);
        let (mut steps, mut totals) = (0usize, StepReport::default());
        let (mut backlog, mut wakeups, mut claims) = (false, 0usize, 0usize);
        let mut in_flight = FuturesUnordered::new();
        type Claiming<'a> = futures::future::BoxFuture<'a, (Instant, Result<(Claim, bool), DispatchError>)>;
        let mut claiming: Option<Claiming<'_>> = None;
        let mut exhausted = false;
        let mut first = true;
        let mut seq = 0u64;
        let mut failure: Option<DispatchError> = None;
        loop {
            let may_claim = !exhausted
                && failure.is_none()
                && in_flight.len() < limit
                && deadline.is_none_or(|d| Instant::now() < d)
                && (first || self.outage_pause().is_none());
            if claiming.is_none() && may_claim {
                first = false;
                claims += 1;
                claiming = Some(Box::pin(async {
                    let started = Instant::now();
                    (started, self.claim().await)
                }));
            }
            if claiming.is_none() && in_flight.is_empty() {
                break;
            }
            tokio::select! {
                (started, claimed) = async { claiming.as_mut().expect("guarded").await }, if claiming.is_some() => {
                    claiming = None;
                    match claimed {
                        Ok((claim, _)) if claim.is_empty() => exhausted = true,
                        Ok((claim, took_every_due_row)) => {
                            backlog |= claim.len() >= self.config.batch as usize;
                            // Registered: every later commit notifies (see the module docs).
                            exhausted = took_every_due_row && wake.is_some();
                            seq += 1;
                            let turn = self.order.enter(seq, self.groups(&claim));
                            in_flight.push(async move { self.finish(&claim, started, Some(turn)).await });
                        }
                        Err(error) => failure = Some(error),
                    }
                }
                woken = async { wake.as_mut().expect("guarded").recv().await },
                    if exhausted && failure.is_none() && !in_flight.is_empty() && wake.is_some() => {
                    match woken {
                        Some(_) => {
                            wakeups += 1;
                            // One claim covers every commit notified so far.
                            while wake.as_mut().is_some_and(|w| w.try_recv().is_ok()) {}
                            exhausted = false;
                        }
                        // The LISTEN connection closed: the drain loop notices and reopens it.
                        None => wake = None,
                    }
                }
                Some(finished) = in_flight.next(), if !in_flight.is_empty() => match finished {
                    Ok(report) => {
                        steps += 1;
                        totals.add(&report);
                        crate::dispatch::metrics::flush_pooled(&self.metrics, &self.pool, false).await;
                    }
                    Err(error) => {
                        failure.get_or_insert(error);
                    }
                },
            }
        }
        if let Some(error) = failure {
            return Err(error);
        }
        let outcome = if steps == 0 { StepOutcome::Idle } else { StepOutcome::Dispatched(totals) };
        Ok(Burst { outcome, steps, backlog, exhausted, wakeups, claims })
    }
}

/// What one burst did.
#[derive(Debug)]
pub(super) struct Burst {
    /// `Idle` when the first claim found nothing; otherwise every batch's report, summed.
    pub(super) outcome: StepOutcome,
    pub(super) steps: usize,
    /// Some claim came back full (`batch` rows): there is a backlog.
    pub(super) backlog: bool,
    /// The burst ended on a claim that found nothing due (not on the deadline, an outage or an error).
    pub(super) exhausted: bool,
    /// Notifications that made it claim again.
    pub(super) wakeups: usize,
    /// Claim statements issued, empty ones included.
    pub(super) claims: usize,
}
