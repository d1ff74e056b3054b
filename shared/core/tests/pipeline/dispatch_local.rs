//! The dispatcher with the local transport against real PostgreSQL: end to end, crash recovery,
//! retries, partial failures, fencing, racing dispatchers and the drain loop.
//!
//! Over the 500-line guideline: sixteen cases of one subject (the local-transport dispatcher) sharing
//! its seeding and waiting helpers.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::{drain, fast_config, step, Fixture};
use async_trait::async_trait;
use clinic_core::delivery as notifications;
use clinic_core::dispatch::testing::FailingTransport;
use clinic_core::dispatch::{LocalTransport, Start, StartError, StartResult, StepOutcome, Transport};
use clinic_core::listeners::Listener;
use clinic_core::outbox;

const PENDING_OR_LIVE: &str =
    "SELECT count(*) FROM event_outbox WHERE status IN ('pending', 'claimed', 'retry')";

#[tokio::test]
async fn booking_is_dispatched_to_both_listeners_and_recorded_as_notifications() {
    let fx = Fixture::new().await;
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    let (appointment, created) = fx.book(patient, practitioner, 24).await;

    let dispatcher = fx.dispatcher(fx.local(), fast_config());
    let report = drain(&dispatcher).await;
    // patient.created, practitioner.created (no listeners) and appointment.created (two).
    assert_eq!(report.totals.dispatched, 3);
    assert_eq!(report.totals.started, 2);
    assert_eq!(fx.count(PENDING_OR_LIVE).await, 0);
    assert_eq!(fx.outbox(&created).await.status, "dispatched");
    assert_eq!(fx.count("SELECT count(*) FROM listener_receipts").await, 2);
    // A fully successful event needs no listener_starts rows.
    assert_eq!(fx.count("SELECT count(*) FROM listener_starts").await, 0);

    let client = fx.db.client().await;
    let items = notifications::list(&client, fx.workspace, None, 10).await.unwrap();
    assert_eq!(items.len(), 2);
    let mut templates: Vec<(&str, &str, &str)> =
        items.iter().map(|n| (n.listener.as_str(), n.recipient_kind.as_str(), n.template.as_str())).collect();
    templates.sort();
    assert_eq!(
        templates,
        [
            ("patient_booking_confirmation", "patient", "appointment.booking_confirmation"),
            ("practitioner_schedule_change", "practitioner", "appointment.schedule_change.booked"),
        ]
    );
    for item in &items {
        assert_eq!(item.event_id, created.id);
        // Committed for the sender (issue 15): the channel is chosen from contact data at send time.
        assert_eq!(item.channel, "auto");
        assert_eq!(item.status, "pending");
    }
    let json = serde_json::to_value(&items[0]).unwrap();
    for key in [
        "id",
        "eventId",
        "listener",
        "recipientKind",
        "recipientId",
        "template",
        "channel",
        "status",
        "createdAt",
    ] {
        assert!(json.get(key).is_some(), "missing {key} in {json}");
    }
    // Ids and templates only: no names or contact details in the delivery log.
    let dump: String = client
        .query_one("SELECT coalesce(string_agg(n::text, ' '), '') FROM notifications n", &[])
        .await
        .unwrap()
        .get(0);
    assert!(!dump.contains("Ada") && !dump.contains("Lovelace") && !dump.contains("example.org"));
    // Keyset paging.
    let older = notifications::list(&client, fx.workspace, Some(items[0].id), 10).await.unwrap();
    assert_eq!(older.len(), 1);
    assert_eq!(older[0].id, items[1].id);
    let _ = appointment;
    assert_eq!(dispatcher.step().await.unwrap(), StepOutcome::Idle);
}

/// Runs the inner transport, signals, then never returns: the dispatcher "crashes" between start
/// and mark.
struct HangAfterStart(Arc<dyn Transport>, Arc<tokio::sync::Notify>);

