//! Listener workflows against real PostgreSQL: receipts, duplicates, stale work and chained
//! cancellations.

use crate::support::{drain, fast_config, Fixture};
use clinic_core::appointments::{self, AppointmentStatus};
use clinic_core::events::{self, Actor, EventType};
use clinic_core::ids::AppointmentId;
use clinic_core::listeners::{self, Listener, ListenerError, ListenerOutcome};

async fn status_of(fx: &Fixture, id: AppointmentId) -> AppointmentStatus {
    let client = fx.db.client().await;
    appointments::repo::find(&client, fx.workspace, id).await.unwrap().unwrap().status
}

#[tokio::test]
async fn a_duplicate_delivery_is_a_successful_no_op() {
    let fx = Fixture::new().await;
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    let (_, created) = fx.book(patient, practitioner, 24).await;
    let pool = &fx.db.pool;
    let listener = Listener::PatientBookingConfirmation;
    assert_eq!(
        listeners::run(pool, listener, &created).await.unwrap(),
        ListenerOutcome::Applied { effects: 1 }
    );
    assert_eq!(listeners::run(pool, listener, &created).await.unwrap(), ListenerOutcome::Duplicate);
    assert_eq!(fx.count("SELECT count(*) FROM notifications").await, 1);
    let key: String = fx
        .db
        .client()
        .await
        .query_one("SELECT idempotency_key FROM notifications", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(key, format!("{}:patient_booking_confirmation", created.id));
}

#[tokio::test]
async fn concurrent_duplicate_deliveries_apply_once() {
    let fx = Fixture::new().await;
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    let (_, created) = fx.book(patient, practitioner, 24).await;
    let pool = &fx.db.pool;
    let runs = futures::future::join_all(
        (0..6).map(|_| listeners::run(pool, Listener::PractitionerScheduleChange, &created)),
    )
    .await;
    let applied = runs.iter().filter(|r| matches!(r, Ok(ListenerOutcome::Applied { .. }))).count();
    let duplicates = runs.iter().filter(|r| matches!(r, Ok(ListenerOutcome::Duplicate))).count();
    assert_eq!((applied, duplicates), (1, 5), "{runs:?}");
    assert_eq!(fx.count("SELECT count(*) FROM notifications").await, 1);
}

#[tokio::test]
async fn a_listener_not_routed_for_the_event_is_a_permanent_error() {
    let fx = Fixture::new().await;
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    let (_, created) = fx.book(patient, practitioner, 24).await;
    let error = listeners::run(&fx.db.pool, Listener::PatientReminder, &created).await.unwrap_err();
    assert!(matches!(error, ListenerError::Permanent { code: "listener_not_routed", .. }), "{error:?}");
    assert_eq!(fx.count("SELECT count(*) FROM listener_receipts").await, 0);
}

#[tokio::test]
async fn stale_work_is_skipped_but_still_receipted() {
    let fx = Fixture::new().await;
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    let pool = &fx.db.pool;

    // Cancelled before the confirmation ran: no confirmation, but the cancellation notice goes out.
    let (cancelled, created) = fx.book(patient, practitioner, 24).await;
    let cancellation = fx.cancel(cancelled).await;
    assert_eq!(
        listeners::run(pool, Listener::PatientBookingConfirmation, &created).await.unwrap(),
        ListenerOutcome::Stale { reason: "appointment_not_booked" }
    );
    assert_eq!(
        listeners::run(pool, Listener::PractitionerScheduleChange, &created).await.unwrap(),
        ListenerOutcome::Stale { reason: "appointment_not_booked" }
    );
    assert_eq!(
        listeners::run(pool, Listener::PatientCancellationNotice, &cancellation).await.unwrap(),
        ListenerOutcome::Applied { effects: 1 }
    );
    // The skipped run committed its receipt: a redelivery is a duplicate.
    assert_eq!(
        listeners::run(pool, Listener::PatientBookingConfirmation, &created).await.unwrap(),
        ListenerOutcome::Duplicate
    );

    // Rescheduled past the event: the old confirmation and the first notice are stale, the latest
    // notice is current, and the practitioner still learns of the booking.
    let (moved, created) = fx.book(patient, practitioner, 48).await;
    let first_move = fx.reschedule(moved, 72).await;
    let second_move = fx.reschedule(moved, 96).await;
    assert_eq!(
        listeners::run(pool, Listener::PatientBookingConfirmation, &created).await.unwrap(),
        ListenerOutcome::Stale { reason: "appointment_changed" }
    );
    assert_eq!(
        listeners::run(pool, Listener::PatientRescheduleNotice, &first_move).await.unwrap(),
        ListenerOutcome::Stale { reason: "appointment_changed" }
    );
    assert_eq!(
        listeners::run(pool, Listener::PatientRescheduleNotice, &second_move).await.unwrap(),
        ListenerOutcome::Applied { effects: 1 }
    );
    assert_eq!(
        listeners::run(pool, Listener::PractitionerScheduleChange, &created).await.unwrap(),
        ListenerOutcome::Applied { effects: 1 }
    );

    let templates: Vec<String> = fx
        .db
        .client()
        .await
        .query("SELECT template FROM notifications ORDER BY id", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(
        templates,
        [
            "appointment.cancellation_notice",
            "appointment.reschedule_notice",
            "appointment.schedule_change.booked"
        ]
    );
}

#[tokio::test]
async fn a_deleted_patient_is_not_contacted_and_every_reload_is_accounted() {
    let fx = Fixture::new().await;
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    let (_, created) = fx.book(patient, practitioner, 24).await;
    // Deleted before any listener of the booking ran (its appointment is still booked: the
    // cancellation is the deletion's own listener's work).
    fx.delete_patient(patient).await;
    let pool = &fx.db.pool;
    assert_eq!(
        listeners::run(pool, Listener::PatientBookingConfirmation, &created).await.unwrap(),
        ListenerOutcome::Stale { reason: "patient_deleted" }
    );
    assert_eq!(
        listeners::run(pool, Listener::PractitionerScheduleChange, &created).await.unwrap(),
        ListenerOutcome::Applied { effects: 1 }
    );
    assert_eq!(
        listeners::run(pool, Listener::PatientBookingConfirmation, &created).await.unwrap(),
        ListenerOutcome::Duplicate
    );
    let client = fx.db.client().await;
    let sent: Vec<String> = client
        .query("SELECT listener FROM notifications", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(sent, ["practitioner_schedule_change"]);
    // Both runs reloaded the appointment (its reason): one disclosure each, the stale one too.
    let mut purposes: Vec<String> = client
        .query("SELECT purpose FROM patient_disclosures WHERE event_id = $1", &[&created.id])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    purposes.sort();
    assert_eq!(purposes, ["patient_booking_confirmation", "practitioner_schedule_change"]);
}

#[tokio::test]
async fn patient_deletion_cancels_future_appointments_once_even_when_delivered_twice() {
    let fx = Fixture::new().await;
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    let (past, _) = fx.book(patient, practitioner, -48).await;
    let future = fx.book_many(patient, practitioner, 24, 2).await;
    let deleted = fx.delete_patient(patient).await;
    assert_eq!(deleted.event_type, EventType::PatientDeleted);

    let pool = &fx.db.pool;
    let (first, second) = tokio::join!(
        listeners::run(pool, Listener::CancelFutureAppointments, &deleted),
        listeners::run(pool, Listener::CancelFutureAppointments, &deleted),
    );
    let mut outcomes = vec![first.unwrap(), second.unwrap()];
    outcomes.sort_by_key(|o| o.as_str());
    assert_eq!(outcomes, [ListenerOutcome::Applied { effects: 2 }, ListenerOutcome::Duplicate]);
    assert_eq!(
        listeners::run(pool, Listener::CancelFutureAppointments, &deleted).await.unwrap(),
        ListenerOutcome::Duplicate
    );

    for (id, _) in &future {
        assert_eq!(status_of(&fx, *id).await, AppointmentStatus::Cancelled);
    }
    assert_eq!(status_of(&fx, past).await, AppointmentStatus::Booked);

    // Each cancellation is a normal mutation with its own event: actor system, caused by the deletion,
    // in the deletion's correlation.
    let client = fx.db.client().await;
    let mut cancellations = Vec::new();
    for (id, _) in &future {
        let timeline = events::read::timeline(
            &client,
            fx.workspace,
            events::ResourceType::Appointment,
            id.ulid(),
            None,
            10,
        )
        .await
        .unwrap();
        let cancelled: Vec<_> =
            timeline.into_iter().filter(|e| e.event_type == EventType::AppointmentCancelled).collect();
        assert_eq!(cancelled.len(), 1);
        cancellations.extend(cancelled);
    }
    for event in &cancellations {
        assert_eq!(event.actor, Actor::System);
        assert_eq!(event.causation_id, deleted.id.into());
        assert_eq!(event.correlation_id, deleted.correlation_id);
        assert_eq!(event.resource_version, 2);
    }

    // Dispatching the chain: the cancellation notices find the patient deleted (not contacted),
    // the practitioner is told.
    drain(&fx.dispatcher(fx.local(), fast_config())).await;
    let rows = client
        .query(
            "SELECT listener, template FROM notifications WHERE event_id = ANY($1) ORDER BY id",
            &[&cancellations.iter().map(|e| e.id).collect::<Vec<_>>()],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 2);
    for row in rows {
        assert_eq!(row.get::<_, String>(0), "practitioner_schedule_change");
        assert_eq!(row.get::<_, String>(1), "appointment.schedule_change.cancelled");
    }
    assert_eq!(fx.count("SELECT count(*) FROM appointments WHERE status = 'cancelled'").await, 2);
}
