//! Latency: appointments booked through the API at a steady rate (open loop: requests leave on a
//! fixed schedule whatever the answers do) with the dispatcher loop (LISTEN-woken) and the local
//! transport running in the server child, as `clinic dev` wires them; commit → listener receipt, at
//! `--rate` (200/s) and `--high-rate` (1,000/s); then with a broker's latency instead of local
//! listeners (`--latency-transport-ms`, 10 ms: bench/latency_transport.rs): commit → accepted.
//!
//! Clock: the commit moment is taken client-side — when the API's 201 (sent right after COMMIT
//! returned) arrives — on this host's wall clock, which is also the clock of the PostgreSQL server
//! on 127.0.0.1; so no skew enters. The clock stops at the listener's commit: PostgreSQL's own commit
//! timestamp of the receipt row's transaction (`pg_xact_commit_timestamp(xmin)`), which the server
//! records when `track_commit_timestamp` is on (the `clinic dev` cluster turns it on). It is taken
//! as the commit record is written, so it leaves out the listener's WAL flush; the 201's trip back is
//! left out at the start, and a listener that committed before the 201 arrived counts as 0. On a
//! server without commit timestamps the clock stops at `listener_receipts.received_at` instead — the
//! receipt's insert, the FIRST statement of the listener's transaction, before its reload, effect and
//! COMMIT — and the row says so and judges no target. Shown beside it: the same from
//! `events.recorded_at`, stamped when the event row is inserted — before the writer's COMMIT and its
//! WAL flush — which overstates it by that flush, and (with commit timestamps) commit → the
//! receipt's insert, so the listener's own part can be read off. Each `appointment.created` event
//! has two listeners (patient confirmation, practitioner schedule change); every receipt is a sample.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use chrono::{DateTime, Utc};
use clinic_http::auth::Role;
use tokio::sync::{mpsc, Mutex};
use tokio::time::{Instant, MissedTickBehavior};
use ulid::Ulid;

use super::client::{BenchAuth, Connection};
use super::db::{seed, BenchConnections as _};
use super::report::{ms, thousands, Report, Row};
use super::serve::ServerChild;
use super::stats::{MachineCpu, Samples};
use super::write::Slots;
use super::Options;
use clinic_testkit::TestDb;

const CONNECTIONS: usize = 8;

const NOW: &str = "SELECT clock_timestamp()";

/// Each receipt's event, the listener's commit and the receipt's insert.
const RECEIPT_COMMIT_TIMES: &str = "SELECT e.resource_id, e.recorded_at, \
             pg_xact_commit_timestamp(r.xmin), r.received_at \
             FROM listener_receipts r JOIN events e ON e.id = r.event_id \
             WHERE e.type = 'appointment.created' AND e.recorded_at > $1";

/// The same without commit timestamps: the receipt's insert only.
const RECEIPT_INSERT_TIMES: &str = "SELECT e.resource_id, e.recorded_at, r.received_at, NULL::timestamptz \
             FROM listener_receipts r JOIN events e ON e.id = r.event_id \
             WHERE e.type = 'appointment.created' AND e.recorded_at > $1";

const ACCEPTED_TIMES: &str = "SELECT e.resource_id, e.recorded_at, o.dispatched_at, NULL::timestamptz \
             FROM event_outbox o JOIN events e ON e.id = o.event_id \
             WHERE e.type = 'appointment.created' AND e.recorded_at > $1 AND o.dispatched_at IS NOT NULL";

const CREATED_SINCE: &str =
    "SELECT count(*) FROM events WHERE type = 'appointment.created' AND recorded_at > $1";

/// What the latency runs stop the clock at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Until {
    /// The listener's receipt (local transport), read with `clock`.
    Receipt(ReceiptClock),
    /// `event_outbox.dispatched_at`: the transport accepted every start (the mark after it).
    Accepted,
}

/// How a receipt's time is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReceiptClock {
    /// The listener's commit: the commit timestamp of the receipt row's transaction.
    Commit,
    /// `listener_receipts.received_at`, the receipt's insert (the server records no commit
    /// timestamps): the listener's reload, effect and COMMIT are not counted.
    Insert,
}