#[async_trait]
impl Transport for HangAfterStart {
    fn name(&self) -> &'static str {
        "hang-after-start"
    }
    async fn start(&self, starts: &[Start<'_>]) -> Vec<StartResult> {
        let _ = self.0.start(starts).await;
        self.1.notify_one();
        std::future::pending().await
    }
}

#[tokio::test]
async fn crash_after_start_before_mark_is_reclaimed_after_the_lease_with_one_notification() {
    let fx = Fixture::new().await;
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    let (_, created) = fx.book(patient, practitioner, 24).await;

    let mut config = fast_config();
    config.lease = Duration::from_secs(1);
    let started = Arc::new(tokio::sync::Notify::new());
    let doomed = fx.dispatcher(Arc::new(HangAfterStart(fx.local(), started.clone())), config);
    tokio::select! {
        _ = doomed.step() => panic!("the step should hang after starting"),
        _ = started.notified() => {}
    }
    // The step future is dropped here, between start and mark: the crash.
    drop(doomed);
    let row = fx.outbox(&created).await;
    assert_eq!((row.status.as_str(), row.attempts), ("claimed", 1));
    assert_eq!(fx.count("SELECT count(*) FROM notifications").await, 2);

    // Within the lease nobody may take it.
    let survivor = fx.dispatcher(fx.local(), config);
    assert_eq!(survivor.step().await.unwrap(), StepOutcome::Idle);

    tokio::time::sleep(config.lease).await;
    let report = step(&survivor).await;
    assert_eq!(report.lease_expired, 3);
    assert_eq!(report.dispatched, 3);
    let row = fx.outbox(&created).await;
    assert_eq!((row.status.as_str(), row.attempts), ("dispatched", 2));
    // The second start was a duplicate delivery: absorbed by the receipts.
    assert_eq!(fx.count("SELECT count(*) FROM notifications").await, 2);
    assert_eq!(fx.count("SELECT count(*) FROM listener_receipts").await, 2);
}

#[tokio::test]
async fn failing_transport_retries_with_growing_delays_then_goes_dead_keeping_the_error() {
    let fx = Fixture::new().await;
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    let (_, created) = fx.book(patient, practitioner, 24).await;
    let config = fast_config();
    let failing =
        Arc::new(FailingTransport::always(StartError::retryable("provider_down", "provider answered 503")));
    let dispatcher = fx.dispatcher(failing.clone(), config);

    let mut delays = Vec::new();
    for attempt in 1..=config.max_attempts {
        let report = loop {
            match dispatcher.step().await.unwrap() {
                StepOutcome::Dispatched(report) if report.failed_starts > 0 => break report,
                StepOutcome::Dispatched(_) => continue, // the events without listeners
                StepOutcome::Idle => tokio::time::sleep(Duration::from_millis(5)).await,
            }
        };
        let row = fx.outbox(&created).await;
        assert_eq!(row.attempts, attempt);
        assert_eq!(row.last_error_code.as_deref(), Some("provider_down"));
        if attempt < config.max_attempts {
            assert_eq!((report.retried, row.status.as_str()), (1, "retry"));
            let nominal = config.backoff.nominal(attempt).as_secs_f64() * 1000.0;
            assert!(row.delay_ms >= nominal / 2.0 - 1.0 && row.delay_ms <= nominal + 1.0, "{row:?}");
            delays.push(row.delay_ms);
        } else {
            assert_eq!((report.dead, row.status.as_str()), (1, "dead"));
            let error = row.last_error.unwrap();
            assert!(error.contains("provider answered 503"), "{error}");
            assert!(error.contains("patient_booking_confirmation"), "{error}");
        }
    }
    assert!(delays.windows(2).all(|pair| pair[1] >= pair[0]), "{delays:?}");
    assert_eq!(failing.requested(), 2 * config.max_attempts as usize);
    // Dead rows are never claimed again.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(dispatcher.step().await.unwrap(), StepOutcome::Idle);
}

