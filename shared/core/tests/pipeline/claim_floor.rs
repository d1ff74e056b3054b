//! The claim floor (dispatch/floor.rs) against real PostgreSQL: while a backlog lasts a claim skips
//! rows due before the floor, and a drain still leaves none of them behind.

use std::sync::Arc;
use std::time::Duration;

use super::support::{drain, step, Fixture};
use async_trait::async_trait;
use clinic_core::dispatch::testing::{fast_config, NoopTransport};
use clinic_core::dispatch::{DispatchConfig, Start, StartResult, Transport};
use clinic_core::events::Envelope;
use clinic_core::listeners::Listener;

/// The no-op transport, as a FIFO queue: it delivers every listener in order per resource.
struct OrderedNoop;

#[async_trait]
impl Transport for OrderedNoop {
    fn name(&self) -> &'static str {
        "ordered-noop"
    }

    async fn start(&self, starts: &[Start<'_>]) -> Vec<StartResult> {
        NoopTransport.start(starts).await
    }

    fn ordered(&self, _listener: Listener) -> bool {
        true
    }
}

/// No scan from the start for a minute unless a claim comes back short; one batch at a time.
fn floored() -> DispatchConfig {
    DispatchConfig { batch: 2, steps_in_flight: 1, full_scan_every: Duration::from_secs(60), ..fast_config() }
}

/// Makes `event`'s outbox row due an hour before everything else, as an operator's resume leaves
/// one (or a writer that committed late).
async fn due_an_hour_ago(fx: &Fixture, event: &Envelope) {
    fx.db
        .client()
        .await
        .execute(
            "UPDATE event_outbox SET available_at = now() - interval '1 hour' WHERE event_id = $1",
            &[&event.id],
        )
        .await
        .unwrap();
}

const NOT_DISPATCHED: &str = "SELECT count(*) FROM event_outbox WHERE status <> 'dispatched'";

#[tokio::test]
async fn a_backlog_claims_from_the_floor_and_a_drain_still_takes_the_rows_due_before_it() {
    let fx = Fixture::new().await;
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    let booked = fx.book_many(patient, practitioner, 24, 8).await;
    // Ten rows, two per claim.
    let dispatcher = fx.dispatcher(Arc::new(NoopTransport), floored());
    assert_eq!(step(&dispatcher).await.dispatched, 2, "a full claim: the floor is set");

    // The oldest due row, yet below the floor.
    let resumed = &booked[7].1;
    due_an_hour_ago(&fx, resumed).await;
    assert_eq!(step(&dispatcher).await.dispatched, 2);
    assert_eq!(fx.outbox(resumed).await.status, "pending", "a floored claim starts above the floor");

    // The drain runs out of rows above the floor, then scans from the start: nothing is left.
    let report = drain(&dispatcher).await;
    assert_eq!(report.totals.dispatched, 6, "{report:?}");
    assert_eq!(fx.outbox(resumed).await.status, "dispatched");
    assert_eq!(fx.count(NOT_DISPATCHED).await, 0);
}

#[tokio::test]
async fn a_floored_claim_that_finds_nothing_scans_from_the_start_before_it_reports_idle() {
    let fx = Fixture::new().await;
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    let booked = fx.book_many(patient, practitioner, 24, 2).await;
    let dispatcher = fx.dispatcher(Arc::new(NoopTransport), floored());
    assert_eq!(step(&dispatcher).await.dispatched, 2, "a full claim: the floor is set");
    // Both remaining rows fall below the floor.
    for (_, event) in &booked {
        due_an_hour_ago(&fx, event).await;
    }
    // The floored claim finds nothing above the floor; the same step scans from the start.
    assert_eq!(step(&dispatcher).await.dispatched, 2);
    for (_, event) in &booked {
        assert_eq!(fx.outbox(event).await.status, "dispatched");
    }
    assert_eq!(fx.count(NOT_DISPATCHED).await, 0);
}

#[tokio::test]
async fn with_a_fifo_transport_claims_always_take_the_oldest_due_rows_first() {
    let fx = Fixture::new().await;
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    let booked = fx.book_many(patient, practitioner, 24, 8).await;
    let dispatcher = fx.dispatcher(Arc::new(OrderedNoop), floored());
    assert_eq!(step(&dispatcher).await.dispatched, 2);
    // An older event of a resource must reach a FIFO queue before its newer ones: no floor.
    let resumed = &booked[7].1;
    due_an_hour_ago(&fx, resumed).await;
    assert_eq!(step(&dispatcher).await.dispatched, 2);
    assert_eq!(fx.outbox(resumed).await.status, "dispatched", "the oldest due row went first");
    drain(&dispatcher).await;
    assert_eq!(fx.count(NOT_DISPATCHED).await, 0);
}
