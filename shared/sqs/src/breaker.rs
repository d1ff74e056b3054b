//! A per-queue circuit breaker: after [`OPEN_AFTER`] consecutive unavailable calls to one queue, the
//! transport stops calling it and answers its starts as unavailable (`sqs_breaker_open`) until a
//! cool-down passes; then one call probes it. The cool-down starts at [`FIRST_COOL_DOWN`] and doubles
//! per failed probe up to [`MAX_COOL_DOWN`]; any answered call closes the breaker.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Consecutive unavailable calls that open the breaker.
pub const OPEN_AFTER: u32 = 3;
/// The first cool-down.
pub const FIRST_COOL_DOWN: Duration = Duration::from_secs(1);
/// The longest cool-down (the longest time between probes of a queue).
pub const MAX_COOL_DOWN: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy)]
struct State {
    failures: u32,
    closed_at: Option<Instant>,
}

/// Breakers of every queue, keyed by URL.
#[derive(Debug, Default)]
pub struct Breakers {
    queues: Mutex<HashMap<String, State>>,
}

impl Breakers {
    /// True when `url` may be called now (closed, or the cool-down ended: this call is the probe).
    pub fn allows(&self, url: &str) -> bool {
        let mut queues = self.queues.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match queues.get_mut(url) {
            Some(State { closed_at: Some(until), .. }) if Instant::now() < *until => false,
            Some(state) if state.closed_at.is_some() => {
                // Half-open: let this probe through; a failure reopens with a longer cool-down.
                state.closed_at = None;
                true
            }
            _ => true,
        }
    }

    /// Records a call's result: `unavailable` when the queue did not answer usefully.
    pub fn record(&self, url: &str, unavailable: bool) {
        let mut queues = self.queues.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !unavailable {
            queues.remove(url);
            return;
        }
        let state = queues.entry(url.to_owned()).or_insert(State { failures: 0, closed_at: None });
        state.failures = state.failures.saturating_add(1);
        if state.failures >= OPEN_AFTER {
            let doublings = (state.failures - OPEN_AFTER).min(10);
            let cool_down = FIRST_COOL_DOWN.saturating_mul(1 << doublings).min(MAX_COOL_DOWN);
            state.closed_at = Some(Instant::now() + cool_down);
            tracing::warn!(
                queue = url,
                failures = state.failures,
                cool_down_ms = cool_down.as_millis() as u64,
                "SQS queue breaker open"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_repeated_failures_and_closes_on_an_answer() {
        let breakers = Breakers::default();
        for _ in 0..OPEN_AFTER - 1 {
            assert!(breakers.allows("q"));
            breakers.record("q", true);
        }
        assert!(breakers.allows("q"));
        breakers.record("q", true);
        assert!(!breakers.allows("q"), "open after {OPEN_AFTER} failures");
        assert!(breakers.allows("other"), "per queue");
        breakers.record("q", false);
        assert!(breakers.allows("q"), "an answer closes it");
    }
}
