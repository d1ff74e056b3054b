//! The listener workflows themselves: check and receipt first, reload, stale check, effect, commit.
//!
//! Round trips: a notice about an appointment (every notification listener) takes four — BEGIN;
//! the check with its receipt and the reload of the appointment with its parties, sent together;
//! the disclosure and the notification, sent together; COMMIT. The reload reads by the ids the
//! message claims, before the check has found them genuine, and is used only after it has: a
//! rejected or duplicate delivery rolls back and its reload is dropped unread.

use deadpool_postgres::Pool;

use super::notify::{NewNotification, Notified, Notifier, RecipientKind};
use super::pointer::{self, Checked, Delivery, Rejected};
use super::{Listener, ListenerError, ListenerOutcome};
use crate::appointments::repo::Parties;
use crate::appointments::{self, Appointment};
use crate::context::Ctx;
use crate::db::{sql, Tx};
use crate::delivery::freshness::{self, stale_reason, NoticeRule, Recipient};
use crate::disclosures::{self, Purpose};
use crate::events::{Actor, Envelope, EventType, ResourceType};
use crate::ids::{AppointmentId, PatientId};
use crate::telemetry::spans;

/// Runs `listener` for `envelope` in this process with the built-in
/// [`DeliveryLog`](super::notify::DeliveryLog) notifier and no after-commit step: a test entry point
/// (transports run listeners through [`super::ListenerHost`]).
#[cfg(any(test, feature = "testing"))]
pub async fn run(
    pool: &Pool,
    listener: Listener,
    envelope: &Envelope,
) -> Result<ListenerOutcome, ListenerError> {
    deliver(pool, &super::notify::DeliveryLog, &Delivery::local(listener, envelope)).await
}

