//! The contact policy on the sender's real path (issue 40, DESIGN §5e), on real PostgreSQL: inside
//! the recipient's quiet hours a notification is `deferred` (the lease queue's delay, visible in
//! `GET /v1/notifications`) and sent once they end; an opted-out kind or a channel the patient did
//! not consent to ends `suppressed` with its reason, final.

use std::sync::Arc;
use std::time::Duration;

use chrono::{Timelike, Utc};
use clinic_core::delivery::{DeliveryConfig, FileProvider, NotifierKind, Providers, Sender};
use clinic_core::events::Envelope;
use clinic_core::listeners::{self, Listener, ListenerOutcome};
use clinic_core::workspaces;
use clinic_http::auth::Role;
use clinic_testkit::app::{token, TestApp};
use serde_json::{json, Value};

async fn created_event(app: &TestApp, appointment: &Value) -> Envelope {
    let id: ulid::Ulid = appointment["id"].as_str().unwrap().parse().unwrap();
    let conn = app.db.client().await;
    let row = conn
        .query_one(
            "SELECT id FROM events WHERE type = 'appointment.created' AND resource_id = $1",
            &[&uuid::Uuid::from(id)],
        )
        .await
        .unwrap();
    clinic_core::events::read::find(&conn, row.get(0)).await.unwrap().unwrap()
}

struct Scene {
    app: TestApp,
    patient: Value,
    practitioner: Value,
    sender: Sender,
    dir: std::path::PathBuf,
    hour: u32,
}

impl Scene {
    async fn new() -> Scene {
        let app = TestApp::new().await;
        let staff = app.workspace.staff.clone();
        let body = json!({"givenName": "Ada", "familyName": "Lovelace", "email": "ada@example.test"});
        let patient = app.create_patient(&staff, body).await;
        let practitioner = app.create_practitioner(&staff).await;
        let dir = std::env::temp_dir().join(format!("clinic-policy-{}", ulid::Ulid::generate()));
        let mut config = DeliveryConfig::with_notifiers(vec![NotifierKind::File]);
        config.file_dir = dir.clone();
        let providers = Providers::both(Arc::new(FileProvider::new(&dir)));
        let sender = Sender::new(app.state.pool.clone(), providers, config);
        Scene { app, patient, practitioner, sender, dir, hour: 0 }
    }

    /// Books an appointment and runs the booking confirmation's listener: one pending notification.
    async fn book_and_enqueue(&mut self) -> Envelope {
        self.hour += 1;
        let (starts, ends) =
            (format!("2031-05-01T{:02}:00:00Z", self.hour), format!("2031-05-01T{:02}:30:00Z", self.hour));
        let staff = self.app.workspace.staff.clone();
        let appointment = self.app.book(&staff, &self.patient, &self.practitioner, &starts, &ends).await;
        let created = created_event(&self.app, &appointment).await;
        let outcome = listeners::run(&self.app.state.pool, Listener::PatientBookingConfirmation, &created)
            .await
            .unwrap();
        assert_eq!(outcome, ListenerOutcome::Applied { effects: 1 });
        created
    }

    async fn row(&self, event: &Envelope) -> (String, Option<String>, i32, chrono::DateTime<Utc>) {
        let conn = self.app.db.client().await;
        let row = conn
            .query_one(
                "SELECT status, last_error_code, attempts, available_at FROM notifications WHERE event_id = $1",
                &[&event.id],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1), row.get(2), row.get(3))
    }
}

