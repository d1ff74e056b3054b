//! The recorded trail in explain (issue #17): the outbox row's history written by V10's trigger
//! (failures with code, time and attempt; holds; lease takeovers — never the happy path), custody per
//! listener start, recorded listener rejections (also listed by `GET /v1/system/rejections`), and the
//! oldest unsettled age beside the oldest live one in the overview.

use std::sync::Arc;

use super::support::{fast_config, Scene};
use clinic_core::dispatch::testing::{FailingTransport, NoopTransport};
use clinic_core::dispatch::StartError;
use clinic_core::ids::{EventId, WorkspaceId};
use clinic_core::listeners::{self, Listener, Rejection};
use serde_json::Value;

async fn explain(scene: &Scene, event: EventId) -> Value {
    let admin = scene.app.workspace.admin.clone();
    let response = scene.app.call("GET", &format!("/v1/system/events/{event}"), Some(&admin), None).await;
    assert_eq!(response.status, 200, "{}", response.text);
    response.body
}

fn section(explanation: &Value, name: &str) -> Vec<Value> {
    explanation["sections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no section {name}"))["rows"]
        .as_array()
        .unwrap()
        .clone()
}

#[tokio::test]
async fn a_clean_dispatch_records_no_history_and_custody_shows_each_start_until_its_receipt() {
    let scene = Scene::new().await;
    scene.dispatch_locally().await;
    assert_eq!(scene.app.count("SELECT 1 FROM outbox_history").await, 0, "the happy path writes nothing");

    // Over a broker: both starts accepted, no receipt yet; then one listener commits its receipt.
    let scene = Scene::new().await;
    scene.dispatcher(Arc::new(NoopTransport), fast_config()).drain_once().await.unwrap();
    assert_eq!(scene.app.count("SELECT 1 FROM outbox_history").await, 0);
    let client = scene.app.db.client().await;
    let stored = clinic_core::events::read::find(&client, scene.created).await.unwrap().unwrap();
    listeners::run(&scene.app.state.pool, Listener::PatientBookingConfirmation, &stored).await.unwrap();
    let body = explain(&scene, scene.created).await;
    let custody = section(&body, "custody");
    assert_eq!(custody.len(), 2, "{custody:?}");
    for start in &custody {
        let settled = start["listener"] == "patient_booking_confirmation";
        assert_eq!(start["settledAt"].is_string(), settled, "{start}");
        assert!(start["startedAt"].is_string(), "{start}");
        assert_eq!(start["restarts"], 0);
        assert!(start["restartedAt"].is_null() && start["stuckAt"].is_null(), "{start}");
    }
    assert!(section(&body, "rejections").is_empty());
}

#[tokio::test]
async fn failures_holds_and_a_lease_takeover_are_recorded_in_the_outbox_history() {
    let scene = Scene::new().await;
    // Attempt 1 fails (retryable, with its code). One step: a drain would claim the row again as soon
    // as its short test backoff ends.
    let failing = FailingTransport::always(StartError::retryable("provider_down", "timeout"));
    scene.dispatcher(Arc::new(failing), fast_config()).step().await.unwrap();
    assert_eq!(scene.status(scene.created).await, "retry");
    // A dispatcher claimed attempt 2 and died: its lease has expired.
    let planted = scene
        .execute(
            "UPDATE event_outbox SET status = 'claimed', claim_token = gen_random_uuid(), \
             claimed_by = 'dispatcher-that-died', attempts = attempts + 1, \
             available_at = now() - interval '1 second', claimed_until = now() - interval '1 second' \
             WHERE event_id = $1",
            scene.created,
        )
        .await;
    assert_eq!(planted, 1);
    // Another dispatcher takes the row over and dispatches it.
    scene.dispatch_locally().await;
    assert_eq!(scene.status(scene.created).await, "dispatched");

    let body = explain(&scene, scene.created).await;
    let outbox = &section(&body, "outbox")[0];
    let history = outbox["history"].as_array().unwrap();
    let kinds: Vec<&str> = history.iter().filter_map(|h| h["kind"].as_str()).collect();
    assert_eq!(kinds, ["failure", "takeover"], "{history:?}");
    let failure = history.iter().find(|h| h["kind"] == "failure").unwrap();
    assert_eq!(failure["errorCode"], "provider_down");
    assert_eq!(failure["attempt"], 1);
    assert_eq!(
        (failure["statusBefore"].as_str(), failure["status"].as_str()),
        (Some("claimed"), Some("retry"))
    );
    assert!(failure["at"].is_string());
    let takeover = history.iter().find(|h| h["kind"] == "takeover").unwrap();
    assert_eq!(takeover["previousClaimedBy"], "dispatcher-that-died");
    assert_eq!(takeover["errorCode"], "lease_expired");
    assert_ne!(takeover["claimedBy"], "dispatcher-that-died");
    // In time order, from creation to the dispatch.
    assert_eq!(history.first().unwrap()["by"], "append");
    assert_eq!(history.last().unwrap()["status"], "dispatched");
    assert!(!body.to_string().contains("timeout"), "error texts stay out of explain");
}

