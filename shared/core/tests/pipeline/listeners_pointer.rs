//! Messages are untrusted pointers, in-process (the local transport's path): every reason code, a
//! forged deletion that cancels nothing, the stored envelope winning over the claimed one, and
//! `cancel_future_appointments` judged at the deletion's `occurredAt`.

use super::support::Fixture;
use clinic_core::appointments::{self, AppointmentStatus};
use clinic_core::dispatch::{LocalTransport, Start, Transport};
use clinic_core::events::{Envelope, EventType};
use clinic_core::ids::{AppointmentId, EventId, WorkspaceId};
use clinic_core::listeners::notify::DeliveryLog;
use clinic_core::listeners::{self, Delivery, Listener, ListenerError, Rejection, SourceClaim};

async fn status_of(fx: &Fixture, id: AppointmentId) -> AppointmentStatus {
    let client = fx.db.client().await;
    appointments::repo::find(&client, fx.workspace, id).await.unwrap().unwrap().status
}

/// Runs `envelope` for `listener` and expects the rejection `reason`, with nothing written.
async fn expect_rejected(fx: &Fixture, listener: Listener, envelope: &Envelope, reason: Rejection) {
    let receipts = fx.count("SELECT count(*) FROM listener_receipts").await;
    let notifications = fx.count("SELECT count(*) FROM notifications").await;
    let events = fx.count("SELECT count(*) FROM events").await;
    let error = listeners::run(&fx.db.pool, listener, envelope).await.unwrap_err();
    assert_eq!(error.rejection(), Some(reason), "{error:?}");
    assert!(matches!(error, ListenerError::Permanent { code, .. } if code == reason.as_str()), "{error:?}");
    assert_eq!(fx.count("SELECT count(*) FROM listener_receipts").await, receipts, "{reason:?}");
    assert_eq!(fx.count("SELECT count(*) FROM notifications").await, notifications, "{reason:?}");
    assert_eq!(fx.count("SELECT count(*) FROM events").await, events, "{reason:?}");
}

/// A patient with a booked appointment, and a forged `patient.deleted` for that patient: a real
/// deletion of another patient gives it a realistic shape, then it points at the victim with an id
/// the event log has never seen.
async fn victim_and_forged_deletion(fx: &Fixture) -> (AppointmentId, Envelope) {
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    let (appointment, _) = fx.book(patient, practitioner, 24).await;
    let other = fx.create_patient().await;
    let mut forged = fx.delete_patient(other).await;
    forged.id = EventId::generate();
    forged.resource_id = patient.ulid();
    (appointment, forged)
}

#[tokio::test]
async fn a_forged_patient_deletion_with_an_unknown_id_cancels_nothing() {
    let fx = Fixture::new().await;
    let (appointment, forged) = victim_and_forged_deletion(&fx).await;
    expect_rejected(&fx, Listener::CancelFutureAppointments, &forged, Rejection::UnknownEvent).await;
    assert_eq!(status_of(&fx, appointment).await, AppointmentStatus::Booked);
}

#[tokio::test]
async fn every_altered_attribute_is_rejected_with_its_reason_and_changes_nothing() {
    let fx = Fixture::new().await;
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    let (appointment, created) = fx.book(patient, practitioner, 24).await;
    let (other_appointment, _) = fx.book(patient, practitioner, 48).await;
    let listener = Listener::PatientBookingConfirmation;

    let mut tenant = created.clone();
    tenant.workspace_id = WorkspaceId::generate();
    expect_rejected(&fx, listener, &tenant, Rejection::TenantMismatch).await;

    // Another type that this listener would handle: `type` is checked against the log, not only the
    // routing table.
    let mut retyped = created.clone();
    retyped.event_type = EventType::AppointmentCancelled;
    expect_rejected(&fx, Listener::PatientCancellationNotice, &retyped, Rejection::TypeMismatch).await;
    let mut reversioned = created.clone();
    reversioned.version += 1;
    expect_rejected(&fx, listener, &reversioned, Rejection::TypeMismatch).await;

    let mut subject = created.clone();
    subject.resource_id = other_appointment.ulid();
    expect_rejected(&fx, listener, &subject, Rejection::SubjectMismatch).await;

    let mut version = created.clone();
    version.resource_version += 1;
    expect_rejected(&fx, listener, &version, Rejection::VersionMismatch).await;

    expect_rejected(&fx, Listener::PatientReminder, &created, Rejection::ListenerNotRouted).await;

    // The source is a wire attribute: checked when the transport carries one.
    let delivery = Delivery {
        listener,
        envelope: &created,
        source: Some(SourceClaim { claimed: "/attacker/workspaces/x", prefix: "/clinic" }),
        transport: "test",
        message_id: Some("m-source"),
        sent_at: None,
    };
    let error = listeners::deliver(&fx.db.pool, &DeliveryLog, &delivery).await.unwrap_err();
    assert_eq!(error.rejection(), Some(Rejection::SourceMismatch));
    assert_eq!(fx.count("SELECT count(*) FROM listener_receipts").await, 0);

    // The genuine message, with the genuine source, still works afterwards.
    let source = listeners::event_source("/clinic", created.workspace_id);
    let genuine = Delivery { source: Some(SourceClaim { claimed: &source, prefix: "/clinic" }), ..delivery };
    listeners::deliver(&fx.db.pool, &DeliveryLog, &genuine).await.unwrap();
    assert_eq!(fx.count("SELECT count(*) FROM notifications").await, 1);
    assert_eq!(status_of(&fx, appointment).await, AppointmentStatus::Booked);
}

