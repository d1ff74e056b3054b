//! `clinic chaos`: the fault-injection run. Concurrent HTTP writers call the real API for a fixed time
//! while the faults below are injected; afterwards every invariant of the pipeline is checked and the
//! figures are printed. Exits non-zero when any check fails.
//!
//! Everything runs on private infrastructure that the run starts and removes: a PostgreSQL cluster
//! under a temporary folder on a free port (never the machine's shared server), the API in this
//! process (the real router on 127.0.0.1, connected as `clinic_app`), the dispatcher as a child
//! process (`clinic dispatch-loop`, hidden) so it can be killed for real, and with `--transport sqs`
//! (the default) a `moto_server` child with one queue per listener, reached through a TCP proxy in
//! this process, and the listener side: three consumers per queue that run each message like the
//! listener Lambda (delete on success or duplicate, leave it for redelivery on a retryable failure,
//! dead-letter it on a permanent one). With `--transport local` the dispatcher runs the listeners
//! itself.
//!
//! Faults:
//! - (a) the dispatcher child is killed with SIGKILL at random moments (every 1–5 s) and restarted
//!   after a random pause; its claims are taken over when their lease (2 s here) expires;
//! - (b) PostgreSQL is stopped (fast shutdown: sessions are cut) once, at 40 % of the run, kept down
//!   for `--pg-down-secs` and started again; the API answers 503 problem documents meanwhile and the
//!   writers retry with the same `Idempotency-Key`;
//! - (c) `--transport sqs`: the SQS endpoint becomes unreachable at 65 % of the run for
//!   `--sqs-down-secs` — the proxy refuses connections and cuts open ones, for the dispatcher and the
//!   consumers alike. The proxy, not moto itself, is stopped: moto keeps queues in memory and would
//!   lose the messages it had accepted, which real SQS never does, so a moto restart would test the
//!   emulator rather than the pipeline;
//! - (d) one listener fails permanently for one planted event: [`ChaosNotifier`] (used only by this
//!   command) refuses the booking confirmation of the first appointment the run books. Locally that
//!   outbox row must end `dead`; over SQS the start succeeds and exactly that message is dead-lettered.
//!
//! Checks (after the writers stop and the outbox has drained):
//! 1. every 2xx mutation has exactly one event (type, resource, version), its links (3 for appointment
//!    events, 1 otherwise) and one outbox row, and there is no event no 2xx answer accounts for;
//! 2. every event reached every listener: `listener_receipts` = the listener map, minus the planted one;
//! 3. no duplicate notifications (one per event and listener at most, one per receipt of a notifier);
//! 4. no row left `claimed` past its lease, nothing left pending or in retry;
//! 5. `dead` rows: exactly the planted event (local); no dead rows and exactly the planted message
//!    dead-lettered (SQS);
//! 6. no 5xx except 503 problem documents while PostgreSQL was down (plus a short grace while pooled
//!    connections are replaced), and every request that saw a 503 succeeded exactly once on retry;
//! 7. no unexpected 4xx answers.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context};
use bytes::Bytes;
use clinic_core::config::ApiConfig;
use clinic_core::db::{connect_pool, connect_single, url_with_role, Tx};
use clinic_core::dispatch::{DispatchConfig, Dispatcher, LocalTransport, Transport};
use clinic_core::events::EventType;
use clinic_core::http::auth::{issue_token, Role};
use clinic_core::http::{router, AppState};
use clinic_core::ids::{EventId, MemberId, WorkspaceId};
use clinic_core::listeners::{listeners, Listener, ListenerOutcome};
use clinic_core::notifications::{DeliveryLog, NewNotification, Notified, Notifier, NotifyError};
use clinic_core::telemetry::{self, LogFormat};
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};
use tokio::process::{Child, Command};
use tokio::sync::watch;

use crate::local_pg::LocalPostgres;

/// The listener that fails permanently for the planted event.
const PLANTED_LISTENER: Listener = Listener::PatientBookingConfirmation;
const FAIL_EVENT_VAR: &str = "CLINIC_CHAOS_FAIL_EVENT";
const FAIL_LISTENER_VAR: &str = "CLINIC_CHAOS_FAIL_LISTENER";
/// `sqs` makes `dispatch-loop` send to the queues of `CLINIC_SQS_QUEUE_URL_*` at `CLINIC_SQS_ENDPOINT`.
const TRANSPORT_VAR: &str = "CLINIC_CHAOS_TRANSPORT";
/// After PostgreSQL is back, pooled connections broken by the restart are replaced on first use; a
/// 503 within this grace is still the restart's.
const PG_GRACE: Duration = Duration::from_secs(5);

#[derive(Debug, clap::Args)]
pub struct ChaosArgs {
    /// Bounded run for CI: 40 s of writes under faults (about 60–90 s in all).
    #[arg(long)]
    smoke: bool,
    /// Seconds of writes under faults (default 300; 40 with --smoke).
    #[arg(long)]
    duration: Option<u64>,
    /// Concurrent HTTP writers.
    #[arg(long, default_value_t = 8)]
    writers: usize,
    /// Seconds PostgreSQL stays down when it is restarted.
    #[arg(long, default_value_t = 3)]
    pg_down_secs: u64,
    /// Random seed (default: from the clock); printed, so a run can be repeated.
    #[arg(long)]
    seed: Option<u64>,
    /// Keep the temporary folder (cluster data, dispatcher log) instead of removing it.
    #[arg(long)]
    keep: bool,
    /// How listeners are started: `sqs` (queues on a moto_server this run starts, reached through a
    /// proxy the run cuts for (c)) or `local` (in the dispatcher process; no SQS fault).
    #[arg(long, default_value = "sqs", value_parser = ["sqs", "local"])]
    transport: String,
    /// Pause of each writer between mutations, in milliseconds (default 0 with `local`, 100 with `sqs`:
    /// moto_server, not the pipeline, is the bottleneck there and slows down as its queues fill; use
    /// 400 or more for runs longer than a few minutes).
    #[arg(long)]
    pace_ms: Option<u64>,
    /// Seconds the SQS endpoint stays unreachable (`--transport sqs`).
    #[arg(long, default_value_t = 4)]
    sqs_down_secs: u64,
}

