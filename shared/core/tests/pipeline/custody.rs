//! Custody until receipt (DESIGN §5a) against real PostgreSQL: every start the broker accepted is
//! recorded and settled by its receipt; the reconciler restarts overdue ones under the same identity
//! (one effect each), gives up after its limit and lists the pair for operators; retention keeps the
//! bookkeeping of an event still in custody.

use std::sync::Arc;
use std::time::Duration;

use super::support::{drain, fast_config, Fixture};
use async_trait::async_trait;
use clinic_core::dispatch::testing::NoopTransport;
use clinic_core::dispatch::{Start, StartResult, Transport};
use clinic_core::housekeeping::reconcile::{list_unsettled, reconcile, ReconcileConfig};
use clinic_core::housekeeping::retention::{sweep, RetentionConfig};
use clinic_core::outbox::lag::read_ages;

/// Pairs still in custody, over both records (awaited on the outbox row, or start rows).
const UNSETTLED: &str = "SELECT count(*) FROM listener_custody";

/// Makes every start of `fx` overdue by moving its clock back (the dispatch time of the rows that
/// await receipts, and the start rows).
async fn age_starts(fx: &Fixture, by: Duration) {
    let secs = by.as_secs_f64();
    let client = fx.db.client().await;
    client
        .execute(
            "UPDATE listener_starts SET started_at = started_at - $1 * interval '1 second', \
                 restarted_at = restarted_at - $1 * interval '1 second'",
            &[&secs],
        )
        .await
        .unwrap();
    client
        .execute(
            "UPDATE event_outbox SET dispatched_at = dispatched_at - $1 * interval '1 second' \
             WHERE awaiting IS NOT NULL",
            &[&secs],
        )
        .await
        .unwrap();
}

fn quick() -> ReconcileConfig {
    ReconcileConfig { due: Duration::from_secs(60), max_restarts: 2, batch: 100 }
}

/// Records what it was asked to start, then passes it to the inner transport.
struct Recording {
    inner: Arc<dyn Transport>,
    seen: std::sync::Mutex<Vec<(String, String)>>,
}

#[async_trait]
impl Transport for Recording {
    fn name(&self) -> &'static str {
        "recording"
    }

    async fn start(&self, starts: &[Start<'_>]) -> Vec<StartResult> {
        {
            let mut seen = self.seen.lock().unwrap();
            seen.extend(starts.iter().map(|s| (s.envelope.id.to_string(), s.listener.as_str().to_owned())));
        }
        self.inner.start(starts).await
    }
}

#[tokio::test]
async fn a_start_the_broker_lost_is_restarted_under_the_same_identity_and_takes_effect_once() {
    let fx = Fixture::new().await;
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    let (_, created) = fx.book(patient, practitioner, 24).await;
    // The broker accepted both starts and lost them (a purged queue): dispatched, no receipt.
    let lossy = fx.dispatcher(Arc::new(NoopTransport), fast_config());
    drain(&lossy).await;
    assert_eq!(fx.outbox(&created).await.status, "dispatched");
    assert_eq!(fx.count(UNSETTLED).await, 2, "both starts are in custody");
    assert_eq!(fx.count("SELECT count(*) FROM listener_receipts").await, 0);
    let ages = read_ages(&fx.db.client().await).await.unwrap();
    assert!(ages.oldest_unsettled_ms >= 0);

    let recording = Recording { inner: fx.local(), seen: Default::default() };
    // Not yet due: nothing happens.
    let report = reconcile(&fx.db.pool, &recording, &quick()).await.unwrap();
    assert_eq!(report.restarted, 0);
    age_starts(&fx, Duration::from_secs(120)).await;
    let ages = read_ages(&fx.db.client().await).await.unwrap();
    assert!(ages.oldest_unsettled_ms >= 120_000, "{ages:?}");

    let report = reconcile(&fx.db.pool, &recording, &quick()).await.unwrap();
    assert_eq!(report.restarted, 2, "{report:?}");
    let seen = recording.seen.lock().unwrap().clone();
    assert!(seen.iter().all(|(id, _)| *id == created.id.to_string()), "same event id: {seen:?}");
    assert_eq!(fx.count(UNSETTLED).await, 0, "the receipts settled both starts");
    assert_eq!(fx.count("SELECT count(*) FROM notifications").await, 2);
    // A late copy of the lost message (or a second pass) changes nothing.
    age_starts(&fx, Duration::from_secs(120)).await;
    let again = reconcile(&fx.db.pool, &recording, &quick()).await.unwrap();
    assert_eq!(again.restarted, 0);
    drain(&fx.dispatcher(fx.local(), fast_config())).await;
    assert_eq!(fx.count("SELECT count(*) FROM notifications").await, 2, "exactly one effect each");
    let ages = read_ages(&fx.db.client().await).await.unwrap();
    assert_eq!(ages.oldest_unsettled_ms, 0);
}

