//! Throughput of the outbox itself (no-op transport), ignored by default:
//! `cargo test --release -p clinic-core --test dispatch_bench -- --ignored --nocapture`.
//! `BENCH_EVENTS` (default 100000) and `BENCH_DISPATCHERS` (default 4) tune it.

mod dispatch_support;

use std::sync::Arc;
use std::time::Instant;

use clinic_core::dispatch::{NoopTransport, Transport};
use dispatch_support::{fast_config, Fixture};

#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
#[ignore = "benchmark"]
async fn noop_dispatch_throughput() {
    let events: i64 = std::env::var("BENCH_EVENTS").ok().and_then(|v| v.parse().ok()).unwrap_or(100_000);
    let dispatchers: usize =
        std::env::var("BENCH_DISPATCHERS").ok().and_then(|v| v.parse().ok()).unwrap_or(4);
    // No test subscriber: lifecycle facts cost what they cost in production with logging filtered
    // to INFO (`BENCH_LOG=1` installs the testkit's TRACE subscriber instead).
    let fx = if std::env::var("BENCH_LOG").is_ok() { Fixture::new().await } else { Fixture::quiet().await };
    let client = fx.db.client().await;
    client
        .execute(
            "WITH e AS (
                 INSERT INTO events (id, workspace_id, type, version, actor_kind, occurred_at, resource_type,
                                     resource_id, resource_version, correlation_id, causation_id)
                 SELECT gen_random_uuid(), $1, 'appointment.created', 1, 'system', now(), 'appointment',
                        gen_random_uuid(), 1, gen_random_uuid(), gen_random_uuid()
                 FROM generate_series(1, $2::bigint)
                 RETURNING id, recorded_at)
             INSERT INTO event_outbox (event_id, available_at, created_at, updated_at)
             SELECT id, recorded_at, recorded_at, recorded_at FROM e",
            &[&fx.workspace, &events],
        )
        .await
        .unwrap();
    client.execute("VACUUM ANALYZE event_outbox", &[]).await.unwrap();
    let transport: Arc<dyn Transport> = Arc::new(NoopTransport);
    let started = Instant::now();
    let runs = (0..dispatchers).map(|_| {
        let dispatcher = fx.dispatcher(transport.clone(), fast_config());
        tokio::spawn(async move { dispatcher.drain_once().await.unwrap() })
    });
    let mut dispatched = 0;
    for run in futures::future::join_all(runs).await {
        dispatched += run.unwrap().totals.dispatched;
    }
    let elapsed = started.elapsed();
    assert_eq!(dispatched as i64, events);
    eprintln!(
        "dispatched {dispatched} events with {dispatchers} dispatchers (batch 100, no-op transport) in {elapsed:?}: {:.0} events/s",
        dispatched as f64 / elapsed.as_secs_f64()
    );
}