// ------------------------------------------------------------------------------------------------
// The dispatcher child (`clinic dispatch-loop`, hidden).

/// A notifier that fails permanently for one planted (event, listener) and records every other
/// notification in the built-in delivery log. Used only by `clinic dispatch-loop` under `clinic chaos`.
pub struct ChaosNotifier {
    planted: Option<(EventId, Listener)>,
}

#[async_trait::async_trait]
impl Notifier for ChaosNotifier {
    async fn notify(&self, tx: &Tx<'_>, notification: &NewNotification) -> Result<Notified, NotifyError> {
        if self.planted == Some((notification.event_id, notification.listener)) {
            return Err(NotifyError::Provider {
                code: "chaos_planted_failure".into(),
                message: format!("planted permanent failure for event {}", notification.event_id),
                retryable: false,
            });
        }
        DeliveryLog.notify(tx, notification).await
    }
}

/// `clinic dispatch-loop`: the dispatcher with local listeners on `DATABASE_URL` until killed, with the
/// planted failure of `CLINIC_CHAOS_FAIL_EVENT` / `CLINIC_CHAOS_FAIL_LISTENER` when set.
pub async fn dispatch_loop() -> anyhow::Result<()> {
    telemetry::init(LogFormat::Json);
    let url = clinic_core::config::required("DATABASE_URL")?;
    let planted =
        match (clinic_core::config::var(FAIL_EVENT_VAR), clinic_core::config::var(FAIL_LISTENER_VAR)) {
            (Some(event), Some(listener)) => Some((
                event.parse::<EventId>().map_err(|_| anyhow!("{FAIL_EVENT_VAR} must be an event id"))?,
                Listener::parse(&listener)
                    .ok_or_else(|| anyhow!("{FAIL_LISTENER_VAR} must name a listener"))?,
            )),
            _ => None,
        };
    let pool = connect_pool(&url, 8, None)?;
    let transport: Arc<dyn Transport> = if clinic_core::config::var(TRANSPORT_VAR).as_deref() == Some("sqs") {
        let config = clinic_sqs::SqsConfig::from_env()?;
        let client = clinic_sqs::build_client(config.endpoint.as_deref()).await;
        Arc::new(clinic_sqs::SqsTransport::from_config(client, &config))
    } else {
        Arc::new(LocalTransport::new(pool.clone()).with_notifier(Arc::new(ChaosNotifier { planted })))
    };
    let dispatcher = Dispatcher::new(pool, transport, DispatchConfig::from_env()?).with_listen(url, None);
    let report = dispatcher
        .run_until(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await;
    tracing::info!(steps = report.steps, dispatched = report.totals.dispatched, "dispatch-loop stopped");
    Ok(())
}

// ------------------------------------------------------------------------------------------------
// The run.

/// A small deterministic generator (xorshift64*), so a seed repeats a run's choices.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound.max(1)
    }

    fn millis(&mut self, from: u64, to: u64) -> Duration {
        Duration::from_millis(from + self.below(to - from + 1))
    }
}

/// One accepted (2xx) mutation.
#[derive(Debug, Clone)]
struct Mutation {
    event_type: EventType,
    resource_id: String,
    version: i64,
    saw_unavailable: bool,
}

#[derive(Debug, Default)]
struct Tally {
    mutations: Vec<Mutation>,
    requests: u64,
    retries: u64,
    connection_errors: u64,
    /// (when, status, answered with a problem document)
    server_errors: Vec<(Instant, u16, bool)>,
    unexpected: Vec<String>,
    gave_up: u64,
}

struct Run {
    address: SocketAddr,
    authorization: String,
    tally: Mutex<Tally>,
}

impl Run {
    fn tally(&self) -> std::sync::MutexGuard<'_, Tally> {
        self.tally.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Sends one mutation with a fresh Idempotency-Key, retrying 5xx answers and connection errors with
    /// the same key until it gets a final answer. The 2xx answer's body, or `None`.
    async fn mutate(&self, path: &str, body: Value, event_type: EventType, rng: &mut Rng) -> Option<Value> {
        let key = ulid::Ulid::generate().to_string();
        let mut saw_unavailable = false;
        for attempt in 0..1200u32 {
            if attempt > 0 {
                self.tally().retries += 1;
                tokio::time::sleep(rng.millis(50, 250)).await;
            }
            let answer = send(self.address, &self.authorization, path, &key, &body).await;
            let (status, is_problem, bytes) = match answer {
                Ok(answer) => answer,
                Err(_) => {
                    self.tally().connection_errors += 1;
                    continue;
                }
            };
            let mut tally = self.tally();
            tally.requests += 1;
            if status >= 500 {
                tally.server_errors.push((Instant::now(), status, is_problem));
                saw_unavailable |= status == 503;
                continue;
            }
            if !(200..300).contains(&status) {
                let text = String::from_utf8_lossy(&bytes);
                tally.unexpected.push(format!("POST {path}: {status} {}", &text[..text.len().min(300)]));
                return None;
            }
            let Ok(value) = serde_json::from_slice::<Value>(&bytes) else {
                tally.unexpected.push(format!("POST {path}: {status} with a body that is not JSON"));
                return None;
            };
            tally.mutations.push(Mutation {
                event_type,
                resource_id: value["id"].as_str().unwrap_or_default().to_owned(),
                version: value["version"].as_i64().unwrap_or_default(),
                saw_unavailable,
            });
            return Some(value);
        }
        self.tally().gave_up += 1;
        None
    }
}