#[tokio::test]
async fn a_pair_that_never_settles_is_handed_to_operators_and_replay_restarts_it() {
    let fx = Fixture::new().await;
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    let (_, created) = fx.book(patient, practitioner, 24).await;
    drain(&fx.dispatcher(Arc::new(NoopTransport), fast_config())).await;
    // The restarts are lost too (the listener reports success without a receipt).
    let config = quick();
    for pass in 0..=config.max_restarts {
        age_starts(&fx, Duration::from_secs(120)).await;
        let report = reconcile(&fx.db.pool, &NoopTransport, &config).await.unwrap();
        if pass < config.max_restarts {
            assert_eq!(report.restarted, 2, "pass {pass}: {report:?}");
        } else {
            assert_eq!((report.restarted, report.stuck), (0, 2), "pass {pass}: {report:?}");
        }
    }
    let client = fx.db.client().await;
    let stuck = list_unsettled(&client, None, Duration::ZERO, false, 10).await.unwrap();
    assert_eq!(stuck.len(), 2);
    assert!(stuck.iter().all(|s| s.event_id == created.id && s.stuck_at.is_some() && s.restarts == 2));
    // Stuck pairs are not restarted again, and still count as unsettled custody.
    age_starts(&fx, Duration::from_secs(120)).await;
    assert_eq!(reconcile(&fx.db.pool, &NoopTransport, &config).await.unwrap().restarted, 0);
    assert!(read_ages(&client).await.unwrap().oldest_unsettled_ms > 0);
    // Retention keeps everything of an event in custody, however old.
    let far = chrono::Utc::now() + chrono::Duration::days(400);
    let swept = sweep(&fx.db.pool, &RetentionConfig::default(), far).await.unwrap();
    // Only the two events without listeners (patient, practitioner) leave; the booking stays.
    assert_eq!((swept.outbox_rows, swept.listener_starts), (2, 0), "{swept:?}");
    assert_eq!(fx.outbox(&created).await.status, "dispatched");
    assert_eq!(fx.count(UNSETTLED).await, 2);

    // The operator replays the event: its starts are forgotten and the dispatcher starts them anew.
    let replay = clinic_core::operator::ActionRequest::from_body(
        clinic_core::lease::ActionKind::Replay,
        serde_json::json!({"reason": "lost after every restart"}),
    )
    .unwrap();
    let operator = clinic_core::operator::Operator::member(fx.member);
    let mut conn = fx.db.client().await;
    let tx = conn.transaction().await.unwrap();
    clinic_core::operator::perform(&tx, None, created.id, &replay, &operator).await.unwrap();
    tx.commit().await.unwrap();
    drain(&fx.dispatcher(fx.local(), fast_config())).await;
    assert_eq!(fx.count(UNSETTLED).await, 0);
    assert_eq!(fx.count("SELECT count(*) FROM notifications").await, 2);
    assert!(list_unsettled(&client, None, Duration::ZERO, true, 10).await.unwrap().is_empty());
}

#[tokio::test]
async fn the_receipt_settles_its_start_in_the_listeners_transaction() {
    let fx = Fixture::new().await;
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    let (_, created) = fx.book(patient, practitioner, 24).await;
    drain(&fx.dispatcher(Arc::new(NoopTransport), fast_config())).await;
    assert_eq!(fx.count(UNSETTLED).await, 2);
    clinic_core::listeners::run(
        &fx.db.pool,
        clinic_core::listeners::Listener::PatientBookingConfirmation,
        &created,
    )
    .await
    .unwrap();
    assert_eq!(fx.count(UNSETTLED).await, 1, "one receipt in, one start settled");
}
