//! The dispatcher: claims due outbox rows and starts their listener workflows through a transport.
//!
//! Invariants:
//! - One [`Dispatcher::step`] is three short units of work — claim (one statement), start (the
//!   transport call, no transaction or connection held), mark (one statement for a fully successful
//!   batch) — so no transaction is ever open across a network call and the success path makes no
//!   per-event round trips.
//! - Every mark is fenced by the claim token (see [`crate::outbox`]); a step whose claim was taken
//!   over reports the rows as `fenced` and changes nothing.
//! - A crash anywhere loses nothing: unmarked rows are claimed again when their lease ends and
//!   listener receipts absorb the duplicate starts.
//! - Step outcomes are values ([`StepOutcome`]) so tests drain deterministically, without sleeping.
//! - [`Dispatcher::step`]'s mark computes one [`RowOutcome`] per claimed row; the step report, the
//!   metrics and the lifecycle facts ([`lifecycle`]) are folds over those outcomes.
//! - Outages bury nothing: a row whose starts all failed as *unavailable* (the transport did not
//!   answer, throttled, or a breaker is open) is held without spending its attempt; when a whole step
//!   failed that way the dispatcher waits before probing again (doubling, at most
//!   [`DispatchConfig::probe_max`]) and resumes at full speed once the transport answers. Only
//!   per-message rejections and permanent errors count toward `dead`.
//! - Deploy-safe: a row whose event type or `only_listeners` this build does not know is held for
//!   [`DispatchConfig::unknown_retry`] (logged), never buried.
//! - A drain overlaps steps (module `overlap`): up to [`DispatchConfig::steps_in_flight`] batches
//!   between claim and mark, claims one at a time, each batch fenced by its own token, FIFO groups
//!   started in claim order.
//! - While a backlog lasts, a claim starts its scan at a floor just before the previous claim's
//!   oldest row instead of at the oldest dead index entries (module `floor`); at least once a second,
//!   and whenever the previous claim was not full, it scans from the start (always, when the
//!   transport delivers some listener in order).
//!
//! Wiring (e.g. `clinic dev`): build a [`Dispatcher`] with a [`LocalTransport`] and run
//! [`Dispatcher::run_until`] in a background task; in Lambda, [`Dispatcher::drain`] for the window.

mod config;
mod dispatcher;
mod drain;
mod floor;
pub mod lifecycle;
pub mod metrics;
mod outage;
mod outcome;
mod overlap;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
mod transport;

pub use config::DispatchConfig;
pub use dispatcher::Dispatcher;
pub use outcome::{Fate, RowOutcome};
pub use transport::{LocalTransport, Start, StartError, StartResult, Transport};

use serde::Serialize;

/// Where the dispatcher's dedicated `LISTEN` connection goes.
#[derive(Debug, Clone)]
pub struct ListenSource {
    pub url: String,
    pub ca_file: Option<String>,
    /// The login when it is not in `url` (AWS: read from a secret; see [`crate::db::login`]).
    pub login: Option<crate::db::DbLogin>,
}

/// What one step did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepOutcome {
    /// Nothing was due.
    Idle,
    /// A batch was claimed and marked.
    Dispatched(StepReport),
}

/// Counts of one step (or, summed, of a drain).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StepReport {
    /// Rows claimed (readable or not).
    pub claimed: usize,
    /// Of those, rows whose previous claim's lease had expired.
    pub lease_expired: usize,
    /// Listener starts that succeeded.
    pub started: usize,
    /// Listener starts that failed.
    pub failed_starts: usize,
    /// Rows marked `dispatched`.
    pub dispatched: usize,
    /// Rows marked `retry`.
    pub retried: usize,
    /// Rows marked `dead` (including rows buried at claim time).
    pub dead: usize,
    /// Rows kept live without spending an attempt (transport unavailable, or unknown to this build).
    pub held: usize,
    /// Rows whose mark changed nothing because another dispatcher had taken the claim over.
    pub fenced: usize,
}

/// Totals of a drain.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DrainReport {
    /// Steps that found work.
    pub steps: usize,
    #[serde(flatten)]
    pub totals: StepReport,
    /// Wake-ups received on `LISTEN` (while idle, or during a burst that had found nothing more).
    pub wakeups: usize,
    /// Claim statements issued, empty ones included.
    pub claims: usize,
    /// Registrations in `outbox_waiters`: the first, each refresh, and each after a backlog (a
    /// dispatcher keeping up stays registered).
    pub registrations: usize,
    /// Steps that failed (database unavailable); the loop backed off and went on.
    pub errors: usize,
}

impl StepReport {
    /// Adds `step`'s counts to these.
    pub fn add(&mut self, step: &StepReport) {
        let t = self;
        t.claimed += step.claimed;
        t.lease_expired += step.lease_expired;
        t.started += step.started;
        t.failed_starts += step.failed_starts;
        t.dispatched += step.dispatched;
        t.retried += step.retried;
        t.dead += step.dead;
        t.held += step.held;
        t.fenced += step.fenced;
    }
}

impl DrainReport {
    /// Adds `steps` steps whose summed counts are `totals`.
    fn add(&mut self, steps: usize, totals: &StepReport) {
        self.steps += steps;
        self.totals.add(totals);
    }
}

/// Why a step failed (the database; transports report per start instead).
#[derive(Debug, thiserror::Error)]
pub enum DispatchError {
    #[error("database unavailable: {0}")]
    Pool(#[from] deadpool_postgres::PoolError),
    #[error("database error: {0}")]
    Db(#[from] tokio_postgres::Error),
}
