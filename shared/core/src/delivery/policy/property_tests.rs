//! The contact policy's proof (issue 40 item 5), at the pure-function level: 10,000 simulated
//! reminders and notices at random instants — half of them within a day and a half of one of their
//! zone's DST transitions — in random IANA zones, with random quiet hours, consent, opt-outs and
//! bypass settings, and a sweep over every zone of the tz database across its transitions. After each
//! decision the simulated sender acts on it and [`check`] holds:
//! - nothing is sent inside the patient's quiet hours unless it is a bypass, and a bypass happens
//!   only for a same-day change notice where the workspace allows it (each one recorded: `Send`
//!   says so);
//! - a deferred message is due at the first second its window opens (a brute-force scan of the
//!   clock, minute by minute, agrees within the minute) and is sent when picked up then;
//! - after an opt-out (of the kind, or of everything) or without consent, nothing of it is sent —
//!   including a message deferred before the opt-out arrived, whichever way the opt-out came
//!   ([`LateOptOut`]: the API, an email's one-click link, the SMS provider's STOP; the last two
//!   through the same preference change the database path makes, `patients::OptOut::apply`, the
//!   one-click one from the kind its signed token carries).

use std::sync::atomic::{AtomicUsize, Ordering};

use chrono::{DateTime, Duration, NaiveTime, Offset, TimeZone, Utc};
use chrono_tz::{Tz, TZ_VARIANTS};
use proptest::prelude::*;

use super::*;

/// Counts of what the random run exercised, so the test fails if the generator stops reaching the
/// cases the proof is about.
static DEFERRED: AtomicUsize = AtomicUsize::new(0);
static DEFERRED_ACROSS_DST: AtomicUsize = AtomicUsize::new(0);
static BYPASSED: AtomicUsize = AtomicUsize::new(0);
/// Late opt-outs that suppressed a deferred message, per way it came ([`LateOptOut`] order).
static SUPPRESSED_AFTER_DEFERRAL: [AtomicUsize; 3] =
    [AtomicUsize::new(0), AtomicUsize::new(0), AtomicUsize::new(0)];

/// How an opt-out that arrives while a message waits came in (issue 40 item 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LateOptOut {
    /// `PATCH /v1/patients/{id}` with `contactOptOuts` holding the kind.
    Api,
    /// The one-click link of an earlier email of that kind: its token's kind, opted out of.
    OneClick,
    /// The SMS provider reports a STOP for the channel.
    ProviderStop,
}

impl LateOptOut {
    const fn index(self) -> usize {
        match self {
            LateOptOut::Api => 0,
            LateOptOut::OneClick => 1,
            LateOptOut::ProviderStop => 2,
        }
    }
}

/// The preferences after `late` arrived for a message of `kind` on `channel`, at `at`.
fn withdrawn(
    preferences: &Preferences,
    late: LateOptOut,
    kind: MessageKind,
    channel: Channel,
    at: DateTime<Utc>,
) -> Preferences {
    use crate::delivery::unsubscribe::{Claims, UnsubscribeKeys};
    use crate::patients::OptOut;
    let mut after = preferences.clone();
    match late {
        LateOptOut::Api => {
            after.opt_outs.push(kind);
        }
        LateOptOut::OneClick => {
            // The link of an earlier email of this kind, as the sender signed it and the route reads it.
            let keys = UnsubscribeKeys::new(b"property-test-unsubscribe-key", None);
            let expires_at = DateTime::from_timestamp(at.timestamp() + 86_400, 0).expect("in range");
            let claims = Claims {
                workspace_id: crate::ids::WorkspaceId::generate(),
                patient_id: crate::ids::PatientId::generate(),
                kind,
                expires_at,
            };
            let read = keys.verify(&keys.issue(&claims), at).expect("a genuine, unexpired token");
            OptOut::Kind(read.kind).apply(&mut after.channels, &mut after.opt_outs);
        }
        LateOptOut::ProviderStop => {
            OptOut::Channel(channel).apply(&mut after.channels, &mut after.opt_outs);
        }
    }
    after
}

fn offset_seconds(zone: Tz, at: DateTime<Utc>) -> i32 {
    zone.offset_from_utc_datetime(&at.naive_utc()).fix().local_minus_utc()
}

/// The first instant after `from` (within a year) at which `zone`'s offset changes.
fn next_transition(zone: Tz, from: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let start = offset_seconds(zone, from);
    let mut day = from;
    for _ in 0..370 {
        let next = day + Duration::days(1);
        if offset_seconds(zone, next) != start {
            let (mut low, mut high) = (day, next);
            while high - low > Duration::seconds(1) {
                let middle = low + (high - low) / 2;
                if offset_seconds(zone, middle) == start {
                    low = middle
                } else {
                    high = middle
                }
            }
            return Some(high);
        }
        day = next;
    }
    None
}

