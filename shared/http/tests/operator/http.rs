//! Operator actions over HTTP: `GET /v1/system/outbox` and `POST /v1/system/outbox/{id}/…`, each
//! with its audit row, admin only, 409 (and nothing recorded) when the status does not fit.

use std::sync::Arc;

use crate::support::{event_of, fast_config, slow_retry_config, Scene};
use clinic_core::dispatch::testing::FailingTransport;
use clinic_core::dispatch::{StartError, Transport};
use clinic_core::ids::EventId;
use clinic_core::listeners::Listener;
use serde_json::{json, Value};

fn action_path(event: EventId, action: &str) -> String {
    format!("/v1/system/outbox/{event}/{action}")
}

async fn act(scene: &Scene, event: EventId, action: &str, body: Value) -> clinic_testkit::app::TestResponse {
    let admin = scene.app.workspace.admin.clone();
    scene.app.call("POST", &action_path(event, action), Some(&admin), Some(body)).await
}

#[tokio::test]
async fn retry_makes_a_dead_row_due_now_under_the_same_id_and_audits_it() {
    let scene = Scene::new().await;
    scene.bury().await;
    assert_eq!(scene.status(scene.created).await, "dead");
    let attempts = scene.attempts(scene.created).await;

    let response = act(&scene, scene.created, "retry", json!({"reason": "provider fixed"})).await;
    assert_eq!(response.status, 200, "{}", response.text);
    assert_eq!(response.body["eventId"], scene.created.to_string());
    assert_eq!(response.body["action"], "retry");
    assert_eq!(response.body["statusBefore"], "dead");
    assert_eq!(response.body["statusAfter"], "pending");
    assert_eq!(response.body["actor"], scene.app.workspace.admin_id.to_string());
    assert!(response.body.get("reason").is_none());

    let row = scene
        .query_one(
            "SELECT status, attempts, available_at <= now(), last_error_code FROM event_outbox WHERE event_id = $1",
            scene.created,
        )
        .await;
    assert_eq!(row.get::<_, String>(0), "pending");
    assert_eq!(row.get::<_, i32>(1), 0, "a fresh attempt budget (the spent ones stay in the history)");
    assert!(attempts > 0);
    assert!(row.get::<_, bool>(2), "due now");
    assert_eq!(row.get::<_, Option<String>>(3).as_deref(), Some("provider_rejected"), "last error kept");

    let audit = scene
        .query_one(
            "SELECT action, actor, reason, status_before, status_after, listeners, workspace_id \
             FROM operator_actions WHERE event_id = $1",
            scene.created,
        )
        .await;
    assert_eq!(audit.get::<_, String>(0), "retry");
    assert_eq!(audit.get::<_, String>(1), scene.app.workspace.admin_id.to_string());
    assert_eq!(audit.get::<_, String>(2), "provider fixed");
    assert_eq!(audit.get::<_, String>(3), "dead");
    assert_eq!(audit.get::<_, String>(4), "pending");
    assert_eq!(audit.get::<_, Option<Vec<String>>>(5), None);
    assert_eq!(audit.get::<_, clinic_core::ids::WorkspaceId>(6), scene.app.workspace.id);

    // The dispatcher picks it up again: same event id, the first attempt of the new budget,
    // notifications sent once.
    let report = scene.dispatch_locally().await;
    assert_eq!(report.totals.dispatched, 1);
    assert_eq!(scene.status(scene.created).await, "dispatched");
    assert_eq!(scene.attempts(scene.created).await, 1);
    assert_eq!(scene.notifications(scene.created).await, 2);

    // Retrying again does not fit a dispatched row: 409, nothing more recorded.
    let again = act(&scene, scene.created, "retry", json!({"reason": "again"})).await;
    assert_eq!(again.status, 409, "{}", again.text);
    assert_eq!(scene.audit_count(scene.created).await, 1);
}

#[tokio::test]
async fn retry_of_a_row_in_backoff_makes_it_due_now() {
    let scene = Scene::new().await;
    scene.delay().await;
    let row = scene
        .query_one("SELECT status, available_at > now() FROM event_outbox WHERE event_id = $1", scene.created)
        .await;
    assert_eq!(row.get::<_, String>(0), "retry");
    assert!(row.get::<_, bool>(1), "backing off for an hour");

    let response = act(&scene, scene.created, "retry", json!({"reason": "provider is back"})).await;
    assert_eq!(response.status, 200, "{}", response.text);
    assert_eq!(response.body["statusBefore"], "retry");
    let due: bool = scene
        .query_one("SELECT available_at <= now() FROM event_outbox WHERE event_id = $1", scene.created)
        .await
        .get(0);
    assert!(due);
    assert_eq!(scene.dispatch_locally().await.totals.dispatched, 1);
    assert_eq!(scene.notifications(scene.created).await, 2);
}

