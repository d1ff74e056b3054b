//! The contact policy on the sender's real path (issue 40, DESIGN §5e), on real PostgreSQL: inside
//! the recipient's quiet hours a notification is `deferred` (the lease queue's delay, visible in
//! `GET /v1/notifications`) and sent once they end; an opted-out kind or a channel the patient did
//! not consent to ends `suppressed` with its reason, final; an email's one-click unsubscribe link
//! (RFC 8058) opts out of exactly its kind, at once.

use std::sync::Arc;
use std::time::Duration;

use chrono::{Timelike, Utc};
use clinic_core::delivery::unsubscribe::{UnsubscribeKeys, UnsubscribeLinks};
use clinic_core::delivery::{DeliveryConfig, FileProvider, NotifierKind, Providers, Sender};
use clinic_core::events::Envelope;
use clinic_core::listeners::{self, Listener, ListenerOutcome};
use clinic_core::workspaces;
use clinic_http::auth::Role;
use clinic_testkit::app::{token, TestApp, TEST_SECRET};
use serde_json::{json, Value};

/// The public base URL of the links in these tests.
const BASE: &str = "https://api.clinic.test";

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
        // Emails carry one-click links signed as the test API verifies them (TestApp's local keys).
        config.unsubscribe = Some(UnsubscribeLinks {
            base_url: BASE.into(),
            keys: UnsubscribeKeys::new(TEST_SECRET.as_bytes(), None),
            ttl: Duration::from_secs(60 * 86_400),
        });
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
        let created = self.app.created_event(&appointment).await;
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

/// The `List-Unsubscribe` link of the one email file `name` ends with, and whether the one-click
/// `List-Unsubscribe-Post` header goes with it.
fn link_in(dir: &std::path::Path, name: &str) -> (Option<String>, bool) {
    let path = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .find(|path| path.to_string_lossy().ends_with(name))
        .unwrap_or_else(|| panic!("no email file ending {name}"));
    let eml = std::fs::read_to_string(path).unwrap();
    let link = eml
        .lines()
        .find_map(|line| line.strip_prefix("List-Unsubscribe: <"))
        .map(|rest| rest.trim_end_matches('>').to_owned());
    (link, eml.contains("\r\nList-Unsubscribe-Post: List-Unsubscribe=One-Click\r\n"))
}

/// POSTs the one-click body (RFC 8058) to `link`'s path; the answer's status.
async fn one_click(app: &TestApp, link: &str) -> u16 {
    let path = link.strip_prefix(BASE).expect("a link under the base URL");
    app.post_form(path, "List-Unsubscribe=One-Click").await.status.as_u16()
}

/// The `appointment.reminder_due` event of `appointment` (the reminders job emitted it).
async fn reminder_event(app: &TestApp, appointment: &Value) -> Envelope {
    let id: ulid::Ulid = appointment["id"].as_str().unwrap().parse().unwrap();
    let conn = app.db.client().await;
    let row = conn
        .query_one(
            "SELECT id FROM events WHERE type = 'appointment.reminder_due' AND resource_id = $1",
            &[&uuid::Uuid::from(id)],
        )
        .await
        .unwrap();
    clinic_core::events::read::find(&conn, row.get(0)).await.unwrap().unwrap()
}

/// Books an appointment `hours` from now and runs the reminders job and the reminder's listener.
async fn remind(scene: &Scene, hours: i64) -> Envelope {
    let staff = scene.app.workspace.staff.clone();
    let starts =
        (Utc::now() + chrono::Duration::hours(hours)).with_second(0).unwrap().with_nanosecond(0).unwrap();
    let ends = starts + chrono::Duration::minutes(30);
    let appointment = scene
        .app
        .book(&staff, &scene.patient, &scene.practitioner, &starts.to_rfc3339(), &ends.to_rfc3339())
        .await;
    let pool = &scene.app.state.pool;
    let lead = Duration::from_secs(24 * 3600);
    clinic_core::housekeeping::reminders::run(pool, lead, Utc::now()).await.unwrap();
    let reminder = reminder_event(&scene.app, &appointment).await;
    let outcome = listeners::run(pool, Listener::PatientReminder, &reminder).await.unwrap();
    assert_eq!(outcome, ListenerOutcome::Applied { effects: 1 });
    reminder
}

