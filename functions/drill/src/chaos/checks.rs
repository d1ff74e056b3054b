//! The pipeline's invariants, checked against the database after the run (the faults' own checks are
//! in [`super::fault_checks`]).

use std::collections::{HashMap, HashSet};

use clinic_core::events::EventType;
use clinic_core::listeners::listeners;

use super::faults::PgOutage;
use super::sqs::Consumed;
use super::writers::Tally;
use super::PLANTED_LISTENER;

/// (event type, resource id, resource version): what a 2xx mutation produced.
type EventKey = (String, String, i64);

#[derive(Debug, Default)]
pub struct Report {
    pub events: i64,
    pub links: i64,
    pub outbox_rows: i64,
    pub expected_receipts: usize,
    pub receipts: usize,
    pub notifications: i64,
    pub duplicate_notifications: i64,
    pub claimed_past_lease: i64,
    pub dead: Vec<String>,
    pub reclaimed: i64,
    pub max_attempts: i32,
    pub unavailable_during_outage: usize,
    pub retried_after_503: usize,
    pub checks: Vec<(&'static str, bool)>,
    pub failures: Vec<String>,
}

impl Report {
    pub fn check(&mut self, name: &'static str, failures: Vec<String>) {
        self.checks.push((name, failures.is_empty()));
        for failure in failures.into_iter().take(20) {
            self.failures.push(format!("{name}: {failure}"));
        }
    }
}

/// The pipeline's invariants (1–7 of the module docs of `clinic chaos`).
pub async fn check(
    client: &tokio_postgres::Client,
    tally: &Tally,
    planted: &str,
    outage: PgOutage,
    open: i64,
    consumed: Option<&Consumed>,
) -> anyhow::Result<Report> {
    let mut report = Report::default();
    // Events with their link and outbox counts.
    let rows = client
        .query(
            "WITH links AS (SELECT event_id, count(*) AS n FROM event_resources GROUP BY event_id), \
                  outbox AS (SELECT event_id, count(*) AS n FROM event_outbox GROUP BY event_id) \
             SELECT e.id, e.type, e.resource_id, e.resource_version, coalesce(l.n, 0), coalesce(o.n, 0) \
             FROM events e LEFT JOIN links l ON l.event_id = e.id LEFT JOIN outbox o ON o.event_id = e.id",
            &[],
        )
        .await?;
    let mut by_key: HashMap<EventKey, Vec<(String, i64, i64)>> = HashMap::new();
    let mut event_types: HashMap<String, EventType> = HashMap::new();
    for row in &rows {
        let id = ulid::Ulid::from(row.get::<_, uuid::Uuid>(0)).to_string();
        let kind: String = row.get(1);
        let resource = ulid::Ulid::from(row.get::<_, uuid::Uuid>(2)).to_string();
        let version = i64::from(row.get::<_, i32>(3));
        if let Some(event_type) = EventType::parse(&kind) {
            event_types.insert(id.clone(), event_type);
        }
        by_key.entry((kind, resource, version)).or_default().push((id, row.get(4), row.get(5)));
        report.links += row.get::<_, i64>(4);
        report.outbox_rows += row.get::<_, i64>(5);
    }
    report.events = rows.len() as i64;

    // 1. One event, its links and one outbox row per 2xx mutation; nothing else.
    let mut failures = Vec::new();
    let mut accounted = HashSet::new();
    for mutation in &tally.mutations {
        let key = (mutation.event_type.as_str().to_owned(), mutation.resource_id.clone(), mutation.version);
        let found = by_key.get(&key).map(Vec::as_slice).unwrap_or_default();
        if found.len() != 1 {
            failures.push(format!("{} of {} v{}: {} events", key.0, key.1, key.2, found.len()));
            continue;
        }
        let (id, links, outbox) = &found[0];
        let want_links = if key.0.starts_with("appointment.") { 3 } else { 1 };
        if *links != want_links || *outbox != 1 {
            failures.push(format!("event {id}: {links} links (want {want_links}), {outbox} outbox rows"));
        }
        if !accounted.insert(key.clone()) {
            failures.push(format!("{} of {} v{} answered 2xx twice", key.0, key.1, key.2));
        }
    }
    for (key, found) in &by_key {
        if !accounted.contains(key) {
            failures.push(format!(
                "{} event(s) {} of {} v{} with no 2xx answer",
                found.len(),
                key.0,
                key.1,
                key.2
            ));
        }
    }
    report.check("every 2xx mutation has exactly one event, its links and one outbox row", failures);

    // 2. Receipts = the listener map, minus the planted failure.
    let receipts: HashSet<(String, String)> = client
        .query("SELECT listener, event_id FROM listener_receipts", &[])
        .await?
        .iter()
        .map(|row| (row.get::<_, String>(0), ulid::Ulid::from(row.get::<_, uuid::Uuid>(1)).to_string()))
        .collect();
    let mut expected = HashSet::new();
    for (id, event_type) in &event_types {
        for listener in listeners(*event_type) {
            if !(id == planted && *listener == PLANTED_LISTENER) {
                expected.insert((listener.as_str().to_owned(), id.clone()));
            }
        }
    }
    report.expected_receipts = expected.len();
    report.receipts = receipts.len();
    let mut failures: Vec<String> =
        expected.difference(&receipts).map(|(l, e)| format!("{l} never ran for event {e}")).collect();
    failures
        .extend(receipts.difference(&expected).map(|(l, e)| format!("unexpected receipt {l} for event {e}")));
    report.check("every event reached every listener (receipts = expected)", failures);

    // 3. No duplicate notifications.
    let row = client
        .query_one(
            "SELECT count(*), count(*) - count(DISTINCT (event_id, listener)), \
               (SELECT count(*) FROM notifications n WHERE NOT EXISTS (SELECT 1 FROM listener_receipts r \
                  WHERE r.event_id = n.event_id AND r.listener = n.listener)) \
             FROM notifications",
            &[],
        )
        .await?;
    report.notifications = row.get(0);
    report.duplicate_notifications = row.get(1);
    let orphans: i64 = row.get(2);
    let mut failures = Vec::new();
    if report.duplicate_notifications != 0 {
        failures.push(format!("{} duplicate notifications", report.duplicate_notifications));
    }
    if orphans != 0 {
        failures.push(format!("{orphans} notifications without their listener's receipt"));
    }
    report.check("zero duplicate notifications", failures);

    // 4. No row claimed past its lease; nothing left open.
    let row = client
        .query_one(
            "SELECT count(*) FILTER (WHERE status = 'claimed' AND claimed_until < now()), \
               count(*) FILTER (WHERE attempts > 1), coalesce(max(attempts), 0) FROM event_outbox",
            &[],
        )
        .await?;
    report.claimed_past_lease = row.get(0);
    report.reclaimed = row.get(1);
    report.max_attempts = row.get(2);
    let mut failures = Vec::new();
    if report.claimed_past_lease != 0 {
        failures.push(format!("{} rows claimed past their lease", report.claimed_past_lease));
    }
    if open != 0 {
        failures.push(format!("{open} rows still pending, claimed or in retry after the drain"));
    }
    report.check("no row left claimed past its lease; outbox drained", failures);

    // 5. Dead rows: exactly the planted event.
    report.dead = client
        .query("SELECT event_id FROM event_outbox WHERE status = 'dead' ORDER BY event_id", &[])
        .await?
        .iter()
        .map(|row| ulid::Ulid::from(row.get::<_, uuid::Uuid>(0)).to_string())
        .collect();
    let planted_pair = (planted.to_owned(), PLANTED_LISTENER.as_str().to_owned());
    let failures = match consumed {
        // Local: the permanent listener failure turns the planted row `dead`.
        None if report.dead == [planted.to_owned()] => Vec::new(),
        None => vec![format!("dead rows {:?}, want exactly the planted event {planted}", report.dead)],
        // SQS: the start succeeded (the queue took it); the listener's permanent failure sends that one
        // message to the dead-letter queue, and no outbox row dies.
        Some(consumed) => {
            let mut failures = Vec::new();
            if !report.dead.is_empty() {
                failures.push(format!("dead outbox rows {:?}, want none over SQS", report.dead));
            }
            let dead_lettered: Vec<_> = consumed.dead_lettered.iter().cloned().collect();
            if dead_lettered != [planted_pair] {
                failures.push(format!("dead-lettered {dead_lettered:?}, want exactly the planted {planted}"));
            }
            failures
        }
    };
    report.check("dead rows / dead-lettered messages only for the planted failure", failures);

    // 6. 5xx only while PostgreSQL was down, and only 503 problem documents; retries succeed once.
    let mut failures = Vec::new();
    for (at, status, is_problem) in &tally.server_errors {
        if *status == 503 && *is_problem && outage.covers(*at) {
            report.unavailable_during_outage += 1;
        } else {
            failures.push(format!("{status} (problem document: {is_problem}) outside the PostgreSQL outage"));
        }
    }
    report.retried_after_503 = tally.mutations.iter().filter(|m| m.saw_unavailable).count();
    if tally.gave_up != 0 {
        failures.push(format!("{} requests never got a final answer", tally.gave_up));
    }
    report
        .check("no 5xx except 503 while PostgreSQL was down; each retried request succeeded once", failures);

    // 7. No unexpected 4xx.
    report.check("no unexpected 4xx answers", tally.unexpected.clone());
    Ok(report)
}
