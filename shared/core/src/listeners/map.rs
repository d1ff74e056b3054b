//! The listener catalog and the compile-checked listener map.
//!
//! It imports nothing of the core but [`EventType`]: [`crate::contract`] reads the catalog (the
//! AsyncAPI channels, the CloudEvent `listener` extension, the event catalog) from here, the one
//! import from below into the listeners module.
//!
//! Invariants:
//! - [`Listener`] is fieldless; its `as_str` names are stable (they are part of idempotency keys,
//!   `listener_starts`, `listener_receipts`, queue configuration and message attributes) and never
//!   renamed: a changed behaviour gets a new listener.
//! - [`listeners`] is an exhaustive `match` over [`EventType`] with no wildcard arm, so a new event
//!   type does not compile until its listener list (possibly empty) is written here.
//! - [`Listener::WebhookFanOut`] may run for every event type; the dispatcher starts it for an event
//!   only when a webhook endpoint of the event's workspace subscribes to its type — enabled, or
//!   disabled for less than `webhooks::fanout::HOLD_DAYS` (its deliveries are held) — decided in the
//!   claim statement by the one predicate `webhooks::fanout::subscribed`, one cheap indexed probe per
//!   claimed row: [`routed`]. [`listeners`]
//!   lists the built-in listeners every event of a type gets.

use std::fmt;

use crate::events::EventType;

macro_rules! listener_catalog {
    ($($variant:ident => $name:literal;)+) => {
        /// A listener workflow started for an event.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Listener {
            $($variant,)+
        }

        impl Listener {
            /// Every listener, in catalog order.
            pub const ALL: &'static [Listener] = &[$(Listener::$variant,)+];

            /// The stable name, e.g. `patient_booking_confirmation`.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Listener::$variant => $name,)+
                }
            }

            /// The inverse of [`Listener::as_str`].
            pub fn parse(name: &str) -> Option<Listener> {
                match name {
                    $($name => Some(Listener::$variant),)+
                    _ => None,
                }
            }
        }

        // The names, in catalog order.
        crate::inline_schema!(Listener, |_: &mut schemars::SchemaGenerator| {
            schemars::json_schema!({ "type": "string", "enum": [$($name,)+] })
        });
    };
}

listener_catalog! {
    PatientBookingConfirmation => "patient_booking_confirmation";
    PractitionerScheduleChange => "practitioner_schedule_change";
    PatientRescheduleNotice => "patient_reschedule_notice";
    PatientCancellationNotice => "patient_cancellation_notice";
    PatientReminder => "patient_reminder";
    CancelFutureAppointments => "cancel_future_appointments";
    WebhookFanOut => "webhook_fan_out";
}

impl fmt::Display for Listener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The listeners started for each event type. Exhaustive, no wildcard: an empty list is an answer.
pub fn listeners(event: EventType) -> &'static [Listener] {
    use Listener::*;
    match event {
        EventType::AppointmentCreated => &[PatientBookingConfirmation, PractitionerScheduleChange],
        EventType::AppointmentRescheduled => &[PatientRescheduleNotice],
        EventType::AppointmentCancelled => &[PatientCancellationNotice, PractitionerScheduleChange],
        EventType::AppointmentReminderDue => &[PatientReminder],
        EventType::PatientDeleted => &[CancelFutureAppointments],
        EventType::PatientCreated => &[],
        EventType::PatientUpdated => &[],
        EventType::PractitionerCreated => &[],
        // A changed name, specialty or active flag notifies nobody: patients learn of schedule
        // changes through their appointments' own events.
        EventType::PractitionerUpdated => &[],
        EventType::AppointmentCompleted => &[],
    }
}

/// The listeners the dispatcher starts for an event: [`listeners`], then the webhook fan-out when
/// `webhooks` (an endpoint of the workspace subscribes to the type: `webhooks::fanout::subscribed`).
pub fn routed(event: EventType, webhooks: bool) -> impl Iterator<Item = Listener> {
    listeners(event).iter().copied().chain(webhooks.then_some(Listener::WebhookFanOut))
}

/// True when `listener` may run for `event` (a message naming another pair is permanently wrong).
pub fn is_routed(event: EventType, listener: Listener) -> bool {
    listener == Listener::WebhookFanOut || listeners(event).contains(&listener)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listener_names_round_trip() {
        for listener in Listener::ALL {
            assert_eq!(Listener::parse(listener.as_str()), Some(*listener));
        }
        assert_eq!(Listener::parse("send_fax"), None);
    }

    #[test]
    fn every_event_type_has_an_explicit_listener_list() {
        let mut routed = std::collections::BTreeSet::new();
        for event in EventType::ALL {
            let names: Vec<&str> = listeners(*event).iter().map(|l| l.as_str()).collect();
            println!("{:<26} -> {:?}", event.as_str(), names);
            routed.extend(listeners(*event).iter().copied());
        }
        assert_eq!(
            listeners(EventType::AppointmentCreated),
            &[Listener::PatientBookingConfirmation, Listener::PractitionerScheduleChange]
        );
        assert_eq!(listeners(EventType::PatientDeleted), &[Listener::CancelFutureAppointments]);
        assert!(listeners(EventType::PatientCreated).is_empty());
        // Every listener is reachable from some event type; the fan-out from every type.
        routed.insert(Listener::WebhookFanOut);
        assert_eq!(routed.len(), Listener::ALL.len());
        for event in EventType::ALL {
            assert!(is_routed(*event, Listener::WebhookFanOut));
            assert_eq!(super::routed(*event, false).collect::<Vec<_>>(), listeners(*event));
            assert_eq!(super::routed(*event, true).last(), Some(Listener::WebhookFanOut));
        }
    }
}
