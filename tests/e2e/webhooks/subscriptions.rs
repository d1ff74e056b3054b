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
    let expected = [("active", "error"), ("error", "active"), ("active", "off")];
    assert_eq!(steps, expected.map(|(a, b)| (a.to_owned(), b.to_owned())).to_vec(), "{changes:?}");
    assert_eq!(changes[0].0, "system");
    drop(receiver.child);
}
