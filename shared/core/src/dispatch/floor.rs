//! The claim floor: where a claim starts its scan while a backlog lasts.
//!
//! Every claim and every mark of an outbox row is an update that cannot be HOT (`status` is in the
//! predicate of `event_outbox_due_idx`), so each leaves the row's older entries in that index until
//! VACUUM removes them — at the index's oldest end, exactly where the claim's `ORDER BY available_at`
//! scan starts. Between two autovacuum visits (a minute apart with PostgreSQL's defaults) a busy
//! outbox gathers hundreds of thousands of them, and a claim from the start of the index steps over
//! all of them: measured, ~5 ms per claim with 1.2 million, more than the claim's own work.
//!
//! So, while a backlog lasts, a claim starts at a floor: [`SLACK`] before the oldest row the previous
//! claim took. Rows due before the floor are only those that become visible late: a writer's
//! transaction that commits more than [`SLACK`] after it began (its `available_at` is its start), a
//! claim of another dispatcher that rolled back, an operator's resume (`available_at` back to the
//! event's creation).
//!
//! Invariants:
//! - A floor is used only after a full claim (`batch` rows: there is a backlog). A claim that took
//!   fewer rows clears it, so once the backlog is drained every claim — and so every `drain_once`,
//!   every idle re-scan — scans from the start.
//! - "Nothing due" always comes from a scan of the whole index: a floored claim that finds nothing
//!   is repeated from the start at once (the dispatcher's `claim`), so an empty claim still ends a
//!   burst and idles the drain only when no row at all is due.
//! - At least every [`super::DispatchConfig::full_scan_every`] (1 s) a claim scans from the start
//!   whatever the floor: a row due before the floor waits at most that long, and only while a
//!   backlog lasts, when every row waits its turn anyway.
//! - No floor when the transport delivers some listener in order (a FIFO queue,
//!   [`super::Transport::ordered`]): a row due before the floor may be an older event of a resource
//!   whose newer event is above it, and claims must then take them oldest first.
//! - The floor only narrows which due rows a claim may take; leases and fencing are the claim
//!   statement's as before.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

/// How far before the previous claim's oldest row the next claim starts.
pub const SLACK: Duration = Duration::from_secs(1);

#[derive(Debug, Default)]
pub(super) struct ClaimFloor {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Set after a full claim; cleared by a claim that took fewer rows.
    floor: Option<DateTime<Utc>>,
    /// When a claim last scanned from the start.
    full_scan_at: Option<Instant>,
}

impl ClaimFloor {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The floor for the claim about to be issued (`None`: scan from the start, noted as such), with
    /// a scan from the start at least every `full_scan_every`.
    pub(super) fn next(&self, full_scan_every: Duration) -> Option<DateTime<Utc>> {
        self.next_at(Instant::now(), full_scan_every)
    }

    fn next_at(&self, now: Instant, full_scan_every: Duration) -> Option<DateTime<Utc>> {
        let mut state = self.lock();
        let recent_full_scan =
            state.full_scan_at.is_some_and(|at| now.saturating_duration_since(at) < full_scan_every);
        match state.floor {
            Some(floor) if recent_full_scan => Some(floor),
            _ => {
                state.full_scan_at = Some(now);
                None
            }
        }
    }

    /// After a claim of at most `batch` rows that took `taken`, the oldest of them due at `oldest`.
    pub(super) fn claimed(&self, batch: i64, taken: usize, oldest: Option<DateTime<Utc>>) {
        let slack = chrono::Duration::from_std(SLACK).expect("a small constant");
        self.lock().floor = match oldest {
            Some(oldest) if taken as i64 >= batch => Some(oldest - slack),
            _ => None,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floors_only_after_a_full_claim_and_scans_from_the_start_every_second() {
        let every = Duration::from_secs(1);
        let floor = ClaimFloor::default();
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        assert_eq!(floor.next_at(at(0), every), None, "the first claim scans from the start");
        let oldest = Utc::now();
        let expected = Some(oldest - chrono::Duration::seconds(1));
        floor.claimed(100, 100, Some(oldest));
        assert_eq!(floor.next_at(at(10), every), expected);
        assert_eq!(floor.next_at(at(1000), every), None, "a full scan is due");
        assert_eq!(floor.next_at(at(1010), every), expected, "then the floor again");
        floor.claimed(100, 99, Some(oldest));
        assert_eq!(floor.next_at(at(1020), every), None, "a claim that was not full ends the backlog");
        floor.claimed(100, 0, None);
        assert_eq!(floor.next_at(at(1030), every), None);
    }
}
