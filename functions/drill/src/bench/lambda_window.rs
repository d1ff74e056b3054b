//! Lambda windows: the real dispatcher Lambda binary (`clinic-dispatcher`, drain mode, SQS transport
//! on the testkit's emulator) under the local platform stand-in ([`super::runtime_api`]) that delivers
//! the committed EventBridge tick (`tests/fixtures/eventbridge_scheduled_tick.json`) on a schedule,
//! while a writer commits events at a steady rate through the one event writer
//! (`clinic_core::events::store::append`) across every window boundary; commit → start per event.
//!
//! Measured twice in one run on the same database: the template's schedule (windows that overlap:
//! [`OVERLAP`]) and, as the baseline, the previous one (a 50 s window each minute, one environment:
//! [`SINGLE`]). `--tick-secs` compresses the minute (smoke: 3 s): windows scale with it, rounded to
//! whole seconds (`CLINIC_DISPATCH_WINDOW_SECS`), the timeout stays window + 10 s.
//!
//! Invariants:
//! - Commit is the writer's clock right after COMMIT returned; start is `event_outbox.dispatched_at`,
//!   stamped by the mark after SQS accepted every start of the event. Both are this host's wall clock
//!   (PostgreSQL on 127.0.0.1), so no skew enters; the figure slightly overstates commit → accepted.
//! - Writes begin half a period after the first tick and end at tick n; the schedule keeps ticking
//!   until every event is dispatched (at most [`EXTRA_TICKS`] more; the run fails otherwise). The
//!   environments still draining then are killed with the platform; their answers are not counted.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use chrono::{DateTime, Utc};
use clinic_core::events::store::{append, NewEvent};
use clinic_core::events::{Actor, Cause, EventType};
use clinic_core::ids::{CausationId, CorrelationId, WorkspaceId};
use tokio::time::{Instant, MissedTickBehavior};

use super::db::{seed, BenchConnections as _};
use super::report::{ms, Report, Row};
use super::runtime_api::{Function, Platform, Tally};
use super::stats::Samples;
use super::Options;
use clinic_testkit::TestDb;

const TICK: &str = include_str!("../../../../tests/fixtures/eventbridge_scheduled_tick.json");

/// A dispatcher schedule, in template terms (a 60 s period).
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    pub name: &'static str,
    /// `CLINIC_DISPATCH_WINDOW_SECS` for a 60 s period.
    pub window_secs: u64,
    /// ReservedConcurrentExecutions.
    pub reserved: usize,
}

/// template.yaml's DispatcherFunction: windows of 70 s every minute, two environments.
pub const OVERLAP: Schedule =
    Schedule { name: "overlapping windows (70 s each minute, 2 environments)", window_secs: 70, reserved: 2 };

/// The schedule before #13: a 50 s window each minute, one environment.
pub const SINGLE: Schedule =
    Schedule { name: "one 50 s window each minute, 1 environment (before)", window_secs: 50, reserved: 1 };

/// Ticks after the writes ended before a run with undispatched events fails.
const EXTRA_TICKS: u32 = 3;

/// The function's timeout beyond its window (template: 80 s for 70 s).
const TIMEOUT_BEYOND_WINDOW: Duration = Duration::from_secs(10);

/// The bounds of the target.
const P99_TARGET_MS: f64 = 1_000.0;
const MAX_TARGET_MS: f64 = 2_000.0;

/// What one schedule's run measured.
struct Measured {
    samples: Samples,
    tally: Tally,
    window_secs: u64,
    /// The worst wait and when in the period its event committed (seconds after the tick).
    worst_phase_secs: f64,
}

/// Purges every listener queue once a second until aborted. Nothing consumes the messages here (the
/// measure ends when SQS accepted them), and moto does work linear in a queue's length for every
/// message sent to it (it recomputes the queue's attributes per message): left to fill, the queues
/// slowed every send until the dispatcher's calls timed out — what ended the real-minute runs after
/// about two minutes with `sqs_unreachable`.
fn keep_queues_short(
    client: aws_sdk_sqs::Client,
    queues: &clinic_sqs::QueueMap,
) -> tokio::task::JoinHandle<()> {
    let urls: Vec<String> = clinic_core::listeners::Listener::ALL
        .iter()
        .filter_map(|l| queues.url(*l).map(str::to_owned))
        .collect();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            for url in &urls {
                let purge = client.purge_queue().queue_url(url).send();
                let _ = tokio::time::timeout(Duration::from_secs(20), purge).await;
            }
        }
    })
}

