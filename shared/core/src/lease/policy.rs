//! The retry policy of a lease queue: how long a failed row waits before its next attempt
//! (exponential backoff with jitter, or a fixed schedule), and the one attempt ceiling.
//!
//! Invariants:
//! - [`exhausted`] is the only ceiling test in Rust; the SQL one is [`super::Queue::exhausted`].
//! - A retryable failure of attempt `n` retries while `n` is below the ceiling and is `dead` at it;
//!   a permanent failure is `dead` whatever the count. A fixed schedule's ceiling is one more than
//!   its steps, so every attempt below the ceiling has its step.

use std::time::Duration;

use super::Backoff;

/// Whether `attempts` (including the one that just ran or the one about to run) reached `ceiling`.
pub fn exhausted(attempts: i32, ceiling: i32) -> bool {
    attempts >= ceiling
}

/// How the delay before the next attempt grows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delays {
    /// `min(cap, base · 2^(n-1))`, jittered (the outbox, the notifications).
    Exponential(Backoff),
    /// The delay after failed attempt `n` is step `n - 1` (the webhook deliveries).
    Schedule(&'static [Duration]),
}

/// What becomes of a row after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Due again after this delay.
    Retry(Duration),
    /// The ceiling was reached or the failure is permanent.
    Dead,
}

/// Delays and the attempt ceiling of one queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    pub delays: Delays,
    /// Attempts in all; the attempt that fails at this count is `dead`.
    pub ceiling: i32,
}

impl RetryPolicy {
    /// Exponential backoff up to `ceiling` attempts.
    pub const fn backoff(backoff: Backoff, ceiling: i32) -> Self {
        RetryPolicy { delays: Delays::Exponential(backoff), ceiling }
    }

    /// A fixed schedule: one attempt, then one per step.
    pub const fn schedule(steps: &'static [Duration]) -> Self {
        RetryPolicy { delays: Delays::Schedule(steps), ceiling: steps.len() as i32 + 1 }
    }

    /// The verdict on failed attempt number `attempts` (1-based).
    pub fn after_failure(&self, attempts: i32, retryable: bool) -> Verdict {
        if !retryable || exhausted(attempts, self.ceiling) {
            return Verdict::Dead;
        }
        match self.delays {
            Delays::Exponential(backoff) => Verdict::Retry(backoff.delay(attempts)),
            Delays::Schedule(steps) => usize::try_from(attempts - 1)
                .ok()
                .and_then(|i| steps.get(i))
                .map_or(Verdict::Dead, |step| Verdict::Retry(*step)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::Jitter;

    const STEPS: [Duration; 2] = [Duration::from_secs(5), Duration::from_secs(60)];

    #[test]
    fn a_schedule_retries_on_each_step_then_dies() {
        let policy = RetryPolicy::schedule(&STEPS);
        assert_eq!(policy.ceiling, 3);
        assert_eq!(policy.after_failure(1, true), Verdict::Retry(Duration::from_secs(5)));
        assert_eq!(policy.after_failure(2, true), Verdict::Retry(Duration::from_secs(60)));
        assert_eq!(policy.after_failure(3, true), Verdict::Dead);
        assert_eq!(policy.after_failure(1, false), Verdict::Dead);
    }

    #[test]
    fn backoff_retries_below_the_ceiling_only() {
        let backoff =
            Backoff { base: Duration::from_secs(1), cap: Duration::from_secs(8), jitter: Jitter::Equal };
        let policy = RetryPolicy::backoff(backoff, 4);
        for attempt in 1..4 {
            let Verdict::Retry(delay) = policy.after_failure(attempt, true) else { panic!("{attempt}") };
            assert!(delay <= backoff.nominal(attempt) && delay >= backoff.nominal(attempt) / 2);
        }
        assert_eq!(policy.after_failure(4, true), Verdict::Dead);
        assert_eq!(policy.after_failure(9, true), Verdict::Dead);
        assert!(exhausted(4, 4) && !exhausted(3, 4));
    }
}