/// One POST on a fresh connection: (status, is a problem document, body).
async fn send(
    address: SocketAddr,
    authorization: &str,
    path: &str,
    key: &str,
    body: &Value,
) -> anyhow::Result<(u16, bool, Bytes)> {
    use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST};
    let exchange = async {
        let stream = tokio::net::TcpStream::connect(address).await?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
        tokio::spawn(connection);
        let request = hyper::Request::builder()
            .method("POST")
            .uri(path)
            .header(HOST, "127.0.0.1")
            .header(AUTHORIZATION, authorization)
            .header(CONTENT_TYPE, "application/json")
            .header("idempotency-key", key)
            .body(Full::new(Bytes::from(body.to_string())))?;
        let response = sender.send_request(request).await?;
        let status = response.status().as_u16();
        let is_problem = response
            .headers()
            .get(CONTENT_TYPE)
            .is_some_and(|value| value.as_bytes().starts_with(b"application/problem+json"));
        let bytes = response.into_body().collect().await?.to_bytes();
        anyhow::Ok((status, is_problem, bytes))
    };
    tokio::time::timeout(Duration::from_secs(30), exchange).await.context("request timed out")?
}

fn slot(writer: usize, index: u64) -> (String, String) {
    let base = chrono::DateTime::parse_from_rfc3339("2040-01-01T00:00:00Z").expect("constant").to_utc();
    let starts = base + chrono::Duration::hours(index as i64) + chrono::Duration::minutes(writer as i64 % 30);
    let ends = starts + chrono::Duration::minutes(30);
    let format = "%Y-%m-%dT%H:%M:%SZ";
    (starts.format(format).to_string(), ends.format(format).to_string())
}

/// One writer: its own practitioner (so bookings never clash), then a random mix of patient creations,
/// bookings, reschedules, cancellations and completions until the deadline.
async fn writer(run: Arc<Run>, index: usize, seed: u64, deadline: Instant, pace: Duration) {
    let mut rng = Rng::new(seed ^ (index as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let body = json!({"displayName": format!("Dr. Chaos {index}"), "specialty": "Fault injection"});
    let Some(practitioner) =
        run.mutate("/v1/practitioners", body, EventType::PractitionerCreated, &mut rng).await
    else {
        return;
    };
    let practitioner = practitioner["id"].as_str().unwrap_or_default().to_owned();
    let mut patients: Vec<String> = Vec::new();
    let mut booked: Vec<String> = Vec::new();
    let mut next_slot = 0u64;
    while Instant::now() < deadline {
        tokio::time::sleep(pace).await;
        let roll = rng.below(100);
        if patients.is_empty() || roll < 25 {
            let body = json!({"givenName": "Chaos", "familyName": format!("Writer {index}")});
            if let Some(patient) = run.mutate("/v1/patients", body, EventType::PatientCreated, &mut rng).await
            {
                patients.push(patient["id"].as_str().unwrap_or_default().to_owned());
            }
        } else if booked.is_empty() || roll < 60 {
            let patient = &patients[rng.below(patients.len() as u64) as usize];
            let (starts_at, ends_at) = slot(index, next_slot);
            next_slot += 1;
            let body = json!({"patientId": patient, "practitionerId": practitioner, "startsAt": starts_at, "endsAt": ends_at});
            if let Some(appointment) =
                run.mutate("/v1/appointments", body, EventType::AppointmentCreated, &mut rng).await
            {
                booked.push(appointment["id"].as_str().unwrap_or_default().to_owned());
            }
        } else {
            let at = rng.below(booked.len() as u64) as usize;
            let appointment = booked[at].clone();
            let (action, event_type, body) = if roll < 75 {
                let (starts_at, ends_at) = slot(index, next_slot);
                next_slot += 1;
                (
                    "reschedule",
                    EventType::AppointmentRescheduled,
                    json!({"startsAt": starts_at, "endsAt": ends_at}),
                )
            } else if roll < 88 {
                ("cancel", EventType::AppointmentCancelled, json!({}))
            } else {
                ("complete", EventType::AppointmentCompleted, json!({}))
            };
            let path = format!("/v1/appointments/{appointment}/{action}");
            if run.mutate(&path, body, event_type, &mut rng).await.is_some() && action != "reschedule" {
                booked.swap_remove(at);
            }
        }
    }
}

/// The dispatcher child process: spawned, killed with SIGKILL, spawned again.
struct DispatcherChild {
    program: PathBuf,
    env: Vec<(String, String)>,
    log: PathBuf,
    child: Option<Child>,
    starts: u32,
}

impl DispatcherChild {
    fn spawn(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log)?;
        let child = Command::new(&self.program)
            .arg("dispatch-loop")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .kill_on_drop(true)
            .spawn()
            .context("starting `clinic dispatch-loop`")?;
        self.child = Some(child);
        self.starts += 1;
        Ok(())
    }

    async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.start_kill(); // SIGKILL
            let _ = child.wait().await;
        }
    }

    /// Restarts the child if it exited on its own (it should not).
    async fn ensure_running(&mut self) -> anyhow::Result<bool> {
        let exited = match &mut self.child {
            Some(child) => child.try_wait()?.is_some(),
            None => true,
        };
        if exited {
            self.child = None;
            self.spawn()?;
        }
        Ok(exited)
    }
}

