//! Dispatcher metrics as CloudWatch Embedded Metric Format (EMF) log lines.
//!
//! A [`DispatchMetrics`] accumulates what a dispatcher did — rows claimed, dispatched, retried and
//! buried (`dead`) by event type, the duration of each batch (one claim → start → mark step), and
//! the age of the oldest due row — and [`DispatchMetrics::emit`] prints it to stdout as EMF JSON
//! lines, which CloudWatch Logs turns into metrics in namespace [`NAMESPACE`] without any API call:
//!
//! - one line per event type seen, dimension `EventType`, metrics `Claimed`, `Dispatched`,
//!   `Retried`, `Dead` (unit `Count`);
//! - one line without dimensions holding the totals of the same four counts, `BatchDurationMs`
//!   (unit `Milliseconds`, the list of batch durations — EMF takes up to 100 values a line, so the
//!   accumulator asks to be flushed at [`MAX_VALUES`]) and `OldestPendingAgeMs` (unit
//!   `Milliseconds`).
//!
//! The dispatcher holds a [`Recorder`]: after each step it records the step's marks
//! ([`Recorder::record_marks`]) and duration ([`Recorder::batch`]), and it flushes
//! ([`Recorder::flush`]) when going idle (at most every [`EMIT_EVERY`]) and when a drain ends.
//!
//! Invariants:
//! - Lines carry event type names, counts and durations only: never ids, reasons or health data.
//! - `emit` resets the accumulator, so each count is reported exactly once; an accumulator with
//!   nothing recorded prints nothing.
//! - Metrics go to stdout, logs (`tracing`) to stderr, so an EMF line is never interleaved inside a
//!   log line. `CLINIC_METRICS=off` (see [`MetricsMode`]) silences them, e.g. for `clinic dev`.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use chrono::Utc;
use deadpool_postgres::GenericClient;
use serde_json::{json, Map, Value};

use crate::config::ConfigError;
use crate::db::sql;
use crate::events::EventType;

/// The CloudWatch namespace of every dispatcher metric.
pub const NAMESPACE: &str = "Clinic/Outbox";

/// EMF accepts at most 100 values for one metric in one line.
pub const MAX_VALUES: usize = 100;

/// Counts of one event type.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub claimed: u64,
    pub dispatched: u64,
    pub retried: u64,
    pub dead: u64,
}

impl Counts {
    fn add(&mut self, other: &Counts) {
        self.claimed += other.claimed;
        self.dispatched += other.dispatched;
        self.retried += other.retried;
        self.dead += other.dead;
    }

    fn is_zero(&self) -> bool {
        *self == Counts::default()
    }
}

/// Whether metrics are printed: `CLINIC_METRICS` = `emf` (the default) or `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsMode {
    Emf,
    Off,
}