#[tokio::test]
async fn the_local_transport_rejects_a_forged_start_permanently() {
    let fx = Fixture::new().await;
    let (appointment, forged) = victim_and_forged_deletion(&fx).await;
    let transport = LocalTransport::new(fx.db.pool.clone());
    let results =
        transport.start(&[Start { envelope: &forged, listener: Listener::CancelFutureAppointments }]).await;
    let error = results[0].as_ref().unwrap_err();
    assert_eq!((error.code.as_str(), error.permanent), ("unknown_event", true));
    assert_eq!(status_of(&fx, appointment).await, AppointmentStatus::Booked);
    assert_eq!(fx.count("SELECT count(*) FROM listener_receipts").await, 0);
}

#[tokio::test]
async fn the_listener_works_from_the_stored_event_not_the_claimed_one() {
    let fx = Fixture::new().await;
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    let future = fx.book_many(patient, practitioner, 24, 2).await;
    let mut deleted = fx.delete_patient(patient).await;
    // A message that lies about when the deletion happened (after every appointment) would cancel
    // nothing if it were believed.
    deleted.occurred_at += chrono::Duration::days(30);
    let outcome = listeners::run(&fx.db.pool, Listener::CancelFutureAppointments, &deleted).await.unwrap();
    assert_eq!(outcome, listeners::ListenerOutcome::Applied { effects: 2 });
    for (id, _) in &future {
        assert_eq!(status_of(&fx, *id).await, AppointmentStatus::Cancelled);
    }
}

#[tokio::test]
async fn cancel_future_appointments_uses_the_deletion_time_not_the_run_time() {
    let fx = Fixture::new().await;
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    let (was_future, _) = fx.book(patient, practitioner, 24).await;
    let (was_past, _) = fx.book(patient, practitioner, 48).await;
    let deleted = fx.delete_patient(patient).await;
    // Move the appointments around the deletion time: one started 1 ms after the deletion (in the
    // future then, in the past by the time the listener runs), one 1 ms before it.
    let client = fx.db.client().await;
    let moved = "UPDATE appointments SET starts_at = $2::timestamptz + $3::text::interval, \
                 ends_at = $2::timestamptz + $3::text::interval + interval '30 minutes' WHERE id = $1";
    client.execute(moved, &[&was_future, &deleted.occurred_at, &"1 millisecond"]).await.unwrap();
    client.execute(moved, &[&was_past, &deleted.occurred_at, &"-1 hour"]).await.unwrap();
    // The run happens after the first appointment's start (wait on the clock, bounded).
    let limit = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while chrono::Utc::now() <= deleted.occurred_at + chrono::Duration::milliseconds(2) {
        assert!(std::time::Instant::now() < limit);
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let outcome = listeners::run(&fx.db.pool, Listener::CancelFutureAppointments, &deleted).await.unwrap();
    assert_eq!(outcome, listeners::ListenerOutcome::Applied { effects: 1 });
    assert_eq!(status_of(&fx, was_future).await, AppointmentStatus::Cancelled);
    assert_eq!(status_of(&fx, was_past).await, AppointmentStatus::Booked);
}

#[tokio::test]
async fn a_local_listener_run_is_bounded_by_its_timeout_and_leaves_nothing() {
    let fx = Fixture::new().await;
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    let (_, created) = fx.book(patient, practitioner, 24).await;
    let listener = Listener::PatientBookingConfirmation;
    // Another session is inserting the same receipt and has not committed: the run blocks on it.
    let mut blocker = fx.db.client().await;
    let tx = blocker.transaction().await.unwrap();
    tx.execute(
        "INSERT INTO listener_receipts (listener, event_id) VALUES ($1, $2)",
        &[&listener.as_str(), &created.id],
    )
    .await
    .unwrap();
    let transport =
        LocalTransport::new(fx.db.pool.clone()).with_run_timeout(std::time::Duration::from_millis(500));
    let start = Start { envelope: &created, listener };
    let results = transport.start(&[start]).await;
    let error = results[0].as_ref().unwrap_err();
    assert_eq!((error.code.as_str(), error.permanent), ("listener_timeout", false), "{error:?}");
    tx.rollback().await.unwrap();
    // The abandoned run rolled back; the retry does the work once.
    assert!(transport.start(&[start]).await[0].is_ok());
    assert_eq!(fx.count("SELECT count(*) FROM listener_receipts").await, 1);
    assert_eq!(fx.count("SELECT count(*) FROM notifications").await, 1);
}