#[tokio::test]
async fn discard_buries_a_dead_row_for_good() {
    let scene = Scene::new().await;
    scene.bury().await;
    let response = act(&scene, scene.created, "discard", json!({"reason": "appointment long past"})).await;
    assert_eq!(response.status, 200, "{}", response.text);
    assert_eq!(response.body["statusBefore"], "dead");
    assert_eq!(response.body["statusAfter"], "discarded");
    assert_eq!(scene.status(scene.created).await, "discarded");
    let audit = scene
        .query_one(
            "SELECT action, status_before, status_after FROM operator_actions WHERE event_id = $1",
            scene.created,
        )
        .await;
    assert_eq!(
        (audit.get::<_, String>(0), audit.get::<_, String>(1), audit.get::<_, String>(2)),
        ("discard".to_owned(), "dead".to_owned(), "discarded".to_owned())
    );

    // Nothing is dispatched any more, and a discarded row accepts no action.
    assert_eq!(scene.dispatch_locally().await.totals.claimed, 0);
    for action in ["retry", "replay", "discard"] {
        let response = act(&scene, scene.created, action, json!({"reason": "changed my mind"})).await;
        assert_eq!(response.status, 409, "{action}: {}", response.text);
        assert_eq!(response.body["type"], "urn:clinic:problem:conflict");
    }
    assert_eq!(scene.audit_count(scene.created).await, 1);
}

#[tokio::test]
async fn an_action_that_does_not_fit_the_status_answers_409_and_records_nothing() {
    let scene = Scene::new().await;
    // Pending (not yet dispatched): nothing fits.
    for action in ["retry", "replay", "discard"] {
        let response = act(&scene, scene.created, action, json!({"reason": "why not"})).await;
        assert_eq!(response.status, 409, "{action} on pending: {}", response.text);
    }
    scene.dispatch_locally().await;
    // Dispatched: only replay fits.
    for action in ["retry", "discard"] {
        let response = act(&scene, scene.created, action, json!({"reason": "why not"})).await;
        assert_eq!(response.status, 409, "{action} on dispatched: {}", response.text);
        assert!(response.body["detail"].as_str().unwrap().contains("dispatched"));
    }
    assert_eq!(scene.status(scene.created).await, "dispatched");
    assert_eq!(scene.audit_count(scene.created).await, 0);
    let total: i64 = scene.app.count("SELECT 1 FROM operator_actions").await;
    assert_eq!(total, 0);
}

#[tokio::test]
async fn a_missing_or_blank_reason_is_rejected_before_the_status_is_considered() {
    let scene = Scene::new().await;
    scene.dispatch_locally().await;
    // Retry would be a 409 on this dispatched row; the reason is checked first.
    for body in [json!({}), json!({"reason": ""}), json!({"reason": "   "}), json!({"reason": null})] {
        let response = act(&scene, scene.created, "retry", body.clone()).await;
        assert_eq!(response.status, 422, "{body}: {}", response.text);
        assert_eq!(response.body["field"], "reason");
    }
    let admin = scene.app.workspace.admin.clone();
    let no_body = scene.app.call("POST", &action_path(scene.created, "discard"), Some(&admin), None).await;
    assert_eq!(no_body.status, 422, "{}", no_body.text);
    // Only listeners this build does not know (a rolling deploy): 409 naming them.
    let unknown_only = act(
        &scene,
        scene.created,
        "replay",
        json!({"reason": "x", "listeners": ["send_fax", "page_doctor"]}),
    )
    .await;
    assert_eq!(unknown_only.status, 409, "{}", unknown_only.text);
    assert_eq!(unknown_only.body["field"], "listeners");
    assert_eq!(unknown_only.body["type"].as_str().map(|t| t.ends_with("unknown-listeners")), Some(true));
    let detail = unknown_only.body["detail"].as_str().unwrap();
    assert!(detail.contains("send_fax") && detail.contains("page_doctor"), "{detail}");
    // Some known, some unknown: 422 naming the unknown ones, nothing replayed.
    let mixed = act(
        &scene,
        scene.created,
        "replay",
        json!({"reason": "x", "listeners": ["patient_booking_confirmation", "send_fax"]}),
    )
    .await;
    assert_eq!(mixed.status, 422, "{}", mixed.text);
    assert_eq!(mixed.body["field"], "listeners");
    assert!(mixed.text.contains("send_fax") && !mixed.body["detail"].to_string().contains("patient_booking"));
    let not_routed =
        act(&scene, scene.created, "replay", json!({"reason": "x", "listeners": ["patient_reminder"]})).await;
    assert_eq!(not_routed.status, 422, "{}", not_routed.text);
    let bad_id = scene
        .app
        .call("POST", "/v1/system/outbox/nope/retry", Some(&admin), Some(json!({"reason": "x"})))
        .await;
    assert_eq!(bad_id.status, 400);
    let unknown = act(&scene, EventId::generate(), "retry", json!({"reason": "x"})).await;
    assert_eq!(unknown.status, 404);
    assert_eq!(scene.app.count("SELECT 1 FROM operator_actions").await, 0);
    assert_eq!(scene.status(scene.created).await, "dispatched");
}