#[tokio::test]
async fn a_permanent_start_error_buries_the_row_at_once() {
    let fx = Fixture::new().await;
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    let (_, created) = fx.book(patient, practitioner, 24).await;
    let failing = FailingTransport::always(StartError::permanent("listener_not_routed", "no"));
    let dispatcher = fx.dispatcher(Arc::new(failing), fast_config());
    let report = drain(&dispatcher).await;
    assert_eq!(report.totals.dead, 1);
    let row = fx.outbox(&created).await;
    assert_eq!((row.status.as_str(), row.attempts), ("dead", 1));
    assert_eq!(row.last_error_code.as_deref(), Some("listener_not_routed"));
}

/// Records which listeners it was asked to start, then delegates.
struct Recording(Arc<dyn Transport>, Mutex<Vec<Listener>>);

#[async_trait]
impl Transport for Recording {
    fn name(&self) -> &'static str {
        "recording"
    }
    async fn start(&self, starts: &[Start<'_>]) -> Vec<StartResult> {
        self.1.lock().unwrap().extend(starts.iter().map(|s| s.listener));
        self.0.start(starts).await
    }
}

#[tokio::test]
async fn a_partial_failure_retries_only_the_failed_listeners() {
    let fx = Fixture::new().await;
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    let (_, created) = fx.book(patient, practitioner, 24).await;
    let config = fast_config();
    let half = FailingTransport::only(
        vec![Listener::PractitionerScheduleChange],
        StartError::retryable("queue_throttled", "throttled"),
        fx.local(),
    );
    let report = step(&fx.dispatcher(Arc::new(half), config)).await;
    assert_eq!((report.retried, report.started, report.failed_starts), (1, 1, 1));
    let started: Vec<String> = fx
        .db
        .client()
        .await
        .query("SELECT listener FROM listener_starts WHERE event_id = $1", &[&created.id])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(started, ["patient_booking_confirmation"]);
    assert_eq!(fx.count("SELECT count(*) FROM notifications").await, 1);

    tokio::time::sleep(config.backoff.nominal(1)).await;
    let recording = Arc::new(Recording(fx.local(), Mutex::new(Vec::new())));
    let report = drain(&fx.dispatcher(recording.clone(), config)).await;
    assert_eq!(report.totals.dispatched, 1);
    assert_eq!(*recording.1.lock().unwrap(), [Listener::PractitionerScheduleChange]);
    assert_eq!(fx.outbox(&created).await.status, "dispatched");
    assert_eq!(fx.count("SELECT count(*) FROM notifications").await, 2);
}

#[tokio::test]
async fn a_fenced_mark_after_takeover_changes_nothing() {
    let fx = Fixture::new().await;
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    let (_, created) = fx.book(patient, practitioner, 24).await;
    let client = fx.db.client().await;
    let lease = Duration::from_millis(50);

    let first = outbox::claim(&client, 100, lease, "a").await.unwrap();
    assert_eq!(first.rows.len(), 3);
    tokio::time::sleep(lease + Duration::from_millis(20)).await;
    let second = outbox::claim(&client, 100, Duration::from_secs(30), "b").await.unwrap();
    assert_eq!(second.rows.len(), 3);
    assert!(second.rows.iter().all(|row| row.lease_expired && row.attempts == 2));

    let ids: Vec<_> = first.rows.iter().map(|row| row.envelope.id).collect();
    assert!(outbox::mark_dispatched(&client, first.token, &ids).await.unwrap().is_empty());
    let failure = outbox::FailureMark {
        event_id: created.id,
        next: outbox::Failure::Dead,
        code: "late".into(),
        message: "late".into(),
    };
    assert!(outbox::mark_failed(&client, first.token, &[failure]).await.unwrap().is_empty());
    let row = fx.outbox(&created).await;
    assert_eq!((row.status.as_str(), row.attempts, row.last_error_code), ("claimed", 2, None));
    let owner: String = client
        .query_one("SELECT claimed_by FROM event_outbox WHERE event_id = $1", &[&created.id])
        .await
        .unwrap()
        .get(0);
    assert_eq!(owner, "b");

    assert_eq!(outbox::mark_dispatched(&client, second.token, &ids).await.unwrap().len(), 3);
    assert_eq!(fx.outbox(&created).await.status, "dispatched");
}

