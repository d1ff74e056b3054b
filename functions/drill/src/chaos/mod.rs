//! `clinic chaos`: the fault-injection run. Concurrent HTTP writers call the real API for a fixed time
//! while the faults below are injected; afterwards every invariant of the pipeline is checked and the
//! figures are printed. Exits non-zero when any check fails. docs/chaos.md has the modes and figures.
//!
//! Everything runs on private infrastructure that the run starts and removes: a PostgreSQL cluster
//! under a temporary folder on a free port (never the machine's shared server), the API in this
//! process (the real router on 127.0.0.1, connected as `clinic_app` with a `lock_timeout`), the
//! dispatcher as a child process (`clinic dispatch-loop`, hidden, [`dispatcher`]) so it can be killed
//! for real, and with `--transport sqs` (the default) a private SQS emulator (its own `moto_server`) with one queue per
//! listener, reached through a TCP proxy in this process ([`proxy`]), and the listener side: consumers
//! that run each received batch concurrently through the listener Lambda's own handler, with a
//! visibility timeout longer than a batch can take ([`sqs`], `clinic::sqs_consumer`). With
//! `--transport local` the dispatcher runs the listeners itself.
//!
//! Faults ([`faults`] and one file per message fault):
//! - (a) the dispatcher child is killed with SIGKILL at random moments (every 1–5 s) and restarted
//!   after a random pause; its claims are taken over when their lease (30 s, as deployed) expires;
//! - (b) PostgreSQL is stopped (fast shutdown: sessions are cut) once, at 40 % of the run, kept down
//!   for `--pg-down-secs` and started again; the API answers 503 problem documents meanwhile and the
//!   writers retry with the same `Idempotency-Key`;
//! - (c) `--transport sqs`: the SQS endpoint becomes unreachable at 65 % of the run for 10 × the
//!   dispatcher's retry budget ([`args::RetryBudget`]) — the proxy closes new connections at once and cuts open
//!   ones, for the dispatcher and the consumers alike; no row may die of it;
//! - (d) one listener fails permanently for one planted event ([`dispatcher::ChaosNotifier`]): locally
//!   that outbox row must end `dead`; over SQS the start succeeds and exactly that message is
//!   dead-lettered;
//! - (e) [`forgery`]: forged and altered messages injected into the listener queues at 55 % (locally:
//!   run in-process); every one must be rejected with its reason code and none may act;
//! - (f) [`lost`]: `--transport sqs`: messages deleted from a listener queue after the dispatcher sent
//!   them, at 30 %; the custody reconciler must start them again, with exactly one effect each;
//! - (g) [`lock`]: at 15 %, a listener blocked on a row lock past its `lock_timeout`; that message alone
//!   is retried, and takes effect once the lock is gone.
//!
//! Checks ([`checks`], [`fault_checks`]), after the pipeline settled ([`settle`]: waits on progress,
//! with a generous overall bound):
//! 1. every 2xx mutation has exactly one event (type, resource, version), its links (3 for appointment
//!    events, 1 otherwise) and one outbox row, and there is no event no 2xx answer accounts for (so a
//!    forged deletion that cancelled anything fails here);
//! 2. every event reached every listener: `listener_receipts` = the listener map, minus the planted one;
//! 3. no duplicate notifications (one per event and listener at most, one per receipt of a notifier);
//! 4. no row left `claimed` past its lease, nothing left pending or in retry;
//! 5. `dead` rows: exactly the planted event (local); no dead rows and exactly the planted message
//!    dead-lettered (SQS);
//! 6. no 5xx except 503 problem documents while PostgreSQL was down (plus a short grace while pooled
//!    connections are replaced), and every request that saw a 503 succeeded exactly once on retry;
//! 7. no unexpected 4xx answers;
//! 8. every forged or altered message rejected with its reason (none acted: 1–3 would show it);
//! 9. the SQS outage lasted at least 10 × the retry budget (and 5 found no dead row);
//! 10. every message lost after sending restarted by the reconciler, with exactly one effect;
//! 11. the message blocked past `lock_timeout` retried alone, then took effect once.

mod args;
mod checks;
mod dispatcher;
mod drive;
mod fault_checks;
mod faults;
mod figures;
mod forgery;
mod lock;
mod lost;
mod proxy;
mod rng;
mod settle;
mod setup;
mod sqs;
mod writers;

use anyhow::{anyhow, Context};
use clinic_core::listeners::Listener;
use clinic_core::telemetry::{self, LogFormat};

pub use args::ChaosArgs;
pub use dispatcher::{dispatch_loop, FAIL_EVENT_VAR, FAIL_LISTENER_VAR, TRANSPORT_VAR};

/// The listener that fails permanently for the planted event.
const PLANTED_LISTENER: Listener = Listener::PatientBookingConfirmation;

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

/// The process environment `chaos` runs with, set by `main` before it captures the environment (the
/// dispatcher child inherits it).
pub fn prepare_environment() {
    let unset = |name: &str| std::env::var_os(name).is_none_or(|value| value.is_empty());
    if unset("RUST_LOG") {
        // The API logs every request and every 503 of the outage; the run prints its own figures
        // (set RUST_LOG to see the logs).
        std::env::set_var("RUST_LOG", "off");
    }
    if unset("CLINIC_METRICS") {
        // The in-process listeners' EMF lines (a `Rejected` per forged message) would interleave
        // with the figures; the figures count the same things.
        std::env::set_var("CLINIC_METRICS", "off");
    }
    // The emulator takes any credentials; the dispatcher child inherits these.
    for (name, value) in
        [("AWS_ACCESS_KEY_ID", "test"), ("AWS_SECRET_ACCESS_KEY", "test"), ("AWS_REGION", "us-east-1")]
    {
        if unset(name) {
            std::env::set_var(name, value);
        }
    }
}

pub async fn run(args: ChaosArgs) -> anyhow::Result<()> {
    telemetry::init(LogFormat::Text, &crate::settings::current().telemetry);
    let duration = args.duration();
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
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let mut cluster = Some(faults::start_cluster(dir.join("pgdata"), port).await?);
    // Ctrl-C (or SIGTERM) ends the run early but still stops the children and the cluster.
    let outcome = tokio::select! {
        outcome = drive::drive(&args, seed, &dir, port, &mut cluster) => outcome,
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