/// Runs one delivery in one transaction: the check against the event log folded into the receipt
/// insert ([`pointer`]), then the work with the stored envelope, then the commit. Every transport
/// comes through here.
#[tracing::instrument(
    skip_all,
    name = "listener.run",
    fields(listener = %delivery.listener, event_id = %delivery.envelope.id, event_type = %delivery.envelope.event_type)
)]
pub async fn deliver(
    pool: &Pool,
    notifier: &dyn Notifier,
    delivery: &Delivery<'_>,
) -> Result<ListenerOutcome, ListenerError> {
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    let work = Work::of(delivery.listener, delivery.envelope.event_type);
    // In order, in one round trip: the check (and receipt), then a notice's reload.
    let (checked, reloaded) = sql::pipeline(
        &tx,
        &[&pointer::CHECK_AND_RECEIPT, appointments::repo::FIND_WITH_PARTIES],
        (pointer::check_and_receipt(&tx, delivery), async {
            match work {
                Work::Notice(_) => reload(&tx, delivery.envelope).await,
                Work::CancelFutureAppointments | Work::WebhookFanOut => Ok(None),
            }
        }),
    )
    .await?;
    let stored = match checked {
        Ok(Checked::Fresh(stored)) => {
            link_run(delivery, &stored);
            *stored
        }
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
    let outcome = match work {
        Work::Notice(notice) => {
            notify_about_appointment(&tx, notifier, delivery.listener, &stored, notice, reloaded?).await?
        }
        Work::CancelFutureAppointments => cancel_future_appointments(&tx, &stored).await?,
        Work::WebhookFanOut => {
            let created = crate::webhooks::fanout::fan_out(&tx, &stored).await?;
            ListenerOutcome::Applied { effects: created as usize }
        }
    };
    tx.commit().await?;
    Ok(outcome)
}

/// Links the run's span to the trace that committed the event (the STORED trace context) with how
/// long the message waited in its queue (send → this run's check). Nothing is done with the export off.
fn link_run(delivery: &Delivery<'_>, stored: &Envelope) {
    spans::link_events(&tracing::Span::current(), spans::QUEUE_WAIT, || {
        let now = chrono::Utc::now();
        std::iter::once(spans::Handled {
            event_id: stored.id,
            trace: stored.traceparent,
            wait_ms: delivery.sent_at.map_or(0, |sent| spans::wait_ms(sent, now)),
        })
    });
}

/// What a listener does.
#[derive(Debug, Clone, Copy)]
enum Work {
    /// Sends a notice about the event's appointment.
    Notice(NoticeRule),
    /// `patient.deleted`: cancels the patient's future appointments.
    CancelFutureAppointments,
    /// Creates one webhook delivery per subscribed endpoint.
    WebhookFanOut,
}

impl Work {
    /// What `listener` does for an event of `event_type`.
    fn of(listener: Listener, event_type: EventType) -> Work {
        use freshness::*;
        Work::Notice(match listener {
            Listener::CancelFutureAppointments => return Work::CancelFutureAppointments,
            Listener::WebhookFanOut => return Work::WebhookFanOut,
            Listener::PatientBookingConfirmation => BOOKING_CONFIRMATION,
            Listener::PatientRescheduleNotice => RESCHEDULE_NOTICE,
            Listener::PatientReminder => REMINDER,
            Listener::PatientCancellationNotice => CANCELLATION_NOTICE,
            Listener::PractitionerScheduleChange => match event_type {
                EventType::AppointmentCancelled => SCHEDULE_CHANGE_CANCELLED,
                _ => SCHEDULE_CHANGE_BOOKED,
            },
        })
    }
}

/// A notice's reload: the appointment the message points at, with what the notice needs of its
/// parties (`None` when the message is not about an appointment, or it is gone).
async fn reload(tx: &Tx<'_>, claim: &Envelope) -> Result<Option<(Appointment, Parties)>, ListenerError> {
    if claim.resource_type != ResourceType::Appointment {
        return Ok(None);
    }
    let id = AppointmentId::from_ulid(claim.resource_id);
    Ok(appointments::repo::find_with_parties(tx, claim.workspace_id, id).await?)
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

/// Sends `notice` about the appointment `reloaded` (read with the check, by the ids the message
/// claimed, which the check has since found equal to the stored event's): records the disclosure of
/// the reload, and the notification unless the current state has made it stale, both in one round
/// trip.
async fn notify_about_appointment(
    tx: &Tx<'_>,
    notifier: &dyn Notifier,
    listener: Listener,
    env: &Envelope,
    notice: NoticeRule,
    reloaded: Option<(Appointment, Parties)>,
) -> Result<ListenerOutcome, ListenerError> {
    expect_resource(env, ResourceType::Appointment)?;
    let Some((appointment, parties)) = reloaded else {
        return Ok(ListenerOutcome::Stale { reason: "appointment_missing" });
    };
    // The reload carries the appointment's reason: recorded whether or not the notice is sent.
    let purpose = Purpose { name: listener.as_str(), event_id: Some(env.id) };
    let patients = [appointment.patient_id];
    let disclosed = disclosures::record(tx, env.workspace_id, &Actor::System, &patients, purpose);
    let (recipient_kind, recipient_id) = match notice.recipient {
        Recipient::Patient => (RecipientKind::Patient, appointment.patient_id.ulid()),
        Recipient::Practitioner => (RecipientKind::Practitioner, appointment.practitioner_id.ulid()),
    };
    if let Some(reason) = stale_reason(&appointment, parties, env, notice) {
        disclosed.await?;
        return Ok(ListenerOutcome::Stale { reason });
    }
    let notification = NewNotification {
        workspace_id: env.workspace_id,
        event_id: env.id,
        listener,
        recipient_kind,
        recipient_id,
        template: notice.template,
        priority: crate::delivery::Priority::of(notice.template, appointment.starts_at, chrono::Utc::now()),
    };
    let (disclosed, notified) = futures::future::join(disclosed, notifier.notify(tx, &notification)).await;
    disclosed?;
    Ok(match notified? {
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
    let ctx = Ctx::system_after(env);
    let patient_id = PatientId::from_ulid(env.resource_id);
    let events = appointments::cancel_future_of_patient(tx, &ctx, patient_id, env.occurred_at).await?;
    Ok(ListenerOutcome::Applied { effects: events.len() })
}
