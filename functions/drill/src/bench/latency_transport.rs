//! A broker with latency: [`LatencyTransport`] wraps the no-op transport so that every call it stands
//! for takes a fixed time, and [`run`] drains the dispatch section's pending events through it for each
//! `--transport-latency-ms` value, beside the raw loop and the analytical ceiling for that latency.
//!
//! Invariants:
//! - A step's starts are cut into calls of at most [`CALL_ENTRIES`] (SendMessageBatch's limit); every
//!   call sleeps the latency and all calls of one `start` run concurrently, as the SQS transport sends
//!   them — so a step costs the latency once, not once per call. Every start is accepted.
//! - The ceiling for latency N is `batch ÷ (claim + N + mark)` per step in flight, where claim + mark
//!   is the raw loop's own time per step in the same run (its elapsed time ÷ its steps).
//! - Every drain starts from the same rows reset to `pending` (the dispatch section's reset), so the
//!   figures of the different latencies compare like with like.
//! - Each latency above 0 is drained with the configured steps in flight and again with each of
//!   [`DEEP_STEPS`] above it (what a deployment facing that broker latency would set,
//!   `CLINIC_DISPATCH_STEPS_IN_FLIGHT`); every row is printed, the target is judged on each.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use clinic_core::dispatch::testing::NoopTransport;
use clinic_core::dispatch::{DispatchConfig, Dispatcher, Start, StartResult, Transport};
use clinic_core::telemetry::emf::MetricsMode;
use tokio::time::Instant;
use tokio_postgres::Client;

use super::db::BenchConnections as _;
use super::report::{ratio, thousands, Row};
use clinic_testkit::TestDb;

/// Steps in flight of the further drains of each latency: 8 hide 5 ms behind the claims, 20 ms
/// needs 16 (the most `CLINIC_DISPATCH_STEPS_IN_FLIGHT` allows).
pub const DEEP_STEPS: [usize; 2] = [8, 16];

/// Entries per call (SendMessageBatch takes at most 10).
pub const CALL_ENTRIES: usize = 10;

/// The no-op transport, with every call taking `latency`.
#[derive(Debug, Clone, Copy)]
pub struct LatencyTransport {
    latency: Duration,
}

impl LatencyTransport {
    pub fn new(latency: Duration) -> Self {
        Self { latency }
    }
}

#[async_trait]
impl Transport for LatencyTransport {
    fn name(&self) -> &'static str {
        "latency"
    }

    async fn start(&self, starts: &[Start<'_>]) -> Vec<StartResult> {
        let calls = starts.chunks(CALL_ENTRIES).map(|call| async move {
            // A zero-length sleep still waits for the timer's next turn (about 1 ms): skip it.
            if !self.latency.is_zero() {
                tokio::time::sleep(self.latency).await;
            }
            NoopTransport.start(call).await
        });
        futures::future::join_all(calls).await.into_iter().flatten().collect()
    }
}

/// What the dispatch section measured before this runs, on the same rows.
#[derive(Debug, Clone, Copy)]
pub struct Baseline {
    /// The real dispatcher with the no-op transport (row 2a).
    pub noop_per_second: f64,
    /// The raw claim-then-mark loop: events per second and seconds per step.
    pub raw_per_second: f64,
    pub raw_step_seconds: f64,
}

/// One drain of every pending row of `workspace` through a [`LatencyTransport`] per latency: one row
/// each, for the caller to print after its own.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    db: &TestDb,
    owner: &Client,
    workspace: uuid::Uuid,
    events: i64,
    config: DispatchConfig,
    latencies_ms: &[u64],
    baseline: Baseline,
) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::with_capacity(2 * latencies_ms.len());
    for &latency_ms in latencies_ms {
        let mut depths = vec![config.steps_in_flight];
        if latency_ms > 0 {
            depths.extend(DEEP_STEPS.into_iter().filter(|deep| *deep > config.steps_in_flight));
        }
        for steps_in_flight in depths {
            let config = DispatchConfig { steps_in_flight, ..config };
            super::dispatch::reset(owner, workspace, events).await?;
            rows.push(row(db, config, events, latency_ms, baseline).await?);
        }
    }
    Ok(rows)
}

