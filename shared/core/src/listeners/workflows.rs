//! The listener workflows themselves: check and receipt first, reload, stale check, effect, commit.

use deadpool_postgres::Pool;

use super::notify::{DeliveryLog, NewNotification, Notified, Notifier, RecipientKind};
use super::pointer::{self, Checked, Delivery, Rejected};
use super::{Listener, ListenerError, ListenerOutcome};
use crate::appointments::{self, Appointment, AppointmentStatus};
use crate::context::Ctx;
use crate::db::Tx;
use crate::disclosures::{self, Purpose};
use crate::events::{Actor, Cause, Envelope, EventType, ResourceType};
use crate::ids::{AppointmentId, PatientId};

/// Runs `listener` for `envelope` in this process with the built-in [`DeliveryLog`] notifier.
pub async fn run(
    pool: &Pool,
    listener: Listener,
    envelope: &Envelope,
) -> Result<ListenerOutcome, ListenerError> {
    deliver(pool, &DeliveryLog, &Delivery::local(listener, envelope)).await
}

/// Runs `listener` for `envelope` in this process, notifying through `notifier`.
pub async fn run_with(
    pool: &Pool,
    notifier: &dyn Notifier,
    listener: Listener,
    envelope: &Envelope,
) -> Result<ListenerOutcome, ListenerError> {
    deliver(pool, notifier, &Delivery::local(listener, envelope)).await
}

/// Runs one delivery in one transaction: the check against the event log folded into the receipt
/// insert ([`pointer`]), then the work with the stored envelope, then the commit. Every transport
/// comes through here.
pub async fn deliver(
    pool: &Pool,
    notifier: &dyn Notifier,
    delivery: &Delivery<'_>,
) -> Result<ListenerOutcome, ListenerError> {
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    let stored = match pointer::check_and_receipt(&tx, delivery).await {
        Ok(Checked::Fresh(stored)) => *stored,
        Ok(Checked::Duplicate) => {
            tx.rollback().await?;
            return Ok(ListenerOutcome::Duplicate);
        }
        Err(Rejected::Rejection(rejection)) => {
            // Nothing was inserted unless only the source disagreed; roll back either way. A failed
            // rollback discards the connection's transaction all the same and must not hide the
            // rejection.
            let _ = tx.rollback().await;
            pointer::report(delivery, rejection);
            // Recorded for operators on this connection, outside the rejected transaction.
            super::rejections::record(&client, delivery, rejection).await;
            return Err(rejection.into_error(delivery));
        }
        Err(Rejected::Error(error)) => return Err(error),
    };
    let outcome = work(&tx, notifier, delivery.listener, &stored).await?;
    tx.commit().await?;
    Ok(outcome)
}

async fn work(
    tx: &Tx<'_>,
    notifier: &dyn Notifier,
    listener: Listener,
    env: &Envelope,
) -> Result<ListenerOutcome, ListenerError> {
    use Freshness::{Any, Current, StillBooked};
    use Recipient::{Patient, Practitioner};
    let (recipient, freshness, template) = match listener {
        Listener::CancelFutureAppointments => return cancel_future_appointments(tx, env).await,
        Listener::WebhookFanOut => {
            let created = crate::webhooks::fanout::fan_out(tx, env).await?;
            return Ok(ListenerOutcome::Applied { effects: created as usize });
        }
        Listener::PatientBookingConfirmation => (Patient, Current, "appointment.booking_confirmation"),
        Listener::PatientRescheduleNotice => (Patient, Current, "appointment.reschedule_notice"),
        Listener::PatientReminder => (Patient, Current, "appointment.reminder"),
        Listener::PatientCancellationNotice => (Patient, Any, "appointment.cancellation_notice"),
        Listener::PractitionerScheduleChange => match env.event_type {
            EventType::AppointmentCancelled => (Practitioner, Any, "appointment.schedule_change.cancelled"),
            _ => (Practitioner, StillBooked, "appointment.schedule_change.booked"),
        },
    };
    notify_about_appointment(tx, notifier, listener, env, recipient, freshness, template).await
}

#[derive(Debug, Clone, Copy)]
enum Recipient {
    Patient,
    Practitioner,
}