#[tokio::test]
async fn a_hold_is_recorded_once_per_code() {
    let scene = Scene::new().await;
    let admin = scene.app.workspace.admin.clone();
    let pause = serde_json::json!({"listener": "patient_booking_confirmation", "reason": "template bug"});
    let paused = scene.app.call("POST", "/v1/system/listeners/pause", Some(&admin), Some(pause)).await;
    assert_eq!(paused.status, 200, "{}", paused.text);
    scene.dispatch_locally().await;
    // Held again on a later pass (same code): not recorded a second time.
    scene.execute("UPDATE event_outbox SET available_at = now() WHERE event_id = $1", scene.created).await;
    scene.dispatch_locally().await;
    let rows = scene
        .query_one(
            "SELECT count(*), min(kind), min(error_code), min(attempt) FROM outbox_history WHERE event_id = $1",
            scene.created,
        )
        .await;
    assert_eq!(rows.get::<_, i64>(0), 1);
    assert_eq!(rows.get::<_, Option<String>>(1).as_deref(), Some("hold"));
    assert_eq!(rows.get::<_, Option<String>>(2).as_deref(), Some("listener_paused"));
    assert_eq!(rows.get::<_, Option<i32>>(3), Some(1));
}

#[tokio::test]
async fn rejections_are_recorded_shown_in_explain_and_listed_for_the_events_workspace_only() {
    let scene = Scene::new().await;
    let client = scene.app.db.client().await;
    let stored = clinic_core::events::read::find(&client, scene.created).await.unwrap().unwrap();
    let listener = Listener::PatientBookingConfirmation;
    // An altered tenant: filed under the event's real workspace, not the claimed one.
    let mut tenant = stored.clone();
    tenant.workspace_id = WorkspaceId::generate();
    let error = listeners::run(&scene.app.state.pool, listener, &tenant).await.unwrap_err();
    assert_eq!(error.rejection(), Some(Rejection::TenantMismatch));
    // A forged id that matches no event: recorded under the id it claimed.
    let mut forged = stored.clone();
    forged.id = EventId::generate();
    let error = listeners::run(&scene.app.state.pool, listener, &forged).await.unwrap_err();
    assert_eq!(error.rejection(), Some(Rejection::UnknownEvent));
    let recorded = scene
        .query_one(
            "SELECT workspace_id, reason, transport FROM listener_rejections WHERE event_id = $1",
            forged.id,
        )
        .await;
    assert_eq!(recorded.get::<_, WorkspaceId>(0), stored.workspace_id);
    assert_eq!(recorded.get::<_, String>(1), "unknown_event");
    assert_eq!(recorded.get::<_, String>(2), "local");

    let body = explain(&scene, scene.created).await;
    let rejections = section(&body, "rejections");
    assert_eq!(rejections.len(), 1, "{rejections:?}");
    assert_eq!(rejections[0]["reason"], "tenant_mismatch");
    assert_eq!(rejections[0]["listener"], listener.as_str());
    assert_eq!(rejections[0]["workspaceId"], stored.workspace_id.to_string());
    let path = section(&body, "listeners");
    let confirmation = path.iter().find(|l| l["listener"] == listener.as_str()).unwrap();
    assert_eq!(confirmation["outcome"], "rejected");
    assert_eq!(confirmation["rejectedReason"], "tenant_mismatch");

    let admin = scene.app.workspace.admin.clone();
    let listed = scene.app.call("GET", "/v1/system/rejections", Some(&admin), None).await;
    assert_eq!(listed.status, 200, "{}", listed.text);
    let items = listed.body["items"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{}", listed.text);
    assert_eq!(items[0]["eventId"], forged.id.to_string(), "newest first");
    let one = format!("/v1/system/rejections?eventId={}&limit=1", forged.id);
    let filtered = scene.app.call("GET", &one, Some(&admin), None).await;
    assert_eq!(filtered.body["items"].as_array().unwrap().len(), 1, "{}", filtered.text);
    let paged = scene.app.call("GET", "/v1/system/rejections?limit=1", Some(&admin), None).await;
    let cursor = paged.body["nextCursor"].as_str().unwrap().to_owned();
    let next = scene
        .app
        .call("GET", &format!("/v1/system/rejections?limit=1&cursor={cursor}"), Some(&admin), None)
        .await;
    assert_eq!(next.body["items"][0]["reason"], "tenant_mismatch", "{}", next.text);
    let bad = scene.app.call("GET", "/v1/system/rejections?reason=nope", Some(&admin), None).await;
    assert_eq!(bad.status, 400, "{}", bad.text);
    assert_eq!(bad.body["field"], "reason");
    let staff = scene.app.workspace.staff.clone();
    assert_eq!(scene.app.call("GET", "/v1/system/rejections", Some(&staff), None).await.status, 403);
    for secret in ["Chest pain", "Grace", "Hopper"] {
        assert!(!listed.text.contains(secret) && !body.to_string().contains(secret), "leaks {secret}");
    }
}

#[tokio::test]
async fn the_overview_shows_the_oldest_unsettled_age_beside_the_oldest_live_age() {
    let scene = Scene::new().await;
    // The broker accepted the starts and lost them: dispatched, unsettled.
    scene.dispatcher(Arc::new(NoopTransport), fast_config()).drain_once().await.unwrap();
    scene
        .execute(
            "UPDATE event_outbox SET dispatched_at = now() - interval '5 minutes' WHERE event_id = $1",
            scene.created,
        )
        .await;
    let admin = scene.app.workspace.admin.clone();
    let overview = scene.app.call("GET", "/v1/system/overview", Some(&admin), None).await;
    assert_eq!(overview.status, 200, "{}", overview.text);
    let unsettled = overview.body["oldestUnsettledAgeMs"].as_i64().unwrap();
    assert!((300_000..400_000).contains(&unsettled), "{}", overview.text);
    assert!(overview.body["oldestLiveAgeMs"].is_i64());
    // The same figure as the metric's reader.
    let conn = scene.app.state.pool.get().await.unwrap();
    let ages = clinic_core::outbox::lag::read_ages(&conn).await.unwrap();
    assert!((ages.oldest_unsettled_ms - unsettled).abs() < 60_000, "{ages:?} vs {unsettled}");
}
