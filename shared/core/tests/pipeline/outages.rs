//! Outages bury nothing (DESIGN §5a): a transport that is down far longer than the retry budget
//! leaves every row live with its attempts unspent, the dispatcher probes at a bounded pace, and
//! everything is dispatched once it answers. Also: rows past the attempt ceiling are buried at claim
//! time, and an event type this build does not know is held, never buried.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::support::{drain, fast_config, step, Fixture};
use clinic_core::dispatch::testing::{FailingTransport, OutageTransport};
use clinic_core::dispatch::{StartError, Transport};
use clinic_core::listeners::Listener;
use clinic_core::outbox::lag::read_ages;

const LIVE: &str = "SELECT count(*) FROM event_outbox WHERE status IN ('pending', 'claimed', 'retry')";
const DEAD: &str = "SELECT count(*) FROM event_outbox WHERE status = 'dead'";

#[tokio::test]
async fn an_outage_twenty_times_the_retry_budget_buries_nothing() {
    let fx = Fixture::new().await;
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    fx.book_many(patient, practitioner, 24, 20).await;
    let config = fast_config();
    // The retry budget: the backoff a row would spend before `dead` (max_attempts failures).
    let budget: Duration = (1..=config.max_attempts).map(|a| config.backoff.nominal(a)).sum();
    let outage_for = budget * 20;

    let outage = Arc::new(OutageTransport::down(fx.local()));
    let transport: Arc<dyn Transport> = outage.clone();
    let dispatcher = Arc::new(fx.dispatcher(transport, config));
    let running = {
        let dispatcher = dispatcher.clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        (tokio::spawn(async move { dispatcher.run_until(async { stopped.await.unwrap_or(()) }).await }), stop)
    };
    let began = Instant::now();
    while began.elapsed() < outage_for {
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(fx.count(DEAD).await, 0, "nothing is buried during the outage");
    }
    let max_attempts: i32 = fx
        .db
        .client()
        .await
        .query_one("SELECT coalesce(max(attempts), 0) FROM event_outbox", &[])
        .await
        .unwrap()
        .get(0);
    assert!(max_attempts <= 1, "held rows keep their attempts: max {max_attempts}");
    assert!(fx.count(LIVE).await > 0);
    let probes = outage.asked_while_down();
    assert!(probes > 0, "the dispatcher kept probing");
    // Bounded probing: each probe step asks for the 40 starts of the 20 bookings, and steps come at
    // most every probe_max once the wait has doubled up to it (plus a few on the way up).
    let probe_steps = probes / 40;
    let at_most = (outage_for.as_millis() / config.probe_max.as_millis()) as usize + 10;
    assert!(probe_steps <= at_most, "{probe_steps} probe steps in {outage_for:?} (at most {at_most})");
    let ages = read_ages(&fx.db.client().await).await.unwrap();
    assert!(ages.oldest_live_ms >= outage_for.as_millis() as i64 / 2, "{ages:?}");

    outage.set_down(false);
    let deadline = Instant::now() + Duration::from_secs(60);
    while fx.count(LIVE).await > 0 {
        assert!(Instant::now() < deadline, "rows still live a minute after recovery");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (task, stop) = running;
    stop.send(()).unwrap();
    let report = task.await.unwrap();
    assert_eq!(report.totals.dead, 0);
    assert!(report.totals.held > 0, "{report:?}");
    assert_eq!(fx.count(DEAD).await, 0);
    // 20 bookings, two listeners each: every receipt is in.
    assert_eq!(fx.count("SELECT count(*) FROM listener_receipts").await, 40);
    let ages = read_ages(&fx.db.client().await).await.unwrap();
    assert_eq!((ages.oldest_live_ms, ages.oldest_unsettled_ms), (0, 0));
}

#[tokio::test]
async fn per_message_failures_still_reach_dead() {
    let fx = Fixture::new().await;
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    let (_, created) = fx.book(patient, practitioner, 24).await;
    let failing = Arc::new(FailingTransport::always(StartError::retryable("sqs_InvalidMessage", "rejected")));
    let dispatcher = fx.dispatcher(failing, fast_config());
    let deadline = Instant::now() + Duration::from_secs(30);
    while fx.outbox(&created).await.status != "dead" {
        assert!(Instant::now() < deadline, "never buried");
        drain(&dispatcher).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(fx.outbox(&created).await.attempts, fast_config().max_attempts);
}

#[tokio::test]
async fn a_row_reclaimed_past_the_ceiling_is_buried_at_claim_time() {
    let fx = Fixture::new().await;
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    let (_, created) = fx.book(patient, practitioner, 24).await;
    let config = fast_config();
    // Its last attempt's dispatcher died: claimed, attempts at the ceiling, lease expired.
    fx.db
        .client()
        .await
        .execute(
            "UPDATE event_outbox SET status = 'claimed', attempts = $2, claim_token = gen_random_uuid(), \
                 available_at = now() - interval '1 second', claimed_until = now() - interval '1 second' \
             WHERE event_id = $1",
            &[&created.id, &config.max_attempts],
        )
        .await
        .unwrap();
    let dispatcher = fx.dispatcher(fx.local(), config);
    let report = drain(&dispatcher).await;
    assert_eq!(report.totals.dead, 1, "{report:?}");
    let row = fx.outbox(&created).await;
    assert_eq!(row.status, "dead");
    assert_eq!(row.attempts, config.max_attempts, "no further attempt was spent");
    assert_eq!(row.last_error_code.as_deref(), Some("attempts_exhausted"));
    assert!(!row.claim_token);
    assert_eq!(fx.count("SELECT count(*) FROM listener_receipts").await, 0, "nothing was started");
}

#[tokio::test]
async fn an_event_type_unknown_to_this_build_is_held_not_buried() {
    let fx = Fixture::new().await;
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    let (_, created) = fx.book(patient, practitioner, 24).await;
    let dispatcher = fx.dispatcher(fx.local(), fast_config());
    drain(&dispatcher).await;
    // A newer build's event: the type is unknown here (the owner may rewrite the log in a test).
    let owner = fx.db.client().await;
    owner.batch_execute("ALTER TABLE events DISABLE TRIGGER USER").await.unwrap();
    owner
        .execute("UPDATE events SET type = 'appointment.teleported' WHERE id = $1", &[&created.id])
        .await
        .unwrap();
    owner.batch_execute("ALTER TABLE events ENABLE TRIGGER USER").await.unwrap();
    owner
        .execute(
            "UPDATE event_outbox SET status = 'pending', available_at = now(), attempts = 0 WHERE event_id = $1",
            &[&created.id],
        )
        .await
        .unwrap();
    for _ in 0..(fast_config().max_attempts * 3) {
        let report = step(&dispatcher).await;
        assert_eq!((report.held, report.dead), (1, 0), "{report:?}");
        owner
            .execute("UPDATE event_outbox SET available_at = now() WHERE event_id = $1", &[&created.id])
            .await
            .unwrap();
    }
    let row = fx.outbox(&created).await;
    assert_eq!(row.status, "retry");
    assert_eq!(row.attempts, 0, "holds never spend attempts");
    assert_eq!(row.last_error_code.as_deref(), Some("unknown_event_type"));
}

#[tokio::test]
async fn a_replay_naming_a_listener_unknown_to_this_build_is_held() {
    let fx = Fixture::new().await;
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    let (_, created) = fx.book(patient, practitioner, 24).await;
    let dispatcher = fx.dispatcher(fx.local(), fast_config());
    drain(&dispatcher).await;
    // A newer build's API replayed it for a listener this build does not have.
    fx.db
        .client()
        .await
        .execute(
            "UPDATE event_outbox SET status = 'pending', available_at = now(), \
                 only_listeners = ARRAY['send_fax', 'patient_booking_confirmation'] WHERE event_id = $1",
            &[&created.id],
        )
        .await
        .unwrap();
    let report = step(&dispatcher).await;
    assert_eq!((report.held, report.dispatched, report.dead), (1, 0, 0), "{report:?}");
    let row = fx.outbox(&created).await;
    assert_eq!(row.status, "retry", "not marked dispatched with send_fax never started");
    assert_eq!(row.last_error_code.as_deref(), Some("unknown_listener"));
    assert!(row.last_error.unwrap().contains("send_fax"));
}

#[tokio::test]
async fn a_row_held_on_its_first_attempt_starts_only_the_missing_listener_on_each_probe() {
    let fx = Fixture::new().await;
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    let (_, created) = fx.book(patient, practitioner, 24).await;
    // The practitioner's queue is down (unavailable: a hold), the patient's answers.
    let transport = Arc::new(FailingTransport::only(
        vec![Listener::PractitionerScheduleChange],
        StartError::unavailable("sqs_unreachable", "connection refused"),
        fx.local(),
    ));
    let dispatcher = fx.dispatcher(transport.clone(), fast_config());
    let first = step(&dispatcher).await;
    assert_eq!((first.held, first.started), (1, 1), "{first:?}");
    assert_eq!(transport.requested(), 2, "the first attempt starts both listeners");
    let row = fx.outbox(&created).await;
    assert_eq!((row.status.as_str(), row.attempts), ("retry", 0), "held: the attempt given back");
    let recorded: i64 = fx
        .db
        .client()
        .await
        .query_one("SELECT count(*) FROM listener_starts WHERE event_id = $1", &[&created.id])
        .await
        .unwrap()
        .get(0);
    assert_eq!(recorded, 1, "the hold remembers the start that succeeded");

    let probes = 3;
    for probe in 1..=probes {
        fx.db
            .client()
            .await
            .execute("UPDATE event_outbox SET available_at = now() WHERE event_id = $1", &[&created.id])
            .await
            .unwrap();
        let report = step(&dispatcher).await;
        assert_eq!(report.held, 1, "{report:?}");
        assert_eq!(
            transport.requested(),
            2 + probe,
            "probe {probe} starts only the missing listener, not the one already started"
        );
    }
    assert_eq!(fx.outbox(&created).await.attempts, 0, "holds spend no attempt");
}