impl ReceiptClock {
    /// `Commit` when the server records commit timestamps.
    async fn of(owner: &tokio_postgres::Client) -> anyhow::Result<Self> {
        let setting: String = owner.query_one("SHOW track_commit_timestamp", &[]).await?.get(0);
        Ok(if setting == "on" { ReceiptClock::Commit } else { ReceiptClock::Insert })
    }

    /// What the clock stops at, for the row's label.
    fn stops_at(self) -> &'static str {
        match self {
            ReceiptClock::Commit => {
                "the listener's commit (pg_xact_commit_timestamp of the receipt's transaction: the \
                 listener's reload, effect and receipt committed)"
            }
            ReceiptClock::Insert => {
                "listener_receipts.received_at (the receipt's insert, the first statement of the \
                 listener's transaction: its reload, effect and COMMIT are NOT counted — this server \
                 has track_commit_timestamp off)"
            }
        }
    }
}

/// One measured run: commit → the stop point, and the same from `events.recorded_at`.
struct Measured {
    rate: u32,
    duration: Duration,
    from_commit: Samples,
    from_recorded: Samples,
    /// Commit → the receipt's insert, when the clock stops at the listener's commit.
    to_insert: Samples,
    events: i64,
    before_answer: usize,
    responses: Samples,
    /// How busy the machine was during the measured run (`/proc/stat`).
    machine_cpu: String,
}

pub async fn run(db: &TestDb, options: &Options, report: &mut Report) -> anyhow::Result<()> {
    let owner = db.owner().await?;
    let fixtures = seed(&owner, 256, 256).await?;
    let slots = Arc::new(Slots::new(fixtures.clone()));
    let BenchAuth { secret, header: auth } =
        BenchAuth::new(fixtures.workspace_id, fixtures.member_id, Role::Admin)?;
    let warm_up = if options.smoke { Duration::from_millis(500) } else { Duration::from_secs(2) };
    let duration = options.latency_duration();
    let high_rate = options.high_rate;

    let clock = ReceiptClock::of(&owner).await?;
    let receipt = Until::Receipt(clock);
    let server = ServerChild::start(&db.app_url(), &secret, 16, true).await?;
    let mut low =
        measure(&owner, server.address, &auth, &slots, options.rate, warm_up, duration, receipt).await?;
    let mut high =
        measure(&owner, server.address, &auth, &slots, high_rate, warm_up, duration, receipt).await?;
    server.stop().await?;
    let latency_ms = options.latency_transport_ms;
    let server = ServerChild::start_with(&db.app_url(), &secret, 16, true, Some(latency_ms)).await?;
    let mut accepted =
        measure(&owner, server.address, &auth, &slots, options.rate, warm_up, duration, Until::Accepted)
            .await?;
    server.stop().await?;

    // The targets count the listener's own commit: judged only when the clock stops there.
    let judged = |met: bool| (clock == ReceiptClock::Commit).then_some(met);
    let not_judged = match clock {
        ReceiptClock::Commit => "",
        ReceiptClock::Insert => " (not judged: the listener's commit is not measured)",
    };
    let (p50, p99) = (low.from_commit.quantile_ms(0.5), low.from_commit.quantile_ms(0.99));
    let met = matches!((p50, p99), (Some(p50), Some(p99)) if p50 <= 1.0 && p99 <= 2.5);
    push(
        report,
        "3",
        &mut low,
        &format!(
            "dispatcher loop LISTEN-woken + local transport in the server; commit (the API's 201 arriving \
             at the client) → {}",
            clock.stops_at()
        ),
        &format!("p50 ≤ 1 ms, p99 ≤ 2.5 ms (the best peer's commit → handler start){not_judged}"),
        judged(met),
    );
    let p99 = high.from_commit.quantile_ms(0.99);
    push(
        report,
        "3b",
        &mut high,
        "as 3, at the higher rate",
        &format!("p99 ≤ 10 ms{not_judged}"),
        judged(p99.is_some_and(|p99| p99 <= 10.0)),
    );
    push(
        report,
        "3c",
        &mut accepted,
        &format!("dispatcher loop with a {latency_ms} ms transport (no-op, every call {latency_ms} ms); commit → event_outbox.dispatched_at (the mark after the transport accepted every start)"),
        &format!("— (shown: a {latency_ms} ms broker's floor is {latency_ms} ms)"),
        None,
    );
    Ok(())
}

