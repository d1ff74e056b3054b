//! Webhooks end to end against a real receiver on 127.0.0.1 (`tests/webhooks/receiver.py`) that
//! verifies every delivery with the PyPI `standardwebhooks` package: receiver down → retries →
//! delivered once per `webhook-id`; filters; a rotation during which both secrets verify; a final
//! 4xx, recover-since (same `webhook-id`); disable; and a scan of deliveries, attempts, the audit,
//! the bodies and the logs for the patient's data and the secrets.
//!
//! The Python interpreter is `CLINIC_TEST_WEBHOOK_PYTHON` (tests/run points it at its venv, where
//! it installs `standardwebhooks`), else `.local/venv/bin/python3`.
//!
//! Longer than the 500-line guideline: its six end-to-end cases share one set-up (a `clinic dev`-shaped
//! app, the reference receiver in Python, the sender) and one set of waits; split, each file would
//! repeat that harness.

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clinic_core::dispatch::{DispatchConfig, Dispatcher, LocalTransport};
use clinic_core::webhooks::client::Timeouts;
use clinic_core::webhooks::guard::Egress;
use clinic_core::webhooks::{WebhookConfig, WebhookSender};
use clinic_http::router;
use clinic_testkit::app::TestApp;
use serde_json::{json, Value};
use tokio::io::AsyncBufReadExt;

mod reference_receiver;
mod subscriptions;

const PATIENT_GIVEN: &str = "Zephyrine";
const PATIENT_FAMILY: &str = "Quarterwood";
const REASON: &str = "persistent-migraine-confidential";

fn python() -> String {
    clinic_testkit::test_env::var("CLINIC_TEST_WEBHOOK_PYTHON").unwrap_or_else(|| {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../.local/venv/bin/python3");
        root.to_string_lossy().into_owned()
    })
}

struct Receiver {
    child: tokio::process::Child,
    port: u16,
    http: String,
}

