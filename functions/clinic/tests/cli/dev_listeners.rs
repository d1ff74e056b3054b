//! `clinic dev` runs listeners as the listener Lambda does: the built binary, on a test database,
//! with its delivery loop slowed to one step a minute, sends a booking's notification right after
//! the listener's commit (the notification fast path of the one listener host), not at the loop's
//! next step — with the local transport, and with the SQS transport and its local consumers
//! (against the SQS emulator, when `CLINIC_TEST_SQS_ENDPOINT` names one).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clinic_testkit::app::TestApp;
use serde_json::json;

/// Generous bounds on a busy shared machine; both stay well below the delivery loop's minute.
const READY_BOUND: Duration = Duration::from_secs(40);
const SENT_BOUND: Duration = Duration::from_secs(40);

/// A `clinic dev` child, ended by its pid when dropped.
struct Dev(Child);

impl Drop for Dev {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `clinic dev` on `app`'s database with `env` and waits until it says it is running.
fn start_dev(app: &TestApp, data_dir: &std::path::Path, env: &[(&str, &str)]) -> Dev {
    let port = clinic_testkit::free_port().expect("a free port");
    let mut child = Command::new(env!("CARGO_BIN_EXE_clinic"))
        .arg("dev")
        .env("DATABASE_URL", &app.db.url)
        .env("CLINIC_DATA_DIR", data_dir)
        .env("CLINIC_PORT", port.to_string())
        .env("CLINIC_TRANSPORT", "local")
        .env("CLINIC_NOTIFIER", "file")
        .env("CLINIC_WEBHOOK_KEY_FILE", clinic_testkit::webhook_key_file())
        // The loop's first step runs at start-up; its next one only after a minute.
        .env("CLINIC_DELIVERY_POLL_MS", "60000")
        .env("RUST_LOG", "warn")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start clinic dev");
    let stdout = child.stdout.take().expect("stdout");
    let (ready, ready_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.contains("clinic dev is running") {
                let _ = ready.send(());
            }
        }
    });
    let dev = Dev(child);
    ready_rx.recv_timeout(READY_BOUND).expect("clinic dev did not start");
    dev
}

#[tokio::test]
async fn clinic_dev_sends_a_notification_right_after_the_listener_commits() {
    booking_is_sent_right_after_the_commit(&[]).await;
}

#[tokio::test]
async fn clinic_dev_on_sqs_sends_a_notification_right_after_the_listener_commits() {
    let Some(endpoint) = clinic_testkit::test_env::var("CLINIC_TEST_SQS_ENDPOINT") else {
        eprintln!("skipped: CLINIC_TEST_SQS_ENDPOINT is not set");
        return;
    };
    let env = [
        ("CLINIC_TRANSPORT", "sqs"),
        ("CLINIC_SQS_ENDPOINT", endpoint.as_str()),
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
        ("AWS_REGION", "us-east-1"),
    ];
    booking_is_sent_right_after_the_commit(&env).await;
}

async fn booking_is_sent_right_after_the_commit(env: &[(&str, &str)]) {
    let app = TestApp::new().await;
    let data_dir = std::env::temp_dir().join(format!("clinic-dev-listeners-{}", ulid::Ulid::generate()));
    let staff = app.workspace.staff.clone();
    let patient = app
        .create_patient(
            &staff,
            json!({"givenName": "Fast", "familyName": "Path", "email": "fast@example.test"}),
        )
        .await;
    let practitioner = app.create_practitioner(&staff).await;
    let dev = start_dev(&app, &data_dir, env);

    // Booked after start-up, so only the fast path can send it within the bound.
    app.book(&staff, &patient, &practitioner, "2031-03-04T09:00:00Z", "2031-03-04T09:30:00Z").await;
    let sent =
        "SELECT 1 FROM notifications WHERE status = 'sent' AND listener = 'patient_booking_confirmation'";
    let until = Instant::now() + SENT_BOUND;
    while app.count(sent).await == 0 {
        if Instant::now() >= until {
            let pending = app.count("SELECT 1 FROM notifications WHERE status = 'pending'").await;
            panic!(
                "the booking confirmation was not sent right after the listener's commit ({pending} pending)"
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(dev);
    let mail = std::fs::read_dir(data_dir.join("mail")).expect("the mail folder").count();
    assert!(mail >= 1, "the file provider wrote the message");
    let _ = std::fs::remove_dir_all(&data_dir);
}

/// Issue 42 item 6 (failed on e6934c2: the body named `http://127.0.0.1:3000/schemas/…` whatever
/// port `clinic dev` listened on): a webhook body's `dataschema` names the address `clinic dev` is
/// reached at.
#[tokio::test]
async fn clinic_devs_webhook_dataschema_names_the_address_it_listens_on() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut app = TestApp::new().await;
    app.state.api.webhook_egress = clinic_core::webhooks::guard::Egress { allow_loopback_http: true };
    app.router = clinic_http::router(app.state.clone());
    let data_dir = std::env::temp_dir().join(format!("clinic-dev-schema-{}", ulid::Ulid::generate()));
    let receiver = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", receiver.local_addr().unwrap());
    let body = json!({"url": url, "eventTypes": ["appointment.created"]});
    let created = app.call("POST", "/v1/webhooks/endpoints", Some(&app.workspace.admin), Some(body)).await;
    assert_eq!(created.status, 201, "{}", created.text);
    let staff = app.workspace.staff.clone();
    let patient = app.create_patient(&staff, json!({"givenName": "Schema", "familyName": "Port"})).await;
    let practitioner = app.create_practitioner(&staff).await;
    let port = clinic_testkit::free_port().expect("a free port");
    let port_text = port.to_string();
    let dev = start_dev(
        &app,
        &data_dir,
        &[("CLINIC_PORT", port_text.as_str()), ("CLINIC_WEBHOOKS_ALLOW_LOOPBACK_HTTP", "1")],
    );
    app.book(&staff, &patient, &practitioner, "2031-03-05T09:00:00Z", "2031-03-05T09:30:00Z").await;

    let request = tokio::time::timeout(SENT_BOUND, async {
        let (mut stream, _) = receiver.accept().await.unwrap();
        let mut raw = Vec::new();
        let mut buffer = [0u8; 8192];
        loop {
            let n = stream.read(&mut buffer).await.unwrap();
            raw.extend_from_slice(&buffer[..n]);
            let text = String::from_utf8_lossy(&raw).into_owned();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let length = head
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_owned())
                    })
                    .and_then(|v| v.parse::<usize>().ok())
                    .unwrap_or(0);
                if body.len() >= length || n == 0 {
                    let _ = stream.write_all(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n").await;
                    return body.to_owned();
                }
            }
        }
    })
    .await
    .expect("clinic dev posted the webhook");
    drop(dev);
    let body: serde_json::Value = serde_json::from_str(&request).expect("a JSON body");
    let dataschema = body["dataschema"].as_str().unwrap();
    assert!(
        dataschema.starts_with(&format!("http://127.0.0.1:{port}/schemas/events/appointment.created/")),
        "{dataschema}"
    );
    let _ = std::fs::remove_dir_all(&data_dir);
}
