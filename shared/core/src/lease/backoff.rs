//! Retry delays: exponential in the attempt number, capped, with jitter so that rows failing together
//! do not retry together.

use std::time::Duration;

use rand::Rng;

/// How randomness is applied to the exponential delay `d = min(cap, base · 2^(attempt-1))`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Jitter {
    /// Uniform in `[0, d]`: the widest spread, but a later delay can be shorter than an earlier one.
    Full,
    /// Uniform in `[d/2, d]`: spreads retries while every delay stays at least half its nominal
    /// value, so delays keep growing with the attempt number (the default).
    Equal,
}

impl std::str::FromStr for Jitter {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "full" => Ok(Jitter::Full),
            "equal" => Ok(Jitter::Equal),
            _ => Err("expected `full` or `equal`".into()),
        }
    }
}

/// Bounded, jittered exponential backoff.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub base: Duration,
    pub cap: Duration,
    pub jitter: Jitter,
}

impl Backoff {
    /// The nominal (un-jittered) delay after failed attempt number `attempt` (1-based).
    pub fn nominal(&self, attempt: i32) -> Duration {
        let exponent = attempt.saturating_sub(1).clamp(0, 30) as u32;
        self.base.saturating_mul(1u32 << exponent).min(self.cap)
    }

    /// The jittered delay after failed attempt number `attempt` (1-based).
    pub fn delay(&self, attempt: i32) -> Duration {
        self.jittered(self.nominal(attempt))
    }

    /// `nominal` with this backoff's jitter applied (for delays not derived from an attempt count).
    pub fn jittered(&self, nominal: Duration) -> Duration {
        let nanos = nominal.as_nanos().min(u64::MAX as u128) as u64;
        let low = match self.jitter {
            Jitter::Full => 0,
            Jitter::Equal => nanos / 2,
        };
        if nanos == 0 {
            return Duration::ZERO;
        }
        Duration::from_nanos(rand::rng().random_range(low..=nanos))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nominal_delay_doubles_up_to_the_cap() {
        let backoff =
            Backoff { base: Duration::from_secs(1), cap: Duration::from_secs(60), jitter: Jitter::Equal };
        let delays: Vec<u64> = (1..=9).map(|a| backoff.nominal(a).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(backoff.nominal(1_000), Duration::from_secs(60));
    }

    #[test]
    fn equal_jitter_stays_within_half_and_whole() {
        let backoff =
            Backoff { base: Duration::from_millis(100), cap: Duration::from_secs(10), jitter: Jitter::Equal };
        for attempt in 1..12 {
            let nominal = backoff.nominal(attempt);
            for _ in 0..50 {
                let delay = backoff.delay(attempt);
                assert!(delay <= nominal && delay >= nominal / 2, "{delay:?} vs {nominal:?}");
            }
        }
    }

    #[test]
    fn full_jitter_never_exceeds_the_cap() {
        let backoff =
            Backoff { base: Duration::from_millis(100), cap: Duration::from_secs(1), jitter: Jitter::Full };
        for _ in 0..200 {
            assert!(backoff.delay(20) <= Duration::from_secs(1));
        }
    }
}