/// Warms up, then books `rate`/s for `duration` and reads when each event reached `until`.
#[allow(clippy::too_many_arguments)]
async fn measure(
    owner: &tokio_postgres::Client,
    address: std::net::SocketAddr,
    auth: &hyper::header::HeaderValue,
    slots: &Arc<Slots>,
    rate: u32,
    warm_up: Duration,
    duration: Duration,
    until: Until,
) -> anyhow::Result<Measured> {
    eprintln!("bench: latency: warming up for {warm_up:?}");
    steady(address, auth, slots, rate, warm_up).await?;
    wait_dispatched(owner).await?;
    let cutoff: chrono::DateTime<chrono::Utc> = owner.query_one(NOW, &[]).await?.get(0);
    eprintln!("bench: latency: {rate} events/s for {duration:?} ({until:?})");
    let cpu = MachineCpu::now();
    let run = steady(address, auth, slots, rate, duration).await?;
    let machine_cpu = cpu.busy_since();
    wait_dispatched(owner).await?;
    let query = match until {
        Until::Receipt(ReceiptClock::Commit) => RECEIPT_COMMIT_TIMES,
        Until::Receipt(ReceiptClock::Insert) => RECEIPT_INSERT_TIMES,
        Until::Accepted => ACCEPTED_TIMES,
    };
    let rows = owner.query(query, &[&cutoff]).await?;
    let events: i64 = owner.query_one(CREATED_SINCE, &[&cutoff]).await?.get(0);
    let mut from_commit = Samples::with_capacity(rows.len());
    let mut from_recorded = Samples::with_capacity(rows.len());
    let mut to_insert = Samples::default();
    let mut before_answer = 0usize;
    for row in &rows {
        let resource: uuid::Uuid = row.get(0);
        let recorded_at: DateTime<Utc> = row.get(1);
        let reached_at: DateTime<Utc> = row.get(2);
        let inserted_at: Option<DateTime<Utc>> = row.get(3);
        from_recorded.push_micros(micros_between(recorded_at, reached_at));
        if let Some(answered_at) = run.answered_at.get(&resource) {
            if reached_at < *answered_at {
                before_answer += 1;
            }
            from_commit.push_micros(micros_between(*answered_at, reached_at));
            if let Some(inserted_at) = inserted_at {
                to_insert.push_micros(micros_between(*answered_at, inserted_at));
            }
        }
    }
    anyhow::ensure!(from_recorded.len() > 0, "no {until:?} times were recorded");
    Ok(Measured {
        rate,
        duration,
        from_commit,
        from_recorded,
        to_insert,
        events,
        before_answer,
        responses: run.responses,
        machine_cpu,
    })
}