pub async fn run(db: &TestDb, options: &Options, report: &mut Report) -> anyhow::Result<()> {
    let binary = dispatcher_binary()?;
    let emulator = tokio::task::spawn_blocking(clinic_sqs::testing::Emulator::start).await?.context(
        "no SQS emulator for the dispatcher Lambda (install moto_server or set CLINIC_TEST_SQS_ENDPOINT)",
    )?;
    // The emulator's own client (test credentials, us-east-1): the bench must not depend on the
    // operator's AWS credentials or region, which it would otherwise look up (and without them fail
    // with "dispatch failure" after every earlier section had run).
    let client = emulator.client();
    let prefix = format!("bench-{}", ulid::Ulid::generate().to_string().to_lowercase());
    let queues =
        clinic_sqs::queues::create_queues_when_ready(&client, &prefix, false, Duration::from_secs(5))
            .await
            .map_err(|error| {
            anyhow::anyhow!("could not create the listener queues on the SQS emulator: {error}")
        })?;
    let mut env: Vec<(String, String)> = clinic_core::listeners::Listener::ALL
        .iter()
        .filter_map(|l| queues.url(*l).map(|url| (clinic_sqs::queue_url_var(*l), url.to_owned())))
        .collect();
    for (key, value) in [
        ("DATABASE_URL", db.app_url()),
        ("CLINIC_DB_POOL_SIZE", "2".into()),
        ("CLINIC_SQS_ENDPOINT", emulator.endpoint.clone()),
        ("CLINIC_METRICS", "off".into()),
        // The emulator (one Python process on a loaded machine) can answer slower than SQS does: the
        // attempt timeout of the template (3 s) would open the breaker on the emulator's pauses.
        ("CLINIC_SQS_ATTEMPT_TIMEOUT_MS", "10000".into()),
        ("CLINIC_SQS_OPERATION_TIMEOUT_MS", "20000".into()),
        ("RUST_LOG", crate::settings::current().rust_log.clone().unwrap_or_else(|| "warn".into())),
        // The credentials and region of `emulator.client()`, which created the queues.
        ("AWS_ACCESS_KEY_ID", "test".into()),
        ("AWS_SECRET_ACCESS_KEY", "test".into()),
        ("AWS_REGION", "us-east-1".into()),
    ] {
        env.push((key.into(), value));
    }
    let purger = keep_queues_short(client.clone(), &queues);
    let owner = db.owner().await?;
    let workspace = seed(&owner, 1, 1).await?.workspace_id;
    let period = options.tick_period();
    let ticks = options.lambda_ticks();
    let rate = options.lambda_rate;
    let mut results = Vec::new();
    for schedule in [OVERLAP, SINGLE] {
        eprintln!(
            "bench: lambda-window: {} (period {period:?}, {ticks} ticks, {rate} writes/s)",
            schedule.name
        );
        let measured = measure(db, &binary, &env, schedule, period, ticks, rate, workspace).await?;
        results.push((schedule, measured));
    }
    purger.abort();
    let mut baseline = results.pop().context("no baseline run")?.1;
    let (schedule, mut measured) = results.pop().context("no overlap run")?;
    let (p50, p99, max) = (
        measured.samples.quantile_ms(0.5),
        measured.samples.quantile_ms(0.99),
        measured.samples.quantile_ms(1.0),
    );
    let met = matches!((p99, max), (Some(p99), Some(max)) if p99 <= P99_TARGET_MS && max <= MAX_TARGET_MS);
    let tally = &measured.tally;
    report.push(Row {
        measure: format!(
            "5. Lambda (simulated schedule): the dispatcher Lambda binary under a local Runtime API, ticks every {}s \
             ({ticks} + 1), {}: window {}s, SQS transport (emulator); {} events committed at {rate}/s across every \
             boundary; commit → start (dispatched after SQS accepted); {} invocations, {} cold starts, {} ticks dropped, {} failed",
            period.as_secs(),
            schedule.name,
            measured.window_secs,
            measured.samples.len(),
            tally.delivered,
            tally.cold_starts,
            tally.dropped,
            tally.errors
        ),
        figure: format!(
            "p50 {} · p99 {} · max {} (worst at {:.1}s after a tick)",
            ms(p50),
            ms(p99),
            ms(max),
            measured.worst_phase_secs
        ),
        baseline: format!(
            "{} (window {}s): p50 {} · p99 {} · max {} (worst at {:.1}s after a tick)",
            SINGLE.name,
            baseline.window_secs,
            ms(baseline.samples.quantile_ms(0.5)),
            ms(baseline.samples.quantile_ms(0.99)),
            ms(baseline.samples.quantile_ms(1.0)),
            baseline.worst_phase_secs
        ),
        ratio: "—".into(),
        target: "p99 ≤ 1 s, max ≤ 2 s".into(),
        met: Some(met),
    });
    drop(emulator);
    Ok(())
}

