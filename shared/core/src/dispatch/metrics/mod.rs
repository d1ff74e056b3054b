//! Dispatcher metrics as CloudWatch Embedded Metric Format (EMF) log lines.
//!
//! A [`DispatchMetrics`] accumulates what a dispatcher did — rows claimed, dispatched, retried and
//! buried (`dead`) by event type, the duration of each batch (one claim → start → mark step), and
//! the age of the oldest due row — and [`DispatchMetrics::emit`] prints it to stdout as EMF JSON
//! lines, which CloudWatch Logs turns into metrics in namespace [`NAMESPACE`] without any API call:
//!
//! - one line per event type seen, dimension `EventType`, metrics `Claimed`, `Dispatched`,
//!   `Retried`, `Held`, `Dead` (unit `Count`);
//! - one line without dimensions holding the totals of the same counts, `BatchDurationMs`
//!   (unit `Milliseconds`, the list of batch durations — EMF takes up to 100 values a line, so the
//!   accumulator asks to be flushed at [`MAX_VALUES`]) and the lag gauges (unit `Milliseconds`):
//!   `OldestPendingAgeMs` (the oldest *due* row's wait since its `available_at`), `OldestLiveAgeMs`
//!   (the oldest live row — pending, claimed or retry — since its creation: what an outage or a
//!   retry loop makes grow, since retries move `available_at`) and `OldestUnsettledAgeMs` (the
//!   oldest listener start still missing its receipt: custody, DESIGN §5a).
//!
//! The dispatcher holds a [`Recorder`] ([`recorder`]): after each step it records the step's row
//! outcomes ([`Recorder::record`], a fold over [`crate::dispatch::RowOutcome`]) and duration
//! ([`Recorder::batch`]), and it flushes ([`Recorder::flush`]) when going idle (at most every
//! [`EMIT_EVERY`]) and when a drain ends.
//!
//! Invariants:
//! - Lines carry event type names, counts and durations only: never ids, reasons or health data.
//! - `emit` resets the accumulator, so each count is reported exactly once; an accumulator with
//!   nothing recorded prints nothing.
//! - Metrics go to stdout, logs (`tracing`) to stderr, so an EMF line is never interleaved inside a
//!   log line. `CLINIC_METRICS=off` (see [`crate::telemetry::emf::MetricsMode`]) silences them, e.g. for `clinic dev`.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use chrono::Utc;
use serde_json::{json, Value};

use crate::events::EventType;

mod recorder;

pub use recorder::{flush_pooled, Recorder, EMIT_EVERY};

/// The CloudWatch namespace of every dispatcher metric.
pub use crate::telemetry::emf::NAMESPACE;

/// EMF accepts at most 100 values for one metric in one line.
pub const MAX_VALUES: usize = 100;

/// Counts of one event type.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub claimed: u64,
    pub dispatched: u64,
    pub retried: u64,
    pub held: u64,
    pub dead: u64,
}

impl Counts {
    fn add(&mut self, other: &Counts) {
        self.claimed += other.claimed;
        self.dispatched += other.dispatched;
        self.retried += other.retried;
        self.held += other.held;
        self.dead += other.dead;
    }

    fn is_zero(&self) -> bool {
        *self == Counts::default()
    }
}

/// What a dispatcher did since the last [`DispatchMetrics::emit`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DispatchMetrics {
    by_type: BTreeMap<EventType, Counts>,
    /// Rows whose event this build cannot read (no type to report them under); counted as claimed
    /// and dead in the totals only.
    untyped: Counts,
    batch_durations_ms: Vec<f64>,
    oldest_pending_age_ms: Option<i64>,
    oldest_live_age_ms: Option<i64>,
    oldest_unsettled_age_ms: Option<i64>,
}

impl DispatchMetrics {
    pub fn new() -> Self {
        Self::default()
    }