/// When the current appointment still warrants the notification.
#[derive(Debug, Clone, Copy)]
enum Freshness {
    /// Still booked and not changed since the event (a later reschedule or cancellation sends its
    /// own, newer notice).
    Current,
    /// Still booked (the time may have moved; the appointment is still on the schedule).
    StillBooked,
    /// Always valid (a cancellation notice stays true whatever happened later).
    Any,
}

fn stale_reason(appointment: &Appointment, env: &Envelope, freshness: Freshness) -> Option<&'static str> {
    let booked = appointment.status == AppointmentStatus::Booked;
    match freshness {
        Freshness::Any => None,
        Freshness::StillBooked if !booked => Some("appointment_not_booked"),
        Freshness::StillBooked => None,
        Freshness::Current if !booked => Some("appointment_not_booked"),
        Freshness::Current if appointment.version > env.resource_version => Some("appointment_changed"),
        Freshness::Current => None,
    }
}

fn expect_resource(env: &Envelope, expected: ResourceType) -> Result<(), ListenerError> {
    if env.resource_type == expected {
        Ok(())
    } else {
        Err(ListenerError::Permanent {
            code: "wrong_resource_type",
            message: format!("event {} is about a {}", env.id, env.resource_type.as_str()),
        })
    }
}

async fn notify_about_appointment(
    tx: &Tx<'_>,
    notifier: &dyn Notifier,
    listener: Listener,
    env: &Envelope,
    recipient: Recipient,
    freshness: Freshness,
    template: &'static str,
) -> Result<ListenerOutcome, ListenerError> {
    expect_resource(env, ResourceType::Appointment)?;
    let id = AppointmentId::from_ulid(env.resource_id);
    let Some(appointment) = appointments::repo::find(tx, env.workspace_id, id).await? else {
        return Ok(ListenerOutcome::Stale { reason: "appointment_missing" });
    };
    // The reload carries the appointment's reason (and, for patients, the patient's fields).
    let purpose = Purpose { name: listener.as_str(), event_id: Some(env.id) };
    disclosures::record(tx, env.workspace_id, &Actor::System, &[appointment.patient_id], purpose).await?;
    if let Some(reason) = stale_reason(&appointment, env, freshness) {
        return Ok(ListenerOutcome::Stale { reason });
    }
    let (recipient_kind, recipient_id) = match recipient {
        Recipient::Patient => {
            // A deleted patient is not contacted any more.
            if crate::patients::repo::find(tx, env.workspace_id, appointment.patient_id).await?.is_none() {
                return Ok(ListenerOutcome::Stale { reason: "patient_deleted" });
            }
            (RecipientKind::Patient, appointment.patient_id.ulid())
        }
        Recipient::Practitioner => {
            // A staff member is never notified of their own change.
            if let Actor::Member { id: member } = env.actor {
                let practitioner = appointment.practitioner_id;
                if crate::delivery::render::is_member(tx, env.workspace_id, practitioner, member).await? {
                    return Ok(ListenerOutcome::Stale { reason: "own_change" });
                }
            }
            (RecipientKind::Practitioner, appointment.practitioner_id.ulid())
        }
    };
    let notification = NewNotification {
        workspace_id: env.workspace_id,
        event_id: env.id,
        listener,
        recipient_kind,
        recipient_id,
        template,
    };
    Ok(match notifier.notify(tx, &notification).await? {
        Notified::Recorded(_) => ListenerOutcome::Applied { effects: 1 },
        Notified::AlreadySent => ListenerOutcome::AlreadySent,
    })
}

/// `patient.deleted`: cancel the patient's booked appointments that were in the future when the
/// patient was deleted (the event's `occurredAt`, not the time this run happens to start: a
/// redelivery hours later cancels the same set), each a normal mutation with its own
/// `appointment.cancelled` event (actor `system`, causation = the deletion event).
async fn cancel_future_appointments(tx: &Tx<'_>, env: &Envelope) -> Result<ListenerOutcome, ListenerError> {
    expect_resource(env, ResourceType::Patient)?;
    let ctx = Ctx {
        workspace_id: env.workspace_id,
        cause: Cause {
            actor: Actor::System,
            correlation_id: env.correlation_id,
            causation_id: env.id.into(),
            idempotency_key: None,
        },
    };
    let patient_id = PatientId::from_ulid(env.resource_id);
    let events = appointments::cancel_future_of_patient(tx, &ctx, patient_id, env.occurred_at).await?;
    Ok(ListenerOutcome::Applied { effects: events.len() })
}