/// The brute-force answer: the first whole-minute step from `now` that is outside quiet hours.
fn first_open_minute(quiet: QuietHours, zone: Tz, now: DateTime<Utc>) -> DateTime<Utc> {
    let mut at = now;
    for _ in 0..(4 * 24 * 60) {
        if !quiet.contains_instant(at, zone) {
            return at;
        }
        at += Duration::minutes(1);
    }
    panic!("quiet hours never end in {zone}");
}

/// The simulated sender acting on one decision, and every invariant of the module docs.
fn check(
    preferences: &Preferences,
    channel: Channel,
    notice: Notice,
    now: DateTime<Utc>,
    opt_out_later: Option<LateOptOut>,
) {
    let zone = preferences.zone;
    let quiet = preferences.quiet_hours;
    let opted_out = preferences.opted_out_of_all || preferences.opt_outs.contains(&notice.kind);
    let decision = decide(preferences, channel, notice, now);
    let context = format!("{zone} {now} {quiet:?} {notice:?} {channel:?} → {decision:?}");
    match decision {
        Decision::Suppress(reason) => {
            let expected = if preferences.channels.is_empty() {
                SuppressReason::NoConsent
            } else if opted_out {
                SuppressReason::OptedOut
            } else {
                SuppressReason::ChannelNotAllowed
            };
            assert_eq!(reason, expected, "{context}");
        }
        Decision::Send { bypassed_quiet_hours } => {
            assert!(!opted_out && preferences.channels.contains(&channel), "{context}");
            let inside = quiet.contains_instant(now, zone);
            assert_eq!(
                bypassed_quiet_hours, inside,
                "a send inside quiet hours is a recorded bypass: {context}"
            );
            if bypassed_quiet_hours {
                BYPASSED.fetch_add(1, Ordering::Relaxed);
                assert_eq!(notice.kind, MessageKind::ChangeNotice, "only change notices bypass: {context}");
                assert!(
                    notice.changes_today && preferences.bypass.contains(&MessageKind::ChangeNotice),
                    "{context}"
                );
            }
        }
        Decision::Defer { until } => {
            DEFERRED.fetch_add(1, Ordering::Relaxed);
            assert!(!opted_out && quiet.contains_instant(now, zone), "{context}");
            assert!(until > now, "{context}");
            assert!(!quiet.contains_instant(until, zone), "due outside quiet hours: {context}");
            // The first second of the window: a second earlier is still quiet ...
            let before = (until - Duration::seconds(1)).max(now);
            assert!(quiet.contains_instant(before, zone), "not the window's first second: {context}");
            // ... and the brute-force scan finds the window open within the minute after it.
            let scanned = first_open_minute(quiet, zone, now);
            assert!(until <= scanned && scanned - until < Duration::minutes(1), "{context}: scan {scanned}");
            if offset_seconds(zone, now) != offset_seconds(zone, until) {
                DEFERRED_ACROSS_DST.fetch_add(1, Ordering::Relaxed);
            }
            // Picked up when due: sent then, not inside quiet hours, not deferred again.
            let again = decide(preferences, channel, notice, until);
            assert_eq!(again, Decision::Send { bypassed_quiet_hours: false }, "{context}");
            // An opt-out that arrives while it waits wins, whichever way it came: nothing is sent.
            if let Some(late) = opt_out_later {
                let after = decide(
                    &withdrawn(preferences, late, notice.kind, channel, until),
                    channel,
                    notice,
                    until,
                );
                let expected = match late {
                    LateOptOut::Api | LateOptOut::OneClick => vec![SuppressReason::OptedOut],
                    // The channel is gone: not allowed, or no consent left at all.
                    LateOptOut::ProviderStop => {
                        vec![SuppressReason::ChannelNotAllowed, SuppressReason::NoConsent]
                    }
                };
                assert!(
                    matches!(after, Decision::Suppress(reason) if expected.contains(&reason)),
                    "{late:?}: {after:?} {context}"
                );
                SUPPRESSED_AFTER_DEFERRAL[late.index()].fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

fn time_of(minutes: u32) -> NaiveTime {
    NaiveTime::from_hms_opt(minutes / 60 % 24, minutes % 60, 0).expect("in range")
}

fn subset<T: Copy>(all: &[T], mask: u8) -> Vec<T> {
    all.iter().enumerate().filter(|(i, _)| mask & (1 << i) != 0).map(|(_, v)| *v).collect()
}

prop_compose! {
    fn scenario()(
        zone in 0..TZ_VARIANTS.len(),
        seconds in 0i64..(2037 - 1970) * 365 * 86_400,
        near_transition in any::<bool>(),
        around in -36 * 3600i64..36 * 3600,
        default_hours in any::<bool>(),
        start in 0u32..1440,
        end in 0u32..1440,
        channels in 0u8..4,
        channels_bias in 0u8..4,
        opt_outs in 0u8..8,
        opt_outs_bias in 0u8..4,
        opted_out_of_all in proptest::bool::weighted(0.05),
        bypass in 0u8..8,
        kind in 0usize..3,
        changes_today in any::<bool>(),
        sms in any::<bool>(),
        late in 0u8..6,
    ) -> (Preferences, Channel, Notice, DateTime<Utc>, Option<LateOptOut>) {
        let zone = TZ_VARIANTS[zone];
        let random = DateTime::<Utc>::from_timestamp(seconds, 0).expect("in range");
        let now = if near_transition {
            next_transition(zone, random).map_or(random, |at| at + Duration::seconds(around))
        } else {
            random
        };
        let quiet_hours = if default_hours {
            QuietHours::default()
        } else {
            QuietHours { start: time_of(start), end: time_of(end) }
        };
        // Mostly consenting, not opted out: the interesting path is the clock's.
        let channels = if channels_bias == 0 { subset(Channel::ALL, channels) } else { Channel::ALL.to_vec() };
        let opt_outs = if opt_outs_bias == 0 { subset(MessageKind::ALL, opt_outs) } else { Vec::new() };
        let preferences = Preferences {
            channels,
            opt_outs,
            opted_out_of_all,
            zone,
            quiet_hours,
            // Any setting, even one the database refuses (a reminder that may bypass).
            bypass: subset(MessageKind::ALL, bypass),
        };
        let notice = Notice { kind: MessageKind::ALL[kind], changes_today };
        let channel = if sms { Channel::Sms } else { Channel::Email };
        // Half of them: an opt-out arrives while the message waits, one of the three ways.
        let opt_out_later = match late {
            3 => Some(LateOptOut::Api),
            4 => Some(LateOptOut::OneClick),
            5 => Some(LateOptOut::ProviderStop),
            _ => None,
        };
        (preferences, channel, notice, now, opt_out_later)
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10_000, failure_persistence: None, ..ProptestConfig::default() })]

    /// Run by the test below (so the counts are this run's alone).
    fn ten_thousand_simulated_messages_keep_the_policy(
        (preferences, channel, notice, now, opt_out_later) in scenario()
    ) {
        check(&preferences, channel, notice, now, opt_out_later);
    }
}

/// The random run must reach deferrals (across DST too), bypasses and late opt-outs; it runs the
/// proptest above in-line so the counts are its own.
#[test]
fn the_random_run_reaches_deferrals_across_dst_bypasses_and_late_opt_outs() {
    ten_thousand_simulated_messages_keep_the_policy();
    assert!(DEFERRED.load(Ordering::Relaxed) >= 1_000, "deferred {}", DEFERRED.load(Ordering::Relaxed));
    assert!(
        DEFERRED_ACROSS_DST.load(Ordering::Relaxed) >= 10,
        "{}",
        DEFERRED_ACROSS_DST.load(Ordering::Relaxed)
    );
    assert!(BYPASSED.load(Ordering::Relaxed) >= 10, "{}", BYPASSED.load(Ordering::Relaxed));
    for late in [LateOptOut::Api, LateOptOut::OneClick, LateOptOut::ProviderStop] {
        let suppressed = SUPPRESSED_AFTER_DEFERRAL[late.index()].load(Ordering::Relaxed);
        assert!(suppressed >= 30, "{late:?}: {suppressed}");
    }
}

/// Every zone of the tz database, with the default quiet hours, through each of its transitions of
/// 2026–2027 (or a plain day where it has none), every 7 minutes for a day and a half around it.
#[test]
fn every_iana_zone_keeps_the_policy_across_its_transitions() {
    let start: DateTime<Utc> = "2026-01-01T00:00:00Z".parse().expect("time");
    let reminder = Notice { kind: MessageKind::Reminder, changes_today: false };
    let mut transitions = 0;
    for zone in TZ_VARIANTS {
        let preferences = Preferences {
            channels: Channel::ALL.to_vec(),
            opt_outs: Vec::new(),
            opted_out_of_all: false,
            zone,
            quiet_hours: QuietHours::default(),
            bypass: vec![MessageKind::ChangeNotice],
        };
        let mut anchors = Vec::new();
        let mut from = start;
        while let Some(at) = next_transition(zone, from).filter(|at| *at < start + Duration::days(730)) {
            anchors.push(at);
            from = at + Duration::hours(1);
        }
        transitions += anchors.len();
        if anchors.is_empty() {
            anchors.push(start + Duration::days(180));
        }
        for anchor in anchors {
            let mut at = anchor - Duration::hours(18);
            while at < anchor + Duration::hours(18) {
                check(&preferences, Channel::Sms, reminder, at, None);
                at += Duration::minutes(7);
            }
        }
    }
    assert!(
        TZ_VARIANTS.len() > 400 && transitions > 300,
        "{} zones, {transitions} transitions",
        TZ_VARIANTS.len()
    );
}
