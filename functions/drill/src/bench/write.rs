//! Write path: appointments booked through the real HTTP router (a `clinic bench serve` child on
//! loopback) by N keep-alive clients for T seconds, beside the same rows written by raw SQL over
//! tokio-postgres with the same concurrency and one transaction per booking.
//!
//! Runs, in this order so that drift hits baseline and figure alike: raw (in the API's round trips,
//! `Shape::AsTheApi`), raw pipelined (every statement in one round trip), API with no dispatcher waiting (no NOTIFY
//! is paid), API with an idle LISTENing dispatcher registered in `outbox_waiters` (every commit
//! NOTIFYs: the worst case of the wake-up design), API with a real dispatcher draining beside it
//! (LISTEN-woken, no-op transport: it registers only while idle), raw again. The baseline is the mean
//! of the two raw runs.
//!
//! Bookings never collide: booking n goes to practitioner n mod P in slot n div P (30 minutes each).
//!
//! Longer than the 500-line guideline on purpose: the API runs and the raw-SQL runs of the same shape are kept in one file so each figure and
//! its same-run baseline stay visibly the same shape (a change to one shows beside the other).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use chrono::{DateTime, SecondsFormat, TimeZone, Utc};
use clinic_core::dispatch::testing::NoopTransport;
use clinic_core::dispatch::{DispatchConfig, Dispatcher};
use clinic_core::telemetry::emf::MetricsMode;
use clinic_http::auth::Role;
use tokio::time::Instant;
use tokio_postgres::types::ToSql;
use ulid::Ulid;

use super::client::{Answer, BenchAuth, Connection};
use super::db::{seed, BenchConnections as _, Fixtures};
use super::report::{ms, ratio, thousands, Report, Row};
use super::serve::ServerChild;
use super::stats::Samples;
use super::Options;
use clinic_testkit::TestDb;

pub(super) const PRACTITIONERS: usize = 1024;
pub(super) const PATIENTS: usize = 1024;
const SLOT_MINUTES: i64 = 30;
pub(super) const API_POOL: usize = 16;

/// Hands out non-overlapping bookings.
pub(super) struct Slots {
    fixtures: Fixtures,
    next: AtomicU64,
    base: DateTime<Utc>,
}

pub(super) struct Booking {
    patient: Ulid,
    practitioner: Ulid,
    starts_at: DateTime<Utc>,
    ends_at: DateTime<Utc>,
}

impl Slots {
    pub(super) fn new(fixtures: Fixtures) -> Self {
        let base = Utc.with_ymd_and_hms(2030, 1, 7, 0, 0, 0).single().unwrap_or_else(Utc::now);
        Self { fixtures, next: AtomicU64::new(0), base }
    }

    pub(super) fn take(&self) -> Booking {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let practitioners = self.fixtures.practitioners.len() as u64;
        let patients = self.fixtures.patients.len() as u64;
        let slot = (n / practitioners) as i64;
        let starts_at = self.base + chrono::Duration::minutes(slot * SLOT_MINUTES);
        Booking {
            patient: self.fixtures.patients[((n * 7 + n / practitioners) % patients) as usize],
            practitioner: self.fixtures.practitioners[(n % practitioners) as usize],
            starts_at,
            ends_at: starts_at + chrono::Duration::minutes(SLOT_MINUTES),
        }
    }
}

impl Booking {
    /// The `POST /v1/appointments` body.
    pub(super) fn json(&self) -> String {
        format!(
            r#"{{"patientId":"{}","practitionerId":"{}","startsAt":"{}","endsAt":"{}","reason":"checkup"}}"#,
            self.patient,
            self.practitioner,
            self.starts_at.to_rfc3339_opts(SecondsFormat::Secs, true),
            self.ends_at.to_rfc3339_opts(SecondsFormat::Secs, true),
        )
    }
}

/// What one timed run did.
#[derive(Debug)]
pub(super) struct RunResult {
    completed: u64,
    errors: u64,
    first_error: Option<String>,
    elapsed: Duration,
    samples: Samples,
}

impl RunResult {
    pub(super) fn per_second(&self) -> f64 {
        self.completed as f64 / self.elapsed.as_secs_f64()
    }

