//! Every mutating operator route honours `Idempotency-Key` (issue 38 item 4): the same key with the
//! same body answers the stored answer and writes nothing (one audit row, one fresh attempt budget);
//! the same key with another body answers 422 and writes nothing.
//!
//! Each test lets the row fall back into a state the action accepts between the two requests (a
//! client whose first answer was lost retries after the row died again): without the key, the repeat
//! would act a second time.

use crate::support::Scene;
use clinic_core::ids::EventId;
use serde_json::{json, Value};

async fn post(scene: &Scene, path: &str, body: Value, key: &str) -> clinic_testkit::app::TestResponse {
    let admin = scene.app.workspace.admin.clone();
    scene.app.call_with("POST", path, Some(&admin), Some(body), &[("idempotency-key", key)]).await
}

/// The row died again at its ceiling after the operator's retry.
async fn die_again(scene: &Scene, event: EventId) {
    scene.execute("UPDATE event_outbox SET status = 'dead', attempts = 10 WHERE event_id = $1", event).await;
}

#[tokio::test]
async fn an_outbox_retry_repeated_with_its_key_answers_the_stored_action_and_acts_once() {
    let scene = Scene::new().await;
    scene.bury().await;
    let path = format!("/v1/system/outbox/{}/retry", scene.created);
    let body = json!({"reason": "provider fixed"});

    let first = post(&scene, &path, body.clone(), "retry-1").await;
    assert_eq!(first.status, 200, "{}", first.text);
    die_again(&scene, scene.created).await;

    let again = post(&scene, &path, body, "retry-1").await;
    assert_eq!(again.status, 200, "{}", again.text);
    assert_eq!(again.body["id"], first.body["id"], "the stored action, not a new one");
    assert_eq!(again.body["statusAfter"], "pending");
    assert_eq!(scene.audit_count(scene.created).await, 1, "one audit row per key");
    assert_eq!(scene.status(scene.created).await, "dead", "the repeat changed nothing");
    assert_eq!(scene.attempts(scene.created).await, 10, "no second attempt budget");

    let other = post(&scene, &path, json!({"reason": "another reason"}), "retry-1").await;
    assert_eq!(other.status, 422, "{}", other.text);
    assert_eq!(other.body["field"], "Idempotency-Key");
    assert_eq!(scene.audit_count(scene.created).await, 1);
    assert_eq!(scene.status(scene.created).await, "dead");
}

#[tokio::test]
async fn an_outbox_discard_and_replay_repeated_with_their_keys_act_once() {
    let scene = Scene::new().await;
    scene.dispatch_locally().await;
    let replay = format!("/v1/system/outbox/{}/replay", scene.created);
    let body = json!({"reason": "partner lost it"});
    let first = post(&scene, &replay, body.clone(), "replay-1").await;
    assert_eq!(first.status, 200, "{}", first.text);
    scene.dispatch_locally().await;
    assert_eq!(scene.status(scene.created).await, "dispatched");
    let again = post(&scene, &replay, body, "replay-1").await;
    assert_eq!(again.status, 200, "{}", again.text);
    assert_eq!(again.body["id"], first.body["id"]);
    assert_eq!(scene.status(scene.created).await, "dispatched", "not replayed twice");
    assert_eq!(scene.audit_count(scene.created).await, 1);

    die_again(&scene, scene.created).await;
    let discard = format!("/v1/system/outbox/{}/discard", scene.created);
    let body = json!({"reason": "duplicate"});
    let first = post(&scene, &discard, body.clone(), "discard-1").await;
    assert_eq!(first.status, 200, "{}", first.text);
    let again = post(&scene, &discard, body, "discard-1").await;
    assert_eq!(again.status, 200, "{}", again.text,);
    assert_eq!(again.body["id"], first.body["id"]);
    assert_eq!(scene.audit_count(scene.created).await, 2);
}

