//! When a notice about an appointment is still worth sending: one rule per template, applied by the
//! listener before it commits the notification and again by the send-time render ([`super::render`]),
//! so a notice that waited in retry is never sent once it stopped being true.
//!
//! Invariants:
//! - Every template a listener commits has exactly one [`NoticeRule`] here ([`RULES`]); the rule is a
//!   function of the template alone, so the render finds it from the stored row's template.
//! - A rule reads no personal field: the appointment's status and version, whether the patient is
//!   live, the practitioner's linked member and the event's actor.

use crate::appointments::repo::Parties;
use crate::appointments::{Appointment, AppointmentStatus};
use crate::events::{Actor, Envelope};

/// Whom a notice goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recipient {
    Patient,
    Practitioner,
}

/// When the current appointment still warrants the notification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    /// Still booked and not changed since the event (a later reschedule or cancellation sends its
    /// own, newer notice).
    Current,
    /// Still booked (the time may have moved; the appointment is still on the schedule).
    StillBooked,
    /// Always valid (a cancellation notice stays true whatever happened later).
    Any,
}

/// What a notification listener sends about an appointment: to whom, when it is still worth
/// sending, and which template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoticeRule {
    pub recipient: Recipient,
    pub freshness: Freshness,
    pub template: &'static str,
}

const fn rule(recipient: Recipient, freshness: Freshness, template: &'static str) -> NoticeRule {
    NoticeRule { recipient, freshness, template }
}

pub const BOOKING_CONFIRMATION: NoticeRule =
    rule(Recipient::Patient, Freshness::Current, "appointment.booking_confirmation");
pub const RESCHEDULE_NOTICE: NoticeRule =
    rule(Recipient::Patient, Freshness::Current, "appointment.reschedule_notice");
pub const REMINDER: NoticeRule = rule(Recipient::Patient, Freshness::Current, "appointment.reminder");
pub const CANCELLATION_NOTICE: NoticeRule =
    rule(Recipient::Patient, Freshness::Any, "appointment.cancellation_notice");
pub const SCHEDULE_CHANGE_CANCELLED: NoticeRule =
    rule(Recipient::Practitioner, Freshness::Any, "appointment.schedule_change.cancelled");
pub const SCHEDULE_CHANGE_BOOKED: NoticeRule =
    rule(Recipient::Practitioner, Freshness::StillBooked, "appointment.schedule_change.booked");

/// Every rule, one per template.
pub const RULES: &[NoticeRule] = &[
    BOOKING_CONFIRMATION,
    RESCHEDULE_NOTICE,
    REMINDER,
    CANCELLATION_NOTICE,
    SCHEDULE_CHANGE_CANCELLED,
    SCHEDULE_CHANGE_BOOKED,
];

/// The rule of `template` (`None`: a template this build does not know, e.g. a newer build's row).
pub fn of_template(template: &str) -> Option<NoticeRule> {
    RULES.iter().copied().find(|rule| rule.template == template)
}

/// Why the current state makes `notice` (committed for `env`) stale, if it does.
pub fn stale_reason(
    appointment: &Appointment,
    parties: Parties,
    env: &Envelope,
    notice: NoticeRule,
) -> Option<&'static str> {
    let booked = appointment.status == AppointmentStatus::Booked;
    let stale = match notice.freshness {
        Freshness::Any => None,
        Freshness::StillBooked if !booked => Some("appointment_not_booked"),
        Freshness::StillBooked => None,
        Freshness::Current if !booked => Some("appointment_not_booked"),
        Freshness::Current if appointment.version > env.resource_version => Some("appointment_changed"),
        Freshness::Current => None,
    };
    stale.or(match notice.recipient {
        // A deleted patient is not contacted any more.
        Recipient::Patient if !parties.patient_live => Some("patient_deleted"),
        // A staff member is never notified of their own change.
        Recipient::Practitioner => match env.actor {
            Actor::Member { id } if parties.practitioner_member == Some(id) => Some("own_change"),
            _ => None,
        },
        Recipient::Patient => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_template_has_one_rule_and_every_rendered_template_has_a_rule() {
        for rule in RULES {
            assert_eq!(RULES.iter().filter(|r| r.template == rule.template).count(), 1, "{}", rule.template);
            assert!(
                super::super::render::template(rule.template).is_some(),
                "{} is not rendered",
                rule.template
            );
        }
        assert_eq!(of_template("appointment.reminder"), Some(REMINDER));
        assert_eq!(of_template("appointment.unknown"), None);
    }
}