/// Signals that the start began, holds it until released, then succeeds without doing anything.
struct Gate(tokio::sync::Semaphore, tokio::sync::Notify);

#[async_trait]
impl Transport for Gate {
    fn name(&self) -> &'static str {
        "gate"
    }
    async fn start(&self, starts: &[Start<'_>]) -> Vec<StartResult> {
        self.1.notify_one();
        let _permit = self.0.acquire().await;
        starts.iter().map(|_| Ok(None)).collect()
    }
}

#[tokio::test]
async fn a_dispatcher_whose_lease_was_taken_over_reports_fenced() {
    let fx = Fixture::new().await;
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    let (_, created) = fx.book(patient, practitioner, 24).await;
    let mut config = fast_config();
    config.lease = Duration::from_millis(80);
    let gate = Arc::new(Gate(tokio::sync::Semaphore::new(0), tokio::sync::Notify::new()));
    let slow = fx.dispatcher(gate.clone(), config);
    let slow_step = tokio::spawn(async move { slow.step().await });
    gate.1.notified().await; // claimed, now starting
    tokio::time::sleep(config.lease + Duration::from_millis(40)).await;

    let fast = fx.dispatcher(fx.local(), config);
    let taken = step(&fast).await;
    assert_eq!((taken.lease_expired, taken.dispatched), (3, 3));
    gate.0.add_permits(1);
    let StepOutcome::Dispatched(late) = slow_step.await.unwrap().unwrap() else { panic!("idle") };
    assert_eq!((late.fenced, late.dispatched), (3, 0));
    let row = fx.outbox(&created).await;
    assert_eq!((row.status.as_str(), row.attempts), ("dispatched", 2));
    assert_eq!(fx.count("SELECT count(*) FROM notifications").await, 2);
}

#[tokio::test]
async fn two_dispatchers_racing_over_1000_events_start_every_listener_once() {
    let fx = Fixture::new().await;
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    fx.book_many(patient, practitioner, 1, 1000).await;
    let mut config = fast_config();
    config.batch = 50;
    config.lease = Duration::from_secs(30);
    let transport = |fx: &Fixture| -> Arc<dyn Transport> {
        Arc::new(LocalTransport::new(fx.db.pool.clone()).with_concurrency(3))
    };
    let a = fx.dispatcher(transport(&fx), config).with_id("racer-a");
    let b = fx.dispatcher(transport(&fx), config).with_id("racer-b");
    let started = Instant::now();
    let (ra, rb) = tokio::join!(a.drain_once(), b.drain_once());
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    eprintln!("racing: a={:?} b={:?} in {:?}", ra.totals, rb.totals, started.elapsed());
    assert_eq!(ra.totals.dispatched + rb.totals.dispatched, 1002);
    assert_eq!(ra.totals.started + rb.totals.started, 2000);
    assert_eq!(ra.totals.fenced + rb.totals.fenced, 0);
    assert_eq!(fx.count(PENDING_OR_LIVE).await, 0);
    assert_eq!(fx.count("SELECT count(*) FROM notifications").await, 2000);
    assert_eq!(fx.count("SELECT count(DISTINCT idempotency_key) FROM notifications").await, 2000);
    assert_eq!(fx.count("SELECT count(*) FROM listener_receipts").await, 2000);
    assert_eq!(fx.count("SELECT max(attempts)::bigint FROM event_outbox").await, 1);
}