#[tokio::test]
async fn only_admins_may_use_the_operator_routes() {
    let scene = Scene::new().await;
    scene.bury().await;
    let staff = scene.app.workspace.staff.clone();
    let list = scene.app.call("GET", "/v1/system/outbox", Some(&staff), None).await;
    assert_eq!(list.status, 403);
    for action in ["retry", "replay", "discard"] {
        let path = action_path(scene.created, action);
        let response = scene.app.call("POST", &path, Some(&staff), Some(json!({"reason": "let me"}))).await;
        assert_eq!(response.status, 403, "{action}");
        // Even without a reason: the role is checked first.
        let response = scene.app.call("POST", &path, Some(&staff), Some(json!({}))).await;
        assert_eq!(response.status, 403, "{action}");
        let anonymous = scene.app.call("POST", &path, None, Some(json!({"reason": "let me"}))).await;
        assert_eq!(anonymous.status, 401, "{action}");
    }
    let patient_token = clinic_testkit::app::token(
        scene.app.workspace.id,
        scene.patient["id"].as_str().unwrap().parse().unwrap(),
        clinic_http::auth::Role::Patient,
    );
    let list = scene.app.call("GET", "/v1/system/outbox", Some(&patient_token), None).await;
    assert_eq!(list.status, 403);
    assert_eq!(scene.status(scene.created).await, "dead");
    assert_eq!(scene.app.count("SELECT 1 FROM operator_actions").await, 0);
}

#[tokio::test]
async fn another_workspace_sees_nothing_and_touches_nothing() {
    let scene = Scene::new().await;
    scene.bury().await;
    let other = scene.app.add_workspace().await;
    let list = scene.app.call("GET", "/v1/system/outbox", Some(&other.admin), None).await;
    assert_eq!(list.status, 200);
    assert_eq!(list.body["items"], json!([]));
    let path = action_path(scene.created, "retry");
    let response =
        scene.app.call("POST", &path, Some(&other.admin), Some(json!({"reason": "mine now"}))).await;
    assert_eq!(response.status, 404, "{}", response.text);
    assert_eq!(scene.status(scene.created).await, "dead");
    assert_eq!(scene.app.count("SELECT 1 FROM operator_actions").await, 0);
}

