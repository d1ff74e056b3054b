//! Appointment reminders: exactly one `appointment.reminder_due` per appointment and start time,
//! however runs overlap or repeat; a reschedule arms it again; the listener reminds once per event.

use std::time::Duration;

use crate::support::{fast_config, rfc3339};
use chrono::Utc;
use clinic_core::housekeeping::reminders::run;
use clinic_testkit::app::TestApp;
use serde_json::{json, Value};

const LEAD: Duration = Duration::from_secs(24 * 3600);

struct Clinic {
    app: TestApp,
    patient: Value,
    practitioner: Value,
}

impl Clinic {
    async fn new() -> Clinic {
        clinic_testkit::init_test_logging();
        let app = TestApp::new().await;
        let admin = app.workspace.admin.clone();
        let patient = app.create_patient(&admin, json!({"givenName": "Ada", "familyName": "Lovelace"})).await;
        let practitioner = app.create_practitioner(&admin).await;
        Clinic { app, patient, practitioner }
    }

    async fn book(&self, hours: i64) -> String {
        let starts = Utc::now() + chrono::Duration::hours(hours);
        let body = self
            .app
            .book(
                &self.app.workspace.admin,
                &self.patient,
                &self.practitioner,
                &rfc3339(starts),
                &rfc3339(starts + chrono::Duration::minutes(30)),
            )
            .await;
        body["id"].as_str().unwrap().to_owned()
    }

    async fn post(&self, path: String, body: Value) {
        let response = self.app.call("POST", &path, Some(&self.app.workspace.admin), Some(body)).await;
        assert_eq!(response.status, 200, "{}", response.text);
    }

    async fn reminders_of(&self, appointment: &str) -> i64 {
        let uuid = uuid::Uuid::from(appointment.parse::<ulid::Ulid>().unwrap());
        self.app
            .db
            .client()
            .await
            .query_one(
                "SELECT count(*) FROM events WHERE type = 'appointment.reminder_due' AND resource_id = $1",
                &[&uuid],
            )
            .await
            .unwrap()
            .get(0)
    }

    async fn reminder_events(&self) -> i64 {
        self.app.count("SELECT 1 FROM events WHERE type = 'appointment.reminder_due'").await
    }

    async fn dispatch(&self) {
        let transport =
            std::sync::Arc::new(clinic_core::dispatch::LocalTransport::new(self.app.state.pool.clone()));
        clinic_core::dispatch::Dispatcher::new(self.app.state.pool.clone(), transport, fast_config())
            .drain_once()
            .await
            .unwrap();
    }

    async fn reminder_notifications(&self) -> i64 {
        self.app.count("SELECT 1 FROM notifications WHERE template = 'appointment.reminder'").await
    }
}