#[tokio::test]
async fn an_unreadable_event_goes_dead() {
    // Corrupt (a member actor without an id), not merely newer: a type this build does not know is
    // held instead (tests/outages.rs).
    let fx = Fixture::new().await;
    let client = fx.db.client().await;
    let id = clinic_core::ids::EventId::generate();
    client
        .execute(
            "INSERT INTO events (id, workspace_id, type, version, actor_kind, occurred_at, resource_type, \
             resource_id, resource_version, correlation_id, causation_id) \
             VALUES ($1, $2, 'appointment.created', 1, 'member', now(), 'appointment', $1, 1, $1, $1)",
            &[&id, &fx.workspace],
        )
        .await
        .unwrap();
    client.execute("INSERT INTO event_outbox (event_id) VALUES ($1)", &[&id]).await.unwrap();
    let report = drain(&fx.dispatcher(fx.local(), fast_config())).await;
    assert_eq!(report.totals.dead, 1);
    let row = client
        .query_one("SELECT status, last_error_code FROM event_outbox WHERE event_id = $1", &[&id])
        .await
        .unwrap();
    assert_eq!(
        (row.get::<_, String>(0), row.get::<_, String>(1)),
        ("dead".into(), "unreadable_event".into())
    );
}

#[tokio::test]
async fn the_drain_loop_wakes_on_notify_and_returns_before_the_window_ends() {
    let fx = Fixture::new().await;
    let mut config = fast_config();
    // A long poll: only a NOTIFY can explain a fast dispatch.
    config.poll_interval = Duration::from_secs(30);
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    let dispatcher = Arc::new(fx.dispatcher(fx.local(), config).with_listen(fx.db.url.clone(), None));
    drain(&dispatcher).await;
    let window = Duration::from_millis(3000);
    let draining = {
        let dispatcher = Arc::clone(&dispatcher);
        tokio::spawn(async move {
            let started = Instant::now();
            let report = dispatcher.drain(window).await;
            (report, started.elapsed())
        })
    };
    let within = Duration::from_secs(3);
    wait_count(&fx, "SELECT count(*) FROM outbox_waiters", 1, within, "registration as idle").await;
    let committed = Instant::now();
    fx.book(patient, practitioner, 24).await;
    while fx.count("SELECT count(*) FROM notifications").await < 2 {
        assert!(committed.elapsed() < Duration::from_secs(2), "no wake-up within two seconds");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    eprintln!("commit -> notifications: {:?}", committed.elapsed());
    let (report, elapsed) = draining.await.unwrap();
    assert!(report.wakeups >= 1, "{report:?}");
    assert_eq!(report.totals.dispatched, 1);
    assert!(elapsed <= window + Duration::from_millis(500), "{elapsed:?}");
    assert_eq!(fx.count("SELECT count(*) FROM outbox_waiters").await, 0);
}

#[tokio::test]
async fn run_until_stops_on_shutdown_and_polls_without_listen() {
    let fx = Fixture::new().await;
    let (stop, running) = run_until_stopped(fx.dispatcher(fx.local(), fast_config()));
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    fx.book(patient, practitioner, 24).await;
    let within = Duration::from_secs(3);
    wait_count(&fx, "SELECT count(*) FROM notifications", 2, within, "polling never dispatched").await;
    stop.send(()).unwrap();
    let report = tokio::time::timeout(Duration::from_secs(2), running).await.unwrap().unwrap();
    assert_eq!(report.totals.dispatched, 3);
}

#[tokio::test]
async fn every_transition_emits_one_lifecycle_fact_with_ids_only() {
    let logs = clinic_testkit::capture_logs();
    let fx = Fixture::new().await;
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    let (_, created) = fx.book(patient, practitioner, 24).await;
    drain(&fx.dispatcher(fx.local(), fast_config())).await;
    let facts: Vec<serde_json::Value> = logs
        .json_lines()
        .into_iter()
        .filter(|line| {
            let fields = line.get("fields").unwrap_or(line);
            fields.get("event_id").and_then(|v| v.as_str()) == Some(&created.id.to_string())
                && fields.get("transition").is_some()
        })
        .collect();
    let transitions: Vec<String> = facts
        .iter()
        .map(|line| {
            let fields = line.get("fields").unwrap_or(line);
            format!(
                "{}{}",
                fields["transition"].as_str().unwrap(),
                fields.get("listener").and_then(|l| l.as_str()).map(|l| format!(":{l}")).unwrap_or_default()
            )
        })
        .collect();
    let mut sorted = transitions.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        [
            "claimed",
            "dispatched",
            "started:patient_booking_confirmation",
            "started:practitioner_schedule_change"
        ],
        "{facts:?}"
    );
    for line in &facts {
        let fields = line.get("fields").unwrap_or(line);
        for key in ["event_type", "attempt", "age_ms", "outcome"] {
            assert!(fields.get(key).is_some(), "{key} missing in {line}");
        }
    }
    assert!(!logs.contains("Lovelace") && !logs.contains("ada@example.org"));
}