#[tokio::test]
async fn the_listing_filters_pages_and_holds_no_health_data() {
    let scene = Scene::new().await;
    scene.bury().await;
    let admin = scene.app.workspace.admin.clone();
    let get = |query: String| {
        let admin = admin.clone();
        let app = &scene.app;
        async move { app.call("GET", &format!("/v1/system/outbox{query}"), Some(&admin), None).await }
    };

    let all = get(String::new()).await;
    assert_eq!(all.status, 200, "{}", all.text);
    let items = all.body["items"].as_array().unwrap();
    // patient.created, practitioner.created (dispatched: no listeners) and appointment.created (dead).
    assert_eq!(items.len(), 3);
    assert_eq!(items[0]["eventId"], scene.created.to_string(), "newest first");
    for field in
        ["eventId", "type", "status", "attempts", "availableAt", "lastErrorCode", "lastError", "createdAt"]
    {
        assert!(items[0].get(field).is_some(), "{field} missing");
    }
    assert_eq!(items[0]["type"], "appointment.created");
    assert_eq!(items[0]["status"], "dead");
    assert_eq!(items[0]["lastErrorCode"], "provider_rejected");
    for secret in ["Grace", "Hopper", "Chest pain"] {
        assert!(!all.text.contains(secret), "listing leaks {secret}");
    }

    let dead = get("?status=dead".into()).await;
    assert_eq!(dead.body["items"].as_array().unwrap().len(), 1);
    let dispatched = get("?status=dispatched&eventType=patient.created".into()).await;
    let dispatched = dispatched.body["items"].as_array().unwrap().clone();
    assert_eq!(dispatched.len(), 1);
    assert_eq!(dispatched[0]["type"], "patient.created");
    let young = get("?olderThan=1h".into()).await;
    assert_eq!(young.body["items"], json!([]));
    let ancient = get("?olderThan=999999999d".into()).await;
    assert_eq!(ancient.status, 200, "{}", ancient.text);
    assert_eq!(ancient.body["items"], json!([]));
    let old_enough = get("?olderThan=0s".into()).await;
    assert_eq!(old_enough.body["items"].as_array().unwrap().len(), 3);

    // Keyset pages: 2 + 1, no overlap; the cursor is bound to the filters it was issued for.
    let first = get("?limit=2".into()).await;
    assert_eq!(first.body["items"].as_array().unwrap().len(), 2);
    let cursor = first.body["nextCursor"].as_str().unwrap().to_owned();
    let second = get(format!("?limit=2&cursor={cursor}")).await;
    assert_eq!(second.status, 200, "{}", second.text);
    let second_items = second.body["items"].as_array().unwrap();
    assert_eq!(second_items.len(), 1);
    assert_eq!(second.body["nextCursor"], Value::Null);
    assert!(first.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .all(|item| item["eventId"] != second_items[0]["eventId"]));
    let foreign = get(format!("?limit=2&status=dead&cursor={cursor}")).await;
    assert_eq!(foreign.status, 400);

    for bad in
        ["?status=lost", "?eventType=appointment.exploded", "?olderThan=soon", "?limit=0", "?cursor=abc"]
    {
        let response = get(bad.into()).await;
        assert_eq!(response.status, 400, "{bad}: {}", response.text);
    }
}

#[tokio::test]
async fn replay_keeps_the_event_id_and_sends_no_duplicate_notification() {
    let scene = Scene::new().await;
    scene.dispatch_locally().await;
    assert_eq!(scene.status(scene.created).await, "dispatched");
    assert_eq!(scene.notifications(scene.created).await, 2);
    let events_before = scene.app.count("SELECT 1 FROM events").await;

    let response = act(&scene, scene.created, "replay", json!({"reason": "customer says no email"})).await;
    assert_eq!(response.status, 200, "{}", response.text);
    assert_eq!(response.body["statusBefore"], "dispatched");
    assert_eq!(response.body["statusAfter"], "pending");
    assert_eq!(
        response.body["listeners"],
        json!(["patient_booking_confirmation", "practitioner_schedule_change"])
    );
    let only: Option<Vec<String>> = scene
        .query_one("SELECT only_listeners FROM event_outbox WHERE event_id = $1", scene.created)
        .await
        .get(0);
    assert_eq!(only, None, "all listeners");

    // Both listeners run again under the same event id; their receipts make it a no-op.
    let counting: Arc<FailingTransport> = Arc::new(FailingTransport::only(
        Vec::new(),
        StartError::permanent("unused", "unused"),
        scene.local(),
    ));
    let report =
        scene.dispatcher(counting.clone() as Arc<dyn Transport>, fast_config()).drain_once().await.unwrap();
    assert_eq!(report.totals.dispatched, 1);
    assert_eq!(counting.requested(), 2);
    assert_eq!(scene.status(scene.created).await, "dispatched");
    assert_eq!(scene.notifications(scene.created).await, 2, "no duplicate notification");
    assert_eq!(scene.app.count("SELECT 1 FROM events").await, events_before, "no new event");
    assert_eq!(scene.audit_count(scene.created).await, 1);
}