#[tokio::test]
async fn a_run_reminds_booked_appointments_within_the_lead_time_once() {
    let clinic = Clinic::new().await;
    let soon = clinic.book(2).await;
    let later = clinic.book(30).await;
    let cancelled = clinic.book(5).await;
    clinic.post(format!("/v1/appointments/{cancelled}/cancel"), json!({})).await;

    let report = run(&clinic.app.state.pool, LEAD, Utc::now()).await.unwrap();
    assert_eq!(report.emitted, 1);
    assert_eq!(clinic.reminders_of(&soon).await, 1);
    assert_eq!(clinic.reminders_of(&later).await, 0, "outside the lead time");
    assert_eq!(clinic.reminders_of(&cancelled).await, 0, "not booked");

    // The event: actor system, this run's correlation and causation ids, the appointment's links.
    let row = clinic
        .app
        .db
        .client()
        .await
        .query_one(
            "SELECT e.id, e.actor_kind, e.actor_id IS NULL, e.correlation_id, e.causation_id, e.resource_version, \
                    (SELECT count(*) FROM event_resources l WHERE l.event_id = e.id), \
                    (SELECT count(*) FROM event_outbox o WHERE o.event_id = e.id AND o.status = 'pending'), \
                    (SELECT r.event_id FROM appointment_reminders r WHERE r.appointment_id = e.resource_id) \
             FROM events e WHERE e.type = 'appointment.reminder_due'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(1), "system");
    assert!(row.get::<_, bool>(2));
    assert_eq!(row.get::<_, uuid::Uuid>(3), uuid::Uuid::from(report.correlation_id.ulid()));
    assert_eq!(row.get::<_, uuid::Uuid>(4), uuid::Uuid::from(report.run_id));
    assert_eq!(row.get::<_, i32>(5), 1);
    assert_eq!(row.get::<_, i64>(6), 3, "appointment, patient and practitioner timelines");
    assert_eq!(row.get::<_, i64>(7), 1, "queued for dispatch");
    assert_eq!(row.get::<_, uuid::Uuid>(8), row.get::<_, uuid::Uuid>(0), "the reminder row names its event");

    // A repeated run emits nothing; the listener sends exactly one reminder.
    let again = run(&clinic.app.state.pool, LEAD, Utc::now()).await.unwrap();
    assert_eq!(again.emitted, 0);
    assert_ne!(again.run_id, report.run_id);
    clinic.dispatch().await;
    assert_eq!(clinic.reminder_notifications().await, 1);
    clinic.dispatch().await;
    assert_eq!(clinic.reminder_notifications().await, 1);
}

#[tokio::test]
async fn overlapping_runs_emit_one_event_per_appointment() {
    let clinic = Clinic::new().await;
    let mut appointments = Vec::new();
    for hours in [1, 3, 5, 7, 9] {
        appointments.push(clinic.book(hours).await);
    }
    let pool = &clinic.app.state.pool;
    let now = Utc::now();
    let (first, second) = tokio::join!(run(pool, LEAD, now), run(pool, LEAD, now));
    let (first, second) = (first.unwrap(), second.unwrap());
    assert_eq!(first.emitted + second.emitted, appointments.len(), "{first:?} {second:?}");
    for appointment in &appointments {
        assert_eq!(clinic.reminders_of(appointment).await, 1, "{appointment}");
    }
    // Three more overlapping runs change nothing.
    let (a, b, c) = tokio::join!(run(pool, LEAD, now), run(pool, LEAD, now), run(pool, LEAD, Utc::now()));
    assert_eq!(a.unwrap().emitted + b.unwrap().emitted + c.unwrap().emitted, 0);
    assert_eq!(clinic.reminder_events().await, appointments.len() as i64);
}

#[tokio::test]
async fn a_reschedule_arms_the_reminder_again() {
    let clinic = Clinic::new().await;
    let appointment = clinic.book(4).await;
    assert_eq!(run(&clinic.app.state.pool, LEAD, Utc::now()).await.unwrap().emitted, 1);
    clinic.dispatch().await;
    assert_eq!(clinic.reminder_notifications().await, 1);

    let starts = Utc::now() + chrono::Duration::hours(6);
    clinic
        .post(
            format!("/v1/appointments/{appointment}/reschedule"),
            json!({"startsAt": rfc3339(starts), "endsAt": rfc3339(starts + chrono::Duration::minutes(30))}),
        )
        .await;
    let report = run(&clinic.app.state.pool, LEAD, Utc::now()).await.unwrap();
    assert_eq!(report.emitted, 1, "new start time, new reminder");
    assert_eq!(clinic.reminders_of(&appointment).await, 2);
    assert_eq!(run(&clinic.app.state.pool, LEAD, Utc::now()).await.unwrap().emitted, 0);
    clinic.dispatch().await;
    assert_eq!(clinic.reminder_notifications().await, 2, "one reminder per reminder event");
}

#[tokio::test]
async fn a_reminder_made_stale_by_a_change_is_not_sent() {
    let clinic = Clinic::new().await;
    let appointment = clinic.book(4).await;
    assert_eq!(run(&clinic.app.state.pool, LEAD, Utc::now()).await.unwrap().emitted, 1);
    // Cancelled before the dispatcher ran: the reminder event is stale.
    clinic.post(format!("/v1/appointments/{appointment}/cancel"), json!({})).await;
    clinic.dispatch().await;
    assert_eq!(clinic.reminder_notifications().await, 0);
}