/// Waits until `query` counts at least `at_least`, failing after `within`.
async fn wait_count(fx: &Fixture, query: &str, at_least: i64, within: Duration, what: &str) {
    let deadline = Instant::now() + within;
    while fx.count(query).await < at_least {
        assert!(Instant::now() < deadline, "{what}: still fewer than {at_least} after {within:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Generous, for waits on progress that only a busy machine slows down.
const PROGRESS: Duration = Duration::from_secs(20);

/// Runs `dispatcher`'s drain loop until the returned sender fires.
fn run_until_stopped(
    dispatcher: clinic_core::dispatch::Dispatcher,
) -> (tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<clinic_core::dispatch::DrainReport>) {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(async move {
        dispatcher
            .run_until(async {
                let _ = stopped.await;
            })
            .await
    });
    (stop, running)
}

/// A drain loop (LISTEN-woken, 30 s poll: only a NOTIFY explains a prompt dispatch) running until
/// the returned sender fires.
fn run_listening(
    fx: &Fixture,
    transport: Arc<dyn Transport>,
) -> (tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<clinic_core::dispatch::DrainReport>) {
    let mut config = fast_config();
    config.poll_interval = Duration::from_secs(30);
    config.lease = Duration::from_secs(30);
    config.batch = 2;
    run_until_stopped(fx.dispatcher(transport, config).with_listen(fx.db.url.clone(), None))
}

#[tokio::test]
async fn a_drain_keeping_up_stays_registered_and_is_woken_for_every_commit() {
    let fx = Fixture::new().await;
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    let (stop, running) = run_listening(&fx, fx.local());
    wait_count(&fx, "SELECT count(*) FROM outbox_waiters", 1, PROGRESS, "registration").await;
    for booking in 1..=3 {
        fx.book(patient, practitioner, 24 + booking).await;
        wait_count(&fx, "SELECT count(*) FROM notifications", 2 * booking, PROGRESS, "dispatch of a booking")
            .await;
        assert_eq!(fx.count("SELECT count(*) FROM outbox_waiters").await, 1, "still registered");
    }
    stop.send(()).unwrap();
    let report = running.await.unwrap();
    // With the patient's and the practitioner's creation events.
    assert_eq!(report.totals.dispatched, 5, "{report:?}");
    assert!(report.wakeups >= 3, "{report:?}");
    assert_eq!(report.registrations, 1, "registered once, never re-registered: {report:?}");
    assert_eq!(fx.count("SELECT count(*) FROM outbox_waiters").await, 0, "unregistered on the way out");
}

#[tokio::test]
async fn a_registered_drain_claims_once_per_wake_up_when_the_claim_comes_back_short() {
    let fx = Fixture::new().await;
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    drain(&fx.dispatcher(fx.local(), fast_config())).await;
    let (stop, running) = run_listening(&fx, fx.local());
    wait_count(&fx, "SELECT count(*) FROM outbox_waiters", 1, PROGRESS, "registration").await;
    for booking in 1..=3 {
        fx.book(patient, practitioner, 24 + booking).await;
        wait_count(&fx, "SELECT count(*) FROM notifications", 2 * booking, PROGRESS, "dispatch of a booking")
            .await;
    }
    stop.send(()).unwrap();
    let report = running.await.unwrap();
    assert_eq!(report.totals.dispatched, 3, "{report:?}");
    // Two empty claims before the first wait (the first burst, the re-scan after registering), then
    // one claim per wake-up: a claim that took one row of a batch of two took every row due, and
    // the next commit notifies; no empty claim follows it.
    assert_eq!(report.claims, 2 + report.wakeups, "{report:?}");
}

#[tokio::test]
async fn a_drain_that_meets_a_backlog_unregisters_then_registers_again_once_idle() {
    let fx = Fixture::new().await;
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    let (stop, running) = run_listening(&fx, fx.local());
    wait_count(&fx, "SELECT count(*) FROM outbox_waiters", 1, PROGRESS, "registration").await;
    // Six events in one commit, claimed two at a time: the first claim comes back full.
    fx.book_many(patient, practitioner, 24, 6).await;
    wait_count(&fx, "SELECT count(*) FROM notifications", 12, PROGRESS, "dispatch of the backlog").await;
    wait_count(&fx, "SELECT count(*) FROM outbox_waiters", 1, PROGRESS, "registration once idle").await;
    stop.send(()).unwrap();
    let report = running.await.unwrap();
    // With the patient's and the practitioner's creation events.
    assert_eq!(report.totals.dispatched, 8, "{report:?}");
    assert_eq!(report.registrations, 2, "unregistered after the backlog, registered again: {report:?}");
}

/// Holds the first start call until released (its batch stays in flight); later calls pass.
struct HoldFirst {
    inner: Arc<dyn Transport>,
    held: std::sync::atomic::AtomicBool,
    entered: tokio::sync::Notify,
    release: tokio::sync::Notify,
}

#[async_trait]
impl Transport for HoldFirst {
    fn name(&self) -> &'static str {
        "hold-first"
    }
    async fn start(&self, starts: &[Start<'_>]) -> Vec<StartResult> {
        if !self.held.swap(true, std::sync::atomic::Ordering::SeqCst) {
            let released = self.release.notified();
            self.entered.notify_one();
            released.await;
        }
        self.inner.start(starts).await
    }
}

#[tokio::test]
async fn a_commit_during_a_burst_is_claimed_while_an_earlier_batch_is_still_in_flight() {
    let fx = Fixture::new().await;
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    let transport = Arc::new(HoldFirst {
        inner: fx.local(),
        held: Default::default(),
        entered: Default::default(),
        release: Default::default(),
    });
    let (stop, running) = run_listening(&fx, transport.clone());
    wait_count(&fx, "SELECT count(*) FROM outbox_waiters", 1, PROGRESS, "registration").await;
    fx.book(patient, practitioner, 24).await;
    tokio::time::timeout(Duration::from_secs(20), transport.entered.notified())
        .await
        .expect("the first booking's batch never started");
    // The burst's next claim found nothing; this commit's NOTIFY must make it claim again now, not
    // after the held batch is marked.
    fx.book(patient, practitioner, 25).await;
    wait_count(
        &fx,
        "SELECT count(*) FROM notifications",
        2,
        PROGRESS,
        "the second booking, while the first is held",
    )
    .await;
    transport.release.notify_one();
    wait_count(&fx, "SELECT count(*) FROM notifications", 4, PROGRESS, "the first booking, once released")
        .await;
    stop.send(()).unwrap();
    let report = running.await.unwrap();
    // With the patient's and the practitioner's creation events.
    assert_eq!(report.totals.dispatched, 4, "{report:?}");
    assert!(report.wakeups >= 2, "{report:?}");
}
