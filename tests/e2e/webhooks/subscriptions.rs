//! Issue 42: subscriptions a receiver can verify — heartbeats carrying the status and the last
//! number, the status an endpoint shows and its audit, against the `standardwebhooks` receiver.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{loopback_app_with, Receiver};

const HEARTBEAT: &str = "clinic.webhook.heartbeat.v1";

fn heartbeats(received: &[Value]) -> Vec<Value> {
    received.iter().filter(|r| r["body"]["type"] == HEARTBEAT).cloned().collect()
}

/// Polls `check` (sending due deliveries and heartbeats between tries) until it answers `Some`.
async fn until<T>(
    sender: &clinic_core::webhooks::WebhookSender,
    what: &str,
    mut check: impl AsyncFnMut() -> Option<T>,
) -> T {
    let started = Instant::now();
    loop {
        sender.send_due(10).await.unwrap();
        if let Some(found) = check().await {
            return found;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "{what}: not within 60 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn heartbeats_carry_status_and_last_number_and_status_changes_are_audited() {
    // Status `error` at the first failure (threshold 0) so the test need not wait ten minutes.
    let (app, sender, dispatcher) = loopback_app_with(|config| config.error_after = Duration::ZERO).await;
    let admin = app.workspace.admin.clone();
    let staff = app.workspace.staff.clone();
    let receiver = Receiver::start(0, &[]).await;
    let url = format!("http://127.0.0.1:{}/hook", receiver.port);

    for bad in [json!(-1), json!(86_401), json!("5"), json!(1.5)] {
        let body = json!({"url": url, "heartbeatSeconds": bad});
        let refused = app.call("POST", "/v1/webhooks/endpoints", Some(&admin), Some(body)).await;
        assert_eq!(refused.status, 422, "{bad}: {}", refused.text);
        assert!(refused.text.contains("heartbeatSeconds"), "{}", refused.text);
    }
    assert_eq!(app.count("SELECT 1 FROM webhook_endpoints").await, 0, "nothing written");

    let body = json!({"url": url, "eventTypes": ["appointment.created"], "heartbeatSeconds": 1});
    let created = app.call("POST", "/v1/webhooks/endpoints", Some(&admin), Some(body)).await;
    assert_eq!(created.status, 201, "{}", created.text);
    assert_eq!(created.body["status"], "active");
    assert_eq!(created.body["lastSequence"], 0);
    assert_eq!(created.body["heartbeatSeconds"], 1);
    let secret = created.body["secret"].as_str().unwrap().to_owned();
    receiver.call("POST", "/_secrets", Some(json!({"secrets": [secret]}))).await;
    let path = format!("/v1/webhooks/endpoints/{}", created.body["id"].as_str().unwrap());

    let practitioner = app.create_practitioner(&staff).await;
    let patient = app.create_patient(&staff, json!({"givenName": "Beat", "familyName": "Keeper"})).await;
    app.book(&staff, &patient, &practitioner, "2031-08-01T09:00:00Z", "2031-08-01T09:30:00Z").await;
    dispatcher.drain_once().await.unwrap();

    // Idle after delivery 1: a verified heartbeat with the status and the last number, no number of
    // its own.
    let beat = until(&sender, "a heartbeat", async || heartbeats(&receiver.received().await).pop()).await;
    assert_eq!(beat["verified"], json!([true]), "{beat}");
    assert_eq!(beat["body"]["data"]["lastSequence"], 1, "{beat}");
    assert_eq!(beat["body"]["data"]["status"], "active");
    assert_eq!(beat["body"]["data"]["heartbeatSeconds"], 1);
    assert_eq!(beat["body"]["specversion"], "1.0");
    assert!(beat["body"].get("sequence").is_none(), "a heartbeat is not a numbered delivery: {beat}");
    let delivered: Vec<Value> =
        receiver.received().await.into_iter().filter(|r| r["body"]["type"] != HEARTBEAT).collect();
    assert_eq!(delivered.len(), 1);
    assert_eq!(delivered[0]["body"]["sequence"], "0000000000000000001");
    let shown = app.call("GET", &path, Some(&admin), None).await;
    assert_eq!(shown.body["lastSequence"], 1, "{}", shown.text);

    // The receiver fails: the next heartbeat's failure makes the status `error` (GET shows it).
    receiver.answer(503).await;
    until(&sender, "status error", async || {
        let shown = app.call("GET", &path, Some(&admin), None).await;
        (shown.body["status"] == "error").then_some(())
    })
    .await;
    // It answers again: the next heartbeat makes it `active`, and says so.
    receiver.answer(204).await;
    until(&sender, "status active", async || {
        let shown = app.call("GET", &path, Some(&admin), None).await;
        (shown.body["status"] == "active").then_some(())
    })
    .await;
    // The workspace's webhook fan-out paused by an operator: no new event reaches the endpoint, so
    // it shows `off` (GET, and the heartbeats it still gets say so); resumed, `active` again.
    let pause = json!({"listener": "webhook_fan_out", "reason": "receiver migration"});
    let paused = app.call("POST", "/v1/system/listeners/pause", Some(&admin), Some(pause.clone())).await;
    assert_eq!(paused.status, 200, "{}", paused.text);
    assert_eq!(app.call("GET", &path, Some(&admin), None).await.body["status"], "off");
    let listed = app.call("GET", "/v1/webhooks/endpoints", Some(&admin), None).await;
    assert_eq!(listed.body["items"][0]["status"], "off", "{}", listed.text);
    let seen = heartbeats(&receiver.received().await).len();
    let off_beat = until(&sender, "a heartbeat saying off", async || {
        heartbeats(&receiver.received().await)
            .into_iter()
            .skip(seen)
            .find(|b| b["body"]["data"]["status"] == "off")
    })
    .await;
    assert_eq!(off_beat["verified"], json!([true]), "{off_beat}");
    // A success while paused keeps it `off` for the receiver (the sender's health is kept apart).
    assert_eq!(app.call("GET", &path, Some(&admin), None).await.body["status"], "off");
    let resume = json!({"listener": "webhook_fan_out", "reason": "done"});
    let resumed = app.call("POST", "/v1/system/listeners/resume", Some(&admin), Some(resume)).await;
    assert_eq!(resumed.status, 200, "{}", resumed.text);
    assert_eq!(app.call("GET", &path, Some(&admin), None).await.body["status"], "active");
    let seen = heartbeats(&receiver.received().await).len();
    until(&sender, "a heartbeat saying active", async || {
        heartbeats(&receiver.received().await)
            .into_iter()
            .skip(seen)
            .find(|b| b["body"]["data"]["status"] == "active")
    })
    .await;

    // Disabled: `off`, and no heartbeat goes out while off.
    let off = app.call("PATCH", &path, Some(&admin), Some(json!({"enabled": false}))).await;
    assert_eq!(off.status, 200, "{}", off.text);
    assert_eq!(off.body["status"], "off");
    let before = heartbeats(&receiver.received().await).len();
    let quiet = Instant::now();
    while quiet.elapsed() < Duration::from_millis(2_500) {
        sender.send_due(10).await.unwrap();
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(heartbeats(&receiver.received().await).len(), before, "no heartbeat while off");

    // Every status change is in the audit, codes only, in order.
    let conn = app.db.pool.get().await.unwrap();
    let changes: Vec<(String, Value)> = conn
        .query(
            "SELECT actor, detail FROM webhook_endpoint_actions WHERE action = 'status' ORDER BY created_at, id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    let steps: Vec<(String, String)> = changes
        .iter()
        .map(|(_, d)| (d["from"].as_str().unwrap().to_owned(), d["to"].as_str().unwrap().to_owned()))
        .collect();
    let expected =
        [("active", "error"), ("error", "active"), ("active", "off"), ("off", "active"), ("active", "off")];
    assert_eq!(steps, expected.map(|(a, b)| (a.to_owned(), b.to_owned())).to_vec(), "{changes:?}");
    assert_eq!(changes[0].0, "system");
    assert_eq!(changes[2].0, changes[3].0, "the pause and the resume are the operator's");
    assert_ne!(changes[2].0, "system");
    drop(receiver.child);
}

/// An endpoint enabled or disabled while an operator has paused the workspace's fan-out: receivers
/// keep seeing `off` until the resume, the enable and disable themselves are audited, and a status
/// row is written only when the status a receiver sees changes — the pause (active → off), not the
/// enable or disable inside it, not the resume of a disabled endpoint, and the enable after it
/// (off → active).
#[tokio::test]
async fn enabling_or_disabling_while_the_fan_out_is_paused_audits_only_the_status_receivers_see() {
    let (app, _sender, _dispatcher) = loopback_app_with(|_| {}).await;
    let admin = app.workspace.admin.clone();
    let (receiver, path) = super::receiving_endpoint(&app).await;
    let status = async || app.call("GET", &path, Some(&admin), None).await.body["status"].clone();
    let patch = async |enabled: bool| {
        let answer = app.call("PATCH", &path, Some(&admin), Some(json!({"enabled": enabled}))).await;
        assert_eq!(answer.status, 200, "{}", answer.text);
        answer.body["status"].clone()
    };
    let listener = |action: &str, reason: &str| {
        let body = json!({"listener": "webhook_fan_out", "reason": reason});
        (format!("/v1/system/listeners/{action}"), body)
    };

    let (pause, body) = listener("pause", "receiver migration");
    assert_eq!(app.call("POST", &pause, Some(&admin), Some(body)).await.status, 200);
    assert_eq!(status().await, "off");
    assert_eq!(patch(false).await, "off", "disabled while paused");
    assert_eq!(patch(true).await, "off", "enabled while paused: still off for receivers");
    assert_eq!(status().await, "off");
    assert_eq!(patch(false).await, "off");
    let (resume, body) = listener("resume", "done");
    assert_eq!(app.call("POST", &resume, Some(&admin), Some(body)).await.status, 200);
    assert_eq!(status().await, "off", "resumed, but disabled");
    assert_eq!(patch(true).await, "active", "enabled after the resume");

    let conn = app.db.pool.get().await.unwrap();
    let rows = conn
        .query("SELECT action, detail FROM webhook_endpoint_actions ORDER BY created_at, id", &[])
        .await
        .unwrap();
    let actions: Vec<String> = rows.iter().map(|row| row.get::<_, String>(0)).collect();
    assert_eq!(
        actions.iter().filter(|a| *a == "disable" || *a == "enable").count(),
        4,
        "every enable and disable is audited: {actions:?}"
    );
    let steps: Vec<(String, String)> = rows
        .iter()
        .filter(|row| row.get::<_, String>(0) == "status")
        .map(|row| {
            let detail: Value = row.get(1);
            (detail["from"].as_str().unwrap().to_owned(), detail["to"].as_str().unwrap().to_owned())
        })
        .collect();
    let expected = [("active", "off"), ("off", "active")].map(|(a, b)| (a.to_owned(), b.to_owned()));
    assert_eq!(steps, expected.to_vec(), "status rows only where the seen status changed: {actions:?}");
    drop(receiver.child);
}

/// Replay by number: every numbered delivery after N, in order, whatever its state, for an admin or
/// a partner's read-only `integration` token of the workspace — a token that can call nothing else.
#[tokio::test]
async fn replay_by_number_answers_the_numbered_deliveries_to_admins_and_integration_tokens_only() {
    let (app, sender, dispatcher) = loopback_app_with(|_| {}).await;
    let admin = app.workspace.admin.clone();
    let staff = app.workspace.staff.clone();
    let (receiver, path) = super::receiving_endpoint(&app).await;
    let practitioner = app.create_practitioner(&staff).await;
    let patient = app.create_patient(&staff, json!({"givenName": "Replaya", "familyName": "Numbers"})).await;
    let mut booked = Vec::new();
    for day in 1..=2 {
        let (starts, ends) = (format!("2031-09-0{day}T09:00:00Z"), format!("2031-09-0{day}T09:30:00Z"));
        booked.push(app.book(&staff, &patient, &practitioner, &starts, &ends).await["id"].clone());
    }
    dispatcher.drain_once().await.unwrap();
    super::send_until(&sender, &receiver, "two deliveries", |r| r.len() >= 2).await;
    let off = app.call("PATCH", &path, Some(&admin), Some(json!({"enabled": false}))).await;
    assert_eq!(off.status, 200, "{}", off.text);
    for day in 3..=5 {
        let (starts, ends) = (format!("2031-09-0{day}T09:00:00Z"), format!("2031-09-0{day}T09:30:00Z"));
        booked.push(app.book(&staff, &patient, &practitioner, &starts, &ends).await["id"].clone());
    }
    dispatcher.drain_once().await.unwrap();

    let integration = clinic_testkit::app::token(
        app.workspace.id,
        ulid::Ulid::generate(),
        clinic_http::auth::Role::Integration,
    );
    for token in [&admin, &integration] {
        let all = app.call("GET", &format!("{path}/events"), Some(token), None).await;
        assert_eq!(all.status, 200, "{}", all.text);
        assert_eq!(all.body["lastSequence"], 5);
        assert_eq!(all.body["status"], "off");
        assert_eq!(all.body["nextAfter"], Value::Null);
        let items = all.body["items"].as_array().unwrap();
        let numbers: Vec<i64> = items.iter().map(|i| i["sequence"].as_i64().unwrap()).collect();
        assert_eq!(numbers, vec![1, 2, 3, 4, 5], "{}", all.text);
        let statuses: Vec<&str> = items.iter().map(|i| i["status"].as_str().unwrap()).collect();
        assert_eq!(statuses, vec!["delivered", "delivered", "pending", "pending", "pending"]);
        // Numbered in the order the fan-outs committed (not necessarily the events' order): each
        // booking once, identified by its appointment.
        let mut subjects: Vec<String> = items.iter().map(|i| i["resourceId"].to_string()).collect();
        subjects.sort();
        let mut expected: Vec<String> = booked.iter().map(Value::to_string).collect();
        expected.sort();
        assert_eq!(subjects, expected);
        assert!(items.iter().all(|i| i["type"] == "clinic.appointment.created.v1"));
        assert!(!all.text.contains("Replaya") && !all.text.contains("Numbers"), "ids only: {}", all.text);
    }
    // The replayed number is the one the body carried (the two were posted concurrently, so in
    // either order).
    let received = receiver.received().await;
    let second = received.iter().find(|r| r["body"]["sequence"] == "0000000000000000002").unwrap();
    let replayed = app.call("GET", &format!("{path}/events?after=1&limit=1"), Some(&integration), None).await;
    assert_eq!(replayed.body["items"][0]["webhookId"], second["id"]);
    assert_eq!(replayed.body["nextAfter"], 2, "a full page says where to go on");
    let page = app.call("GET", &format!("{path}/events?after=2&limit=2"), Some(&admin), None).await;
    let numbers: Vec<i64> =
        page.body["items"].as_array().unwrap().iter().map(|i| i["sequence"].as_i64().unwrap()).collect();
    assert_eq!(numbers, vec![3, 4]);
    let tail = app.call("GET", &format!("{path}/events?after=5"), Some(&admin), None).await;
    assert_eq!(tail.body["items"], json!([]));

    // Bad parameters: 400 naming the parameter.
    for (query, field) in [
        ("after=-1", "after"),
        ("after=x", "after"),
        ("limit=0", "limit"),
        ("limit=101", "limit"),
        ("limit=", "limit"),
    ] {
        let refused = app.call("GET", &format!("{path}/events?{query}"), Some(&admin), None).await;
        assert_eq!(refused.status, 400, "{query}: {}", refused.text);
        assert!(refused.text.contains(field), "{query}: {}", refused.text);
    }
    let malformed = app.call("GET", "/v1/webhooks/endpoints/nope/events", Some(&admin), None).await;
    assert_eq!(malformed.status, 400, "{}", malformed.text);

    // The integration token reads this endpoint and its replay, nothing else; staff may not replay.
    assert_eq!(app.call("GET", &path, Some(&integration), None).await.status, 200);
    let appointment = format!("/v1/appointments/{}", booked[0].as_str().unwrap());
    let patient_path = format!("/v1/patients/{}", patient["id"].as_str().unwrap());
    for (method, route, body) in [
        ("GET", "/v1/webhooks/endpoints".to_owned(), None),
        ("PATCH", path.clone(), Some(json!({"enabled": true}))),
        ("POST", format!("{path}/recover"), Some(json!({"since": "2031-01-01T00:00:00Z"}))),
        ("GET", "/v1/webhooks/deliveries".to_owned(), None),
        ("GET", appointment.clone(), None),
        ("POST", format!("{appointment}/cancel"), Some(json!({}))),
        ("GET", patient_path.clone(), None),
        ("GET", "/v1/patients".to_owned(), None),
        ("GET", "/v1/notifications".to_owned(), None),
        ("GET", "/v1/system/outbox".to_owned(), None),
    ] {
        let answer = app.call(method, &route, Some(&integration), body).await;
        assert_eq!(answer.status, 403, "{method} {route}: {}", answer.text);
    }
    assert_eq!(app.count("SELECT 1 FROM appointments WHERE status = 'cancelled'").await, 0);
    assert_eq!(app.call("GET", &format!("{path}/events"), Some(&staff), None).await.status, 403);
    // Another workspace's tokens see it as missing.
    let other = app.add_workspace().await;
    let foreign =
        clinic_testkit::app::token(other.id, ulid::Ulid::generate(), clinic_http::auth::Role::Integration);
    assert_eq!(app.call("GET", &format!("{path}/events"), Some(&foreign), None).await.status, 404);
    assert_eq!(app.call("GET", &format!("{path}/events"), Some(&other.admin), None).await.status, 404);
    drop(receiver.child);
}

/// `payloadFormat: fhir-id-only`: a FHIR R5 `subscription-notification` Bundle per delivery (and per
/// heartbeat), signed like every delivery, each body validated by the PyPI `fhir.resources` R5
/// models in the receiver; identifiers only.
#[tokio::test]
async fn fhir_id_only_endpoints_get_valid_r5_subscription_notifications() {
    let (app, sender, dispatcher) = loopback_app_with(|_| {}).await;
    let admin = app.workspace.admin.clone();
    let staff = app.workspace.staff.clone();
    let receiver = Receiver::start(0, &[]).await;
    let url = format!("http://127.0.0.1:{}/hook", receiver.port);
    let refused = app
        .call(
            "POST",
            "/v1/webhooks/endpoints",
            Some(&admin),
            Some(json!({"url": url, "payloadFormat": "hl7v2"})),
        )
        .await;
    assert_eq!(refused.status, 422, "{}", refused.text);
    assert!(refused.text.contains("payloadFormat"), "{}", refused.text);

    let body = json!({"url": url, "payloadFormat": "fhir-id-only", "heartbeatSeconds": 1});
    let created = app.call("POST", "/v1/webhooks/endpoints", Some(&admin), Some(body)).await;
    assert_eq!(created.status, 201, "{}", created.text);
    assert_eq!(created.body["payloadFormat"], "fhir-id-only");
    let endpoint = created.body["id"].as_str().unwrap().to_owned();
    let secret = created.body["secret"].as_str().unwrap().to_owned();
    receiver.call("POST", "/_secrets", Some(json!({"secrets": [secret]}))).await;

    let practitioner = app.create_practitioner(&staff).await;
    let patient =
        app.create_patient(&staff, json!({"givenName": "Fhirella", "familyName": "Quillworth"})).await;
    let booked =
        app.book(&staff, &patient, &practitioner, "2031-10-01T09:00:00Z", "2031-10-01T09:30:00Z").await;
    dispatcher.drain_once().await.unwrap();
    let notifications = |received: &[Value], kind: &str| -> Vec<Value> {
        received.iter().filter(|r| r["body"]["entry"][0]["resource"]["type"] == kind).cloned().collect()
    };
    let received = until(&sender, "three notifications and a heartbeat", async || {
        let received = receiver.received().await;
        let enough = notifications(&received, "event-notification").len() >= 3
            && !notifications(&received, "heartbeat").is_empty();
        enough.then_some(received)
    })
    .await;
    for record in &received {
        assert_eq!(record["fhir"], "valid", "fhir.resources (R5) rejected it: {record:#}");
        assert_eq!(record["verified"], json!([true]));
        assert_eq!(record["contentType"], "application/fhir+json");
        let bundle = &record["body"];
        assert_eq!(bundle["resourceType"], "Bundle");
        assert_eq!(bundle["type"], "subscription-notification");
        let status = &bundle["entry"][0]["resource"];
        assert_eq!(status["resourceType"], "SubscriptionStatus");
        assert_eq!(status["status"], "active");
        assert_eq!(status["subscription"]["reference"], format!("Subscription/{endpoint}"));
    }
    let mut focus: Vec<(String, String)> = notifications(&received, "event-notification")
        .iter()
        .map(|r| {
            let status = &r["body"]["entry"][0]["resource"];
            let event = &status["notificationEvent"][0];
            assert_eq!(status["eventsSinceSubscriptionStart"], event["eventNumber"], "{status:#}");
            (
                event["eventNumber"].as_str().unwrap().to_owned(),
                event["focus"]["reference"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    focus.sort();
    let mut expected = vec![
        format!("Practitioner/{}", practitioner["id"].as_str().unwrap()),
        format!("Patient/{}", patient["id"].as_str().unwrap()),
        format!("Appointment/{}", booked["id"].as_str().unwrap()),
    ];
    expected.sort();
    let mut references: Vec<String> = focus.iter().map(|(_, r)| r.clone()).collect();
    references.sort();
    assert_eq!(references, expected, "one notification per event, focus by type and id");
    let numbers: Vec<&str> = focus.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(numbers, vec!["1", "2", "3"], "integer64 event numbers, dense");
    let beat = notifications(&received, "heartbeat").pop().unwrap();
    let status = &beat["body"]["entry"][0]["resource"];
    assert_eq!(status["eventsSinceSubscriptionStart"], "3", "{beat:#}");
    assert!(status.get("notificationEvent").is_none());
    let sent = serde_json::to_string(&received).unwrap();
    assert!(!sent.contains("Fhirella") && !sent.contains("Quillworth"), "ids only");
    drop(receiver.child);
}

/// Issue 42 item 6 (failed on e6934c2: every create answered 201): a workspace has a bounded number
/// of endpoints; one more answers 409 and writes nothing; another workspace is not affected.
#[tokio::test]
async fn a_workspace_has_a_bounded_number_of_webhook_endpoints() {
    let (app, _sender, _dispatcher) = loopback_app_with(|_| {}).await;
    let admin = app.workspace.admin.clone();
    let body = json!({"url": "https://93.184.216.34/hook"});
    let mut created = 0;
    loop {
        let answer = app.call("POST", "/v1/webhooks/endpoints", Some(&admin), Some(body.clone())).await;
        if answer.status != 201 {
            assert_eq!(answer.status, 409, "{}", answer.text);
            assert!(answer.text.contains("at most"), "{}", answer.text);
            break;
        }
        created += 1;
        assert!(created <= 100, "no bound after 100 endpoints");
    }
    assert_eq!(created, clinic_core::webhooks::endpoints::MAX_ENDPOINTS_PER_WORKSPACE);
    assert_eq!(app.count("SELECT 1 FROM webhook_endpoints").await, created, "the refused one wrote nothing");
    let other = app.add_workspace().await;
    let elsewhere = app.call("POST", "/v1/webhooks/endpoints", Some(&other.admin), Some(body)).await;
    assert_eq!(elsewhere.status, 201, "{}", elsewhere.text);
}
