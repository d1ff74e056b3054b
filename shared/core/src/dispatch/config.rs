//! Dispatcher settings, read once from the environment with documented defaults.

use std::time::Duration;

use crate::config::{ConfigError, Env};
use crate::lease::{Backoff, Jitter, RetryPolicy};

/// How a dispatcher claims, retries and drains. Every field has an environment variable (named on
/// the field) and a default ([`DispatchConfig::default`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DispatchConfig {
    /// `CLINIC_DISPATCH_BATCH` (default 100, 1–1000): rows claimed per step.
    pub batch: i64,
    /// `CLINIC_DISPATCH_LEASE_MS` (default 30000): how long a claim is exclusive. A dispatcher that
    /// has not marked its rows by then is presumed dead and the rows are claimed again.
    pub lease: Duration,
    /// `CLINIC_DISPATCH_BACKOFF_BASE_MS` (default 1000), `CLINIC_DISPATCH_BACKOFF_CAP_MS` (default
    /// 300000) and `CLINIC_DISPATCH_JITTER` (`equal`, the default, or `full`): the retry delay after
    /// failed attempt n is `min(cap, base · 2^(n-1))`, jittered.
    pub backoff: Backoff,
    /// `CLINIC_DISPATCH_MAX_ATTEMPTS` (default 10, 1–1000): the attempt that fails at this count turns
    /// the row `dead`.
    pub max_attempts: i32,
    /// `CLINIC_DISPATCH_WINDOW_SECS` (default 50, 1–890): how long one scheduled invocation keeps
    /// draining. Keep it about 10 s below the function timeout.
    pub window: Duration,
    /// `CLINIC_DISPATCH_POLL_MS` (default 500, 10–60000): the safety-net poll while idle, for
    /// wake-ups that were not sent or not received.
    pub poll_interval: Duration,
    /// `CLINIC_DISPATCH_PROBE_MAX_MS` (default 30000, 10–30000): the longest wait between probes of
    /// a transport that is down (every start of a step failed as unavailable). The wait starts at the
    /// backoff base and doubles per failed probe up to this; rows keep their attempts meanwhile.
    pub probe_max: Duration,
    /// `CLINIC_DISPATCH_UNKNOWN_RETRY_MS` (default 30000, 100–3600000): how long a row naming an
    /// event type or listener this build does not know (a newer build's, mid-deploy) is held before
    /// it is claimed again. Such rows never spend attempts and are never buried.
    pub unknown_retry: Duration,
    /// `CLINIC_DISPATCH_STEPS_IN_FLIGHT` (default 2, 1–16): batches a drain keeps between claim and
    /// mark at once. The drain claims the next batch while earlier ones are still starting or being
    /// marked, so a transport's latency (an SQS round trip) is not idle time; claims stay one at a
    /// time, each batch keeps its own claim token and lease, and starts of one FIFO group never
    /// overtake each other (see `dispatch::overlap`). Each batch in its mark holds one connection:
    /// keep `CLINIC_DB_POOL_SIZE` at least this plus one (the dispatcher Lambda's default is).
    /// 1 is the strict claim → start → mark sequence.
    pub steps_in_flight: usize,
    /// `CLINIC_DISPATCH_FULL_SCAN_MS` (default 1000, 10–60000): while a backlog lasts, claims start
    /// their scan at a floor just before the previous claim's oldest row (see `dispatch::floor`);
    /// at least this often one scans from the start, so a row due before the floor (a late commit,
    /// a resumed listener's rows) waits at most this long.
    pub full_scan_every: Duration,
}

impl Default for DispatchConfig {
    fn default() -> Self {
        Self {
            batch: 100,
            lease: Duration::from_secs(30),
            backoff: Backoff {
                base: Duration::from_secs(1),
                cap: Duration::from_secs(300),
                jitter: Jitter::Equal,
            },
            max_attempts: 10,
            window: Duration::from_secs(50),
            poll_interval: Duration::from_millis(500),
            probe_max: Duration::from_secs(30),
            unknown_retry: Duration::from_secs(30),
            steps_in_flight: 2,
            full_scan_every: Duration::from_secs(1),
        }
    }
}

impl DispatchConfig {
    /// The lease queue's retry policy for outbox rows: this backoff up to `max_attempts`.
    pub fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::backoff(self.backoff, self.max_attempts)
    }

    /// Reads every `CLINIC_DISPATCH_*` variable; unset ones take their default.
    pub fn read(env: &Env) -> Result<Self, ConfigError> {
        let defaults = Self::default();
        let config = Self {
            batch: env.bounded("CLINIC_DISPATCH_BATCH", defaults.batch as u64, 1..=1000)? as i64,
            lease: env.millis("CLINIC_DISPATCH_LEASE_MS", 30_000, 100..=3_600_000)?,
            backoff: Backoff {
                base: env.millis("CLINIC_DISPATCH_BACKOFF_BASE_MS", 1_000, 1..=3_600_000)?,
                cap: env.millis("CLINIC_DISPATCH_BACKOFF_CAP_MS", 300_000, 1..=86_400_000)?,
                jitter: env.parsed("CLINIC_DISPATCH_JITTER", Jitter::Equal)?,
            },
            max_attempts: env.bounded("CLINIC_DISPATCH_MAX_ATTEMPTS", 10, 1..=1000)? as i32,
            window: Duration::from_secs(env.bounded("CLINIC_DISPATCH_WINDOW_SECS", 50, 1..=890)?),
            poll_interval: env.millis("CLINIC_DISPATCH_POLL_MS", 500, 10..=60_000)?,
            probe_max: env.millis("CLINIC_DISPATCH_PROBE_MAX_MS", 30_000, 10..=30_000)?,
            unknown_retry: env.millis("CLINIC_DISPATCH_UNKNOWN_RETRY_MS", 30_000, 100..=3_600_000)?,
            steps_in_flight: env.bounded(
                "CLINIC_DISPATCH_STEPS_IN_FLIGHT",
                defaults.steps_in_flight as u64,
                1..=16,
            )? as usize,
            full_scan_every: env.millis("CLINIC_DISPATCH_FULL_SCAN_MS", 1_000, 10..=60_000)?,
        };
        if config.backoff.cap < config.backoff.base {
            return Err(ConfigError::Invalid {
                name: "CLINIC_DISPATCH_BACKOFF_CAP_MS",
                value: config.backoff.cap.as_millis().to_string(),
                message: "must not be below CLINIC_DISPATCH_BACKOFF_BASE_MS".into(),
            });
        }
        Ok(config)
    }
}