    fn of(&mut self, event_type: Option<EventType>) -> &mut Counts {
        match event_type {
            Some(event_type) => self.by_type.entry(event_type).or_default(),
            None => &mut self.untyped,
        }
    }

    /// A row was claimed (`None`: its event type cannot be read).
    pub fn claimed(&mut self, event_type: Option<EventType>) {
        self.of(event_type).claimed += 1;
    }

    pub fn dispatched(&mut self, event_type: EventType) {
        self.of(Some(event_type)).dispatched += 1;
    }

    pub fn retried(&mut self, event_type: EventType) {
        self.of(Some(event_type)).retried += 1;
    }

    /// A row was held without spending an attempt (`None`: its type is unknown to this build).
    pub fn held(&mut self, event_type: Option<EventType>) {
        self.of(event_type).held += 1;
    }

    /// A row went `dead` (`None`: its event type cannot be read).
    pub fn dead(&mut self, event_type: Option<EventType>) {
        self.of(event_type).dead += 1;
    }

    /// One batch (claim, start, mark) took `elapsed`.
    pub fn batch(&mut self, elapsed: Duration) {
        self.batch_durations_ms.push(elapsed.as_secs_f64() * 1000.0);
    }

    /// The age of the oldest due row, from [`crate::outbox::lag::oldest_pending_age_ms`].
    pub fn oldest_pending_age(&mut self, age_ms: i64) {
        self.oldest_pending_age_ms = Some(age_ms.max(0));
    }

    /// The three lag gauges, from [`crate::outbox::lag::read_ages`].
    pub fn ages(&mut self, ages: crate::outbox::lag::Ages) {
        self.oldest_pending_age_ms = Some(ages.oldest_pending_ms.max(0));
        self.oldest_live_age_ms = Some(ages.oldest_live_ms.max(0));
        self.oldest_unsettled_age_ms = Some(ages.oldest_unsettled_ms.max(0));
    }

    /// The counts of one event type so far.
    pub fn counts(&self, event_type: EventType) -> Counts {
        self.by_type.get(&event_type).copied().unwrap_or_default()
    }

    /// The totals over every event type (and unreadable rows) so far.
    pub fn totals(&self) -> Counts {
        let mut totals = self.untyped;
        for counts in self.by_type.values() {
            totals.add(counts);
        }
        totals
    }

    /// True when nothing was recorded since the last emit.
    pub fn is_empty(&self) -> bool {
        self.totals().is_zero()
            && self.batch_durations_ms.is_empty()
            && self.oldest_pending_age_ms.is_none()
            && self.oldest_live_age_ms.is_none()
            && self.oldest_unsettled_age_ms.is_none()
    }

    /// True when the batch durations reached the EMF limit and should be emitted now.
    pub fn should_flush(&self) -> bool {
        self.batch_durations_ms.len() >= MAX_VALUES
    }

