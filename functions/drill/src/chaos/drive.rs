//! The run proper: the timeline of writers and faults, the wait for the pipeline to settle, the
//! checks and the figures.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::anyhow;
use clinic_core::db::{connect_pool, connect_single};
use clinic_core::events::EventType;
use clinic_core::listeners::Listener;
use tokio::sync::watch;

use super::args::{ChaosArgs, BACKOFF_BASE, BACKOFF_CAP};
use super::dispatcher::{DispatcherChild, FAIL_EVENT_VAR, FAIL_LISTENER_VAR, TRANSPORT_VAR};
use super::fault_checks::{FaultLog, LockLog};
use super::rng::Rng;
use super::sqs::{Counter, Sqs};
use super::writers::{writer, Mutation};
use super::{faults, figures, forgery, lock, lost, settle, setup, PLANTED_LISTENER};
use clinic::local_pg::LocalPostgres;

/// The moment `fraction` of the way through the writing time.
fn at(started: Instant, duration: Duration, fraction: f64) -> Instant {
    started + duration.mul_f64(fraction)
}

async fn sleep_until(when: Instant) {
    tokio::time::sleep_until(tokio::time::Instant::from_std(when)).await;
}

/// A connection of the run's own (the checker), retried while PostgreSQL restarts.
async fn connect_patiently(url: &str) -> anyhow::Result<tokio_postgres::Client> {
    let until = Instant::now() + Duration::from_secs(120);
    loop {
        match connect_single(url, None, None).await {
            Ok(client) => return Ok(client),
            Err(error) if Instant::now() >= until => return Err(error.into()),
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

/// The run. `cluster` holds the running cluster (taken while it is restarted) for the caller to stop,
/// whatever happens here.
pub async fn drive(
    args: &ChaosArgs,
    seed: u64,
    dir: &Path,
    port: u16,
    cluster: &mut Option<LocalPostgres>,
) -> anyhow::Result<()> {
    let duration = args.duration();
    let url = cluster.as_ref().ok_or_else(|| anyhow!("no cluster"))?.url();
    let mut rng = Rng::new(seed);
    let setup = setup::set_up(&url, args.lock_timeout_ms, &mut rng).await?;
    let run = setup.run.clone();
    let planted_event_id = setup.planted_event.to_string();
    // The SQS outage must outlast the dispatcher's whole retry budget; locally rows are retried as
    // before (no SQS fault, and PostgreSQL restarts fail local listener runs).
    let max_attempts = if args.sqs() { args.max_attempts } else { 1000 };
    let mut dispatcher = DispatcherChild {
        program: std::env::current_exe()?,
        env: vec![
            ("DATABASE_URL".into(), setup.app_url.clone()),
            // The deployed lease (30 s) and SQS calls that wait for the emulator up to 25 s: moto
            // keeps working on a call its client gave up on, so every timed-out call it is resent
            // adds load, and the load makes calls time out — on a busy machine a short lease or
            // short call timeouts turned that into a spiral that froze the emulator. The outage is
            // still seen at once (the cut proxy closes connections), and a killed dispatcher's
            // claims are still taken over, 30 s later.
            ("CLINIC_SQS_OPERATION_TIMEOUT_MS".into(), "25000".into()),
            ("CLINIC_SQS_ATTEMPT_TIMEOUT_MS".into(), "20000".into()),
            ("CLINIC_SQS_CONNECT_TIMEOUT_MS".into(), "10000".into()),
            ("CLINIC_DISPATCH_BACKOFF_BASE_MS".into(), BACKOFF_BASE.as_millis().to_string()),
            ("CLINIC_DISPATCH_BACKOFF_CAP_MS".into(), BACKOFF_CAP.as_millis().to_string()),
            ("CLINIC_DISPATCH_MAX_ATTEMPTS".into(), max_attempts.to_string()),
            ("CLINIC_DISPATCH_POLL_MS".into(), "200".into()),
            ("CLINIC_DISPATCH_BATCH".into(), "50".into()),
            ("CLINIC_CUSTODY_DUE_SECS".into(), args.custody_due_secs.to_string()),
            // Probe a cut SQS endpoint at least every 2 s, so the run resumes soon after it is back.
            ("CLINIC_DISPATCH_PROBE_MAX_MS".into(), "2000".into()),
            (FAIL_EVENT_VAR.into(), planted_event_id.clone()),
            (FAIL_LISTENER_VAR.into(), PLANTED_LISTENER.as_str().into()),
            ("RUST_LOG".into(), "warn,clinic::outbox=info".into()),
        ],
        log: dir.join("dispatcher.log"),
        child: None,
        starts: 0,
    };
    let sqs = if args.sqs() {
        let pool = connect_pool(&setup.app_url, 16, None)?;
        let sqs = Sqs::start(pool, (setup.planted_event, PLANTED_LISTENER)).await?;
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

    let started = Instant::now();
    let deadline = started + duration;
    let writers: Vec<_> = (0..args.writers)
        .map(|index| tokio::spawn(writer(run.clone(), index, seed, deadline, args.pace())))
        .collect();
    let (faults_done, faults_stop) = watch::channel(false);
    let killer = faults::kill_dispatcher_repeatedly(dispatcher, seed, faults_stop);
    let mut log = FaultLog { retry_budget: args.retry_budget().total(), ..FaultLog::default() };

    // The lock fault at 15 %: a message blocked past lock_timeout.
    let lock_task = {
        let (url, counter) = (url.clone(), sqs.as_ref().map(Sqs::counter));
        let (workspace, patient, practitioner) =
            (setup.workspace, setup.planted_patient, setup.planted_practitioner);
        let lock_timeout = Duration::from_millis(args.lock_timeout_ms);
        let when = at(started, duration, 0.15);
        tokio::spawn(async move {
            sleep_until(when).await;
            let held = lock::take(&url, workspace, patient, practitioner).await?;
            let event = held.event.clone();
            println!(
                "  t={:>5.1}s holding the receipt lock of event {}",
                started.elapsed().as_secs_f64(),
                event.id
            );
            let checker = connect_patiently(&url).await?;
            let id = event.id;
            let blocked = || {
                let (counter, checker) = (counter.clone(), &checker);
                async move { lock_timed_out(counter.as_deref(), checker, id).await }
            };
            let (held, seen) = held.release_after(lock_timeout * 3, Duration::from_secs(90), blocked).await;
            println!(
                "  t={:>5.1}s released the lock after {:.1} s",
                started.elapsed().as_secs_f64(),
                held.as_secs_f64()
            );
            anyhow::Ok((event, held, seen))
        })
    };
    // Messages deleted from a queue after sending, at 30 %.
    let steal_task = sqs.as_ref().filter(|_| args.lost > 0).map(|sqs| {
        let (client, queues, count) = (sqs.client.clone(), sqs.queues.clone(), args.lost);
        let when = at(started, duration, 0.30);
        tokio::spawn(async move {
            sleep_until(when).await;
            let stolen = lost::steal(&client, &queues, count, Duration::from_secs(30)).await;
            println!(
                "  t={:>5.1}s deleted {} sent messages from {}",
                started.elapsed().as_secs_f64(),
                stolen.len(),
                lost::VICTIM_LISTENER
            );
            stolen
        })
    });
    // Forged and altered messages at 55 %. The SQS outage waits for them: on a busy machine the
    // injection can run late, and a send cut by the outage would fail the run for the machine's load.
    let (forged, forged_done) = tokio::sync::oneshot::channel::<()>();
    let forge_task = {
        let (url, pool, count) = (url.clone(), setup.pool.clone(), args.forged);
        let target = sqs.as_ref().map(|sqs| (sqs.client.clone(), sqs.queues.clone()));
        let when = at(started, duration, 0.55);
        tokio::spawn(async move {
            sleep_until(when).await;
            let checker = connect_patiently(&url).await?;
            let result = match target {
                Some((client, queues)) => (
                    forgery::inject_into_queues(&checker, &client, &queues, count).await?,
                    Default::default(),
                ),
                None => forgery::run_in_process(&checker, &pool, count).await?,
            };
            let _ = forged.send(());
            println!(
                "  t={:>5.1}s injected {count} forged or altered messages",
                started.elapsed().as_secs_f64()
            );
            anyhow::Ok(result)
        })
    };
    // The SQS outage at 65 %, 10 × the retry budget by default.
    let sqs_outage = sqs.as_ref().map(|sqs| {
        log.sqs_down = Some(args.sqs_down());
        faults::cut_sqs(sqs.proxy.clone(), at(started, duration, 0.65), forged_done, args.sqs_down(), started)
    });
    // PostgreSQL restarted at 40 %.
    let pg = faults::restart_postgres(
        cluster,
        dir.join("pgdata"),
        port,
        at(started, duration, 0.4),
        Duration::from_secs(args.pg_down_secs),
        started,
    )
    .await?;

    for writer in writers {
        writer.await?;
    }
    if let Some(outage) = sqs_outage {
        outage.await?;
    }
    let (lock_event, lock_held, lock_seen) = lock_task.await??;
    run.tally().mutations.push(Mutation {
        event_type: EventType::AppointmentCreated,
        resource_id: lock_event.resource_id.to_string(),
        version: i64::from(lock_event.resource_version),
        saw_unavailable: false,
    });
    if let Some(task) = steal_task {
        log.stolen = task.await?;
    }
    let (forged_sent, forged_rejected) = forge_task.await??;
    log.forged_sent = forged_sent;
    log.forged_rejected = forged_rejected;
    let writes_took = started.elapsed();
    let _ = faults_done.send(true);
    let (mut dispatcher, kills) = killer.await?;
    dispatcher.ensure_running().await?;
    println!(
        "  t={:>5.1}s writers done; {kills} dispatcher kills; settling",
        started.elapsed().as_secs_f64()
    );

    let checker = connect_patiently(&url).await?;
    let settled = settle::wait(
        &checker,
        sqs.as_ref(),
        1,
        Duration::from_secs(args.settle_bound_secs),
        Duration::from_secs(args.stall_secs),
        started,
        &mut dispatcher,
    )
    .await?;
    if !settled.settled {
        println!(
            "  t={:>5.1}s not settled after {:.1} s ({}): {:?}",
            started.elapsed().as_secs_f64(),
            settled.took.as_secs_f64(),
            if settled.stalled { "no progress" } else { "overall bound" },
            settled.last
        );
    }
    dispatcher.kill().await;
    setup.server.abort();
    let consumed = match sqs {
        Some(sqs) => Some(sqs.stop().await),
        None => None,
    };
    log.lock = Some(lock_log(consumed.as_ref(), &lock_event, lock_held, lock_seen));
    if let Some(consumed) = &consumed {
        log.forged_rejected = consumed.rejected.clone();
    }
    let tally = std::mem::take(&mut *run.tally());
    let open = settled.last.open_rows;
    let mut report =
        super::checks::check(&checker, &tally, &planted_event_id, pg, open, consumed.as_ref()).await?;
    super::fault_checks::check(&checker, &mut log, &mut report).await?;
    figures::print(&figures::Figures {
        seed,
        writers: args.writers,
        writes_took,
        settle_took: settled.took,
        kills,
        dispatcher_starts: dispatcher.starts,
        pg_downtime: pg.downtime(),
        consumed: consumed.as_ref(),
        faults: &log,
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

/// Whether the blocked listener has hit its lock timeout yet (SQS: a `db_lock_timeout` delivery of
/// the event; local: the outbox row retried with that code).
async fn lock_timed_out(
    counter: Option<&Counter>,
    checker: &tokio_postgres::Client,
    event: clinic_core::ids::EventId,
) -> bool {
    match counter {
        Some(counter) => counter.snapshot().lock_timeouts.contains_key(&event.to_string()),
        None => checker
            .query_opt(
                "SELECT 1 FROM event_outbox WHERE event_id = $1 AND last_error_code = 'db_lock_timeout'",
                &[&event],
            )
            .await
            .is_ok_and(|row| row.is_some()),
    }
}

fn lock_log(
    consumed: Option<&super::sqs::Consumed>,
    event: &clinic_core::events::Envelope,
    held: Duration,
    seen: bool,
) -> LockLog {
    let event_id = event.id.to_string();
    let (victim_timeouts, other_timeouts) = match consumed {
        Some(consumed) => {
            let victim = consumed.lock_timeouts.get(&event_id).copied().unwrap_or_default();
            (victim, consumed.lock_timeouts.values().sum::<u64>() - victim)
        }
        // Locally the run saw the outbox row retried with `db_lock_timeout` while it held the lock.
        None => (u64::from(seen), 0),
    };
    LockLog { event_id, held, victim_timeouts, other_timeouts }
}
