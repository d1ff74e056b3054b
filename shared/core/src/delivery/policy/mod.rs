//! The contact policy (DESIGN §5e): one pure decision before every send to a patient,
//! [`decide`]`(preferences, channel, notice, now) → Send | Defer(until) | Suppress(reason)`.
//!
//! | in this order | when | decision |
//! |---------------|------|----------|
//! | 1 | the patient consented to no channel | suppress `no_consent` |
//! | 2 | the patient opted out of all notifications, or of this kind | suppress `opted_out` |
//! | 3 | the channel chosen is not one the patient consented to | suppress `channel_not_allowed` |
//! | 4 | `now`, read in the patient's zone, is outside the quiet hours | send |
//! | 5 | a change notice about an appointment on the patient's today, by the clinic, and the workspace lets change notices bypass | send, the bypass recorded |
//! | 6 | otherwise (inside quiet hours) | defer until the first instant the quiet hours end |
//!
//! Invariants:
//! - Total and pure: every input has an answer; no I/O, no clock (the caller passes `now`).
//! - A reminder or a booking confirmation never bypasses quiet hours, whatever the setting says
//!   (the database's CHECK holds the same for the setting).
//! - `Defer(until)`: `until` is after `now`, outside the quiet hours in the patient's zone, and the
//!   first such instant (within the clock's resolution) — across DST gaps and repeated hours, where
//!   a wall-clock end time may not exist or exist twice.
//! - Quiet hours are a wall-clock window `[start, end)` in the patient's zone (the workspace's when
//!   the patient has none); `start > end` wraps midnight; `start == end` means none.

use chrono::{DateTime, Duration, LocalResult, NaiveDate, NaiveDateTime, NaiveTime, Offset, TimeZone, Utc};
use chrono_tz::Tz;

use crate::domain::contact::{Channel, MessageKind};

/// The workspace's quiet hours, a wall-clock window in the patient's zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuietHours {
    pub start: NaiveTime,
    pub end: NaiveTime,
}

impl Default for QuietHours {
    /// 21:00–08:00.
    fn default() -> Self {
        let at = |hour| NaiveTime::from_hms_opt(hour, 0, 0).unwrap_or(NaiveTime::MIN);
        Self { start: at(21), end: at(8) }
    }
}

impl QuietHours {
    /// True when the wall-clock time `local` lies inside the quiet hours.
    pub fn contains(&self, local: NaiveTime) -> bool {
        match self.start.cmp(&self.end) {
            std::cmp::Ordering::Equal => false,
            std::cmp::Ordering::Less => self.start <= local && local < self.end,
            std::cmp::Ordering::Greater => local >= self.start || local < self.end,
        }
    }

    /// True when the instant `at`, read in `zone`, lies inside the quiet hours.
    pub fn contains_instant(&self, at: DateTime<Utc>, zone: Tz) -> bool {
        self.contains(at.with_timezone(&zone).time())
    }

    /// The first instant after `now` outside the quiet hours in `zone` (`now` itself when it is
    /// outside). The candidates are the end time on the local dates around `now`; an end time that
    /// falls in a DST gap is moved to the first wall-clock minute after the gap, one that occurs
    /// twice counts both times; and the zone's offset changes, where a fall-back can move the wall
    /// clock back out of the window.
    pub fn next_opening(&self, now: DateTime<Utc>, zone: Tz) -> DateTime<Utc> {
        if !self.contains_instant(now, zone) {
            return now;
        }
        let today = now.with_timezone(&zone).date_naive();
        let mut best: Option<DateTime<Utc>> = None;
        for offset in -1..=3 {
            let Some(date) = today.checked_add_signed(Duration::days(offset)) else { continue };
            for candidate in instants_at_or_after(zone, date, self.end) {
                if candidate > now && !self.contains_instant(candidate, zone) {
                    best = Some(best.map_or(candidate, |b: DateTime<Utc>| b.min(candidate)));
                }
            }
        }
        // A fall-back whose repeated hour starts before the window moves the wall clock back out of
        // it: the transition itself is then the opening.
        for change in offset_changes(zone, now, now + Duration::days(4)) {
            if change > now && !self.contains_instant(change, zone) {
                best = Some(best.map_or(change, |b: DateTime<Utc>| b.min(change)));
            }
        }
        // Every zone's quiet window ends within three local days; a day later is the safe answer
        // should a zone ever jump further (never observed in the tz database).
        best.unwrap_or(now + Duration::days(1))
    }
}