    /// The EMF documents of what was recorded (one per event type, then the totals), timestamped
    /// `timestamp_ms` (epoch milliseconds). Empty when nothing was recorded.
    pub fn to_emf(&self, timestamp_ms: i64) -> Vec<Value> {
        if self.is_empty() {
            return Vec::new();
        }
        let count_metrics = ["Claimed", "Dispatched", "Retried", "Held", "Dead"];
        let counts_of =
            |counts: &Counts| [counts.claimed, counts.dispatched, counts.retried, counts.held, counts.dead];
        let mut documents = Vec::new();
        for (event_type, counts) in &self.by_type {
            if counts.is_zero() {
                continue;
            }
            let mut document =
                envelope(timestamp_ms, &["EventType"], &count_metrics.map(|name| (name, "Count")));
            document.insert("EventType".into(), json!(event_type.as_str()));
            for (name, value) in count_metrics.iter().zip(counts_of(counts)) {
                document.insert((*name).into(), json!(value));
            }
            documents.push(Value::Object(document));
        }
        let mut metrics: Vec<(&str, &str)> = count_metrics.iter().map(|name| (*name, "Count")).collect();
        if !self.batch_durations_ms.is_empty() {
            metrics.push(("BatchDurationMs", "Milliseconds"));
        }
        let gauges = [
            ("OldestPendingAgeMs", self.oldest_pending_age_ms),
            ("OldestLiveAgeMs", self.oldest_live_age_ms),
            ("OldestUnsettledAgeMs", self.oldest_unsettled_age_ms),
        ];
        for (name, value) in gauges {
            if value.is_some() {
                metrics.push((name, "Milliseconds"));
            }
        }
        let mut document = envelope(timestamp_ms, &[], &metrics);
        for (name, value) in count_metrics.iter().zip(counts_of(&self.totals())) {
            document.insert((*name).into(), json!(value));
        }
        if !self.batch_durations_ms.is_empty() {
            let durations: Vec<f64> =
                self.batch_durations_ms.iter().map(|ms| (ms * 1000.0).round() / 1000.0).collect();
            document.insert("BatchDurationMs".into(), json!(durations));
        }
        for (name, value) in gauges {
            if let Some(age) = value {
                document.insert(name.into(), json!(age));
            }
        }
        documents.push(Value::Object(document));
        documents
    }

    /// Writes the EMF lines to `out` and resets the accumulator; returns the number of lines.
    pub fn write_to(&mut self, out: &mut impl Write) -> std::io::Result<usize> {
        let documents = self.to_emf(Utc::now().timestamp_millis());
        let mut text = String::new();
        for document in &documents {
            text.push_str(&document.to_string());
            text.push('\n');
        }
        out.write_all(text.as_bytes())?;
        out.flush()?;
        *self = DispatchMetrics::default();
        Ok(documents.len())
    }

    /// Prints the EMF lines to stdout (one write, so lines of concurrent emitters do not interleave)
    /// and resets the accumulator. A failed write is logged and the counts are dropped: metrics
    /// never stop dispatching.
    pub fn emit(&mut self) -> usize {
        let stdout = std::io::stdout();
        let mut lock = stdout.lock();
        match self.write_to(&mut lock) {
            Ok(lines) => lines,
            Err(error) => {
                tracing::warn!(error = %error, "could not write metrics");
                *self = DispatchMetrics::default();
                0
            }
        }
    }
}