/// Issue 40 item 5, the one-click path on real PostgreSQL: an email's link opts the patient out of
/// exactly that kind, at once — the next message of that kind ends `suppressed` (`opted_out`) and is
/// never sent, another kind still goes out (with its own link); after the reminder's link, no later
/// reminder is sent.
#[tokio::test]
async fn a_one_click_unsubscribe_stops_exactly_that_kind_at_once() {
    let mut scene = Scene::new().await;
    let first = scene.book_and_enqueue().await;
    assert_eq!(scene.sender.send_due(5).await.unwrap().sent, 1);
    let (link, one_click_header) = link_in(&scene.dir, "_patient_booking_confirmation.eml");
    let link = link.expect("a booking confirmation carries List-Unsubscribe");
    assert!(one_click_header, "with List-Unsubscribe-Post: List-Unsubscribe=One-Click");
    assert!(link.starts_with(&format!("{BASE}/v1/unsubscribe/")), "{link}");

    // A GET (a mail scanner, a link preview) only shows the page.
    let path = link.strip_prefix(BASE).unwrap();
    let page = scene.app.call("GET", path, None, None).await;
    assert_eq!(page.status, 200, "{}", page.text);
    let patient_path = format!("/v1/patients/{}", scene.patient["id"].as_str().unwrap());
    let staff = scene.app.workspace.staff.clone();
    let read = scene.app.call("GET", &patient_path, Some(&staff), None).await;
    assert_eq!(read.body["contactOptOuts"], json!([]), "a GET opts out of nothing");

    assert_eq!(one_click(&scene.app, &link).await, 200);
    let read = scene.app.call("GET", &patient_path, Some(&staff), None).await;
    assert_eq!(read.body["contactOptOuts"], json!(["booking_confirmation"]));

    // The next booking confirmation: suppressed, never sent.
    let second = scene.book_and_enqueue().await;
    let report = scene.sender.send_due(5).await.unwrap();
    assert_eq!((report.suppressed, report.sent), (1, 0), "{report:?}");
    let (status, code, _, _) = scene.row(&second).await;
    assert_eq!((status.as_str(), code.as_deref()), ("suppressed", Some("opted_out")));
    assert_eq!(scene.row(&first).await.0, "sent");

    // Another kind still goes out, with its own link, which opts out of reminders.
    let reminder = remind(&scene, 2).await;
    assert_eq!(scene.sender.send_due(5).await.unwrap().sent, 1);
    assert_eq!(scene.row(&reminder).await.0, "sent");
    let (reminder_link, _) = link_in(&scene.dir, "_patient_reminder.eml");
    let reminder_link = reminder_link.expect("a reminder carries List-Unsubscribe");
    assert_ne!(reminder_link, link);
    assert_eq!(one_click(&scene.app, &reminder_link).await, 200);
    let read = scene.app.call("GET", &patient_path, Some(&staff), None).await;
    assert_eq!(read.body["contactOptOuts"], json!(["booking_confirmation", "reminder"]));

    // No later reminder is sent.
    let later = remind(&scene, 3).await;
    let report = scene.sender.send_due(5).await.unwrap();
    assert_eq!((report.suppressed, report.sent), (1, 0), "{report:?}");
    let (status, code, _, _) = scene.row(&later).await;
    assert_eq!((status.as_str(), code.as_deref()), ("suppressed", Some("opted_out")));
    assert_eq!(std::fs::read_dir(&scene.dir).unwrap().count(), 2, "one confirmation and one reminder");
    std::fs::remove_dir_all(&scene.dir).unwrap();
}