#[tokio::test]
async fn replay_of_named_listeners_reruns_only_what_was_not_done() {
    let scene = Scene::new().await;
    scene.dispatch_locally().await;
    // Simulate a lost effect: the practitioner's notice and its receipt are gone.
    scene
        .execute(
            "DELETE FROM notifications WHERE event_id = $1 AND listener = 'practitioner_schedule_change'",
            scene.created,
        )
        .await;
    scene
        .execute(
            "DELETE FROM listener_receipts WHERE event_id = $1 AND listener = 'practitioner_schedule_change'",
            scene.created,
        )
        .await;
    assert_eq!(scene.notifications(scene.created).await, 1);

    let response = act(
        &scene,
        scene.created,
        "replay",
        json!({"reason": "notice lost", "listeners": ["practitioner_schedule_change"]}),
    )
    .await;
    assert_eq!(response.status, 200, "{}", response.text);
    assert_eq!(response.body["listeners"], json!(["practitioner_schedule_change"]));
    let audit: Option<Vec<String>> = scene
        .query_one("SELECT listeners FROM operator_actions WHERE event_id = $1", scene.created)
        .await
        .get(0);
    assert_eq!(audit, Some(vec!["practitioner_schedule_change".to_owned()]));

    let counting = Arc::new(FailingTransport::only(
        Vec::new(),
        StartError::permanent("unused", "unused"),
        scene.local(),
    ));
    scene.dispatcher(counting.clone() as Arc<dyn Transport>, fast_config()).drain_once().await.unwrap();
    assert_eq!(counting.requested(), 1, "only the named listener starts");
    assert_eq!(scene.status(scene.created).await, "dispatched");
    assert_eq!(scene.notifications(scene.created).await, 2);
    let listeners: Vec<String> = scene
        .app
        .db
        .client()
        .await
        .query("SELECT listener FROM notifications WHERE event_id = $1 ORDER BY listener", &[&scene.created])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(listeners, ["patient_booking_confirmation", "practitioner_schedule_change"]);
}

#[tokio::test]
async fn replay_starts_listeners_again_even_when_earlier_starts_were_recorded() {
    let scene = Scene::new().await;
    // Attempt 1: the practitioner's start fails (the patient's is recorded as started); attempt 2
    // starts only the practitioner's and the row is dispatched.
    let flaky = FailingTransport::only(
        vec![Listener::PractitionerScheduleChange],
        StartError::retryable("provider_down", "timeout"),
        scene.local(),
    );
    scene.dispatcher(Arc::new(flaky), slow_retry_config()).drain_once().await.unwrap();
    assert_eq!(scene.status(scene.created).await, "retry");
    scene.execute("UPDATE event_outbox SET available_at = now() WHERE event_id = $1", scene.created).await;
    scene.dispatch_locally().await;
    assert_eq!(scene.status(scene.created).await, "dispatched");
    let starts: i64 = scene
        .query_one("SELECT count(*) FROM listener_starts WHERE event_id = $1", scene.created)
        .await
        .get(0);
    assert_eq!(starts, 1);

    let response = act(&scene, scene.created, "replay", json!({"reason": "provider lost messages"})).await;
    assert_eq!(response.status, 200, "{}", response.text);
    let counting = Arc::new(FailingTransport::only(
        Vec::new(),
        StartError::permanent("unused", "unused"),
        scene.local(),
    ));
    scene.dispatcher(counting.clone() as Arc<dyn Transport>, fast_config()).drain_once().await.unwrap();
    assert_eq!(counting.requested(), 2, "both listeners start again");
    assert_eq!(scene.notifications(scene.created).await, 2);
    assert_eq!(event_of(&scene.app, "appointment.created").await, scene.created);
}

#[tokio::test]
async fn concurrent_actions_on_one_row_serialise_on_its_lock() {
    let scene = Scene::new().await;
    scene.bury().await;
    let retry = act(&scene, scene.created, "retry", json!({"reason": "first"}));
    let discard = act(&scene, scene.created, "discard", json!({"reason": "second"}));
    let again = act(&scene, scene.created, "retry", json!({"reason": "third"}));
    let (a, b, c) = tokio::join!(retry, discard, again);
    let mut statuses = [a.status.as_u16(), b.status.as_u16(), c.status.as_u16()];
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 409, 409], "{} | {} | {}", a.text, b.text, c.text);
    assert_eq!(scene.audit_count(scene.created).await, 1);
    let after = scene.status(scene.created).await;
    let recorded: String = scene
        .query_one("SELECT status_after FROM operator_actions WHERE event_id = $1", scene.created)
        .await
        .get(0);
    assert_eq!(after, recorded, "the one recorded action is the one applied");
}

#[tokio::test]
async fn odd_reasons_are_stored_as_written_not_answered_with_500() {
    let scene = Scene::new().await;
    scene.bury().await;
    let reason = "fixed \u{0} by ops \u{1F9EF} \u{7}";
    let response = act(&scene, scene.created, "discard", json!({ "reason": reason })).await;
    assert_eq!(response.status, 200, "{}", response.text);
    let stored: String = scene
        .query_one("SELECT reason FROM operator_actions WHERE event_id = $1", scene.created)
        .await
        .get(0);
    assert_eq!(stored, "fixed \u{FFFD} by ops \u{1F9EF} \u{7}");
}
