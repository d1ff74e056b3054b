//! Priority by kind (issue 41 item 2, DESIGN §5d): which notifications a claim takes first. This is
//! the one table (docs/delivery.md shows it); the listener writes the rank into
//! `notifications.priority` when it commits the row, and the lease queue's fair pick orders every
//! claim by it before it takes turns across workspaces.
//!
//! | template | priority |
//! |----------|----------|
//! | `appointment.cancellation_notice` | urgent |
//! | `appointment.reschedule_notice`, `appointment.schedule_change.cancelled` | urgent on the same day, else change |
//! | `appointment.schedule_change.booked` | urgent on the same day, else routine |
//! | `appointment.booking_confirmation`, `appointment.reminder`, anything else | routine |
//!
//! Invariants:
//! - "On the same day" means the appointment (as reloaded by the listener, i.e. after the change)
//!   starts within [`SAME_DAY`] of the commit, or has started.
//! - The rank depends on the kind and the appointment's time only — never on who the clinic is or
//!   how much it sends — so a clinic cannot buy a place in the queue; fairness between clinics is
//!   the claim's turns, not this table.

use chrono::{DateTime, Utc};

/// How soon a notification should go out; lower is sooner (the stored value).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Priority {
    /// Changes what someone must do today: a cancellation, a same-day change.
    Urgent = 0,
    /// Another change to the schedule.
    Change = 1,
    /// Confirmations and reminders.
    Routine = 2,
}

/// The horizon of "the same day": an appointment starting within it is today's business.
pub const SAME_DAY: chrono::Duration = chrono::Duration::hours(24);

impl Priority {
    /// The stored rank (`notifications.priority`).
    pub const fn rank(self) -> i16 {
        self as i16
    }

    /// The table above: the priority of `template` about an appointment starting at `starts_at`,
    /// committed at `now`.
    pub fn of(template: &str, starts_at: DateTime<Utc>, now: DateTime<Utc>) -> Priority {
        let same_day = starts_at - now <= SAME_DAY;
        match template {
            "appointment.cancellation_notice" => Priority::Urgent,
            "appointment.reschedule_notice" | "appointment.schedule_change.cancelled" if same_day => {
                Priority::Urgent
            }
            "appointment.reschedule_notice" | "appointment.schedule_change.cancelled" => Priority::Change,
            "appointment.schedule_change.booked" if same_day => Priority::Urgent,
            _ => Priority::Routine,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cancellations_and_same_day_changes_outrank_confirmations_and_reminders() {
        let now = Utc::now();
        let today = now + chrono::Duration::hours(3);
        let next_week = now + chrono::Duration::days(7);
        for starts_at in [today, next_week] {
            assert_eq!(Priority::of("appointment.cancellation_notice", starts_at, now), Priority::Urgent);
            assert_eq!(Priority::of("appointment.booking_confirmation", starts_at, now), Priority::Routine);
            assert_eq!(Priority::of("appointment.reminder", starts_at, now), Priority::Routine);
        }
        for template in ["appointment.reschedule_notice", "appointment.schedule_change.cancelled"] {
            assert_eq!(Priority::of(template, today, now), Priority::Urgent, "{template}");
            assert_eq!(Priority::of(template, next_week, now), Priority::Change, "{template}");
        }
        assert_eq!(Priority::of("appointment.schedule_change.booked", today, now), Priority::Urgent);
        assert_eq!(Priority::of("appointment.schedule_change.booked", next_week, now), Priority::Routine);
        assert!(Priority::Urgent.rank() < Priority::Change.rank());
        assert!(Priority::Change.rank() < Priority::Routine.rank());
    }

    #[test]
    fn every_template_has_a_row_in_the_table() {
        // A new template lands in `_ => Routine` unless it is added above; this lists the known ones
        // so a new template file makes the author look here.
        let known = [
            "appointment.booking_confirmation",
            "appointment.cancellation_notice",
            "appointment.reminder",
            "appointment.reschedule_notice",
            "appointment.schedule_change.booked",
            "appointment.schedule_change.cancelled",
        ];
        let mut templates: Vec<String> =
            std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/src/delivery/templates"))
                .unwrap()
                .map(|entry| entry.unwrap().file_name().to_string_lossy().trim_end_matches(".txt").to_owned())
                .collect();
        templates.sort();
        assert_eq!(templates, known);
    }
}