#[tokio::test]
async fn inside_quiet_hours_a_notification_is_deferred_then_sent_once_they_end() {
    let mut scene = Scene::new().await;
    // Quiet hours from an hour ago until a few seconds from now, in the workspace's zone (UTC; the
    // patient has none): the window's end is a wall-clock time, so it is the only way to reach it
    // in a test without a clock of our own.
    let now = Utc::now();
    let end_instant = (now + chrono::Duration::seconds(4)).with_nanosecond(0).unwrap();
    let start = (now - chrono::Duration::hours(1)).time();
    let owner = scene.app.db.client().await;
    let quiet = workspaces::set_quiet_hours(&owner, scene.app.workspace.id, start, end_instant.time(), &[]);
    assert!(quiet.await.unwrap());
    let created = scene.book_and_enqueue().await;

    let report = scene.sender.step_due().await.unwrap();
    assert_eq!((report.deferred, report.sent), (1, 0), "{report:?}");
    let (status, code, attempts, available_at) = scene.row(&created).await;
    assert_eq!((status.as_str(), code.as_deref(), attempts), ("deferred", Some("quiet_hours"), 0));
    // Due again at the first instant the quiet hours end (a window across midnight included).
    assert_eq!(available_at, end_instant, "deferred to the end of the quiet hours");
    let listed = scene.app.call("GET", "/v1/notifications", Some(&scene.app.workspace.staff), None).await;
    assert_eq!(listed.body["items"][0]["status"], "deferred", "{}", listed.text);
    assert!(!scene.dir.exists() || std::fs::read_dir(&scene.dir).unwrap().count() == 0, "nothing sent");

    // Once the window ends the same row is due and sent.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut sent = 0;
    while sent == 0 && tokio::time::Instant::now() < deadline {
        let report = scene.sender.step_due().await.unwrap();
        assert_eq!(report.deferred, 0, "not deferred again after the window ended: {report:?}");
        sent += report.sent;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(sent, 1);
    let (status, _, attempts, _) = scene.row(&created).await;
    assert_eq!((status.as_str(), attempts), ("sent", 1));
    assert!(Utc::now() >= end_instant, "sent only after the quiet hours ended");
    assert_eq!(std::fs::read_dir(&scene.dir).unwrap().count(), 1);
    std::fs::remove_dir_all(&scene.dir).unwrap();
}

#[tokio::test]
async fn an_opted_out_kind_and_a_channel_not_consented_end_suppressed_for_good() {
    let mut scene = Scene::new().await;
    let id = scene.patient["id"].as_str().unwrap().to_owned();
    let own = token(scene.app.workspace.id, id.parse().unwrap(), Role::Patient);
    let path = format!("/v1/patients/{id}");
    let body = json!({"contactOptOuts": ["booking_confirmation"]});
    let opted = scene.app.call("PATCH", &path, Some(&own), Some(body)).await;
    assert_eq!(opted.status, 200, "{}", opted.text);
    let first = scene.book_and_enqueue().await;
    let report = scene.sender.send_due(5).await.unwrap();
    assert_eq!((report.suppressed, report.sent), (1, 0), "{report:?}");
    let (status, code, _, _) = scene.row(&first).await;
    assert_eq!((status.as_str(), code.as_deref()), ("suppressed", Some("opted_out")));

    // Opted back in to the kind, but consenting to SMS only while only an email address is known.
    let body = json!({"contactOptOuts": [], "contactChannels": ["sms"]});
    assert_eq!(scene.app.call("PATCH", &path, Some(&own), Some(body)).await.status, 200);
    let second = scene.book_and_enqueue().await;
    let report = scene.sender.send_due(5).await.unwrap();
    assert_eq!((report.suppressed, report.sent, report.claimed), (1, 0, 1), "final: {report:?}");
    let (status, code, _, _) = scene.row(&second).await;
    assert_eq!((status.as_str(), code.as_deref()), ("suppressed", Some("channel_not_allowed")));

    let body = json!({"contactChannels": []});
    assert_eq!(scene.app.call("PATCH", &path, Some(&own), Some(body)).await.status, 200);
    let third = scene.book_and_enqueue().await;
    scene.sender.send_due(5).await.unwrap();
    let (status, code, _, _) = scene.row(&third).await;
    assert_eq!((status.as_str(), code.as_deref()), ("suppressed", Some("no_consent")));
    // Final: nothing of them is claimed again, nothing was sent.
    assert_eq!(scene.sender.send_due(5).await.unwrap().claimed, 0);
    assert!(!scene.dir.exists() || std::fs::read_dir(&scene.dir).unwrap().count() == 0);
}

/// A zone in which it is about noon now (`Etc/GMT±N`), so "today" lasts the whole test.
fn zone_at_noon(now: chrono::DateTime<Utc>) -> String {
    let offset = 12 - i64::from(now.hour());
    match offset {
        0 => "Etc/GMT".into(),
        // The tz database's Etc names have the sign inverted (POSIX): Etc/GMT-3 is UTC+3.
        positive if positive > 0 => format!("Etc/GMT-{positive}"),
        negative => format!("Etc/GMT+{}", -negative),
    }
}

#[tokio::test]
async fn a_same_day_cancellation_bypasses_quiet_hours_only_where_allowed_and_is_recorded() {
    let mut scene = Scene::new().await;
    let now = Utc::now();
    let zone = zone_at_noon(now);
    let id = scene.patient["id"].as_str().unwrap().to_owned();
    let staff = scene.app.workspace.staff.clone();
    let path = format!("/v1/patients/{id}");
    let zoned = scene.app.call("PATCH", &path, Some(&staff), Some(json!({"timeZone": zone}))).await;
    assert_eq!(zoned.status, 200, "{}", zoned.text);
    // Quiet hours around the patient's noon (one hour either side): it is quiet for them now.
    let local: chrono_tz::Tz = zone.parse().unwrap();
    let local_now = now.with_timezone(&local).time();
    let (start, end) = (local_now - chrono::Duration::hours(1), local_now + chrono::Duration::hours(1));
    let owner = scene.app.db.client().await;
    let bypass = [clinic_core::domain::contact::MessageKind::ChangeNotice];
    assert!(workspaces::set_quiet_hours(&owner, scene.app.workspace.id, start, end, &bypass).await.unwrap());

    // Today, in half an hour (still the patient's today: it is about noon for them).
    let starts = (now + chrono::Duration::minutes(30)).with_second(0).unwrap().with_nanosecond(0).unwrap();
    let ends = starts + chrono::Duration::minutes(30);
    let appointment = scene
        .app
        .book(&staff, &scene.patient, &scene.practitioner, &starts.to_rfc3339(), &ends.to_rfc3339())
        .await;
    let appointment_id = appointment["id"].as_str().unwrap().to_owned();
    let cancel = format!("/v1/appointments/{appointment_id}/cancel");
    assert_eq!(scene.app.call("POST", &cancel, Some(&staff), Some(json!({}))).await.status, 200);
    let conn = scene.app.db.client().await;
    let row = conn
        .query_one(
            "SELECT id FROM events WHERE type = 'appointment.cancelled' AND resource_id = $1",
            &[&uuid::Uuid::from(appointment_id.parse::<ulid::Ulid>().unwrap())],
        )
        .await
        .unwrap();
    let cancelled = clinic_core::events::read::find(&conn, row.get(0)).await.unwrap().unwrap();
    let pool = &scene.app.state.pool;
    let outcome = listeners::run(pool, Listener::PatientCancellationNotice, &cancelled).await.unwrap();
    assert_eq!(outcome, ListenerOutcome::Applied { effects: 1 });
    let report = scene.sender.send_due(5).await.unwrap();
    assert_eq!((report.sent, report.bypassed_quiet_hours, report.deferred), (1, 1, 0), "{report:?}");
    let bypassed: bool = conn
        .query_one("SELECT quiet_hours_bypassed FROM notifications WHERE event_id = $1", &[&cancelled.id])
        .await
        .unwrap()
        .get(0);
    assert!(bypassed, "the bypass is recorded on the row");

    // A booking confirmation in the same quiet hours never bypasses: deferred.
    let created = scene.book_and_enqueue().await;
    let report = scene.sender.send_due(5).await.unwrap();
    assert_eq!((report.sent, report.deferred), (0, 1), "{report:?}");
    assert_eq!(scene.row(&created).await.0, "deferred");
    std::fs::remove_dir_all(&scene.dir).unwrap();
}