/// What the section runs, found (or built) before any section of the run starts, so `bench all` never
/// stops at this section after the earlier ones ran: the dispatcher binary ([`dispatcher_binary`]) and
/// an SQS emulator (`CLINIC_TEST_SQS_ENDPOINT`, or `moto_server` on PATH).
pub fn prerequisites() -> anyhow::Result<()> {
    dispatcher_binary()?;
    // The emulator's endpoint when set; else whether a `moto_server` can start (asked only then).
    let emulator = clinic_testkit::test_env::var("CLINIC_TEST_SQS_ENDPOINT").is_some()
        || std::process::Command::new("moto_server")
            .arg("--help")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success());
    anyhow::ensure!(
        emulator,
        "the lambda-window section needs an SQS emulator: install moto_server (pip install 'moto[server]') \
         or set CLINIC_TEST_SQS_ENDPOINT"
    );
    Ok(())
}

/// `CLINIC_BENCH_DISPATCHER_BIN`, else `clinic-dispatcher` beside this binary (same profile and
/// target folder), built there first when missing and this binary was built from the workspace.
fn dispatcher_binary() -> anyhow::Result<PathBuf> {
    if let Some(path) = &crate::settings::current().dispatcher_bin {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe().context("locating the clinic-drill binary")?;
    let beside = exe.with_file_name("clinic-dispatcher");
    if !beside.exists() {
        build_dispatcher(&exe)?;
    }
    Ok(beside)
}

/// `cargo build [--release] -p clinic-dispatcher` into the target folder `exe` runs from; on failure
/// the error says the one command to run first.
fn build_dispatcher(exe: &std::path::Path) -> anyhow::Result<()> {
    let release = !cfg!(debug_assertions);
    let command = format!("cargo build{} -p clinic-dispatcher", if release { " --release" } else { "" });
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.toml");
    // Only into a cargo target folder (it holds `CACHEDIR.TAG`): a copied binary builds nothing.
    let target_dir =
        exe.parent().and_then(|profile| profile.parent()).filter(|dir| dir.join("CACHEDIR.TAG").exists());
    let (true, Some(target_dir)) = (manifest.exists(), target_dir) else {
        anyhow::bail!(
            "{} does not exist: build it first ({command}) or set CLINIC_BENCH_DISPATCHER_BIN",
            exe.with_file_name("clinic-dispatcher").display()
        );
    };
    eprintln!("building the dispatcher Lambda binary the lambda-window section runs: {command}");
    let mut cargo = std::process::Command::new("cargo");
    cargo.args(["build", "-p", "clinic-dispatcher", "--manifest-path"]).arg(&manifest);
    cargo.arg("--target-dir").arg(target_dir);
    if release {
        cargo.arg("--release");
    }
    let status = cargo.status();
    anyhow::ensure!(
        status.as_ref().is_ok_and(|status| status.success()),
        "building clinic-dispatcher failed ({status:?}): run `{command}` first, or set CLINIC_BENCH_DISPATCHER_BIN"
    );
    Ok(())
}

/// The window for `period`: a 60 s schedule's window scaled to whole seconds (at least 1 s), rounded
/// away from the period, so an overlap stays an overlap and a gap stays a gap.
fn scaled_window(schedule: Schedule, period: Duration) -> u64 {
    let scaled = schedule.window_secs as f64 * period.as_secs_f64() / 60.0;
    let rounded = if schedule.window_secs > 60 { scaled.ceil() } else { scaled.floor() };
    (rounded as u64).max(1)
}

#[allow(clippy::too_many_arguments)]
async fn measure(
    db: &TestDb,
    binary: &std::path::Path,
    env: &[(String, String)],
    schedule: Schedule,
    period: Duration,
    ticks: u32,
    rate: u32,
    workspace: WorkspaceId,
) -> anyhow::Result<Measured> {
    let window_secs = scaled_window(schedule, period);
    let mut env = env.to_vec();
    env.push(("CLINIC_DISPATCH_WINDOW_SECS".into(), window_secs.to_string()));
    let timeout = Duration::from_secs(window_secs) + TIMEOUT_BEYOND_WINDOW;
    let mut platform = Platform::new(Function {
        binary: binary.to_path_buf(),
        env,
        timeout,
        reserved: schedule.reserved,
        // template.yaml: MaximumEventAgeInSeconds 60 (one period).
        max_event_age: period,
    });
    let started = Instant::now();
    let writes_from = started + period / 2;
    let writes_until = started + period * ticks;
    let pool = db.app_pool(1)?;
    let writer = tokio::spawn(write(pool, workspace, rate, writes_from, writes_until));
    let mut schedule_ticks = tokio::time::interval_at(started, period);
    schedule_ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let tick_times = Arc::new(std::sync::Mutex::new(Vec::new()));
    for _ in 0..=ticks {
        schedule_ticks.tick().await;
        tick_times.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.push(Utc::now());
        platform.invoke(TICK.to_owned()).await?;
    }
    let commits = writer.await.context("the writer task failed")??;
    let owner = db.owner().await?;
    let ids: Vec<uuid::Uuid> = commits.iter().map(|(id, _)| *id).collect();
    // The schedule keeps ticking until every event is dispatched (at most EXTRA_TICKS more periods).
    let mut extra = 0;
    while undispatched(&owner, &ids).await? > 0 {
        anyhow::ensure!(
            extra < EXTRA_TICKS,
            "{} events still not dispatched {EXTRA_TICKS} ticks after the writes ended",
            undispatched(&owner, &ids).await?
        );
        tokio::select! {
            _ = schedule_ticks.tick() => {
                extra += 1;
                tick_times.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.push(Utc::now());
                platform.invoke(TICK.to_owned()).await?;
            }
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    }
    // The invocations still draining are stopped with the platform (as a frozen environment would be).
    let rows = owner.query(DISPATCHED_AT, &[&ids]).await?;
    let dispatched: std::collections::HashMap<uuid::Uuid, DateTime<Utc>> =
        rows.iter().map(|row| (row.get(0), row.get(1))).collect();
    let tick_times = tick_times.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.clone();
    let mut samples = Samples::with_capacity(commits.len());
    let mut worst = (0i64, 0.0);
    for (id, committed_at) in &commits {
        let at = dispatched.get(id).context("an event has no dispatched_at")?;
        let micros = (*at - *committed_at).num_microseconds().unwrap_or(0).max(0);
        samples.push_micros(micros as u64);
        if micros > worst.0 {
            let tick = tick_times.iter().rev().find(|t| *t <= committed_at).copied().unwrap_or(*committed_at);
            worst = (micros, (*committed_at - tick).num_milliseconds() as f64 / 1000.0);
        }
    }
    Ok(Measured { samples, tally: platform.tally(), window_secs, worst_phase_secs: worst.1 })
}

/// Commits one `appointment.created` event per 1/`rate` s between `from` and `until` (open loop):
/// (event id, the moment COMMIT returned).
async fn write(
    pool: deadpool_postgres::Pool,
    workspace: WorkspaceId,
    rate: u32,
    from: Instant,
    until: Instant,
) -> anyhow::Result<Vec<(uuid::Uuid, DateTime<Utc>)>> {
    let mut client = pool.get().await?;
    let mut every = tokio::time::interval_at(from, Duration::from_secs_f64(1.0 / f64::from(rate.max(1))));
    every.set_missed_tick_behavior(MissedTickBehavior::Burst);
    let mut commits = Vec::new();
    loop {
        every.tick().await;
        if Instant::now() >= until {
            break;
        }
        let cause = Cause {
            actor: Actor::System,
            correlation_id: CorrelationId::generate(),
            causation_id: CausationId(ulid::Ulid::generate()),
            idempotency_key: None,
            trace: None,
        };
        let tx = client.transaction().await?;
        let envelope = append(
            &tx,
            &cause,
            NewEvent {
                event_type: EventType::AppointmentCreated,
                workspace_id: workspace,
                resource_id: ulid::Ulid::generate(),
                resource_version: 1,
                occurred_at: Utc::now(),
                also_links: Vec::new(),
                changed_fields: None,
            },
        )
        .await?;
        tx.commit().await?;
        commits.push((uuid::Uuid::from(envelope.id.ulid()), Utc::now()));
    }
    Ok(commits)
}

const DISPATCHED_AT: &str =
    "SELECT event_id, dispatched_at FROM event_outbox WHERE event_id = ANY($1) AND dispatched_at IS NOT NULL";

const UNDISPATCHED: &str =
    "SELECT count(*) FROM event_outbox WHERE event_id = ANY($1) AND status <> 'dispatched'";

/// Events of `ids` not yet dispatched.
async fn undispatched(owner: &tokio_postgres::Client, ids: &[uuid::Uuid]) -> anyhow::Result<i64> {
    Ok(owner.query_one(UNDISPATCHED, &[&ids]).await?.get(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_scale_with_the_period() {
        assert_eq!(scaled_window(OVERLAP, Duration::from_secs(60)), 70);
        assert_eq!(scaled_window(SINGLE, Duration::from_secs(60)), 50);
        // Compressed: the overlap survives, and the old schedule keeps its gap.
        assert_eq!(scaled_window(OVERLAP, Duration::from_secs(3)), 4);
        assert_eq!(scaled_window(SINGLE, Duration::from_secs(3)), 2);
        assert!(scaled_window(OVERLAP, Duration::from_secs(6)) > 6);
        assert!(scaled_window(SINGLE, Duration::from_secs(6)) < 6);
    }
}