    pub(super) fn describe(&mut self, unit: &str) -> String {
        format!(
            "{} {unit}/s · p50 {} · p99 {}",
            thousands(self.per_second()),
            ms(self.samples.quantile_ms(0.5)),
            ms(self.samples.quantile_ms(0.99))
        )
    }

    /// Waits for every client task and merges their results.
    async fn join(
        tasks: Vec<tokio::task::JoinHandle<RunResult>>,
        what: &'static str,
    ) -> anyhow::Result<RunResult> {
        let mut results = Vec::with_capacity(tasks.len());
        for task in tasks {
            results.push(task.await.context(what)?);
        }
        Ok(RunResult::merge(results))
    }

    fn merge(runs: Vec<RunResult>) -> RunResult {
        let mut merged = RunResult {
            completed: 0,
            errors: 0,
            first_error: None,
            elapsed: Duration::ZERO,
            samples: Samples::default(),
        };
        for run in runs {
            merged.completed += run.completed;
            merged.errors += run.errors;
            merged.first_error = merged.first_error.or(run.first_error);
            merged.elapsed = merged.elapsed.max(run.elapsed);
            merged.samples.extend(run.samples);
        }
        merged
    }

    pub(super) fn check(&self, what: &str) -> anyhow::Result<()> {
        if self.completed == 0 {
            anyhow::bail!(
                "{what}: nothing completed ({} errors; first: {})",
                self.errors,
                self.first_error.as_deref().unwrap_or("none")
            );
        }
        if self.errors > 0 {
            eprintln!(
                "bench: {what}: {} errors beside {} successes (first: {})",
                self.errors,
                self.completed,
                self.first_error.as_deref().unwrap_or("?")
            );
        }
        Ok(())
    }
}

