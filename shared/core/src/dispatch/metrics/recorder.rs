//! The dispatcher's side of the metrics: the [`Recorder`] it holds, and the lag gauges it reads when
//! it flushes.

use std::time::Duration;

use deadpool_postgres::GenericClient;

use super::DispatchMetrics;
use crate::dispatch::{Fate, RowOutcome};
use crate::outbox::lag::read_ages;
use crate::telemetry::emf::MetricsMode;

/// How often a long-running dispatcher emits while it keeps working (it also emits when a drain
/// ends and whenever [`DispatchMetrics::should_flush`]).
pub const EMIT_EVERY: Duration = Duration::from_secs(60);

/// The dispatcher's side of the metrics: it records each step's marks and duration, and flushes
/// (with a fresh oldest-pending age) when asked. Cheap when [`MetricsMode::Off`]: nothing is kept.
#[derive(Debug)]
pub struct Recorder {
    mode: MetricsMode,
    state: std::sync::Mutex<(DispatchMetrics, std::time::Instant)>,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder::new(MetricsMode::Emf)
    }
}

impl Recorder {
    pub fn new(mode: MetricsMode) -> Recorder {
        Recorder { mode, state: std::sync::Mutex::new((DispatchMetrics::new(), std::time::Instant::now())) }
    }

    pub fn mode(&self) -> MetricsMode {
        self.mode
    }

    fn with<T>(&self, f: impl FnOnce(&mut DispatchMetrics, &mut std::time::Instant) -> T) -> Option<T> {
        if self.mode == MetricsMode::Off {
            return None;
        }
        let mut guard = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (metrics, last_emit) = &mut *guard;
        Some(f(metrics, last_emit))
    }

    /// Records one step's outcomes: every row counts as claimed, and as what became of it (fenced
    /// rows, whose mark changed nothing, count as claimed only).
    pub fn record(&self, outcomes: &[RowOutcome]) {
        self.with(|metrics, _| {
            for row in outcomes {
                metrics.claimed(row.event_type);
                match (&row.fate, row.event_type) {
                    (Fate::Dispatched, Some(event_type)) => metrics.dispatched(event_type),
                    (Fate::Retry { .. }, Some(event_type)) => metrics.retried(event_type),
                    (Fate::Dispatched | Fate::Retry { .. }, None) | (Fate::Fenced { .. }, _) => {}
                    (Fate::Held { .. }, event_type) => metrics.held(event_type),
                    (Fate::Dead { .. }, event_type) => metrics.dead(event_type),
                }
            }
        });
    }

    /// Records the duration of one batch (claim, start, mark).
    pub fn batch(&self, elapsed: Duration) {
        self.with(|metrics, _| metrics.batch(elapsed));
    }

    /// True when something was recorded and `force` is set, [`EMIT_EVERY`] has passed since the last
    /// emit, or the batch durations reached the EMF limit: what [`Recorder::flush`] checks first
    /// (cheap; lets a caller skip getting a connection when nothing is due).
    pub fn is_due(&self, force: bool) -> bool {
        self.with(|metrics, last_emit| {
            !metrics.is_empty() && (force || metrics.should_flush() || last_emit.elapsed() >= EMIT_EVERY)
        })
        .unwrap_or(false)
    }

    /// Emits when [`Recorder::is_due`] says so. Reads the lag gauges first (a failure to read them
    /// is logged and the line goes out without them). Returns the lines printed.
    pub async fn flush(&self, client: &impl GenericClient, force: bool) -> usize {
        if !self.is_due(force) {
            return 0;
        }
        let ages = match read_ages(client).await {
            Ok(ages) => Some(ages),
            Err(error) => {
                tracing::warn!(error = %error, "could not read the outbox lag gauges");
                None
            }
        };
        if self.mode() == MetricsMode::Emf {
            crate::operator::pause::emit_metrics(client).await;
        }
        self.with(|metrics, last_emit| {
            if let Some(ages) = ages {
                metrics.ages(ages);
            }
            *last_emit = std::time::Instant::now();
            metrics.emit()
        })
        .unwrap_or(0)
    }

    /// Takes what was recorded so far, leaving the recorder empty: a test entry point (production
    /// emits through [`Recorder::flush`]).
    #[cfg(any(test, feature = "testing"))]
    pub fn take(&self) -> DispatchMetrics {
        self.with(|metrics, _| std::mem::take(metrics)).unwrap_or_default()
    }
}

/// [`Recorder::flush`] on a connection from `pool`, taken only when something is due; a pool error
/// is logged and the counts wait for the next flush.
pub async fn flush_pooled(recorder: &Recorder, pool: &deadpool_postgres::Pool, force: bool) -> usize {
    if !recorder.is_due(force) {
        return 0;
    }
    match pool.get().await {
        Ok(client) => recorder.flush(&client, force).await,
        Err(error) => {
            tracing::warn!(error = %error, "no connection to read the oldest pending age; metrics wait");
            0
        }
    }
}
