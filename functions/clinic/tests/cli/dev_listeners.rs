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
    let Ok(endpoint) = std::env::var("CLINIC_TEST_SQS_ENDPOINT") else {
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