pub async fn run(db: &TestDb, options: &Options, report: &mut Report) -> anyhow::Result<()> {
    let clients = options.clients;
    let duration = options.write_duration();
    let owner = db.owner().await?;
    let fixtures = seed(&owner, PRACTITIONERS, PATIENTS).await?;
    let slots = Arc::new(Slots::new(fixtures.clone()));

    eprintln!("bench: write: raw SQL in the API's round trips ({clients} clients, {duration:?})");
    let raw_first = raw_run(db, &slots, clients, duration, Shape::AsTheApi).await?;
    eprintln!("bench: write: raw SQL, pipelined");
    let mut raw_pipelined = raw_run(db, &slots, clients, duration, Shape::Pipelined).await?;

    let BenchAuth { secret, header: auth } =
        BenchAuth::new(fixtures.workspace_id, fixtures.member_id, Role::Admin)?;
    let server = ServerChild::start(&db.app_url(), &secret, API_POOL, false).await?;

    eprintln!("bench: write: API, no dispatcher waiting");
    let mut api_quiet = api_run(server.address, &auth, &slots, clients, duration).await?;

    eprintln!("bench: write: API, an idle LISTENing dispatcher registered (every commit notifies)");
    let idle = IdleListener::start(db).await?;
    let mut api_notify = api_run(server.address, &auth, &slots, clients, duration).await?;
    let notifications = idle.stop(db).await?;

    // The backlog of the runs above is drained untimed, so the next run measures only its own events.
    let pool = db.app_pool(4)?;
    let backlog = Dispatcher::new(pool.clone(), Arc::new(NoopTransport), DispatchConfig::default())
        .with_metrics(MetricsMode::Off)
        .drain_once()
        .await?;
    eprintln!(
        "bench: write: drained a backlog of {} events; API with a dispatcher draining beside it",
        backlog.totals.dispatched
    );
    let dispatcher = Arc::new(
        Dispatcher::new(pool.clone(), Arc::new(NoopTransport), DispatchConfig::default())
            .with_metrics(MetricsMode::Off)
            .with_listen(db.app_url(), None),
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = {
        let dispatcher = dispatcher.clone();
        tokio::spawn(async move {
            dispatcher
                .run_until(async {
                    let _ = stopped.await;
                })
                .await
        })
    };
    let mut api_live = api_run(server.address, &auth, &slots, clients, duration).await?;
    let _ = stop.send(());
    let live = running.await.context("the dispatcher task failed")?;

    let peak_rss = server.peak_rss_kib();
    server.stop().await?;

    eprintln!("bench: write: raw SQL in the API's round trips (again)");
    let raw_second = raw_run(db, &slots, clients, duration, Shape::AsTheApi).await?;

    for (name, result) in [
        ("raw", &raw_first),
        ("raw pipelined", &raw_pipelined),
        ("API quiet", &api_quiet),
        ("API notify", &api_notify),
        ("API live", &api_live),
        ("raw again", &raw_second),
    ] {
        result.check(name)?;
    }
    let raw_rates = (raw_first.per_second(), raw_second.per_second());
    let mut raw = RunResult::merge(vec![raw_first, raw_second]);
    let raw_rate = (raw_rates.0 + raw_rates.1) / 2.0;
    let raw_text = format!(
        "raw SQL, the API's 6 round trips (BEGIN, idempotency lock + lookup in one, the patient and practitioner checks in one, the appointment and its event with links and outbox in one, stored key, COMMIT): {} tx/s (runs {} and {}) · p50 {} · p99 {}",
        thousands(raw_rate),
        thousands(raw_rates.0),
        thousands(raw_rates.1),
        ms(raw.samples.quantile_ms(0.5)),
        ms(raw.samples.quantile_ms(0.99)),
    );
    let pipelined_rate = raw_pipelined.per_second();
    let pipelined_text = format!("raw SQL pipelined (one round trip): {}", raw_pipelined.describe("tx"));

    let quiet_rate = api_quiet.per_second();
    let (quiet_ratio, quiet_ratio_text) = ratio(quiet_rate, raw_rate);
    report.push(Row {
        measure: format!(
            "1a. Write: POST /v1/appointments with an Idempotency-Key, {clients} keep-alive clients, {}s, no dispatcher waiting (no NOTIFY)",
            duration.as_secs()
        ),
        figure: api_quiet.describe("req"),
        baseline: raw_text.clone(),
        ratio: quiet_ratio_text,
        target: "≥ 0.95×".into(),
        met: Some(quiet_ratio >= 0.95),
    });
    let (pipelined_ratio, pipelined_ratio_text) = ratio(quiet_rate, pipelined_rate);
    report.push(Row {
        measure: "1a'. Same API run against the pipelined raw limit".into(),
        figure: format!("{} req/s", thousands(quiet_rate)),
        baseline: pipelined_text,
        ratio: pipelined_ratio_text,
        target: "≥ 0.8×".into(),
        met: Some(pipelined_ratio >= 0.8),
    });
    let notify_rate = api_notify.per_second();
    report.push(Row {
        measure: format!(
            "1b. Write with an idle LISTENing dispatcher registered: every commit NOTIFYs ({} notifications received); {} of 1a",
            thousands(notifications as f64),
            ratio(notify_rate, quiet_rate).1
        ),
        figure: api_notify.describe("req"),
        baseline: "raw SQL (1a)".into(),
        ratio: ratio(notify_rate, raw_rate).1,
        target: "— (the NOTIFY cost, shown)".into(),
        met: None,
    });
    let live_rate = api_live.per_second();
    report.push(Row {
        measure: format!(
            "1c. Write with a real dispatcher draining beside it (LISTEN-woken, no-op transport): {} events dispatched, {} wake-ups; {} of 1a",
            thousands(live.totals.dispatched as f64),
            thousands(live.wakeups as f64),
            ratio(live_rate, quiet_rate).1
        ),
        figure: api_live.describe("req"),
        baseline: "raw SQL (1a)".into(),
        ratio: ratio(live_rate, raw_rate).1,
        target: "— (the design in use)".into(),
        met: None,
    });
    let rss_mib = peak_rss.map(|kib| kib as f64 / 1024.0);
    report.push(Row {
        measure: format!(
            "4. Memory: peak RSS (VmHWM) of the API server child process over runs 1a–1c (pool {API_POOL}, {clients} connections)"
        ),
        figure: rss_mib.map_or_else(|| "n/a".into(), |mib| format!("{mib:.1} MiB")),
        baseline: "—".into(),
        ratio: "—".into(),
        target: "≤ 64 MiB".into(),
        met: rss_mib.map(|mib| mib <= 64.0),
    });
    report.note(
        "Write: 1a is judged against the raw run with the API's round-trip shape (the same nine statements in the same \
         six round trips), 1a' against the pipelined raw run (the nine in one round trip). Both include the Idempotency-Key's \
         lock, lookup and stored key. A booking writes no disclosure: its answer carries only what the caller sent; the \
         disclosure log's cost (reads, PATCH answers) is rows 6a and 6b.",
    );
    Ok(())
}

/// Books through the API with `clients` keep-alive connections for `duration`.
pub(super) async fn api_run(
    address: std::net::SocketAddr,
    auth: &hyper::header::HeaderValue,
    slots: &Arc<Slots>,
    clients: usize,
    duration: Duration,
) -> anyhow::Result<RunResult> {
    let mut connections = Vec::with_capacity(clients);
    for _ in 0..clients {
        connections.push(Connection::open(address, auth.clone()).await?);
    }
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = Vec::with_capacity(clients);
    for mut connection in connections {
        let slots = slots.clone();
        tasks.push(tokio::spawn(async move {
            let mut result = RunResult {
                completed: 0,
                errors: 0,
                first_error: None,
                elapsed: Duration::ZERO,
                samples: Samples::with_capacity(1 << 14),
            };
            while Instant::now() < deadline {
                let body = slots.take().json();
                // Every booking claims an idempotency key, as a retrying client's would.
                let key = Ulid::generate().to_string();
                let sent = Instant::now();
                match connection.post("/v1/appointments", body, Some(&key)).await {
                    Ok(answer) if answer.status.as_u16() == 201 => {
                        result.samples.push(sent.elapsed());
                        result.completed += 1;
                    }
                    Ok(Answer { status, body, .. }) => {
                        result.errors += 1;
                        result.first_error.get_or_insert_with(|| {
                            format!("HTTP {status}: {}", String::from_utf8_lossy(&body))
                        });
                    }
                    Err(error) => {
                        result.errors += 1;
                        result.first_error.get_or_insert_with(|| format!("{error:#}"));
                        break;
                    }
                }
            }
            result.elapsed = started.elapsed();
            result
        }));
    }
    RunResult::join(tasks, "a bench client task failed").await
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// The API's nine statements in its six round trips: BEGIN, the idempotency lock and lookup
    /// (pipelined in one, as `http::idempotency::claim` sends them), the two reference checks in one,
    /// the appointment and the event with its links and outbox row in one (as `appointments::book`
    /// sends them), the stored key, COMMIT.
    AsTheApi,
    /// The same nine statements sent together (one round trip).
    Pipelined,
}

// The statements the API sends for `POST /v1/appointments` with an Idempotency-Key (read off
// PostgreSQL's statement log), written here as the bench's own raw SQL.
const RAW_KEY_LOCK: &str =
    "SELECT pg_advisory_xact_lock(hashtextextended($1::uuid::text || ':' || $2::text, 0))";
const RAW_KEY_FIND: &str =
    "SELECT request_hash, response_status, resource_id FROM idempotency_keys WHERE workspace_id = $1 AND key = $2";
const RAW_PATIENT: &str =
    "SELECT 1 FROM patients WHERE workspace_id = $1 AND id = $2 AND deleted_at IS NULL FOR SHARE";
const RAW_PRACTITIONER: &str =
    "SELECT active FROM practitioners WHERE workspace_id = $1 AND id = $2 FOR SHARE";
const RAW_APPOINTMENT: &str = "INSERT INTO appointments (id, workspace_id, patient_id, practitioner_id, \
     starts_at, ends_at, status, reason, version, created_at, updated_at) \
     VALUES ($1, $2, $3, $4, $5, $6, 'booked', $7, 1, $8, $8)";
const RAW_EVENT: &str = "WITH event AS ( \
         INSERT INTO events (id, workspace_id, type, version, actor_kind, actor_id, occurred_at, \
             resource_type, resource_id, resource_version, correlation_id, causation_id, idempotency_key_digest) \
         VALUES ($1, $2, 'appointment.created', 1, 'member', $3, $4, 'appointment', $5, 1, $6, $7, $10) \
         RETURNING id, recorded_at \
     ), links AS ( \
         INSERT INTO event_resources (workspace_id, resource_type, resource_id, event_id) \
         VALUES ($2, 'appointment', $5, $1), ($2, 'patient', $8, $1), ($2, 'practitioner', $9, $1) \
     ), outbox AS ( \
         INSERT INTO event_outbox (event_id, workspace_id, available_at, created_at, updated_at) \
         SELECT id, $2, recorded_at, recorded_at, recorded_at FROM event \
     ) SELECT recorded_at FROM event";
const RAW_KEY_STORE: &str =
    "INSERT INTO idempotency_keys (workspace_id, key, request_hash, response_status, \
     resource_type, resource_id) VALUES ($1, $2, $3, 201, 'appointment', $4)";

/// The raw run's prepared statements, in the order a booking sends them.
struct RawStatements {
    key_lock: tokio_postgres::Statement,
    key_find: tokio_postgres::Statement,
    patient: tokio_postgres::Statement,
    practitioner: tokio_postgres::Statement,
    appointment: tokio_postgres::Statement,
    event: tokio_postgres::Statement,
    key_store: tokio_postgres::Statement,
}

impl RawStatements {
    async fn prepare(client: &tokio_postgres::Client) -> Result<Self, tokio_postgres::Error> {
        Ok(Self {
            key_lock: client.prepare(RAW_KEY_LOCK).await?,
            key_find: client.prepare(RAW_KEY_FIND).await?,
            patient: client.prepare(RAW_PATIENT).await?,
            practitioner: client.prepare(RAW_PRACTITIONER).await?,
            appointment: client.prepare(RAW_APPOINTMENT).await?,
            event: client.prepare(RAW_EVENT).await?,
            key_store: client.prepare(RAW_KEY_STORE).await?,
        })
    }
}

/// Writes the same rows as a booking with an Idempotency-Key (stored key, appointment, event, three
/// links, outbox row) straight over tokio-postgres, one transaction per booking, `clients`
/// connections for `duration`.
async fn raw_run(
    db: &TestDb,
    slots: &Arc<Slots>,
    clients: usize,
    duration: Duration,
    shape: Shape,
) -> anyhow::Result<RunResult> {
    let pool = db.app_pool(clients)?;
    let mut connections = Vec::with_capacity(clients);
    for _ in 0..clients {
        connections.push(pool.get().await?);
    }
    let workspace = uuid::Uuid::from(slots.fixtures.workspace_id.ulid());
    let actor = uuid::Uuid::from(slots.fixtures.member_id.ulid());
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = Vec::with_capacity(clients);
    for mut client in connections {
        let slots = slots.clone();
        tasks.push(tokio::spawn(async move {
            let mut result = RunResult {
                completed: 0,
                errors: 0,
                first_error: None,
                elapsed: Duration::ZERO,
                samples: Samples::with_capacity(1 << 14),
            };
            let raw = match RawStatements::prepare(&client).await {
                Ok(statements) => statements,
                Err(error) => {
                    result.errors += 1;
                    result.first_error = Some(error.to_string());
                    return result;
                }
            };
            while Instant::now() < deadline {
                let booking = slots.take();
                let appointment_id = uuid::Uuid::from(Ulid::generate());
                let event_id = uuid::Uuid::from(Ulid::generate());
                let correlation = uuid::Uuid::from(Ulid::generate());
                let causation = uuid::Uuid::from(Ulid::generate());
                let patient = uuid::Uuid::from(booking.patient);
                let practitioner = uuid::Uuid::from(booking.practitioner);
                let key = Ulid::generate().to_string();
                // Shaped like the API's values: a hex SHA-256 fingerprint, an HMAC key digest.
                let fingerprint = format!("{:064x}", u128::from(Ulid::generate()));
                let key_digest = format!("hmac-sha256:{fingerprint}");
                let now = Utc::now();
                let reason = "checkup";
                let key_params: [&(dyn ToSql + Sync); 2] = [&workspace, &key];
                let patient_params: [&(dyn ToSql + Sync); 2] = [&workspace, &patient];
                let practitioner_params: [&(dyn ToSql + Sync); 2] = [&workspace, &practitioner];
                let appointment_params: [&(dyn ToSql + Sync); 8] = [
                    &appointment_id,
                    &workspace,
                    &patient,
                    &practitioner,
                    &booking.starts_at,
                    &booking.ends_at,
                    &reason,
                    &now,
                ];
                let event_params: [&(dyn ToSql + Sync); 10] = [
                    &event_id,
                    &workspace,
                    &actor,
                    &now,
                    &appointment_id,
                    &correlation,
                    &causation,
                    &patient,
                    &practitioner,
                    &key_digest,
                ];
                let store_params: [&(dyn ToSql + Sync); 4] =
                    [&workspace, &key, &fingerprint, &appointment_id];
                let sent = Instant::now();
                let outcome = match shape {
                    Shape::AsTheApi => {
                        async {
                            let tx = client.transaction().await?;
                            futures::future::try_join(
                                tx.query_one(&raw.key_lock, &key_params),
                                tx.query_opt(&raw.key_find, &key_params),
                            )
                            .await?;
                            futures::future::try_join(
                                tx.query_opt(&raw.patient, &patient_params),
                                tx.query_opt(&raw.practitioner, &practitioner_params),
                            )
                            .await?;
                            futures::future::try_join(
                                tx.execute(&raw.appointment, &appointment_params),
                                tx.query_one(&raw.event, &event_params),
                            )
                            .await?;
                            tx.execute(&raw.key_store, &store_params).await?;
                            tx.commit().await
                        }
                        .await
                    }
                    Shape::Pipelined => {
                        let c = &**client;
                        tokio::try_join!(
                            c.batch_execute("BEGIN"),
                            c.query_one(&raw.key_lock, &key_params),
                            c.query_opt(&raw.key_find, &key_params),
                            c.query_opt(&raw.patient, &patient_params),
                            c.query_opt(&raw.practitioner, &practitioner_params),
                            c.execute(&raw.appointment, &appointment_params),
                            c.query_one(&raw.event, &event_params),
                            c.execute(&raw.key_store, &store_params),
                            c.batch_execute("COMMIT"),
                        )
                        .map(drop)
                    }
                };
                match outcome {
                    Ok(()) => {
                        result.samples.push(sent.elapsed());
                        result.completed += 1;
                    }
                    Err(error) => {
                        result.errors += 1;
                        result.first_error.get_or_insert_with(|| error.to_string());
                        if shape == Shape::Pipelined {
                            // A failed statement leaves the pipelined transaction aborted; end it.
                            let _ = client.batch_execute("ROLLBACK").await;
                        }
                    }
                }
            }
            result.elapsed = started.elapsed();
            result
        }));
    }
    RunResult::join(tasks, "a raw client task failed").await
}

/// A stand-in for a dispatcher that is idle and LISTENing: registered in `outbox_waiters` for the
/// whole run (so every commit NOTIFYs) and counting the notifications it receives.
struct IdleListener {
    _client: tokio_postgres::Client,
    received: Arc<AtomicU64>,
    counter: tokio::task::JoinHandle<()>,
}

const IDLE_ID: &str = "bench-idle-listener";

impl IdleListener {
    async fn start(db: &TestDb) -> anyhow::Result<Self> {
        let (sender, mut notifications) = tokio::sync::mpsc::unbounded_channel();
        let client = clinic_core::db::connect_single(&db.app_url(), None, Some(sender)).await?;
        // LISTEN takes no parameter: the channel comes from its one Rust constant.
        client.batch_execute(&format!("LISTEN {}", clinic_core::events::store::OUTBOX_CHANNEL)).await?;
        clinic_core::outbox::waiters::register(&db.pool.get().await?, IDLE_ID).await?;
        let received = Arc::new(AtomicU64::new(0));
        let counter = {
            let received = received.clone();
            tokio::spawn(async move {
                while notifications.recv().await.is_some() {
                    received.fetch_add(1, Ordering::Relaxed);
                }
            })
        };
        Ok(Self { _client: client, received, counter })
    }

    /// Unregisters and answers how many notifications arrived.
    async fn stop(self, db: &TestDb) -> anyhow::Result<u64> {
        clinic_core::outbox::waiters::unregister(&db.pool.get().await?, IDLE_ID).await?;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let received = self.received.load(Ordering::Relaxed);
        drop(self._client);
        let _ = tokio::time::timeout(Duration::from_secs(2), self.counter).await;
        Ok(received)
    }
}