pub(crate) use crate::telemetry::emf::document as envelope;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_recorded_prints_nothing() {
        let mut metrics = DispatchMetrics::new();
        let mut out = Vec::new();
        assert_eq!(metrics.write_to(&mut out).unwrap(), 0);
        assert!(out.is_empty());
    }

    #[test]
    fn emits_one_line_per_event_type_and_one_for_totals() {
        let mut metrics = DispatchMetrics::new();
        metrics.claimed(Some(EventType::AppointmentCreated));
        metrics.claimed(Some(EventType::AppointmentCreated));
        metrics.dispatched(EventType::AppointmentCreated);
        metrics.retried(EventType::AppointmentCreated);
        metrics.claimed(Some(EventType::PatientDeleted));
        metrics.dead(Some(EventType::PatientDeleted));
        metrics.claimed(None);
        metrics.dead(None);
        metrics.batch(Duration::from_micros(12_500));
        metrics.batch(Duration::from_millis(3));
        metrics.oldest_pending_age(1_234);
        assert_eq!(metrics.counts(EventType::AppointmentCreated).claimed, 2);

        let mut out = Vec::new();
        assert_eq!(metrics.write_to(&mut out).unwrap(), 3);
        let lines: Vec<Value> =
            String::from_utf8(out).unwrap().lines().map(|line| serde_json::from_str(line).unwrap()).collect();
        assert_eq!(lines.len(), 3);
        let created = &lines[1];
        assert_eq!(created["EventType"], "appointment.created");
        assert_eq!(created["Claimed"], 2);
        assert_eq!(created["Dispatched"], 1);
        assert_eq!(created["Retried"], 1);
        assert_eq!(created["Dead"], 0);
        let directive = &created["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(directive["Namespace"], NAMESPACE);
        assert_eq!(directive["Dimensions"], json!([["EventType"]]));
        assert!(created["_aws"]["Timestamp"].is_i64());

        let totals = &lines[2];
        assert!(totals.get("EventType").is_none());
        assert_eq!(totals["_aws"]["CloudWatchMetrics"][0]["Dimensions"], json!([[]]));
        assert_eq!(totals["Claimed"], 4);
        assert_eq!(totals["Dead"], 2);
        assert_eq!(totals["BatchDurationMs"], json!([12.5, 3.0]));
        assert_eq!(totals["OldestPendingAgeMs"], 1_234);
        // Every metric a document defines has a value in it.
        for line in &lines {
            for metric in line["_aws"]["CloudWatchMetrics"][0]["Metrics"].as_array().unwrap() {
                assert!(line.get(metric["Name"].as_str().unwrap()).is_some(), "{line}");
            }
        }
        // Emitting resets.
        assert!(metrics.is_empty());
    }

    #[test]
    fn the_recorder_counts_marked_rows_by_event_type_and_skips_fenced_ones() {
        use crate::dispatch::{Fate, RowOutcome};
        use crate::ids::EventId;
        let row = |event_type: Option<EventType>, fate: Fate| RowOutcome {
            event_id: EventId::generate(),
            event_type,
            recorded_at: Some(Utc::now()),
            attempts: 1,
            lease_expired: false,
            started: 0,
            failed_starts: 0,
            fate,
        };
        let code = || "x".to_owned();
        let outcomes = vec![
            row(Some(EventType::AppointmentCreated), Fate::Dispatched),
            // Fenced: its mark changed nothing.
            row(Some(EventType::AppointmentCreated), Fate::Fenced { intended: "dispatched" }),
            row(
                Some(EventType::AppointmentCancelled),
                Fate::Retry { delay: Duration::from_secs(1), code: code() },
            ),
            row(Some(EventType::PatientDeleted), Fate::Dead { code: code() }),
            // Unreadable, buried.
            row(None, Fate::Dead { code: code() }),
        ];
        let recorder = Recorder::default();
        recorder.record(&outcomes);
        recorder.batch(Duration::from_millis(7));
        let metrics = recorder.take();
        assert_eq!(
            metrics.counts(EventType::AppointmentCreated),
            Counts { claimed: 2, dispatched: 1, retried: 0, held: 0, dead: 0 }
        );
        assert_eq!(
            metrics.counts(EventType::AppointmentCancelled),
            Counts { claimed: 1, dispatched: 0, retried: 1, held: 0, dead: 0 }
        );
        assert_eq!(
            metrics.counts(EventType::PatientDeleted),
            Counts { claimed: 1, dispatched: 0, retried: 0, held: 0, dead: 1 }
        );
        assert_eq!(metrics.totals(), Counts { claimed: 5, dispatched: 1, retried: 1, held: 0, dead: 2 });
    }

    #[test]
    fn a_recorder_that_is_off_keeps_nothing() {
        let recorder = Recorder::new(crate::telemetry::emf::MetricsMode::Off);
        recorder.batch(Duration::from_millis(5));
        assert!(recorder.take().is_empty());
        let recorder = Recorder::default();
        recorder.batch(Duration::from_millis(5));
        assert!(!recorder.take().is_empty());
        assert!(recorder.take().is_empty(), "take empties it");
    }

    #[test]
    fn asks_to_be_flushed_at_the_emf_value_limit() {
        let mut metrics = DispatchMetrics::new();
        for _ in 0..MAX_VALUES - 1 {
            metrics.batch(Duration::from_millis(1));
        }
        assert!(!metrics.should_flush());
        metrics.batch(Duration::from_millis(1));
        assert!(metrics.should_flush());
    }
}