impl MetricsMode {
    pub fn from_env() -> Result<MetricsMode, ConfigError> {
        match crate::config::var("CLINIC_METRICS").as_deref() {
            None | Some("emf") => Ok(MetricsMode::Emf),
            Some("off") => Ok(MetricsMode::Off),
            Some(other) => Err(ConfigError::Invalid {
                name: "CLINIC_METRICS",
                value: other.to_owned(),
                message: "expected `emf` or `off`".into(),
            }),
        }
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

    /// A row went `dead` (`None`: its event type cannot be read).
    pub fn dead(&mut self, event_type: Option<EventType>) {
        self.of(event_type).dead += 1;
    }

    /// One batch (claim, start, mark) took `elapsed`.
    pub fn batch(&mut self, elapsed: Duration) {
        self.batch_durations_ms.push(elapsed.as_secs_f64() * 1000.0);
    }

    /// The age of the oldest due row, from [`oldest_pending_age_ms`].
    pub fn oldest_pending_age(&mut self, age_ms: i64) {
        self.oldest_pending_age_ms = Some(age_ms.max(0));
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
        self.totals().is_zero() && self.batch_durations_ms.is_empty() && self.oldest_pending_age_ms.is_none()
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
        let count_metrics = ["Claimed", "Dispatched", "Retried", "Dead"];
        let counts_of = |counts: &Counts| [counts.claimed, counts.dispatched, counts.retried, counts.dead];
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
        if self.oldest_pending_age_ms.is_some() {
            metrics.push(("OldestPendingAgeMs", "Milliseconds"));
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
        if let Some(age) = self.oldest_pending_age_ms {
            document.insert("OldestPendingAgeMs".into(), json!(age));
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

/// An EMF document with its `_aws` metadata and no values yet.
fn envelope(timestamp_ms: i64, dimensions: &[&str], metrics: &[(&str, &str)]) -> Map<String, Value> {
    let definitions: Vec<Value> =
        metrics.iter().map(|(name, unit)| json!({ "Name": name, "Unit": unit })).collect();
    let mut document = Map::new();
    document.insert(
        "_aws".into(),
        json!({
            "Timestamp": timestamp_ms,
            "CloudWatchMetrics": [{
                "Namespace": NAMESPACE,
                "Dimensions": [dimensions],
                "Metrics": definitions,
            }],
        }),
    );
    document
}

/// How often a long-running dispatcher emits while it keeps working (it also emits when a drain
/// ends and whenever [`DispatchMetrics::should_flush`]).
pub const EMIT_EVERY: Duration = Duration::from_secs(60);

/// The dispatcher's side of the metrics: it records each step's marks and duration, and flushes
/// (with a fresh oldest-pending age) when asked. Cheap when [`MetricsMode::Off`]: nothing is kept.
#[derive(Debug)]
pub struct Recorder {
    mode: MetricsMode,
    state: std::sync::Mutex<(DispatchMetrics, std::time::Instant)>,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder::new(MetricsMode::Emf)
    }
}

impl Recorder {
    pub fn new(mode: MetricsMode) -> Recorder {
        Recorder { mode, state: std::sync::Mutex::new((DispatchMetrics::new(), std::time::Instant::now())) }
    }

    pub fn mode(&self) -> MetricsMode {
        self.mode
    }

    fn with<T>(&self, f: impl FnOnce(&mut DispatchMetrics, &mut std::time::Instant) -> T) -> Option<T> {
        if self.mode == MetricsMode::Off {
            return None;
        }
        let mut guard = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (metrics, last_emit) = &mut *guard;
        Some(f(metrics, last_emit))
    }

    /// Records one step's marks: every claimed row, and the rows actually marked (fenced rows, whose
    /// mark changed nothing, are not counted as dispatched, retried or dead).
    pub fn record_marks(
        &self,
        claim: &crate::outbox::Claim,
        dispatched: &[crate::ids::EventId],
        failed: &[crate::outbox::FailureMark],
        marked_failed: &[crate::ids::EventId],
    ) {
        self.with(|metrics, _| {
            let type_of = |id: crate::ids::EventId| {
                claim.rows.iter().find(|row| row.envelope.id == id).map(|row| row.envelope.event_type)
            };
            for row in &claim.rows {
                metrics.claimed(Some(row.envelope.event_type));
            }
            for _ in &claim.unreadable {
                metrics.claimed(None);
            }
            for id in dispatched {
                if let Some(event_type) = type_of(*id) {
                    metrics.dispatched(event_type);
                }
            }
            for mark in failed.iter().filter(|mark| marked_failed.contains(&mark.event_id)) {
                match (mark.next, type_of(mark.event_id)) {
                    (crate::outbox::Failure::Retry(_), Some(event_type)) => metrics.retried(event_type),
                    (crate::outbox::Failure::Retry(_), None) => {}
                    (crate::outbox::Failure::Dead, event_type) => metrics.dead(event_type),
                }
            }
        });
    }

    /// Records the duration of one batch (claim, start, mark).
    pub fn batch(&self, elapsed: Duration) {
        self.with(|metrics, _| metrics.batch(elapsed));
    }

    /// True when something was recorded and `force` is set, [`EMIT_EVERY`] has passed since the last
    /// emit, or the batch durations reached the EMF limit: what [`Recorder::flush`] checks first
    /// (cheap; lets a caller skip getting a connection when nothing is due).
    pub fn is_due(&self, force: bool) -> bool {
        self.with(|metrics, last_emit| {
            !metrics.is_empty() && (force || metrics.should_flush() || last_emit.elapsed() >= EMIT_EVERY)
        })
        .unwrap_or(false)
    }

    /// Emits when [`Recorder::is_due`] says so. Reads the oldest-pending age first (a
    /// failure to read it is logged and the line goes out without it). Returns the lines printed.
    pub async fn flush(&self, client: &impl GenericClient, force: bool) -> usize {
        if !self.is_due(force) {
            return 0;
        }
        let age = match oldest_pending_age_ms(client).await {
            Ok(age) => Some(age),
            Err(error) => {
                tracing::warn!(error = %error, "could not read the oldest pending age");
                None
            }
        };
        if self.mode() == MetricsMode::Emf {
            crate::operator::pause::emit_metrics(client).await;
        }
        self.with(|metrics, last_emit| {
            if let Some(age) = age {
                metrics.oldest_pending_age(age);
            }
            *last_emit = std::time::Instant::now();
            metrics.emit()
        })
        .unwrap_or(0)
    }

    /// Takes what was recorded so far, leaving the recorder empty (for tests and custom sinks).
    pub fn take(&self) -> DispatchMetrics {
        self.with(|metrics, _| std::mem::take(metrics)).unwrap_or_default()
    }
}

/// [`Recorder::flush`] on a connection from `pool`, taken only when something is due; a pool error
/// is logged and the counts wait for the next flush.
pub async fn flush_pooled(recorder: &Recorder, pool: &deadpool_postgres::Pool, force: bool) -> usize {
    if !recorder.is_due(force) {
        return 0;
    }
    match pool.get().await {
        Ok(client) => recorder.flush(&client, force).await,
        Err(error) => {
            tracing::warn!(error = %error, "no connection to read the oldest pending age; metrics wait");
            0
        }
    }
}

/// How long the oldest due outbox row has waited, in milliseconds: `now() − min(available_at)` over
/// rows a claim would take now (`pending`, `retry` whose backoff ended, `claimed` whose lease
/// expired); 0 when nothing is due. This is the dispatch lag; it answers from the partial index
/// `event_outbox_due_idx`, however much history the table holds.
pub async fn oldest_pending_age_ms(client: &impl GenericClient) -> Result<i64, tokio_postgres::Error> {
    const OLDEST_DUE: &str =
        "SELECT coalesce((extract(epoch FROM now() - min(available_at)) * 1000)::bigint, 0) \
         FROM event_outbox WHERE status IN ('pending', 'retry', 'claimed') AND available_at <= now()";
    let row = sql::query_one(client, OLDEST_DUE, &[]).await?;
    Ok(row.get::<_, i64>(0).max(0))
}

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
        use crate::events::{Actor, Envelope, ENVELOPE_VERSION};
        use crate::ids::{CausationId, ClaimToken, CorrelationId, EventId, WorkspaceId};
        use crate::outbox::{Claim, Claimed, Failure, FailureMark, Unreadable};
        let row = |event_type: EventType| Claimed {
            envelope: Envelope {
                id: EventId::generate(),
                event_type,
                version: ENVELOPE_VERSION,
                workspace_id: WorkspaceId::generate(),
                actor: Actor::System,
                occurred_at: Utc::now(),
                recorded_at: Utc::now(),
                resource_type: event_type.resource_type(),
                resource_id: ulid::Ulid::generate(),
                resource_version: 1,
                correlation_id: CorrelationId::generate(),
                causation_id: CausationId(ulid::Ulid::generate()),
            },
            attempts: 1,
            lease_expired: false,
            only_listeners: None,
            started: Vec::new(),
            paused: Vec::new(),
        };
        let rows = vec![
            row(EventType::AppointmentCreated),
            row(EventType::AppointmentCreated),
            row(EventType::AppointmentCancelled),
            row(EventType::PatientDeleted),
        ];
        let ids: Vec<EventId> = rows.iter().map(|r| r.envelope.id).collect();
        let unreadable =
            Unreadable { event_id: EventId::generate(), attempts: 1, problem: "unknown type".into() };
        let claim = Claim { token: ClaimToken::generate(), rows, unreadable: vec![unreadable.clone()] };
        let mark = |id, next| FailureMark { event_id: id, next, code: "x".into(), message: "x".into() };
        let failed = vec![
            mark(ids[2], Failure::Retry(Duration::from_secs(1))),
            mark(ids[3], Failure::Dead),
            mark(unreadable.event_id, Failure::Dead),
        ];
        let recorder = Recorder::default();
        // ids[1] was fenced (not in `dispatched`); every failure mark landed.
        recorder.record_marks(&claim, &ids[..1], &failed, &[ids[2], ids[3], unreadable.event_id]);
        recorder.batch(Duration::from_millis(7));
        let metrics = recorder.take();
        assert_eq!(
            metrics.counts(EventType::AppointmentCreated),
            Counts { claimed: 2, dispatched: 1, retried: 0, dead: 0 }
        );
        assert_eq!(
            metrics.counts(EventType::AppointmentCancelled),
            Counts { claimed: 1, dispatched: 0, retried: 1, dead: 0 }
        );
        assert_eq!(
            metrics.counts(EventType::PatientDeleted),
            Counts { claimed: 1, dispatched: 0, retried: 0, dead: 1 }
        );
        assert_eq!(metrics.totals(), Counts { claimed: 5, dispatched: 1, retried: 1, dead: 2 });
    }

    #[test]
    fn a_recorder_that_is_off_keeps_nothing() {
        let recorder = Recorder::new(MetricsMode::Off);
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
