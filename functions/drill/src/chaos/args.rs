//! The command line of `clinic chaos`, and the derived settings of one run.

use std::time::Duration;

#[derive(Debug, Clone, clap::Args)]
pub struct ChaosArgs {
    /// Bounded run for CI: 40 s of writes under faults (about 1.5–3 minutes in all).
    #[arg(long)]
    pub smoke: bool,
    /// Seconds of writes under faults (default 300; 40 with --smoke).
    #[arg(long)]
    pub duration: Option<u64>,
    /// Concurrent HTTP writers.
    #[arg(long, default_value_t = 8)]
    pub writers: usize,
    /// Seconds PostgreSQL stays down when it is restarted.
    #[arg(long, default_value_t = 3)]
    pub pg_down_secs: u64,
    /// Random seed (default: from the clock); printed, so a run can be repeated.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Keep the temporary folder (cluster data, dispatcher log) instead of removing it.
    #[arg(long)]
    pub keep: bool,
    /// How listeners are started: `sqs` (queues on a moto_server this run starts, reached through a
    /// proxy the run cuts) or `local` (in the dispatcher process; no queue faults).
    #[arg(long, default_value = "sqs", value_parser = ["sqs", "local"])]
    pub transport: String,
    /// Pause of each writer between mutations, in milliseconds (default 0 with `local`, 300 with `sqs`:
    /// moto_server, not the pipeline, is the bottleneck there — one Python process (one core at most)
    /// doing work linear in a queue's length for every message, so the backlog the SQS outage leaves
    /// can tip a busy machine's emulator into answering slower than the run sends; at 100 ms a CI
    /// machine's run never drained. Use 400 or more for runs longer than a few minutes).
    #[arg(long)]
    pub pace_ms: Option<u64>,
    /// Seconds the SQS endpoint stays unreachable (`--transport sqs`; default: 10 × the dispatcher's
    /// retry budget, see [`RetryBudget`], at least 4 s).
    #[arg(long)]
    pub sqs_down_secs: Option<u64>,
    /// Attempts of the dispatcher before a row is `dead` (small, so the SQS outage outlasts the whole
    /// retry budget many times over).
    #[arg(long, default_value_t = 6)]
    pub max_attempts: u32,
    /// Forged and altered messages injected into the listener queues (or, locally, run in-process).
    #[arg(long, default_value_t = 14)]
    pub forged: usize,
    /// Messages deleted from a listener queue after the dispatcher sent them (`--transport sqs`).
    #[arg(long, default_value_t = 3)]
    pub lost: usize,
    /// `lock_timeout` of the listener sessions, in milliseconds; the lock fault holds its lock 3 × this.
    #[arg(long, default_value_t = 1000)]
    pub lock_timeout_ms: u64,
    /// Seconds the custody reconciler waits for a receipt before restarting a start. Short, so the
    /// messages deleted after sending are restarted within the run, but not below the consumers'
    /// visibility timeout (60 s), as in AWS: below it, the reconciler restarts pairs that are only
    /// late, and on a busy machine the repeats slowed the emulator further (10 s became a spiral).
    #[arg(long, default_value_t = 60)]
    pub custody_due_secs: u64,
    /// Overall bound of the wait for the pipeline to settle after the writers stop, in seconds. The
    /// wait ends as soon as everything is settled; it fails early only when nothing progresses for
    /// `--stall-secs`.
    #[arg(long, default_value_t = 900)]
    pub settle_bound_secs: u64,
    /// Seconds without any progress (receipts, settled rows, queue depth) before the wait gives up.
    #[arg(long, default_value_t = 180)]
    pub stall_secs: u64,
}

impl ChaosArgs {
    pub fn duration(&self) -> Duration {
        Duration::from_secs(self.duration.unwrap_or(if self.smoke { 40 } else { 300 }))
    }

    pub fn sqs(&self) -> bool {
        self.transport == "sqs"
    }

    pub fn pace(&self) -> Duration {
        Duration::from_millis(self.pace_ms.unwrap_or(if self.sqs() { 300 } else { 0 }))
    }

    pub fn retry_budget(&self) -> RetryBudget {
        RetryBudget { base: BACKOFF_BASE, cap: BACKOFF_CAP, attempts: self.max_attempts.max(1) }
    }

    /// The SQS outage: `--sqs-down-secs`, or 10 × the retry budget (at least 4 s).
    pub fn sqs_down(&self) -> Duration {
        match self.sqs_down_secs {
            Some(secs) => Duration::from_secs(secs),
            None => (self.retry_budget().total() * 10).max(Duration::from_secs(4)),
        }
    }
}

/// The dispatcher child's retry backoff (`CLINIC_DISPATCH_BACKOFF_BASE_MS` / `_CAP_MS`).
pub const BACKOFF_BASE: Duration = Duration::from_millis(100);
pub const BACKOFF_CAP: Duration = Duration::from_millis(400);

/// How long the dispatcher would keep retrying one row before burying it, were every attempt to fail:
/// the sum of its backoff delays (base × 2ⁿ, capped, without jitter) over its attempts.
#[derive(Debug, Clone, Copy)]
pub struct RetryBudget {
    pub base: Duration,
    pub cap: Duration,
    pub attempts: u32,
}

impl RetryBudget {
    pub fn total(&self) -> Duration {
        (0..self.attempts.saturating_sub(1)).map(|n| (self.base * 2u32.saturating_pow(n)).min(self.cap)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_outage_is_ten_times_the_retry_budget() {
        let budget =
            RetryBudget { base: Duration::from_millis(100), cap: Duration::from_millis(400), attempts: 6 };
        // 100 + 200 + 400 + 400 + 400 ms
        assert_eq!(budget.total(), Duration::from_millis(1500));
        let args = <ChaosArgs as clap::FromArgMatches>::from_arg_matches(
            &<ChaosArgs as clap::Args>::augment_args(clap::Command::new("chaos")).get_matches_from(["chaos"]),
        )
        .unwrap();
        assert_eq!(args.sqs_down(), Duration::from_secs(15));
        assert!(args.sqs_down() >= args.retry_budget().total() * 10);
    }
}