/// The instants in `(from, to]` at which `zone`'s UTC offset changes, each exact to the second (the
/// tz database's transitions fall on whole seconds): six-hour steps, then bisection over seconds.
fn offset_changes(zone: Tz, from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<DateTime<Utc>> {
    let offset = |second: i64| {
        DateTime::from_timestamp(second, 0)
            .map(|at| zone.offset_from_utc_datetime(&at.naive_utc()).fix().local_minus_utc())
    };
    const STEP: i64 = 6 * 3600;
    let (mut low, end) = (from.timestamp(), to.timestamp());
    let mut changes = Vec::new();
    let mut current = offset(low);
    while low < end {
        let high_end = (low + STEP).min(end);
        let next = offset(high_end);
        if next != current {
            let (mut before, mut after) = (low, high_end);
            while after - before > 1 {
                let middle = before + (after - before) / 2;
                if offset(middle) == current {
                    before = middle
                } else {
                    after = middle
                }
            }
            changes.extend(DateTime::from_timestamp(after, 0));
        }
        (low, current) = (high_end, next);
    }
    changes
}

/// The instants whose wall-clock time in `zone` is `date` at `time` — or, when that wall-clock time
/// does not exist (a DST gap), the first existing minute after it.
fn instants_at_or_after(zone: Tz, date: NaiveDate, time: NaiveTime) -> Vec<DateTime<Utc>> {
    let mut local: NaiveDateTime = date.and_time(time);
    // A gap lasts at most a day (Pacific/Apia skipped 30 December 2011); minute by minute past it.
    for _ in 0..=(26 * 60) {
        match zone.from_local_datetime(&local) {
            LocalResult::Single(at) => return vec![at.with_timezone(&Utc)],
            LocalResult::Ambiguous(first, second) => {
                return vec![first.with_timezone(&Utc), second.with_timezone(&Utc)]
            }
            LocalResult::None => local += Duration::minutes(1),
        }
    }
    Vec::new()
}

/// What the policy reads: the patient's preferences with the workspace's settings folded in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preferences {
    /// The channels the patient consented to (empty: no consent).
    pub channels: Vec<Channel>,
    /// The kinds the patient opted out of.
    pub opt_outs: Vec<MessageKind>,
    /// The patient opted out of every notification (the older all-or-nothing switch).
    pub opted_out_of_all: bool,
    /// The patient's zone, or the workspace's when the patient has none.
    pub zone: Tz,
    /// The workspace's quiet hours.
    pub quiet_hours: QuietHours,
    /// The kinds the workspace lets bypass quiet hours when they change what a patient must do today.
    pub bypass: Vec<MessageKind>,
}

/// The message about to be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Notice {
    pub kind: MessageKind,
    /// A change by the clinic to an appointment on the patient's today (in their zone): the patient
    /// must act on it today.
    pub changes_today: bool,
}

/// Why a message is never sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SuppressReason {
    OptedOut,
    ChannelNotAllowed,
    NoConsent,
}

impl SuppressReason {
    /// The stored reason code (`last_error_code` of a `suppressed` notification).
    pub const fn code(self) -> &'static str {
        match self {
            SuppressReason::OptedOut => "opted_out",
            SuppressReason::ChannelNotAllowed => "channel_not_allowed",
            SuppressReason::NoConsent => "no_consent",
        }
    }
}