#[tokio::test]
async fn a_bulk_retry_repeated_with_its_key_answers_its_batch_and_acts_once() {
    let scene = Scene::new().await;
    scene.bury().await;
    let body = json!({"reason": "provider fixed", "filter": {"status": "dead"}});

    let first = post(&scene, "/v1/system/outbox/bulk/retry", body.clone(), "bulk-1").await;
    assert_eq!(first.status, 200, "{}", first.text);
    assert_eq!(first.body["applied"], 1);
    die_again(&scene, scene.created).await;

    let again = post(&scene, "/v1/system/outbox/bulk/retry", body, "bulk-1").await;
    assert_eq!(again.status, 200, "{}", again.text);
    assert_eq!(again.body["batchId"], first.body["batchId"], "the stored batch");
    assert_eq!(again.body["applied"], 1);
    assert_eq!(scene.audit_count(scene.created).await, 1, "one audit row per key");
    assert_eq!(scene.attempts(scene.created).await, 10, "no second attempt budget");

    let other = json!({"reason": "provider fixed", "filter": {"status": "dead"}, "limit": 5});
    let refused = post(&scene, "/v1/system/outbox/bulk/retry", other, "bulk-1").await;
    assert_eq!(refused.status, 422, "{}", refused.text);
    assert_eq!(scene.audit_count(scene.created).await, 1);

    // A dry run writes nothing and claims no key, but a malformed key is still refused.
    let dry = json!({"reason": "look", "filter": {"status": "dead"}, "dryRun": true});
    let looked = post(&scene, "/v1/system/outbox/bulk/retry", dry.clone(), "bulk-1").await;
    assert_eq!(looked.status, 200, "{}", looked.text);
    assert_eq!(looked.body["matched"], 1);
    let malformed = post(&scene, "/v1/system/outbox/bulk/retry", dry, "has space").await;
    assert_eq!(malformed.status, 400, "{}", malformed.text);
}

#[tokio::test]
async fn a_delivery_retry_repeated_with_its_key_answers_the_stored_action_and_acts_once() {
    let scene = Scene::new().await;
    scene.dispatch_locally().await;
    let die = "UPDATE notifications SET status = 'dead', attempts = 5 \
               WHERE id = (SELECT id FROM notifications WHERE event_id = $1 ORDER BY id LIMIT 1) RETURNING id";
    let id: clinic_core::ids::NotificationId = scene.query_one(die, scene.created).await.get(0);
    let path = format!("/v1/system/deliveries/{id}/retry");
    let body = json!({"reason": "address fixed"});

    let first = post(&scene, &path, body.clone(), "delivery-1").await;
    assert_eq!(first.status, 200, "{}", first.text);
    scene.query_one(die, scene.created).await;

    let again = post(&scene, &path, body, "delivery-1").await;
    assert_eq!(again.status, 200, "{}", again.text);
    assert_eq!(again.body["id"], first.body["id"]);
    let row = scene
        .query_one(
            "SELECT status, attempts, (SELECT count(*) FROM operator_actions WHERE event_id = $1) \
             FROM notifications WHERE id = (SELECT id FROM notifications WHERE event_id = $1 ORDER BY id LIMIT 1)",
            scene.created,
        )
        .await;
    assert_eq!(row.get::<_, String>(0), "dead", "the repeat changed nothing");
    assert_eq!(row.get::<_, i32>(1), 5, "no second attempt budget");
    assert_eq!(row.get::<_, i64>(2), 1, "one audit row per key");

    let other = post(&scene, &path, json!({"reason": "another"}), "delivery-1").await;
    assert_eq!(other.status, 422, "{}", other.text);
}

#[tokio::test]
async fn a_listener_pause_repeated_with_its_key_answers_the_stored_action_and_acts_once() {
    let scene = Scene::new().await;
    let admin = scene.app.workspace.admin.clone();
    let body = json!({"listener": "patient_booking_confirmation", "reason": "provider outage"});
    let first = post(&scene, "/v1/system/listeners/pause", body.clone(), "pause-1").await;
    assert_eq!(first.status, 200, "{}", first.text);
    let resumed = scene
        .app
        .call(
            "POST",
            "/v1/system/listeners/resume",
            Some(&admin),
            Some(json!({"listener": "patient_booking_confirmation", "reason": "over"})),
        )
        .await;
    assert_eq!(resumed.status, 200, "{}", resumed.text);

    let again = post(&scene, "/v1/system/listeners/pause", body, "pause-1").await;
    assert_eq!(again.status, 200, "{}", again.text);
    assert_eq!(again.body["id"], first.body["id"]);
    assert_eq!(scene.app.count("SELECT 1 FROM listener_pauses").await, 0, "not paused again");
    assert_eq!(scene.app.count("SELECT 1 FROM listener_pause_actions").await, 2);
}