impl Receiver {
    async fn start(port: u16, secrets: &[&str]) -> Receiver {
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("webhooks/receiver.py");
        let mut child = tokio::process::Command::new(python())
            .arg(script)
            .arg(port.to_string())
            .args(secrets)
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("starting the receiver with {} failed: {e}", python()));
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        let mut reader = tokio::io::BufReader::new(stdout);
        let read = reader.read_line(&mut line);
        tokio::time::timeout(Duration::from_secs(30), read).await.expect("receiver started").unwrap();
        let port: u16 = line.trim().parse().unwrap_or_else(|_| {
            panic!("the receiver did not start (is `standardwebhooks` installed for {}?)", python())
        });
        Receiver { child, port, http: format!("127.0.0.1:{port}") }
    }

    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let mut stream = tokio::net::TcpStream::connect(&self.http).await.unwrap();
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.http,
            body.len()
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        let (_, json) = answer.split_once("\r\n\r\n").unwrap();
        serde_json::from_str(json).unwrap_or(Value::Null)
    }

    async fn received(&self) -> Vec<Value> {
        self.call("GET", "/_received", None).await.as_array().cloned().unwrap_or_default()
    }

    async fn answer(&self, status: u16) {
        self.call("POST", "/_answer", Some(json!({"status": status}))).await;
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Sends due deliveries until `done` holds for what the receiver saw (bounded generously).
async fn send_until(
    sender: &WebhookSender,
    receiver: &Receiver,
    what: &str,
    done: impl Fn(&[Value]) -> bool,
) {
    let started = Instant::now();
    loop {
        sender.send_due(10).await.unwrap();
        let received = receiver.received().await;
        if done(&received) {
            return;
        }
        assert!(started.elapsed() < Duration::from_secs(90), "{what}: receiver saw {received:#?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn webhooks_reach_a_standard_webhooks_receiver() {
    let logs = clinic_testkit::capture_logs();
    let mut app = TestApp::new().await;
    app.state.api.webhook_egress = Egress { allow_loopback_http: true };
    app.router = router(app.state.clone());
    let admin = app.workspace.admin.clone();
    let staff = app.workspace.staff.clone();

    // SSRF at save: private, metadata and non-https answer 422 naming `url`; nothing is stored.
    for url in ["https://10.0.0.1/hook", "https://169.254.169.254/", "http://example.com/", "https://[::1]/"]
    {
        let refused =
            app.call("POST", "/v1/webhooks/endpoints", Some(&admin), Some(json!({"url": url}))).await;
        assert_eq!(refused.status, 422, "{url}: {}", refused.text);
        assert_eq!(refused.body["field"], "url", "{}", refused.text);
    }
    let as_staff = app
        .call("POST", "/v1/webhooks/endpoints", Some(&staff), Some(json!({"url": "https://x.example/"})))
        .await;
    assert_eq!(as_staff.status, 403);
    assert_eq!(app.count("SELECT 1 FROM webhook_endpoints").await, 0);

    // The receiver's port is chosen now, but nothing listens there yet: the receiver is down.
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/hook");
    let body = json!({"url": url, "description": "billing", "eventTypes": ["appointment.created"]});
    let created = app.call("POST", "/v1/webhooks/endpoints", Some(&admin), Some(body)).await;
    assert_eq!(created.status, 201, "{}", created.text);
    let secret = created.body["secret"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("whsec_"));
    let endpoint = created.body["id"].as_str().unwrap().to_owned();
    let listed = app.call("GET", "/v1/webhooks/endpoints", Some(&admin), None).await;
    assert!(!listed.text.contains(&secret), "lists never show the secret");
    // Another endpoint that only wants deletions: it must receive nothing here.
    let other = json!({"url": format!("http://127.0.0.1:{port}/other"), "eventTypes": ["patient.deleted"]});
    let other = app.call("POST", "/v1/webhooks/endpoints", Some(&admin), Some(other)).await;
    assert_eq!(other.status, 201, "{}", other.text);

    let (sender, dispatcher) = loopback_pipeline(&app, |_| {});

    let practitioner = app.create_practitioner(&staff).await;
    let patient =
        app.create_patient(&staff, json!({"givenName": PATIENT_GIVEN, "familyName": PATIENT_FAMILY})).await;
    let booking = json!({"patientId": patient["id"], "practitionerId": practitioner["id"],
        "startsAt": "2031-03-01T09:00:00Z", "endsAt": "2031-03-01T09:30:00Z", "reason": REASON});
    let booked = app.call("POST", "/v1/appointments", Some(&staff), Some(booking)).await;
    assert_eq!(booked.status, 201, "{}", booked.text);
    let appointment = booked.body["id"].as_str().unwrap().to_owned();
    dispatcher.drain_once().await.unwrap();
    // Only the booking is subscribed: one delivery, and the fan-out ran only for that event.
    assert_eq!(app.count("SELECT 1 FROM webhook_deliveries").await, 1);
    assert_eq!(app.count("SELECT 1 FROM listener_receipts WHERE listener = 'webhook_fan_out'").await, 1);
    // Its first attempt runs right after the fan-out and finds nobody listening.
    let started = Instant::now();
    while app.count("SELECT 1 FROM webhook_attempts WHERE error_code = 'connect_failed'").await == 0 {
        assert!(started.elapsed() < Duration::from_secs(30), "no first attempt");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The receiver comes up; the retry (5 s later) is delivered and verified.
    let receiver = Receiver::start(port, &[&secret]).await;
    assert_eq!(receiver.port, port);
    send_until(&sender, &receiver, "first delivery", |r| !r.is_empty()).await;
    let first = receiver.received().await[0].clone();
    assert_eq!(first["verified"], json!([true]), "{first}");
    assert_eq!(first["body"]["type"], "clinic.appointment.created.v1");
    assert_eq!(first["body"]["specversion"], "1.0");
    assert_eq!(first["body"]["subject"], appointment.as_str());
    assert_eq!(first["body"]["sequence"], "0000000000000000001", "the endpoint's first delivery");
    let delivery_id: String = {
        let conn = app.db.pool.get().await.unwrap();
        let row = conn.query_one("SELECT id, status, attempts FROM webhook_deliveries", &[]).await.unwrap();
        assert_eq!(row.get::<_, String>(1), "delivered");
        assert_eq!(row.get::<_, i32>(2), 2, "one failed attempt, then the delivery");
        ulid::Ulid::from(row.get::<_, uuid::Uuid>(0)).to_string()
    };
    assert_eq!(first["id"], delivery_id.as_str(), "webhook-id is the delivery id");

    // Rotation: both secrets sign during the overlap; the receiver checks each on its own.
    let rotated = app
        .call(
            "POST",
            &format!("/v1/webhooks/endpoints/{endpoint}/rotate"),
            Some(&admin),
            Some(json!({"overlapHours": 1})),
        )
        .await;
    assert_eq!(rotated.status, 200, "{}", rotated.text);
    let new_secret = rotated.body["secret"].as_str().unwrap().to_owned();
    assert_ne!(new_secret, secret);
    receiver.call("POST", "/_secrets", Some(json!({"secrets": [new_secret, secret]}))).await;
    let widen = json!({"eventTypes": ["appointment.created", "appointment.cancelled"]});
    let widened =
        app.call("PATCH", &format!("/v1/webhooks/endpoints/{endpoint}"), Some(&admin), Some(widen)).await;
    assert_eq!(widened.status, 200, "{}", widened.text);
    let cancel = app
        .call("POST", &format!("/v1/appointments/{appointment}/cancel"), Some(&staff), Some(json!({})))
        .await;
    assert_eq!(cancel.status, 200, "{}", cancel.text);
    dispatcher.drain_once().await.unwrap();
    send_until(&sender, &receiver, "cancellation", |r| r.len() >= 2).await;
    let second = receiver.received().await[1].clone();
    assert_eq!(second["body"]["type"], "clinic.appointment.cancelled.v1");
    assert_eq!(second["signatures"], 2);
    assert_eq!(second["verified"], json!([true, true]), "both secrets verify during the overlap");

    // A final 4xx fails the delivery at once; recover-since sends it again with the same webhook-id.
    receiver.answer(410).await;
    let since = chrono::Utc::now().to_rfc3339();
    let later = json!({"patientId": patient["id"], "practitionerId": practitioner["id"],
        "startsAt": "2031-04-01T09:00:00Z", "endsAt": "2031-04-01T09:30:00Z"});
    assert_eq!(app.call("POST", "/v1/appointments", Some(&staff), Some(later)).await.status, 201);
    dispatcher.drain_once().await.unwrap();
    send_until(&sender, &receiver, "the refused delivery", |r| r.len() >= 3).await;
    let started = Instant::now();
    while app.count("SELECT 1 FROM webhook_deliveries WHERE status = 'failed'").await != 1 {
        assert!(started.elapsed() < Duration::from_secs(30), "the 410 did not fail the delivery");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    receiver.answer(204).await;
    let recover = json!({"since": since});
    let recovered = app
        .call("POST", &format!("/v1/webhooks/endpoints/{endpoint}/recover"), Some(&admin), Some(recover))
        .await;
    assert_eq!(recovered.status, 200, "{}", recovered.text);
    assert_eq!(recovered.body["recovered"], 1);
    send_until(&sender, &receiver, "the recovered delivery", |r| r.len() >= 4).await;
    let received = receiver.received().await;
    assert_eq!(received[2]["id"], received[3]["id"], "a resend keeps its webhook-id");
    assert_eq!(received[1]["body"]["sequence"], "0000000000000000002");
    assert_eq!(received[2]["body"]["sequence"], "0000000000000000003");
    assert_eq!(received[3]["body"]["sequence"], received[2]["body"]["sequence"], "and its number");
    assert_eq!(received[3]["verified"], json!([true, true]));
    assert_eq!(app.count("SELECT 1 FROM webhook_deliveries WHERE status <> 'delivered'").await, 0);

    // Disabled: the delivery is created and held (no attempt) until the endpoint is enabled.
    let off = app
        .call(
            "PATCH",
            &format!("/v1/webhooks/endpoints/{endpoint}"),
            Some(&admin),
            Some(json!({"enabled": false})),
        )
        .await;
    assert_eq!(off.status, 200, "{}", off.text);
    let third = json!({"patientId": patient["id"], "practitionerId": practitioner["id"],
        "startsAt": "2031-05-01T09:00:00Z", "endsAt": "2031-05-01T09:30:00Z"});
    assert_eq!(app.call("POST", "/v1/appointments", Some(&staff), Some(third)).await.status, 201);
    dispatcher.drain_once().await.unwrap();
    assert_eq!(app.count("SELECT 1 FROM webhook_deliveries").await, 4);
    assert_eq!(
        app.count("SELECT 1 FROM webhook_deliveries WHERE status = 'pending' AND attempts = 0").await,
        1
    );
    // Every webhook-id arrived, none more often than the recover asked for (at-least-once).
    let mut ids: Vec<String> = receiver.received().await.iter().map(|r| r["id"].to_string()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 3);
    let other_id = other.body["id"].as_str().unwrap();
    let audit = app.count("SELECT 1 FROM webhook_endpoint_actions").await;
    assert_eq!(audit, 2 + 1 + 1 + 1 + 1 + 1, "create ×2, rotate, update, recover, disable, status off");
    assert!(receiver
        .received()
        .await
        .iter()
        .all(|r| r["body"]["data"]["workspaceId"] == app.workspace.id.to_string()));
    assert_eq!(
        app.count(&format!(
            "SELECT 1 FROM webhook_deliveries WHERE endpoint_id::text = '{}'",
            uuid_of(other_id)
        ))
        .await,
        0
    );

    // Nothing about the patient, and no secret, anywhere webhooks write or send.
    let conn = app.db.pool.get().await.unwrap();
    let mut stored = String::new();
    for table in ["webhook_deliveries", "webhook_attempts", "webhook_endpoint_actions"] {
        let rows = conn.query(&format!("SELECT t::text FROM {table} t"), &[]).await.unwrap();
        stored.extend(rows.iter().map(|row| row.get::<_, String>(0)));
    }
    let sent = serde_json::to_string(&receiver.received().await).unwrap();
    let logged = logs.text();
    for (place, text) in [("tables", &stored), ("bodies", &sent), ("logs", &logged)] {
        for needle in [PATIENT_GIVEN, PATIENT_FAMILY, REASON, secret.as_str(), new_secret.as_str()] {
            assert!(!text.contains(needle), "{needle} found in the webhook {place}");
        }
    }
    drop(receiver.child);
}

fn uuid_of(id: &str) -> uuid::Uuid {
    uuid::Uuid::from(id.parse::<ulid::Ulid>().unwrap())
}

/// An app whose webhooks may reach the loopback receiver, with a dispatcher (local transport) and a
/// sender with short timeouts.
async fn loopback_app() -> (TestApp, Arc<WebhookSender>, Dispatcher) {
    loopback_app_with(|_| {}).await
}

/// [`loopback_app`] with the sender's settings changed by `edit`.
async fn loopback_app_with(
    edit: impl FnOnce(&mut WebhookConfig),
) -> (TestApp, Arc<WebhookSender>, Dispatcher) {
    let mut app = TestApp::new().await;
    app.state.api.webhook_egress = Egress { allow_loopback_http: true };
    app.router = router(app.state.clone());
    let (sender, dispatcher) = loopback_pipeline(&app, edit);
    (app, sender, dispatcher)
}

/// A webhook sender allowed to reach the loopback receiver, with short timeouts (then `edit`), and a
/// dispatcher (local transport) that runs the fan-out's first attempts through it.
fn loopback_pipeline(
    app: &TestApp,
    edit: impl FnOnce(&mut WebhookConfig),
) -> (Arc<WebhookSender>, Dispatcher) {
    let mut config = WebhookConfig {
        egress: Egress { allow_loopback_http: true },
        timeouts: Timeouts { connect: Duration::from_secs(2), total: Duration::from_secs(5) },
        ..WebhookConfig::default()
    };
    edit(&mut config);
    let sender = Arc::new(WebhookSender::new(
        app.state.pool.clone(),
        config,
        clinic_testkit::webhook_key(),
        clinic_sqs::webhook_body("/clinic"),
    ));
    let transport = LocalTransport::new(app.state.pool.clone()).with_webhooks(sender.clone());
    let dispatcher = Dispatcher::new(app.state.pool.clone(), Arc::new(transport), DispatchConfig::default());
    (sender, dispatcher)
}

/// A receiver and an endpoint of the app's workspace for `appointment.created` posting to it (the
/// receiver knows its secret); answers the receiver and the endpoint's path.
async fn receiving_endpoint(app: &TestApp) -> (Receiver, String) {
    let receiver = Receiver::start(0, &[]).await;
    let body = json!({"url": format!("http://127.0.0.1:{}/hook", receiver.port),
        "eventTypes": ["appointment.created"]});
    let created = app.call("POST", "/v1/webhooks/endpoints", Some(&app.workspace.admin), Some(body)).await;
    assert_eq!(created.status, 201, "{}", created.text);
    let secret = created.body["secret"].as_str().unwrap().to_owned();
    receiver.call("POST", "/_secrets", Some(json!({"secrets": [secret]}))).await;
    let path = format!("/v1/webhooks/endpoints/{}", created.body["id"].as_str().unwrap());
    (receiver, path)
}

/// Issue 38 defect 3 (failed against a86860d: no delivery was created while the endpoint was off):
/// events committed while an endpoint is disabled are held — created, not sent, no attempt spent —
/// and after enable + recover every one of them reaches the receiver exactly once.
#[tokio::test]
async fn events_committed_while_an_endpoint_is_off_arrive_once_after_enable() {
    let (app, sender, dispatcher) = loopback_app().await;
    let admin = app.workspace.admin.clone();
    let staff = app.workspace.staff.clone();
    let (receiver, path) = receiving_endpoint(&app).await;

    let since = chrono::Utc::now().to_rfc3339();
    let off = app.call("PATCH", &path, Some(&admin), Some(json!({"enabled": false}))).await;
    assert_eq!(off.status, 200, "{}", off.text);
    let practitioner = app.create_practitioner(&staff).await;
    let patient = app.create_patient(&staff, json!({"givenName": "Off", "familyName": "Line"})).await;
    let mut booked = Vec::new();
    for day in 1..=3 {
        let starts = format!("2031-06-0{day}T09:00:00Z");
        let ends = format!("2031-06-0{day}T09:30:00Z");
        booked.push(app.book(&staff, &patient, &practitioner, &starts, &ends).await["id"].clone());
    }
    dispatcher.drain_once().await.unwrap();
    sender.send_due(10).await.unwrap();
    // Held while off: one delivery per event, none attempted.
    assert_eq!(
        app.count("SELECT 1 FROM webhook_deliveries WHERE status = 'pending' AND attempts = 0").await,
        3
    );
    assert_eq!(app.count("SELECT 1 FROM webhook_attempts").await, 0);
    assert!(receiver.received().await.is_empty());

    let on = app.call("PATCH", &path, Some(&admin), Some(json!({"enabled": true}))).await;
    assert_eq!(on.status, 200, "{}", on.text);
    let recover = json!({"since": since});
    let recovered = app.call("POST", &format!("{path}/recover"), Some(&admin), Some(recover)).await;
    assert_eq!(recovered.status, 200, "{}", recovered.text);
    send_until(&sender, &receiver, "the held deliveries", |r| r.len() >= 3).await;
    sender.send_due(10).await.unwrap();
    let received = receiver.received().await;
    assert_eq!(received.len(), 3, "each held event exactly once: {received:#?}");
    let mut subjects: Vec<Value> = received.iter().map(|r| r["body"]["subject"].clone()).collect();
    subjects.sort_by_key(Value::to_string);
    booked.sort_by_key(Value::to_string);
    assert_eq!(subjects, booked);
    assert!(received.iter().all(|r| r["verified"] == json!([true])), "{received:#?}");
    assert_eq!(
        app.count("SELECT 1 FROM webhook_deliveries WHERE status = 'delivered' AND attempts = 1").await,
        3
    );
}

/// Issue 38 (stage 3): a sender that dies while releasing the held deliveries of an endpoint just
/// enabled loses none of them. The crashed sender claimed every held delivery and never marked one;
/// once its lease ends the lease queue's expiry makes them due again (webhook deliveries re-claim),
/// the next sender delivers each exactly once, and the attempt the dead sender spent stays counted.
#[tokio::test]
async fn a_sender_dying_while_releasing_held_deliveries_after_enable_loses_none() {
    let (app, sender, dispatcher) = loopback_app().await;
    let admin = app.workspace.admin.clone();
    let staff = app.workspace.staff.clone();
    let (receiver, path) = receiving_endpoint(&app).await;
    let off = app.call("PATCH", &path, Some(&admin), Some(json!({"enabled": false}))).await;
    assert_eq!(off.status, 200, "{}", off.text);
    let practitioner = app.create_practitioner(&staff).await;
    let patient = app.create_patient(&staff, json!({"givenName": "Held", "familyName": "Over"})).await;
    for day in 1..=3 {
        let (starts, ends) = (format!("2031-07-0{day}T09:00:00Z"), format!("2031-07-0{day}T09:30:00Z"));
        app.book(&staff, &patient, &practitioner, &starts, &ends).await;
    }
    dispatcher.drain_once().await.unwrap();
    assert_eq!(app.count("SELECT 1 FROM webhook_deliveries WHERE status = 'pending'").await, 3);

    let on = app.call("PATCH", &path, Some(&admin), Some(json!({"enabled": true}))).await;
    assert_eq!(on.status, 200, "{}", on.text);
    // The releasing sender claims every held delivery under a short lease, then dies (no mark).
    let lease_ms = 300.0;
    let token = clinic_core::ids::ClaimToken::generate();
    let taken = {
        let client = app.state.pool.get().await.unwrap();
        clinic_core::webhooks::store::claim(&client, 10, token, lease_ms, None, 8, 10).await.unwrap()
    };
    assert_eq!(taken.len(), 3, "the crashed sender held every released delivery");
    // While its lease runs nobody else takes them.
    assert_eq!(sender.send_due(10).await.unwrap().claimed(), 0);
    tokio::time::sleep(Duration::from_millis(2 * lease_ms as u64)).await;

    send_until(&sender, &receiver, "the released deliveries", |r| r.len() >= 3).await;
    sender.send_due(10).await.unwrap();
    assert_eq!(receiver.received().await.len(), 3, "each held event exactly once");
    assert_eq!(
        app.count("SELECT 1 FROM webhook_deliveries WHERE status = 'delivered' AND attempts = 2").await,
        3,
        "the dead sender's attempt stays counted"
    );
    // The dead sender's late mark is fenced: its token no longer holds any row.
    let client = app.state.pool.get().await.unwrap();
    let attempt = clinic_core::webhooks::store::AttemptRecord {
        status_code: Some(500),
        duration_ms: 1,
        error_code: Some("http_status"),
        excerpt: None,
    };
    let next = clinic_core::webhooks::store::Next::Failed;
    let marked = clinic_core::webhooks::store::mark(&client, &taken[0], token, &attempt, next).await.unwrap();
    assert!(!marked, "a mark under an expired, taken-over lease changes nothing");
    assert_eq!(app.count("SELECT 1 FROM webhook_deliveries WHERE status = 'delivered'").await, 3);
}

/// Issue 38 defect 6 (failed against a86860d: the second create made a second endpoint with a
/// second secret): every mutating webhook route honours `Idempotency-Key`; a replay answers the
/// endpoint as it is now and never the secret (no stored copy of it exists); the same key with
/// another body answers 422 and writes nothing.
#[tokio::test]
async fn a_repeated_idempotency_key_changes_a_webhook_endpoint_once() {
    let (app, _, _) = loopback_app().await;
    let admin = app.workspace.admin.clone();
    let create = |key: &'static str, body: Value| {
        let admin = admin.clone();
        let app = &app;
        async move {
            app.call_with(
                "POST",
                "/v1/webhooks/endpoints",
                Some(&admin),
                Some(body),
                &[("idempotency-key", key)],
            )
            .await
        }
    };
    let body = json!({"url": "http://127.0.0.1:9/hook", "eventTypes": ["appointment.created"]});
    let first = create("hook-1", body.clone()).await;
    assert_eq!(first.status, 201, "{}", first.text);
    let secret = first.body["secret"].as_str().unwrap().to_owned();
    let again = create("hook-1", body.clone()).await;
    assert_eq!(again.status, 201, "{}", again.text);
    assert_eq!(again.body["id"], first.body["id"], "one endpoint for one key");
    assert!(again.body.get("secret").is_none(), "a replay never shows the secret: {}", again.text);
    assert_eq!(app.count("SELECT 1 FROM webhook_endpoints").await, 1);
    let other = create("hook-1", json!({"url": "http://127.0.0.1:9/other"})).await;
    assert_eq!(other.status, 422, "{}", other.text);
    assert_eq!(app.count("SELECT 1 FROM webhook_endpoints").await, 1);

    let id = first.body["id"].as_str().unwrap().to_owned();
    let path = format!("/v1/webhooks/endpoints/{id}");
    let call = |method: &'static str, path: String, key: &'static str, body: Option<Value>| {
        let admin = admin.clone();
        let app = &app;
        async move { app.call_with(method, &path, Some(&admin), body, &[("idempotency-key", key)]).await }
    };
    let rotated = call("POST", format!("{path}/rotate"), "rotate-1", Some(json!({"overlapHours": 0}))).await;
    assert_eq!(rotated.status, 200, "{}", rotated.text);
    let rotated_again =
        call("POST", format!("{path}/rotate"), "rotate-1", Some(json!({"overlapHours": 0}))).await;
    assert_eq!(rotated_again.status, 200, "{}", rotated_again.text);
    assert!(rotated_again.body.get("secret").is_none(), "{}", rotated_again.text);
    let patched = call("PATCH", path.clone(), "patch-1", Some(json!({"description": "billing"}))).await;
    assert_eq!(patched.status, 200, "{}", patched.text);
    let patched_again = call("PATCH", path.clone(), "patch-1", Some(json!({"description": "billing"}))).await;
    assert_eq!(patched_again.body["version"], patched.body["version"], "{}", patched_again.text);
    let since = json!({"since": "2030-01-01T00:00:00Z"});
    for _ in 0..2 {
        let recovered = call("POST", format!("{path}/recover"), "recover-1", Some(since.clone())).await;
        assert_eq!(recovered.status, 200, "{}", recovered.text);
    }
    for _ in 0..2 {
        let deleted = call("DELETE", path.clone(), "delete-1", None).await;
        assert_eq!(deleted.status, 204, "{}", deleted.text);
    }
    let audit = |action: &str| format!("SELECT 1 FROM webhook_endpoint_actions WHERE action = '{action}'");
    for action in ["create", "rotate", "update", "recover", "delete"] {
        assert_eq!(app.count(&audit(action)).await, 1, "{action} ran once");
    }
    let stored =
        app.count(&format!("SELECT 1 FROM idempotency_keys t WHERE t::text LIKE '%{secret}%'")).await;
    assert_eq!(stored, 0, "no stored answer holds the secret");
}

/// The row of `endpoint` as text (every column).
async fn endpoint_row(app: &TestApp, endpoint: &str) -> String {
    let conn = app.db.pool.get().await.unwrap();
    let select = "SELECT w::text FROM webhook_endpoints w WHERE id = $1";
    conn.query_one(select, &[&uuid_of(endpoint)]).await.unwrap().get(0)
}

/// Issue 39 item 3, webhook part (failed against a59f249: the row held the `whsec_` secret and the
/// rotated-out one in clear, and a secret copied into another endpoint's row signed that endpoint's
/// deliveries): the columns never hold a secret after create and rotate; a delivery still verifies
/// with the standardwebhooks library; a sealed secret moved to another endpoint's row does not open
/// there (the attempt is recorded with `secret_unreadable`, nothing is sent); a legacy clear row
/// still signs and is sealed by the sender.
#[tokio::test]
async fn webhook_secrets_are_sealed_at_rest_and_bound_to_their_endpoint() {
    let (app, sender, dispatcher) = loopback_app().await;
    let admin = app.workspace.admin.clone();
    let staff = app.workspace.staff.clone();
    let receiver = Receiver::start(0, &[]).await;
    let create = |path: &'static str| {
        let body = json!({"url": format!("http://127.0.0.1:{}/{path}", receiver.port),
            "eventTypes": ["appointment.created"]});
        let (app, admin) = (&app, admin.clone());
        async move {
            let created = app.call("POST", "/v1/webhooks/endpoints", Some(&admin), Some(body)).await;
            assert_eq!(created.status, 201, "{}", created.text);
            (
                created.body["id"].as_str().unwrap().to_owned(),
                created.body["secret"].as_str().unwrap().to_owned(),
            )
        }
    };
    let (sealed, first) = create("sealed").await;
    let (moved, moved_secret) = create("moved").await;
    let (legacy, _) = create("legacy").await;
    assert!(!endpoint_row(&app, &sealed).await.contains(&first), "the created secret is stored in clear");
    let rotated = app
        .call(
            "POST",
            &format!("/v1/webhooks/endpoints/{sealed}/rotate"),
            Some(&admin),
            Some(json!({"overlapHours": 1})),
        )
        .await;
    assert_eq!(rotated.status, 200, "{}", rotated.text);
    let current = rotated.body["secret"].as_str().unwrap().to_owned();
    assert!(current.starts_with("whsec_"), "the client still gets a whsec_ secret");
    let row = endpoint_row(&app, &sealed).await;
    for (what, secret) in [("current", &current), ("rotated-out", &first)] {
        assert!(!row.contains(secret.as_str()), "the {what} secret is stored in clear");
        assert!(!row.contains(secret.trim_start_matches("whsec_")), "the {what} key is stored in clear");
    }

    // The sealed secret of `sealed` copied into `moved`'s row; a clear legacy secret into `legacy`'s.
    let legacy_secret = clinic_core::webhooks::signing::Secret::generate().expose().to_owned();
    {
        let conn = app.db.pool.get().await.unwrap();
        let copy =
            "UPDATE webhook_endpoints SET secret = (SELECT secret FROM webhook_endpoints WHERE id = $1) \
                    WHERE id = $2";
        conn.execute(copy, &[&uuid_of(&sealed), &uuid_of(&moved)]).await.unwrap();
        let clear = "UPDATE webhook_endpoints SET secret = $2 WHERE id = $1";
        conn.execute(clear, &[&uuid_of(&legacy), &legacy_secret]).await.unwrap();
    }
    receiver.call("POST", "/_secrets", Some(json!({"secrets": [current, first, legacy_secret]}))).await;

    let practitioner = app.create_practitioner(&staff).await;
    let patient = app.create_patient(&staff, json!({"givenName": "Sealed", "familyName": "Row"})).await;
    app.book(&staff, &patient, &practitioner, "2031-07-01T09:00:00Z", "2031-07-01T09:30:00Z").await;
    dispatcher.drain_once().await.unwrap();
    send_until(&sender, &receiver, "the sealed and legacy deliveries", |r| r.len() >= 2).await;
    let started = Instant::now();
    let unreadable =
        "SELECT 1 FROM webhook_attempts WHERE error_code = 'secret_unreadable' AND status_code IS NULL";
    while app.count(unreadable).await == 0 {
        sender.send_due(10).await.unwrap();
        assert!(started.elapsed() < Duration::from_secs(30), "the moved secret's attempt was not recorded");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let received = receiver.received().await;
    assert_eq!(received.len(), 2, "nothing is sent for the moved secret: {received:#?}");
    // Each delivery verifies with the standardwebhooks library under its own endpoint's secret(s).
    assert!(received.iter().any(|r| r["verified"] == json!([true, true, false])), "{received:#?}");
    assert!(received.iter().any(|r| r["verified"] == json!([false, false, true])), "{received:#?}");
    let moved_delivery = format!(
        "SELECT 1 FROM webhook_deliveries WHERE endpoint_id = '{}' AND status = 'retry' \
         AND last_error_code = 'secret_unreadable'",
        uuid_of(&moved)
    );
    assert_eq!(app.count(&moved_delivery).await, 1, "the moved secret's delivery is held for retry");
    assert!(!endpoint_row(&app, &moved).await.contains(&moved_secret));
    // The legacy row was converted by the sender: it no longer holds the secret in clear.
    assert!(!endpoint_row(&app, &legacy).await.contains(&legacy_secret), "the legacy row was not sealed");
    // A rotation of a legacy clear row seals the rotated-out secret it keeps for the overlap.
    {
        let conn = app.db.pool.get().await.unwrap();
        let clear = "UPDATE webhook_endpoints SET secret = $2 WHERE id = $1";
        conn.execute(clear, &[&uuid_of(&legacy), &legacy_secret]).await.unwrap();
    }
    let path = format!("/v1/webhooks/endpoints/{legacy}/rotate");
    let rotated = app.call("POST", &path, Some(&admin), Some(json!({"overlapHours": 1}))).await;
    assert_eq!(rotated.status, 200, "{}", rotated.text);
    let row = endpoint_row(&app, &legacy).await;
    assert!(!row.contains(&legacy_secret), "the rotated-out legacy secret is kept in clear");
    assert!(!row.contains(rotated.body["secret"].as_str().unwrap()));
    drop(receiver.child);
}

/// The webhook deliveries of the app's workspace, oldest first: (id, status, attempts).
async fn deliveries(app: &TestApp) -> Vec<(String, String, i32)> {
    let client = app.db.pool.get().await.unwrap();
    let rows = client
        .query("SELECT id, status, attempts FROM webhook_deliveries ORDER BY created_at, id", &[])
        .await
        .unwrap();
    rows.iter()
        .map(|row| (ulid::Ulid::from(row.get::<_, uuid::Uuid>(0)).to_string(), row.get(1), row.get(2)))
        .collect()
}

/// Issue 38 items 1 and 2 (new routes: on e6934c2 they answer 404 no-route, and a webhook delivery
/// could only be recovered by endpoint and time): an operator retries one failed webhook delivery,
/// discards another, dry-runs and then applies a bulk retry by filter; each retried delivery then
/// reaches the receiver exactly once on a fresh attempt budget (same `webhook-id`), the discarded
/// one never does, every pointless action answers 409 naming why and writes nothing, and each
/// action leaves one audit row naming the delivery.
#[tokio::test]
async fn an_operator_retries_discards_and_bulk_recovers_webhook_deliveries() {
    clinic_testkit::init_test_logging();
    let (app, sender, dispatcher) = loopback_app().await;
    let admin = app.workspace.admin.clone();
    let staff = app.workspace.staff.clone();
    let (receiver, path) = receiving_endpoint(&app).await;
    let endpoint_id = path.rsplit('/').next().unwrap().to_owned();
    // The receiver refuses for good (a 4xx other than 408/429): every first attempt fails.
    receiver.answer(410).await;
    let practitioner = app.create_practitioner(&staff).await;
    let patient = app.create_patient(&staff, json!({"givenName": "Re", "familyName": "Try"})).await;
    for day in 1..=4 {
        let (starts, ends) = (format!("2031-08-0{day}T09:00:00Z"), format!("2031-08-0{day}T09:30:00Z"));
        app.book(&staff, &patient, &practitioner, &starts, &ends).await;
    }
    dispatcher.drain_once().await.unwrap();
    let started = Instant::now();
    while deliveries(&app).await.iter().filter(|(_, status, _)| status == "failed").count() < 4 {
        assert!(started.elapsed() < Duration::from_secs(60), "{:?}", deliveries(&app).await);
        sender.send_due(10).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ids: Vec<String> = deliveries(&app).await.into_iter().map(|(id, _, _)| id).collect();
    let received_before = receiver.received().await.len();
    receiver.answer(200).await;
    let post = |path: String, body: Value| {
        let (app, admin) = (&app, admin.clone());
        async move { app.call("POST", &path, Some(&admin), Some(body)).await }
    };
    let act = |id: &str, action: &str| format!("/v1/system/webhook-deliveries/{id}/{action}");

    // One discard, one retry.
    let discarded = post(act(&ids[0], "discard"), json!({"reason": "receiver retired this record"})).await;
    assert_eq!(discarded.status, 200, "{}", discarded.text);
    assert_eq!(
        (
            &discarded.body["webhookDeliveryId"],
            &discarded.body["statusBefore"],
            &discarded.body["statusAfter"]
        ),
        (&json!(ids[0]), &json!("failed"), &json!("discarded"))
    );
    let key = [("Idempotency-Key", "retry-one-webhook-delivery")];
    let body = json!({"reason": "receiver fixed"});
    let retried = app.call_with("POST", &act(&ids[1], "retry"), Some(&admin), Some(body.clone()), &key).await;
    assert_eq!(retried.status, 200, "{}", retried.text);
    assert_eq!(retried.body["statusAfter"], "pending");
    assert_eq!(deliveries(&app).await[1], (ids[1].clone(), "pending".into(), 0), "a fresh attempt budget");
    // The same key again answers the stored audit record and acts no second time.
    let repeated = app.call_with("POST", &act(&ids[1], "retry"), Some(&admin), Some(body), &key).await;
    assert_eq!(
        (repeated.status.as_u16(), &repeated.body["id"]),
        (200, &retried.body["id"]),
        "{}",
        repeated.text
    );

    // Pointless: a discarded delivery cannot be retried or discarded again; replay is not offered;
    // a missing reason is a 422 before anything else. None of them writes an audit row.
    let audit = "SELECT 1 FROM operator_actions WHERE webhook_delivery_id IS NOT NULL";
    assert_eq!(app.count(audit).await, 2);
    let again = post(act(&ids[0], "retry"), json!({"reason": "again"})).await;
    assert_eq!(again.status, 409, "{}", again.text);
    assert!(again.text.contains("discarded"), "{}", again.text);
    let no_reason = post(act(&ids[2], "retry"), json!({})).await;
    assert_eq!(no_reason.status, 422, "{}", no_reason.text);
    assert_eq!(no_reason.body["field"], "reason");
    let missing = post(act(&ulid::Ulid::generate().to_string(), "retry"), json!({"reason": "x"})).await;
    assert_eq!(missing.status, 404, "{}", missing.text);
    assert_eq!(app.count(audit).await, 2);

    // Bulk by filter: a dry run counts the failed ones of the endpoint and changes nothing.
    let bulk = "/v1/system/webhook-deliveries/bulk/retry".to_owned();
    let filter = json!({"status": "failed", "endpointId": endpoint_id});
    let dry = post(bulk.clone(), json!({"reason": "receiver fixed", "dryRun": true, "filter": filter})).await;
    assert_eq!(dry.status, 200, "{}", dry.text);
    assert_eq!(
        (dry.body["queue"].as_str(), dry.body["matched"].as_i64()),
        (Some("webhook_deliveries"), Some(2))
    );
    let mut bulk_ids = vec![ids[2].clone(), ids[3].clone()];
    bulk_ids.sort();
    assert_eq!(dry.body["sample"], json!(bulk_ids), "the sample in id order");
    assert_eq!(app.count("SELECT 1 FROM webhook_deliveries WHERE status = 'failed'").await, 2);
    let unknown = post(bulk.clone(), json!({"reason": "x", "filter": {"template": "x"}})).await;
    assert_eq!(unknown.body["field"], "filter.template", "{}", unknown.text);
    let applied = post(bulk, json!({"reason": "receiver fixed", "filter": filter})).await;
    assert_eq!(applied.status, 200, "{}", applied.text);
    assert_eq!((applied.body["applied"].as_i64(), applied.body["remaining"].as_i64()), (Some(2), Some(0)));

    // Every retried delivery arrives once, on the first attempt of its new budget; the discarded
    // one never does.
    send_until(&sender, &receiver, "the retried deliveries", |r| r.len() >= received_before + 3).await;
    sender.send_due(10).await.unwrap();
    let received = receiver.received().await;
    let mut ids_seen: Vec<String> =
        received[received_before..].iter().map(|r| r["id"].as_str().unwrap_or("").to_owned()).collect();
    ids_seen.sort();
    let mut retried_ids = ids[1..].to_vec();
    retried_ids.sort();
    assert_eq!(ids_seen, retried_ids, "each retried delivery once (its webhook-id), the discarded one never");
    assert!(received[received_before..].iter().all(|r| r["status"] == 200), "{received:#?}");
    let now = deliveries(&app).await;
    assert_eq!(now[0], (ids[0].clone(), "discarded".into(), 1));
    for delivered in &now[1..] {
        assert_eq!((delivered.1.as_str(), delivered.2), ("delivered", 1), "{now:?}");
    }
    // A delivered one took effect: retry and discard answer 409 naming why.
    let done = post(act(&ids[1], "discard"), json!({"reason": "x"})).await;
    assert_eq!(done.status, 409, "{}", done.text);
    assert!(done.text.contains("already took effect"), "{}", done.text);
    assert_eq!(app.count(audit).await, 4, "one audit row per action: 2 single, 2 bulk");
    assert_eq!(
        app.count(
            "SELECT 1 FROM operator_actions WHERE webhook_delivery_id IS NOT NULL AND batch_id IS NOT NULL"
        )
        .await,
        2
    );
}
