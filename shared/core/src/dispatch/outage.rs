//! The dispatcher's view of a transport outage: how long to wait before the next probe.
//!
//! Invariants: the wait starts at the backoff base, doubles per consecutive step whose every start
//! failed as unavailable, never exceeds the configured cap (≤ 30 s), and resets on the first step in
//! which the transport answered anything.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Consecutive unavailable steps and when the dispatcher may probe again.
#[derive(Debug, Default)]
pub(super) struct Outage {
    state: Mutex<Option<(u32, Instant)>>,
}

impl Outage {
    /// A step failed entirely as unavailable: the wait before the next probe (also the hold delay of
    /// its rows).
    pub(super) fn failed(&self, base: Duration, cap: Duration) -> Duration {
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let failures = state.map_or(0, |(n, _)| n).saturating_add(1);
        let wait =
            base.saturating_mul(1u32 << (failures - 1).min(20)).min(cap).max(Duration::from_millis(10));
        *state = Some((failures, Instant::now() + wait));
        wait
    }

    /// The transport answered: the outage (if any) is over. True when one was in progress.
    pub(super) fn recovered(&self) -> bool {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take().is_some()
    }

    /// The current probe wait for rows held by an unavailable queue while others answer.
    pub(super) fn hold_delay(&self, base: Duration, cap: Duration) -> Duration {
        base.min(cap).max(Duration::from_millis(10))
    }

    /// How long until the next probe, when an outage is in progress.
    pub(super) fn pause(&self) -> Option<Duration> {
        let state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        state.and_then(|(_, until)| until.checked_duration_since(Instant::now())).filter(|d| !d.is_zero())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_doubles_to_the_cap_and_resets_on_recovery() {
        let outage = Outage::default();
        let base = Duration::from_secs(1);
        let cap = Duration::from_secs(30);
        let waits: Vec<u64> = (0..8).map(|_| outage.failed(base, cap).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30, 30]);
        assert!(outage.pause().is_some());
        assert!(outage.recovered());
        assert!(!outage.recovered());
        assert_eq!(outage.failed(base, cap), base);
    }
}