/// What happened to PostgreSQL, for the 5xx check.
#[derive(Debug, Clone, Copy, Default)]
struct Outage {
    down_at: Option<Instant>,
    up_at: Option<Instant>,
}

impl Outage {
    fn covers(&self, at: Instant) -> bool {
        match (self.down_at, self.up_at) {
            (Some(down), Some(up)) => at >= down && at <= up + PG_GRACE,
            (Some(down), None) => at >= down,
            _ => false,
        }
    }
}

async fn interrupted() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut terminate) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = terminate.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

async fn start_cluster(dir: PathBuf, port: u16) -> anyhow::Result<LocalPostgres> {
    tokio::task::spawn_blocking(move || LocalPostgres::ensure_started(&dir, port)).await?
}

pub async fn run(args: ChaosArgs) -> anyhow::Result<()> {
    if clinic_core::config::var("RUST_LOG").is_none() {
        // The API logs every request and every 503 of the outage; the run prints its own figures
        // (set RUST_LOG to see the logs).
        std::env::set_var("RUST_LOG", "off");
    }
    // The emulator takes any credentials; the dispatcher child inherits these.
    for (name, value) in
        [("AWS_ACCESS_KEY_ID", "test"), ("AWS_SECRET_ACCESS_KEY", "test"), ("AWS_REGION", "us-east-1")]
    {
        if std::env::var_os(name).is_none() {
            std::env::set_var(name, value);
        }
    }
    telemetry::init(LogFormat::Text);
    let duration = Duration::from_secs(args.duration.unwrap_or(if args.smoke { 40 } else { 300 }));
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
    });
    let dir = std::env::temp_dir()
        .join(format!("clinic-chaos-{}", ulid::Ulid::generate().to_string().to_lowercase()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    println!(
        "clinic chaos: {} s of writes, {} writers, seed {seed}, folder {}",
        duration.as_secs(),
        args.writers,
        dir.display()
    );
    let port = free_port()?;
    let mut cluster = Some(start_cluster(dir.join("pgdata"), port).await?);
    // Ctrl-C (or SIGTERM) ends the run early but still stops the children and the cluster.
    let outcome = tokio::select! {
        outcome = drive(&args, duration, seed, &dir, port, &mut cluster) => outcome,
        _ = interrupted() => Err(anyhow!("clinic chaos: interrupted")),
    };
    if let Some(cluster) = cluster {
        if let Err(error) = cluster.stop() {
            eprintln!("clinic chaos: stopping the private cluster: {error:#}");
        }
    }
    if args.keep {
        println!("kept {}", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
        if let Ok(target) = std::fs::read_link(dir.join("pgdata")) {
            let _ = std::fs::remove_dir_all(target);
        }
    }
    outcome
}

/// The run proper. `cluster` holds the running cluster (taken while it is restarted) for the caller
/// to stop, whatever happens here.
async fn drive(
    args: &ChaosArgs,
    duration: Duration,
    seed: u64,
    dir: &Path,
    port: u16,
    cluster: &mut Option<LocalPostgres>,
) -> anyhow::Result<()> {
    let url = cluster.as_ref().ok_or_else(|| anyhow!("no cluster"))?.url();
    crate::commands::migrate::apply(&url).await?;
    let app_url = url_with_role(&url, "clinic_app");
    let owner_pool = connect_pool(&url, 1, None)?;
    let owner = owner_pool.get().await?;
    let workspace = WorkspaceId::generate();
    let admin = MemberId::generate();
    clinic_core::workspaces::insert_workspace(&owner, workspace, "Chaos Clinic").await?;
    clinic_core::workspaces::insert_member(&owner, admin, workspace, "admin", "Chaos Admin").await?;
    drop(owner);
    owner_pool.close();

    let secret = format!("{}{}", ulid::Ulid::generate(), ulid::Ulid::generate());
    let token =
        issue_token(secret.as_bytes(), workspace, admin.ulid(), Role::Admin, Duration::from_secs(86_400))?;
    let pool = connect_pool(&app_url, 16, None)?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let state = AppState { pool: pool.clone(), api: ApiConfig::local(&secret)? };
    let server = tokio::spawn(async move { axum::serve(listener, router(state)).await });
    let run = Arc::new(Run { address, authorization: format!("Bearer {token}"), tally: Mutex::default() });
    let mut rng = Rng::new(seed);

    // (d) The planted failure: the first booking's confirmation fails permanently.
    let practitioner = run
        .mutate(
            "/v1/practitioners",
            json!({"displayName": "Dr. Planted"}),
            EventType::PractitionerCreated,
            &mut rng,
        )
        .await
        .ok_or_else(|| anyhow!("could not create the planted practitioner"))?;
    let patient = run
        .mutate(
            "/v1/patients",
            json!({"givenName": "Planted", "familyName": "Failure"}),
            EventType::PatientCreated,
            &mut rng,
        )
        .await
        .ok_or_else(|| anyhow!("could not create the planted patient"))?;
    let booking = json!({"patientId": patient["id"], "practitionerId": practitioner["id"],
        "startsAt": "2039-01-01T09:00:00Z", "endsAt": "2039-01-01T09:30:00Z"});
    let planted_appointment = run
        .mutate("/v1/appointments", booking, EventType::AppointmentCreated, &mut rng)
        .await
        .ok_or_else(|| anyhow!("could not book the planted appointment"))?;
    let checker = connect_single(&url, None, None).await?;
    let planted_event: uuid::Uuid = checker
        .query_one(
            "SELECT id FROM events WHERE type = 'appointment.created' AND resource_id = $1",
            &[&uuid::Uuid::from(
                planted_appointment["id"].as_str().unwrap_or_default().parse::<ulid::Ulid>()?,
            )],
        )
        .await?
        .get(0);
    drop(checker);
    let planted_event_id = ulid::Ulid::from(planted_event).to_string();

    let mut dispatcher = DispatcherChild {
        program: std::env::current_exe()?,
        env: vec![
            ("DATABASE_URL".into(), app_url.clone()),
            ("CLINIC_DISPATCH_LEASE_MS".into(), "2000".into()),
            ("CLINIC_DISPATCH_BACKOFF_BASE_MS".into(), "100".into()),
            ("CLINIC_DISPATCH_BACKOFF_CAP_MS".into(), "2000".into()),
            ("CLINIC_DISPATCH_MAX_ATTEMPTS".into(), "1000".into()),
            ("CLINIC_DISPATCH_POLL_MS".into(), "200".into()),
            ("CLINIC_DISPATCH_BATCH".into(), "50".into()),
            (FAIL_EVENT_VAR.into(), planted_event_id.clone()),
            (FAIL_LISTENER_VAR.into(), PLANTED_LISTENER.as_str().into()),
            ("RUST_LOG".into(), "warn,clinic::outbox=info".into()),
        ],
        log: dir.join("dispatcher.log"),
        child: None,
        starts: 0,
    };
    let sqs = if args.transport == "sqs" {
        let planted =
            (planted_event_id.parse::<EventId>().map_err(|_| anyhow!("planted event id"))?, PLANTED_LISTENER);
        let sqs = Sqs::start(dir, pool.clone(), planted).await?;
        dispatcher.env.push((TRANSPORT_VAR.into(), "sqs".into()));
        dispatcher.env.push(("CLINIC_SQS_ENDPOINT".into(), sqs.endpoint.clone()));
        for listener in Listener::ALL {
            let url = sqs.queues.url(*listener).unwrap_or_default().to_owned();
            dispatcher.env.push((clinic_sqs::queue_url_var(*listener), url));
        }
        Some(sqs)
    } else {
        None
    };
    dispatcher.spawn()?;

    // The writers.
    let pace = Duration::from_millis(args.pace_ms.unwrap_or(if sqs.is_some() { 100 } else { 0 }));
    let started = Instant::now();
    let deadline = started + duration;
    let writers: Vec<_> = (0..args.writers)
        .map(|index| tokio::spawn(writer(run.clone(), index, seed, deadline, pace)))
        .collect();

    // (a) SIGKILL the dispatcher at random moments; (b) restart PostgreSQL once, at 40 %.
    let (faults_done, mut faults_stop) = watch::channel(false);
    let killer = {
        let mut rng = Rng::new(seed.rotate_left(17));
        tokio::spawn(async move {
            let mut kills = 0u32;
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(rng.millis(1000, 5000)) => {}
                    _ = faults_stop.changed() => break,
                }
                dispatcher.kill().await;
                kills += 1;
                tokio::time::sleep(rng.millis(0, 800)).await;
                if let Err(error) = dispatcher.spawn() {
                    eprintln!("clinic chaos: restarting the dispatcher: {error:#}");
                }
            }
            (dispatcher, kills)
        })
    };
    // (c) The SQS endpoint unreachable for a while, at 65 %.
    let sqs_outage = sqs.as_ref().map(|sqs| {
        let proxy = sqs.proxy.clone();
        let (at, down_for) = (started + duration.mul_f64(0.65), Duration::from_secs(args.sqs_down_secs));
        tokio::spawn(async move {
            tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await;
            println!("  t={:>5.1}s cutting the SQS endpoint", started.elapsed().as_secs_f64());
            let _ = proxy.send(false);
            tokio::time::sleep(down_for).await;
            let _ = proxy.send(true);
            println!("  t={:>5.1}s SQS endpoint reachable again", started.elapsed().as_secs_f64());
        })
    });
    let restart_at = started + duration.mul_f64(0.4);
    tokio::time::sleep_until(tokio::time::Instant::from_std(restart_at)).await;
    let mut outage = Outage { down_at: Some(Instant::now()), up_at: None };
    println!("  t={:>5.1}s stopping PostgreSQL", started.elapsed().as_secs_f64());
    if let Some(running) = cluster.take() {
        tokio::task::spawn_blocking(move || running.stop()).await??;
    }
    tokio::time::sleep(Duration::from_secs(args.pg_down_secs)).await;
    *cluster = Some(start_cluster(dir.join("pgdata"), port).await?);
    outage.up_at = Some(Instant::now());
    let downtime = outage.up_at.zip(outage.down_at).map(|(up, down)| up - down).unwrap_or_default();
    println!(
        "  t={:>5.1}s PostgreSQL is back ({:.1} s down)",
        started.elapsed().as_secs_f64(),
        downtime.as_secs_f64()
    );

    for writer in writers {
        writer.await?;
    }
    if let Some(outage) = sqs_outage {
        outage.await?;
    }
    let writes_took = started.elapsed();
    let _ = faults_done.send(true);
    let (mut dispatcher, kills) = killer.await?;
    dispatcher.ensure_running().await?;
    println!(
        "  t={:>5.1}s writers done; {kills} dispatcher kills; draining",
        started.elapsed().as_secs_f64()
    );

    // Drain: wait until nothing is pending, claimed or in retry.
    let checker = connect_single(&url, None, None).await?;
    let drain_started = Instant::now();
    let mut last_progress = Instant::now();
    let mut open = i64::MAX;
    let drain_limit = Duration::from_secs(120).max(duration / 2);
    while drain_started.elapsed() < drain_limit {
        open = checker
            .query_one(
                "SELECT count(*) FROM event_outbox WHERE status IN ('pending', 'claimed', 'retry')",
                &[],
            )
            .await?
            .get(0);
        let queues_empty = match &sqs {
            Some(sqs) => sqs.queues_empty().await,
            None => true,
        };
        if let (Some(sqs), true) = (&sqs, last_progress.elapsed() >= Duration::from_secs(10)) {
            last_progress = Instant::now();
            let (runs, retryable) = {
                let consumed = sqs.consumed.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                (consumed.runs, consumed.retryable)
            };
            println!(
                "  t={:>5.1}s draining: {open} outbox rows open, queues empty: {queues_empty}, {runs} listener runs, {retryable} retryable failures",
                started.elapsed().as_secs_f64()
            );
        }
        if open == 0 && queues_empty {
            break;
        }
        if dispatcher.ensure_running().await? {
            eprintln!("clinic chaos: the dispatcher had exited; restarted it");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let drain_took = drain_started.elapsed();
    dispatcher.kill().await;
    server.abort();

    let consumed = match sqs {
        Some(sqs) => Some(sqs.stop().await),
        None => None,
    };
    let tally = std::mem::take(&mut *run.tally());
    let report = check(&checker, &tally, &planted_event_id, outage, open, consumed.as_ref()).await?;
    print_figures(&Figures {
        seed,
        writers: args.writers,
        writes_took,
        drain_took,
        kills,
        dispatcher_starts: dispatcher.starts,
        downtime,
        sqs_down: consumed.as_ref().map(|_| Duration::from_secs(args.sqs_down_secs)),
        consumed: consumed.as_ref(),
        tally: &tally,
        report: &report,
    });
    if report.failures.is_empty() {
        println!("clinic chaos: all checks passed");
        Ok(())
    } else {
        Err(anyhow!("clinic chaos: {} check(s) failed (folder {})", report.failures.len(), dir.display()))
    }
}

/// (event type, resource id, resource version): what a 2xx mutation produced.
type EventKey = (String, String, i64);

#[derive(Debug, Default)]
struct Report {
    events: i64,
    links: i64,
    outbox_rows: i64,
    expected_receipts: usize,
    receipts: usize,
    notifications: i64,
    duplicate_notifications: i64,
    claimed_past_lease: i64,
    dead: Vec<String>,
    reclaimed: i64,
    max_attempts: i32,
    unavailable_during_outage: usize,
    retried_after_503: usize,
    checks: Vec<(&'static str, bool)>,
    failures: Vec<String>,
}

impl Report {
    fn check(&mut self, name: &'static str, failures: Vec<String>) {
        self.checks.push((name, failures.is_empty()));
        for failure in failures.into_iter().take(20) {
            self.failures.push(format!("{name}: {failure}"));
        }
    }
}

async fn check(
    client: &tokio_postgres::Client,
    tally: &Tally,
    planted: &str,
    outage: Outage,
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

struct Figures<'a> {
    seed: u64,
    writers: usize,
    writes_took: Duration,
    drain_took: Duration,
    kills: u32,
    dispatcher_starts: u32,
    downtime: Duration,
    sqs_down: Option<Duration>,
    consumed: Option<&'a Consumed>,
    tally: &'a Tally,
    report: &'a Report,
}

fn print_figures(f: &Figures<'_>) {
    let r = f.report;
    let mut by_type: BTreeMap<&str, usize> = BTreeMap::new();
    for mutation in &f.tally.mutations {
        *by_type.entry(mutation.event_type.as_str()).or_default() += 1;
    }
    let mix = by_type.iter().map(|(t, n)| format!("{t} {n}")).collect::<Vec<_>>().join(", ");
    let rows: Vec<(&str, String)> = vec![
        ("Seed", f.seed.to_string()),
        ("Writers × writing time", format!("{} × {:.1} s", f.writers, f.writes_took.as_secs_f64())),
        ("HTTP answers (incl. retries)", f.tally.requests.to_string()),
        ("2xx mutations", format!("{} ({mix})", f.tally.mutations.len())),
        ("Retries (same Idempotency-Key)", f.tally.retries.to_string()),
        ("Connection errors", f.tally.connection_errors.to_string()),
        ("Dispatcher SIGKILLs / starts", format!("{} / {}", f.kills, f.dispatcher_starts)),
        ("PostgreSQL restarts / downtime", format!("1 / {:.1} s", f.downtime.as_secs_f64())),
        ("503 during the outage (problem documents)", r.unavailable_during_outage.to_string()),
        ("Mutations that saw a 503, then succeeded once", r.retried_after_503.to_string()),
        ("Other 5xx", (f.tally.server_errors.len() - r.unavailable_during_outage).to_string()),
        ("Events / links / outbox rows", format!("{} / {} / {}", r.events, r.links, r.outbox_rows)),
        ("Receipts / expected", format!("{} / {}", r.receipts, r.expected_receipts)),
        ("Notifications / duplicates", format!("{} / {}", r.notifications, r.duplicate_notifications)),
        (
            "Outbox rows claimed more than once / max attempts",
            format!("{} / {}", r.reclaimed, r.max_attempts),
        ),
        ("Rows claimed past their lease", r.claimed_past_lease.to_string()),
        ("Dead outbox rows", r.dead.len().to_string()),
        ("Drain after the writers stopped", format!("{:.1} s", f.drain_took.as_secs_f64())),
    ];
    let mut rows = rows;
    match (f.consumed, f.sqs_down) {
        (Some(c), Some(down)) => {
            rows.insert(1, ("Transport", "sqs (moto_server behind a proxy the run cuts)".into()));
            rows.insert(8, ("SQS endpoint outages / downtime", format!("1 / {:.1} s", down.as_secs_f64())));
            rows.push(("SQS messages run / duplicate deliveries", format!("{} / {}", c.runs, c.duplicates)));
            rows.push(("Listener runs failed retryable (redelivered)", c.retryable.to_string()));
            rows.push(("SQS receive errors during the outage", c.receive_errors.to_string()));
            rows.push(("Dead-lettered messages (planted: 1)", c.dead_lettered.len().to_string()));
        }
        _ => rows.insert(1, ("Transport", "local (listeners in the dispatcher process)".into())),
    }
    println!();
    println!("| Figure | Value |");
    println!("|---|---|");
    for (name, value) in rows {
        println!("| {name} | {value} |");
    }
    println!();
    for (name, passed) in &r.checks {
        println!("  [{}] {name}", if *passed { "ok" } else { "FAIL" });
    }
    for failure in &r.failures {
        println!("  - {failure}");
    }
}

// ------------------------------------------------------------------------------------------------
// SQS: a moto_server child, a proxy in front of it (the fault), queues, and the listener side.

/// What the listener side did with the messages it received.
#[derive(Debug, Default)]
struct Consumed {
    runs: u64,
    duplicates: u64,
    retryable: u64,
    receive_errors: u64,
    /// (event id, listener) of messages that failed permanently: what SQS redrive would move to the
    /// listener's dead-letter queue. A set: a redelivered poison message is one message.
    dead_lettered: std::collections::BTreeSet<(String, String)>,
}

struct Sqs {
    /// The proxy's URL: every SQS call of the run (dispatcher and listeners) goes through it.
    endpoint: String,
    queues: clinic_sqs::QueueMap,
    client: aws_sdk_sqs::Client,
    /// `false` cuts the endpoint (refuses connections and drops open ones), `true` restores it.
    proxy: Arc<watch::Sender<bool>>,
    consumers: Vec<tokio::task::JoinHandle<()>>,
    consumed: Arc<Mutex<Consumed>>,
    _moto: Child,
}

impl Sqs {
    /// Starts moto_server on a free port, the proxy in front of it, one queue per listener, and one
    /// consumer per queue running the listeners on `pool` (with the planted failure).
    async fn start(
        dir: &Path,
        pool: deadpool_postgres::Pool,
        planted: (EventId, Listener),
    ) -> anyhow::Result<Sqs> {
        let moto_port = free_port()?;
        let log = std::fs::File::create(dir.join("moto.log"))?;
        let moto = Command::new("moto_server")
            .args(["-H", "127.0.0.1", "-p", &moto_port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .kill_on_drop(true)
            .spawn()
            .context("starting moto_server (pip install 'moto[server]'; tests/run installs it)")?;
        let moto_address: SocketAddr = ([127, 0, 0, 1], moto_port).into();
        let waited = Instant::now();
        while tokio::net::TcpStream::connect(moto_address).await.is_err() {
            if waited.elapsed() > Duration::from_secs(30) {
                anyhow::bail!("moto_server did not listen on {moto_address} within 30 s");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let proxy_port = free_port()?;
        let (proxy, up) = watch::channel(true);
        tokio::spawn(run_proxy(proxy_port, moto_address, up));
        let endpoint = format!("http://127.0.0.1:{proxy_port}");
        let client = clinic_sqs::build_client(Some(&endpoint)).await;
        let mut queues = None;
        for _ in 0..50 {
            match clinic_sqs::queues::create_queues(&client, "chaos", false).await {
                Ok(created) => {
                    queues = Some(created);
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
        let queues = queues.ok_or_else(|| anyhow!("could not create the queues on moto_server"))?;
        let consumed = Arc::new(Mutex::new(Consumed::default()));
        let notifier = Arc::new(ChaosNotifier { planted: Some(planted) });
        // Three consumers per queue, like concurrent Lambda pollers.
        let consumers = Listener::ALL
            .iter()
            .flat_map(|listener| [*listener; 3])
            .map(|listener| {
                let url = queues.url(listener).unwrap_or_default().to_owned();
                tokio::spawn(consume(client.clone(), url, pool.clone(), notifier.clone(), consumed.clone()))
            })
            .collect();
        Ok(Sqs { endpoint, queues, client, proxy: Arc::new(proxy), consumers, consumed, _moto: moto })
    }

    /// True when no queue holds a message, visible or in flight.
    async fn queues_empty(&self) -> bool {
        for listener in Listener::ALL {
            let Some(url) = self.queues.url(*listener) else { continue };
            let answer = self
                .client
                .get_queue_attributes()
                .queue_url(url)
                .attribute_names("ApproximateNumberOfMessages".into())
                .attribute_names("ApproximateNumberOfMessagesNotVisible".into())
                .send()
                .await;
            let Ok(answer) = answer else { return false };
            let busy =
                answer.attributes().is_some_and(|attributes| attributes.values().any(|count| count != "0"));
            if busy {
                return false;
            }
        }
        true
    }

    async fn stop(self) -> Consumed {
        for consumer in &self.consumers {
            consumer.abort();
        }
        for consumer in self.consumers {
            let _ = consumer.await;
        }
        std::mem::take(&mut *self.consumed.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }
}

/// A TCP proxy on 127.0.0.1:`port` to `target` while `up` is true; when it turns false the listener is
/// closed (connections are refused) and every open connection is cut.
async fn run_proxy(port: u16, target: SocketAddr, mut up: watch::Receiver<bool>) {
    loop {
        while !*up.borrow_and_update() {
            if up.changed().await.is_err() {
                return;
            }
        }
        let listener = match tokio::net::TcpListener::bind(("127.0.0.1", port)).await {
            Ok(listener) => listener,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let mut connections = tokio::task::JoinSet::new();
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    if let Ok((mut inbound, _)) = accepted {
                        connections.spawn(async move {
                            if let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await {
                                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                            }
                        });
                    }
                }
                changed = up.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    if !*up.borrow_and_update() {
                        break;
                    }
                }
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
        drop(listener);
        connections.abort_all();
    }
}

/// The listener side of one queue, like the listener Lambda: run each message, delete it when it
/// succeeded (or is a duplicate); a retryable failure leaves it for redelivery after the visibility
/// timeout; a permanent failure is dead-lettered (recorded, then deleted — what redrive does).
async fn consume(
    client: aws_sdk_sqs::Client,
    url: String,
    pool: deadpool_postgres::Pool,
    notifier: Arc<ChaosNotifier>,
    consumed: Arc<Mutex<Consumed>>,
) {
    let tally = || consumed.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    loop {
        // No long polling: moto_server answers one long poll at a time per worker, and six idle
        // queues polling for a second each would starve the busy ones.
        let received = client
            .receive_message()
            .queue_url(&url)
            .max_number_of_messages(10)
            .visibility_timeout(5)
            .send()
            .await;
        let messages = match received {
            Ok(output) => output.messages.unwrap_or_default(),
            Err(_) => {
                tally().receive_errors += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        if messages.is_empty() {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        let mut finished = Vec::new();
        for (index, message) in messages.iter().enumerate() {
            let Some(body) = message.body() else { continue };
            let done = match clinic_sqs::parse_message(body) {
                Err(error) => {
                    tally().dead_lettered.insert(("unreadable".into(), error.code().into()));
                    true
                }
                Ok((listener, envelope)) => {
                    match clinic_core::listeners::run_with(&pool, &*notifier, listener, &envelope).await {
                        Ok(outcome) => {
                            let mut tally = tally();
                            tally.runs += 1;
                            tally.duplicates += u64::from(outcome == ListenerOutcome::Duplicate);
                            true
                        }
                        Err(error) if error.is_permanent() => {
                            let entry = (envelope.id.to_string(), listener.as_str().to_owned());
                            tally().dead_lettered.insert(entry);
                            true
                        }
                        Err(_) => {
                            tally().retryable += 1;
                            false
                        }
                    }
                }
            };
            if let (true, Some(handle)) = (done, message.receipt_handle()) {
                let entry = aws_sdk_sqs::types::DeleteMessageBatchRequestEntry::builder()
                    .id(index.to_string())
                    .receipt_handle(handle)
                    .build();
                finished.extend(entry.ok());
            }
        }
        if !finished.is_empty() {
            // A failed delete (endpoint cut) means a redelivery, which the receipt absorbs.
            let _ = client.delete_message_batch().queue_url(&url).set_entries(Some(finished)).send().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_outage_window_includes_the_grace_after_restart() {
        let down = Instant::now();
        let up = down + Duration::from_secs(3);
        let outage = Outage { down_at: Some(down), up_at: Some(up) };
        assert!(outage.covers(down + Duration::from_secs(1)));
        assert!(outage.covers(up + PG_GRACE - Duration::from_millis(1)));
        assert!(!outage.covers(up + PG_GRACE + Duration::from_millis(1)));
        assert!(!Outage::default().covers(down));
    }

    #[test]
    fn slots_of_one_writer_never_overlap_and_the_generator_repeats() {
        let (first_start, first_end) = slot(3, 0);
        let (second_start, _) = slot(3, 1);
        assert!(first_end <= second_start, "{first_end} > {second_start}");
        assert!(first_start < first_end);
        let (mut a, mut b) = (Rng::new(42), Rng::new(42));
        assert_eq!(
            (0..5).map(|_| a.below(100)).collect::<Vec<_>>(),
            (0..5).map(|_| b.below(100)).collect::<Vec<_>>()
        );
        let pause = Rng::new(7).millis(1000, 5000);
        assert!((1000..=5000).contains(&pause.as_millis()));
    }
}
