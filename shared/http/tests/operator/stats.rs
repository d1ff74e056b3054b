//! `operator::stats` and `metrics::oldest_pending_age_ms` against real rows, and the metrics
//! recorder flushing after a real dispatcher drain.

use crate::support::Scene;
use clinic_core::dispatch::metrics::Recorder;
use clinic_core::operator::{self, OutboxFilter};
use clinic_core::outbox::lag::oldest_pending_age_ms;

#[tokio::test]
async fn stats_count_by_status_and_error_code_and_measure_the_dispatch_lag() {
    let scene = Scene::new().await;
    let client = scene.app.db.client().await;

    // Three pending rows (patient, practitioner, appointment), due since they were written.
    client
        .execute("UPDATE event_outbox SET available_at = now() - interval '90 seconds'", &[])
        .await
        .unwrap();
    let age = oldest_pending_age_ms(&client).await.unwrap();
    assert!((90_000..120_000).contains(&age), "{age}");
    let stats = operator::stats(&client, Some(scene.app.workspace.id)).await.unwrap();
    assert_eq!(stats.by_status["pending"], 3);
    assert_eq!(stats.by_status["dead"], 0);
    assert!(stats.oldest_pending_age_ms >= 90_000);
    let other = scene.app.add_workspace().await;
    let theirs = operator::stats(&client, Some(other.id)).await.unwrap();
    assert_eq!(theirs.by_status.values().sum::<i64>(), 0);
    assert_eq!(theirs.oldest_pending_age_ms, 0);

    scene.bury().await;
    let stats = operator::stats(&client, None).await.unwrap();
    assert_eq!(stats.by_status["dead"], 1);
    assert_eq!(stats.by_status["dispatched"], 2);
    assert_eq!(stats.dead_by_error_code["provider_rejected"], 1);
    assert_eq!(stats.oldest_pending_age_ms, 0, "nothing due");
    assert_eq!(oldest_pending_age_ms(&client).await.unwrap(), 0);

    // Unscoped listing sees every row.
    let filter = OutboxFilter { status: None, ..OutboxFilter::default() };
    assert_eq!(operator::list(&client, &filter, 10).await.unwrap().len(), 3);
}

#[tokio::test]
async fn the_recorder_flushes_what_it_recorded_once() {
    let scene = Scene::new().await;
    let recorder = Recorder::default();
    let client = scene.app.db.client().await;
    assert_eq!(recorder.flush(&client, true).await, 0, "nothing recorded, nothing printed");
    recorder.batch(std::time::Duration::from_millis(3));
    assert_eq!(recorder.flush(&client, false).await, 0, "not due yet");
    assert_eq!(recorder.flush(&client, true).await, 1, "the totals line");
    assert_eq!(recorder.flush(&client, true).await, 0, "already emitted");
}