/// The policy's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Send now; `bypassed_quiet_hours` when it goes out inside them (recorded on the row).
    Send { bypassed_quiet_hours: bool },
    /// Not now: due again at `until`, the first instant the quiet hours end.
    Defer { until: DateTime<Utc> },
    /// Never: a final state with its reason.
    Suppress(SuppressReason),
}

/// The stored code of a row deferred by quiet hours.
pub const QUIET_HOURS: &str = "quiet_hours";

/// The only kind that may bypass quiet hours (and only when it changes the patient's today).
pub const BYPASSABLE: MessageKind = MessageKind::ChangeNotice;

/// The one decision before every send to a patient (see the module docs for the order).
pub fn decide(preferences: &Preferences, channel: Channel, notice: Notice, now: DateTime<Utc>) -> Decision {
    if preferences.channels.is_empty() {
        return Decision::Suppress(SuppressReason::NoConsent);
    }
    if preferences.opted_out_of_all || preferences.opt_outs.contains(&notice.kind) {
        return Decision::Suppress(SuppressReason::OptedOut);
    }
    if !preferences.channels.contains(&channel) {
        return Decision::Suppress(SuppressReason::ChannelNotAllowed);
    }
    let quiet = preferences.quiet_hours;
    if !quiet.contains_instant(now, preferences.zone) {
        return Decision::Send { bypassed_quiet_hours: false };
    }
    if may_bypass(preferences, notice) {
        return Decision::Send { bypassed_quiet_hours: true };
    }
    Decision::Defer { until: quiet.next_opening(now, preferences.zone) }
}

/// Only a change notice that changes the patient's today, and only where the workspace allows it.
fn may_bypass(preferences: &Preferences, notice: Notice) -> bool {
    notice.kind == BYPASSABLE && notice.changes_today && preferences.bypass.contains(&notice.kind)
}

/// The kind of a patient template (`None`: not a patient message — practitioner notices are
/// staff's and the patient policy does not apply to them).
pub fn kind_of_template(template: &str) -> Option<MessageKind> {
    match template {
        "appointment.booking_confirmation" => Some(MessageKind::BookingConfirmation),
        "appointment.reschedule_notice" | "appointment.cancellation_notice" => {
            Some(MessageKind::ChangeNotice)
        }
        "appointment.reminder" => Some(MessageKind::Reminder),
        _ => None,
    }
}