/// One drain through a `latency_ms` transport, as a row of the table.
async fn row(
    db: &TestDb,
    config: DispatchConfig,
    events: i64,
    latency_ms: u64,
    baseline: Baseline,
) -> anyhow::Result<Row> {
    let in_flight = config.steps_in_flight;
    let latency = Duration::from_millis(latency_ms);
    let (dispatched, elapsed) = drain(db, config, latency).await?;
    anyhow::ensure!(
        dispatched == events as u64,
        "the {latency_ms} ms drain ({in_flight} steps in flight) dispatched {dispatched} of {events} events"
    );
    let rate = dispatched as f64 / elapsed.as_secs_f64().max(1e-9);
    eprintln!(
        "bench: dispatch: {latency_ms} ms transport, {in_flight} steps in flight: {} events/s",
        thousands(rate)
    );
    let ceiling = config.batch as f64 * in_flight as f64
        / (baseline.raw_step_seconds + latency.as_secs_f64()).max(1e-9);
    let (noop_ratio, noop_ratio_text) = ratio(rate, baseline.noop_per_second);
    Ok(Row {
        measure: format!(
            "2e. Dispatch with a {latency_ms} ms transport (every SendMessageBatch-sized call of a step takes \
             {latency_ms} ms, all concurrent), batch {}, {in_flight} step(s) in flight",
            config.batch
        ),
        figure: format!(
            "{} events/s ({} of the ceiling batch ÷ (claim + {latency_ms} ms + mark) × steps in flight = {} events/s; {} of the raw loop's {})",
            thousands(rate),
            ratio(rate, ceiling).1,
            thousands(ceiling),
            ratio(rate, baseline.raw_per_second).1,
            thousands(baseline.raw_per_second)
        ),
        baseline: format!("2a (no-op transport): {} events/s", thousands(baseline.noop_per_second)),
        ratio: noop_ratio_text,
        target: if latency_ms == 0 { "— (the wrapper's own cost)".into() } else { "≥ 0.8× no-op".into() },
        met: (latency_ms > 0).then_some(noop_ratio >= 0.8),
    })
}

/// The real dispatcher through a [`LatencyTransport`], one pass until idle: (dispatched, elapsed).
async fn drain(db: &TestDb, config: DispatchConfig, latency: Duration) -> anyhow::Result<(u64, Duration)> {
    // One connection per batch in flight plus the claim's (as the dispatcher Lambda sizes its pool).
    let pool = db.app_pool(config.steps_in_flight + 1)?;
    drop(pool.get().await?); // connected before the clock starts
    let transport: Arc<dyn Transport> = Arc::new(LatencyTransport::new(latency));
    let dispatcher = Dispatcher::new(pool, transport, config).with_metrics(MetricsMode::Off);
    let started = Instant::now();
    let report = dispatcher.drain_once().await?;
    Ok((report.totals.dispatched as u64, started.elapsed()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clinic_core::events::{Envelope, EventType};
    use clinic_core::listeners::Listener;

    #[tokio::test]
    async fn every_start_is_accepted_and_a_step_costs_the_latency_once() {
        let envelope = Envelope::sample(EventType::AppointmentCreated);
        let starts: Vec<Start<'_>> =
            (0..35).map(|_| Start { envelope: &envelope, listener: Listener::ALL[0] }).collect();
        let transport = LatencyTransport::new(Duration::from_millis(50));
        let started = std::time::Instant::now();
        let results = transport.start(&starts).await;
        let elapsed = started.elapsed();
        assert_eq!(results.len(), 35);
        assert!(results.iter().all(|r| r.is_ok()));
        assert!(elapsed >= Duration::from_millis(50), "{elapsed:?}");
        // Four calls of 50 ms run concurrently: far less than 4 × 50 ms even on a busy machine.
        assert!(elapsed < Duration::from_millis(190), "{elapsed:?}");
    }
}