/// One row of the table for a measured run.
fn push(report: &mut Report, label: &str, run: &mut Measured, what: &str, target: &str, met: Option<bool>) {
    let to_insert = if run.to_insert.len() == 0 {
        String::new()
    } else {
        format!(
            "commit → the receipt's insert (received_at, the listener transaction's first statement): p50 {} · p99 {}; ",
            ms(run.to_insert.quantile_ms(0.5)),
            ms(run.to_insert.quantile_ms(0.99))
        )
    };
    report.push(Row {
        measure: format!(
            "{label}. Latency: POST /v1/appointments at {}/s for {}s (open loop), {what}; {} samples of {} events \
             ({} were written before the 201 arrived: counted as 0); machine CPU busy during the run: {}",
            run.rate,
            run.duration.as_secs(),
            thousands(run.from_commit.len() as f64),
            thousands(run.events as f64),
            thousands(run.before_answer as f64),
            run.machine_cpu
        ),
        figure: format!(
            "p50 {} · p95 {} · p99 {} · max {}",
            ms(run.from_commit.quantile_ms(0.5)),
            ms(run.from_commit.quantile_ms(0.95)),
            ms(run.from_commit.quantile_ms(0.99)),
            ms(run.from_commit.quantile_ms(1.0))
        ),
        baseline: format!(
            "from events.recorded_at (before the writer's COMMIT and its flush): p50 {} · p95 {} · p99 {}; {}API response time: p50 {} · p99 {}",
            ms(run.from_recorded.quantile_ms(0.5)),
            ms(run.from_recorded.quantile_ms(0.95)),
            ms(run.from_recorded.quantile_ms(0.99)),
            to_insert,
            ms(run.responses.quantile_ms(0.5)),
            ms(run.responses.quantile_ms(0.99))
        ),
        ratio: "—".into(),
        target: target.into(),
        met,
    });
}

/// Sends `rate` bookings per second for `duration` on a fixed schedule.
async fn steady(
    address: std::net::SocketAddr,
    auth: &hyper::header::HeaderValue,
    slots: &Arc<Slots>,
    rate: u32,
    duration: Duration,
) -> anyhow::Result<Steady> {
    let (jobs, queue) = mpsc::channel::<String>(1024);
    let queue = Arc::new(Mutex::new(queue));
    let mut workers = Vec::with_capacity(CONNECTIONS);
    for _ in 0..CONNECTIONS {
        let mut connection = Connection::open(address, auth.clone()).await?;
        let queue = queue.clone();
        workers.push(tokio::spawn(async move {
            let mut samples = Samples::default();
            let mut answers = Vec::new();
            loop {
                let Some(body) = queue.lock().await.recv().await else { break };
                let sent = Instant::now();
                let (status, answer) = connection.post_json("/v1/appointments", body).await?;
                let answered_at = Utc::now();
                anyhow::ensure!(
                    status.as_u16() == 201,
                    "HTTP {status}: {}",
                    String::from_utf8_lossy(&answer)
                );
                samples.push(sent.elapsed());
                let created: serde_json::Value = serde_json::from_slice(&answer)?;
                let id: Ulid =
                    created["id"].as_str().and_then(|id| id.parse().ok()).context("no id in the answer")?;
                answers.push((uuid::Uuid::from(id), answered_at));
            }
            Ok::<_, anyhow::Error>((samples, answers))
        }));
    }
    let total = (f64::from(rate) * duration.as_secs_f64()).round() as u64;
    let mut ticker = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(rate)));
    ticker.set_missed_tick_behavior(MissedTickBehavior::Burst);
    for _ in 0..total {
        ticker.tick().await;
        jobs.send(slots.take().json()).await.context("the bench workers stopped")?;
    }
    drop(jobs);
    let mut steady = Steady { responses: Samples::default(), answered_at: HashMap::new() };
    for worker in workers {
        let (samples, answers) = worker.await.context("a bench client task failed")??;
        steady.responses.extend(samples);
        steady.answered_at.extend(answers);
    }
    Ok(steady)
}

/// What the client saw of a steady run.
struct Steady {
    /// Response times.
    responses: Samples,
    /// When each appointment's 201 arrived (wall clock of this host, the database's clock too).
    answered_at: HashMap<uuid::Uuid, DateTime<Utc>>,
}

/// Microseconds from `from` to `to`, 0 when `to` is earlier.
fn micros_between(from: DateTime<Utc>, to: DateTime<Utc>) -> u64 {
    (to - from).num_microseconds().unwrap_or(0).max(0) as u64
}

const UNDISPATCHED: &str = "SELECT count(*) FROM event_outbox WHERE status <> 'dispatched'";

/// Waits until every outbox row is dispatched (at most 30 s).
async fn wait_dispatched(owner: &tokio_postgres::Client) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let open: i64 = owner.query_one(UNDISPATCHED, &[]).await?.get(0);
        if open == 0 {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "{open} outbox rows still not dispatched after 30 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