/// True when `at` falls on the same local date as `now` in `zone`.
pub fn same_local_day(at: DateTime<Utc>, now: DateTime<Utc>, zone: Tz) -> bool {
    at.with_timezone(&zone).date_naive() == now.with_timezone(&zone).date_naive()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn preferences(zone: &str) -> Preferences {
        Preferences {
            channels: vec![Channel::Email, Channel::Sms],
            opt_outs: Vec::new(),
            opted_out_of_all: false,
            zone: zone.parse().unwrap(),
            quiet_hours: QuietHours::default(),
            bypass: Vec::new(),
        }
    }

    fn at(text: &str) -> DateTime<Utc> {
        text.parse().unwrap()
    }

    const REMINDER: Notice = Notice { kind: MessageKind::Reminder, changes_today: false };

    #[test]
    fn quiet_hours_are_read_in_the_patients_zone() {
        let berlin = preferences("Europe/Berlin");
        // 06:30 UTC is 07:30 in Berlin (winter): quiet until 08:00 local = 07:00 UTC.
        assert_eq!(
            decide(&berlin, Channel::Sms, REMINDER, at("2026-12-01T06:30:00Z")),
            Decision::Defer { until: at("2026-12-01T07:00:00Z") }
        );
        // The same instant is 01:30 in New York: quiet until 08:00 local = 13:00 UTC.
        assert_eq!(
            decide(&preferences("America/New_York"), Channel::Sms, REMINDER, at("2026-12-01T06:30:00Z")),
            Decision::Defer { until: at("2026-12-01T13:00:00Z") }
        );
        assert_eq!(
            decide(&berlin, Channel::Sms, REMINDER, at("2026-12-01T12:00:00Z")),
            Decision::Send { bypassed_quiet_hours: false }
        );
    }

    #[test]
    fn a_dst_gap_over_the_end_opens_at_the_first_minute_after_it() {
        let mut prefs = preferences("America/New_York");
        // 2026-03-08 02:00 EST jumps to 03:00 EDT; quiet hours end at 02:30, which does not exist.
        prefs.quiet_hours.end = NaiveTime::from_hms_opt(2, 30, 0).unwrap();
        let night = at("2026-03-08T06:45:00Z"); // 01:45 EST
        assert_eq!(
            decide(&prefs, Channel::Email, REMINDER, night),
            Decision::Defer { until: at("2026-03-08T07:00:00Z") } // 03:00 EDT
        );
    }

    /// Found by the random run (10,000 messages): a fall-back whose repeated hour starts before the
    /// quiet hours moves the wall clock back out of them, and the window opens at that instant, not
    /// at the end time hours later.
    #[test]
    fn a_fall_back_out_of_the_window_opens_it_at_the_transition() {
        let mut prefs = preferences("Europe/Belgrade");
        prefs.quiet_hours = QuietHours {
            start: NaiveTime::from_hms_opt(2, 37, 0).unwrap(),
            end: NaiveTime::from_hms_opt(11, 28, 0).unwrap(),
        };
        // 2029-10-28 03:00 CEST falls back to 02:00 CET at 01:00 UTC; 00:39 UTC is 02:39 CEST (quiet).
        let night = at("2029-10-28T00:39:01Z");
        assert_eq!(
            decide(&prefs, Channel::Email, REMINDER, night),
            Decision::Defer { until: at("2029-10-28T01:00:00Z") } // 02:00 CET, before 02:37
        );
        // The default window (21:00–08:00) contains the whole repeated hour: the end time stands.
        let default = preferences("Europe/Belgrade");
        assert_eq!(
            decide(&default, Channel::Email, REMINDER, night),
            Decision::Defer { until: at("2029-10-28T07:00:00Z") } // 08:00 CET
        );
    }

    #[test]
    fn suppression_comes_first_and_names_its_reason() {
        let mut prefs = preferences("UTC");
        let noon = at("2026-12-01T12:00:00Z");
        prefs.channels = vec![Channel::Email];
        assert_eq!(
            decide(&prefs, Channel::Sms, REMINDER, noon),
            Decision::Suppress(SuppressReason::ChannelNotAllowed)
        );
        prefs.opt_outs = vec![MessageKind::Reminder];
        assert_eq!(
            decide(&prefs, Channel::Email, REMINDER, noon),
            Decision::Suppress(SuppressReason::OptedOut)
        );
        prefs.channels.clear();
        assert_eq!(
            decide(&prefs, Channel::Email, REMINDER, noon),
            Decision::Suppress(SuppressReason::NoConsent)
        );
    }

    #[test]
    fn only_a_same_day_change_notice_bypasses_and_only_where_allowed() {
        let mut prefs = preferences("UTC");
        let night = at("2026-12-01T23:00:00Z");
        let change = Notice { kind: MessageKind::ChangeNotice, changes_today: true };
        assert!(matches!(decide(&prefs, Channel::Sms, change, night), Decision::Defer { .. }));
        prefs.bypass = vec![MessageKind::ChangeNotice, MessageKind::Reminder];
        assert_eq!(
            decide(&prefs, Channel::Sms, change, night),
            Decision::Send { bypassed_quiet_hours: true }
        );
        let later = Notice { changes_today: false, ..change };
        assert!(matches!(decide(&prefs, Channel::Sms, later, night), Decision::Defer { .. }));
        // Reminders never bypass, whatever the setting holds.
        let reminder = Notice { kind: MessageKind::Reminder, changes_today: true };
        assert!(matches!(decide(&prefs, Channel::Sms, reminder, night), Decision::Defer { .. }));
    }
}

#[cfg(test)]
mod property_tests;
