//! Operator recovery that recovers (issue 38 defect 1): a retry, a bulk retry or a replay of a row
//! that ended at the attempt ceiling starts a fresh attempt budget, so the next claim starts its
//! listeners instead of burying it again as `attempts_exhausted`. The old attempts stay in the
//! history; stale or pointless actions answer 409 and write nothing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::{fast_config, Scene};
use clinic_core::dispatch::testing::FailingTransport;
use clinic_core::dispatch::{DispatchConfig, StartError, Transport};
use clinic_core::ids::EventId;
use serde_json::{json, Value};

/// The fast config with retries due at once, so a failing row walks to its ceiling quickly.
fn eager() -> DispatchConfig {
    let mut config = fast_config();
    config.backoff.base = Duration::from_millis(1);
    config.backoff.cap = Duration::from_millis(2);
    config
}

/// Steps a dispatcher whose every start fails retryably until `event` has spent `attempts` attempts
/// (the ceiling buries it `dead` at the last one).
async fn fail_until(scene: &Scene, event: EventId, attempts: i32) {
    let failing: Arc<dyn Transport> =
        Arc::new(FailingTransport::always(StartError::retryable("sqs_KmsAccessDenied", "queue key refused")));
    let dispatcher = scene.dispatcher(failing, eager());
    let deadline = Instant::now() + Duration::from_secs(30);
    while scene.attempts(event).await < attempts {
        assert!(Instant::now() < deadline, "never reached {attempts} attempts");
        dispatcher.step().await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A row that died at the ceiling: every attempt was a per-message refusal.
async fn dead_at_ceiling(scene: &Scene) {
    fail_until(scene, scene.created, eager().max_attempts).await;
    assert_eq!(scene.status(scene.created).await, "dead");
    assert_eq!(scene.attempts(scene.created).await, eager().max_attempts);
}

async fn post(scene: &Scene, path: &str, body: Value) -> clinic_testkit::app::TestResponse {
    let admin = scene.app.workspace.admin.clone();
    scene.app.call("POST", path, Some(&admin), Some(body)).await
}

/// After the action: the dispatcher (same ceiling) starts both listeners and marks the row; the
/// `failed` attempts spent before the action are still in the history.
async fn listeners_start(scene: &Scene, failed: i64) {
    let report = scene.dispatcher(scene.local(), eager()).drain_once().await.unwrap();
    let totals = report.totals;
    assert_eq!((totals.dispatched, totals.dead, totals.started), (1, 0, 2), "{report:?}");
    assert_eq!(scene.status(scene.created).await, "dispatched");
    assert_eq!(scene.attempts(scene.created).await, 1, "a fresh budget: this was its first attempt");
    assert_eq!(scene.notifications(scene.created).await, 2, "both listeners ran");
    let history: i64 = scene
        .query_one(
            "SELECT count(*) FROM outbox_history WHERE event_id = $1 AND kind IN ('failure', 'dead')",
            scene.created,
        )
        .await
        .get(0);
    assert_eq!(history, failed, "the old attempts stay in the history");
}

#[tokio::test]
async fn an_http_retry_of_a_row_dead_at_the_ceiling_starts_its_listeners() {
    let scene = Scene::new().await;
    dead_at_ceiling(&scene).await;
    let path = format!("/v1/system/outbox/{}/retry", scene.created);
    let response = post(&scene, &path, json!({"reason": "queue key policy fixed"})).await;
    assert_eq!(response.status, 200, "{}", response.text);
    assert_eq!(response.body["statusAfter"], "pending");
    assert_eq!(scene.attempts(scene.created).await, 0, "the retry starts a fresh budget");
    listeners_start(&scene, eager().max_attempts as i64).await;

    // Explain tells the whole story: the spent attempts (1 to the ceiling), the retry, and the row
    // now on the first attempt of its new budget.
    let admin = scene.app.workspace.admin.clone();
    let explained =
        scene.app.call("GET", &format!("/v1/system/events/{}", scene.created), Some(&admin), None).await;
    assert_eq!(explained.status, 200, "{}", explained.text);
    let outbox = explained.body["sections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|section| section["name"] == "outbox")
        .unwrap()["rows"][0]
        .clone();
    assert_eq!(outbox["attempts"], 1);
    let history = outbox["history"].as_array().unwrap();
    let spent: Vec<i64> = history
        .iter()
        .filter(|entry| entry["kind"] == "failure" || entry["kind"] == "dead")
        .map(|entry| entry["attempt"].as_i64().unwrap())
        .collect();
    assert_eq!(spent, (1..=eager().max_attempts as i64).collect::<Vec<_>>(), "{outbox}");
    assert!(
        history.iter().any(|entry| entry["by"] == "retry" && entry["statusBefore"] == "dead"),
        "{outbox}"
    );

    // Retrying a dispatched row is pointless: 409 naming why, nothing written.
    let again = post(&scene, &path, json!({"reason": "again"})).await;
    assert_eq!(again.status, 409, "{}", again.text);
    assert!(again.text.contains("dispatched"), "{}", again.text);
    assert_eq!(scene.audit_count(scene.created).await, 1);
}

#[tokio::test]
async fn a_bulk_retry_of_rows_dead_at_the_ceiling_starts_their_listeners() {
    let scene = Scene::new().await;
    dead_at_ceiling(&scene).await;
    let response = post(
        &scene,
        "/v1/system/outbox/bulk/retry",
        json!({"reason": "queue key policy fixed", "filter": {"status": "dead", "errorCode": "sqs_KmsAccessDenied"}}),
    )
    .await;
    assert_eq!(response.status, 200, "{}", response.text);
    assert_eq!(response.body["applied"], 1, "{}", response.text);
    listeners_start(&scene, eager().max_attempts as i64).await;
}

#[tokio::test]
async fn a_replay_of_a_row_dispatched_at_the_ceiling_starts_its_listeners() {
    let scene = Scene::new().await;
    // Refused until its last attempt, which started everything: dispatched at the ceiling.
    fail_until(&scene, scene.created, eager().max_attempts - 1).await;
    scene.dispatcher(scene.local(), eager()).drain_once().await.unwrap();
    assert_eq!(scene.status(scene.created).await, "dispatched");
    assert_eq!(scene.attempts(scene.created).await, eager().max_attempts);

    let path = format!("/v1/system/outbox/{}/replay", scene.created);
    let response = post(&scene, &path, json!({"reason": "notices lost downstream"})).await;
    assert_eq!(response.status, 200, "{}", response.text);
    assert_eq!(scene.attempts(scene.created).await, 0, "the replay starts a fresh budget");
    listeners_start(&scene, eager().max_attempts as i64 - 1).await;
}

/// Issue 38 item 1 (new routes: 404 no-route on e6934c2, where bulk actions were outbox-only):
/// recover-by-filter with a dry run for notifications, through the same generic path and answer as
/// the outbox's. The dry run counts and samples and writes nothing; the filter is the queue's (a
/// field of another queue, a status it does not have and an empty filter are 422s naming the
/// field); applying gives each matching row a fresh attempt budget with one audit row under one
/// batch id; a repeat with the same `Idempotency-Key` acts no second time.
#[tokio::test]
async fn a_bulk_retry_of_dead_notifications_by_filter_counts_first_then_gives_each_a_fresh_budget() {
    let scene = Scene::new().await;
    scene.dispatch_locally().await;
    assert_eq!(scene.notifications(scene.created).await, 2, "both listeners made a notification");
    // Both died at their ceiling during a provider incident (set up directly: this test is about
    // the operator's path, the senders' walk to `dead` has its own tests).
    let buried = scene
        .execute(
            "UPDATE notifications SET status = 'dead', attempts = 5, last_error_code = 'ses_throttled' \
             WHERE event_id = $1",
            scene.created,
        )
        .await;
    assert_eq!(buried, 2);
    let audit = "SELECT count(*) FROM operator_actions WHERE notification_id IS NOT NULL AND event_id = $1";
    let bulk = "/v1/system/deliveries/bulk/retry";
    let filter = json!({"status": "dead", "errorCode": "ses_throttled", "olderThan": "0"});

    let dry =
        post(&scene, bulk, json!({"reason": "provider quota raised", "dryRun": true, "filter": filter}))
            .await;
    assert_eq!(dry.status, 200, "{}", dry.text);
    assert_eq!(
        (dry.body["queue"].as_str(), dry.body["matched"].as_i64(), dry.body["applied"].as_i64()),
        (Some("notifications"), Some(2), Some(0))
    );
    assert_eq!(dry.body["sample"].as_array().map(Vec::len), Some(2));
    let dead: i64 = scene
        .query_one(
            "SELECT count(*) FROM notifications WHERE event_id = $1 AND status = 'dead'",
            scene.created,
        )
        .await
        .get(0);
    assert_eq!(dead, 2, "a dry run changes nothing");
    assert_eq!(scene.query_one(audit, scene.created).await.get::<_, i64>(0), 0, "and records nothing");

    for (body, field) in [
        (json!({"reason": "x", "filter": {"endpointId": "01J00000000000000000000000"}}), "filter.endpointId"),
        (json!({"reason": "x", "filter": {"status": "failed"}}), "filter.status"),
        (json!({"reason": "x", "filter": {}}), "filter"),
        (
            json!({"reason": "x", "filter": {"status": "dead"}, "listeners": ["patient_reminder"]}),
            "listeners",
        ),
    ] {
        let refused = post(&scene, bulk, body).await;
        assert_eq!(
            (refused.status.as_u16(), refused.body["field"].as_str()),
            (422, Some(field)),
            "{}",
            refused.text
        );
    }
    // A status the action does not accept selects nothing (the glossary decides, not the filter).
    let sent = post(&scene, bulk, json!({"reason": "x", "dryRun": true, "filter": {"status": "sent"}})).await;
    assert_eq!(sent.body["matched"], 0, "{}", sent.text);

    let admin = scene.app.workspace.admin.clone();
    let body = json!({"reason": "provider quota raised", "filter": filter});
    let key = [("Idempotency-Key", "bulk-notifications-1")];
    let applied = scene.app.call_with("POST", bulk, Some(&admin), Some(body.clone()), &key).await;
    assert_eq!(applied.status, 200, "{}", applied.text);
    assert_eq!((applied.body["applied"].as_i64(), applied.body["remaining"].as_i64()), (Some(2), Some(0)));
    let fresh: i64 = scene
        .query_one(
            "SELECT count(*) FROM notifications WHERE event_id = $1 AND status = 'pending' AND attempts = 0",
            scene.created,
        )
        .await
        .get(0);
    assert_eq!(fresh, 2, "each retried notification starts a fresh attempt budget");
    let batched: i64 = scene
        .query_one(
            "SELECT count(DISTINCT batch_id) FROM operator_actions WHERE notification_id IS NOT NULL AND event_id = $1",
            scene.created,
        )
        .await
        .get(0);
    assert_eq!((scene.query_one(audit, scene.created).await.get::<_, i64>(0), batched), (2, 1));

    let again = scene.app.call_with("POST", bulk, Some(&admin), Some(body), &key).await;
    assert_eq!(again.status, 200, "{}", again.text);
    assert_eq!(again.body["batchId"], applied.body["batchId"]);
    assert_eq!(again.body["applied"], 2);
    assert_eq!(
        scene.query_one(audit, scene.created).await.get::<_, i64>(0),
        2,
        "the repeat acted no second time"
    );

    // The rows are pending now: a single retry of one is pointless (409, nothing recorded).
    let id = applied.body["sample"][0].as_str().unwrap().to_owned();
    let pointless = post(&scene, &format!("/v1/system/deliveries/{id}/retry"), json!({"reason": "x"})).await;
    assert_eq!(pointless.status, 409, "{}", pointless.text);
    assert_eq!(scene.query_one(audit, scene.created).await.get::<_, i64>(0), 2);
}
