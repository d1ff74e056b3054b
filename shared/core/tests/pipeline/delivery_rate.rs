//! The shared provider rate's two edge cells (issue 41 item 3, `lease::rate`) on real PostgreSQL:
//! a sender that dies while it holds reserved tokens (and leased rows) loses no row and leaves the
//! rate under-spent, never over; a give-back that races a provider's throttling answer is dropped
//! whichever lands first (the bucket stays empty while it is slowed: the safe side).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use clinic_core::delivery::{
    Accepted, DeliveryConfig, NotifierKind, OutgoingMessage, Provider, ProviderError, Providers, Sender,
    UncertainPolicy,
};
use clinic_core::ids::NotificationId;
use clinic_core::lease::rate::{self, Pace};
use clinic_core::listeners::{self, Listener, ListenerOutcome};
use clinic_core::outbox::{Backoff, Jitter};

use super::support::Fixture;

const PROVIDER: &str = "paced";

/// A provider stand-in: notes every call (id, when); the dying sender's never answers.
struct StandIn {
    calls: Arc<Mutex<Vec<(NotificationId, Instant)>>>,
    hangs: bool,
}

#[async_trait]
impl Provider for StandIn {
    fn name(&self) -> &'static str {
        PROVIDER
    }

    async fn send(&self, message: &OutgoingMessage) -> Result<Accepted, ProviderError> {
        self.calls.lock().unwrap().push((message.notification_id, Instant::now()));
        if self.hangs {
            std::future::pending::<()>().await;
        }
        Ok(Accepted { provider_message_id: format!("m-{}", message.notification_id) })
    }
}

/// 10 a second with a saved-up burst of 5; batch 5; a lease short enough to expire in the test.
fn config() -> DeliveryConfig {
    let mut config = DeliveryConfig::with_notifiers(vec![NotifierKind::Log]);
    config.batch = 5;
    config.lease = Duration::from_millis(1_500);
    config.provider_timeout = Duration::from_millis(1_000);
    config.uncertain = UncertainPolicy::Resend;
    config.backoff =
        Backoff { base: Duration::from_millis(1), cap: Duration::from_millis(2), jitter: Jitter::Equal };
    config.pace.push(Pace { burst: 5.0, ..Pace::new(PROVIDER, "test-region", 10.0) });
    config
}

#[tokio::test]
async fn a_sender_dying_with_reserved_tokens_loses_no_row_and_never_over_spends_the_rate() {
    let fx = Fixture::new().await;
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    for (_, created) in fx.book_many(patient, practitioner, 30, 12).await {
        let outcome =
            listeners::run(&fx.db.pool, Listener::PatientBookingConfirmation, &created).await.unwrap();
        assert_eq!(outcome, ListenerOutcome::Applied { effects: 1 });
    }
    let calls = Arc::new(Mutex::new(Vec::new()));

    // The dying sender reserves the whole burst (5 tokens), claims 5 rows and dies in its first
    // provider call: 4 reserved tokens are never used nor given back, 5 rows stay leased.
    let dying = Sender::new(
        fx.db.pool.clone(),
        Providers::both(Arc::new(StandIn { calls: calls.clone(), hangs: true })),
        config(),
    );
    let step = tokio::spawn(async move { dying.step_due().await });
    let deadline = Instant::now() + Duration::from_secs(20);
    while calls.lock().unwrap().is_empty() {
        assert!(Instant::now() < deadline, "the dying sender never called its provider");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    step.abort();
    assert!(step.await.unwrap_err().is_cancelled());
    let tokens: f64 = fx
        .db
        .client()
        .await
        .query_one("SELECT tokens FROM provider_rate_buckets WHERE provider = $1", &[&PROVIDER])
        .await
        .unwrap()
        .get(0);
    assert!(tokens < 1.0, "the dead sender's reservation stays taken: {tokens}");
    assert_eq!(fx.count("SELECT count(*) FROM notifications WHERE status = 'sending'").await, 5);

    // A live sender takes over: the rows the dead one leased come back when their lease ends.
    let live = Sender::new(
        fx.db.pool.clone(),
        Providers::both(Arc::new(StandIn { calls: calls.clone(), hangs: false })),
        config(),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while fx.count("SELECT count(*) FROM notifications WHERE status = 'sent'").await < 12 {
        assert!(Instant::now() < deadline, "not every row was sent within a minute");
        let report = live.step_due().await.unwrap();
        report.wait_for_rate().await;
        if report.idle() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    // No row lost: every one reached the provider (the dead sender's leased rows again, resent
    // under the uncertain policy), and every one is sent.
    let calls = calls.lock().unwrap().clone();
    let ids: Vec<NotificationId> = fx
        .db
        .client()
        .await
        .query("SELECT id FROM notifications", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(ids.len(), 12);
    let live_calls: HashSet<NotificationId> = calls[1..].iter().map(|(id, _)| *id).collect();
    assert!(ids.iter().all(|id| live_calls.contains(id)), "a row never reached the live sender's provider");
    assert_eq!(
        fx.count("SELECT count(*) FROM notifications WHERE status <> 'sent'").await,
        0,
        "every row sent"
    );

    // The rate held, the dead sender's call included: no stretch of calls beats the bucket (the
    // burst, then 10 a second), with one call of slack for the two clocks.
    let mut times: Vec<Instant> = calls.iter().map(|(_, at)| *at).collect();
    times.sort();
    for i in 0..times.len() {
        for j in i..times.len() {
            let allowed = 5.0 + 10.0 * times[j].duration_since(times[i]).as_secs_f64() + 1.0;
            assert!(
                (j - i + 1) as f64 <= allowed,
                "{} calls within {:?}: the rate was over-spent",
                j - i + 1,
                times[j].duration_since(times[i])
            );
        }
    }
}

/// The bucket's tokens now (read back from PostgreSQL).
async fn tokens(client: &tokio_postgres::Client, pace: &Pace) -> f64 {
    client
        .query_one(
            "SELECT tokens FROM provider_rate_buckets WHERE provider = $1 AND region = $2",
            &[&pace.provider, &pace.region],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn a_give_back_racing_a_throttling_answer_is_dropped_whichever_lands_first() {
    let fx = Fixture::new().await;
    let (a, b) = (fx.db.client().await, fx.db.client().await);
    let pace = Pace { burst: 5.0, ..Pace::new("racing", "test-region", 10.0) };
    let slow_for = Duration::from_secs(30);

    // In turn, the throttling answer first: the give-back finds the bucket slowed and is dropped.
    assert_eq!(rate::reserve(&a, &pace, 5).await.unwrap().granted, 5);
    rate::slow(&b, &pace, 0.5, slow_for).await.unwrap();
    rate::give_back(&a, &pace, 5).await.unwrap();
    assert!(tokens(&a, &pace).await <= 0.0, "a give-back while slowed adds nothing");
    assert_eq!(rate::reserve(&a, &pace, 5).await.unwrap().granted, 0, "nothing at hand while slowed");

    // In turn, the give-back first: the throttling answer then drops the saved-up tokens.
    let reset = "UPDATE provider_rate_buckets SET slowed_until = NULL, tokens = burst, \
                 refilled_at = clock_timestamp() WHERE provider = $1";
    a.execute(reset, &[&pace.provider]).await.unwrap();
    assert_eq!(rate::reserve(&a, &pace, 5).await.unwrap().granted, 5);
    rate::give_back(&a, &pace, 5).await.unwrap();
    assert!(tokens(&a, &pace).await >= 4.9, "given back while not slowed");
    rate::slow(&b, &pace, 0.5, slow_for).await.unwrap();
    assert!(tokens(&a, &pace).await <= 0.0, "a throttling answer drops what was given back");
    assert_eq!(rate::reserve(&a, &pace, 5).await.unwrap().granted, 0);

    // At once, from two connections, many times: whichever wins the row, nothing is at hand after.
    for round in 0..20 {
        a.execute(reset, &[&pace.provider]).await.unwrap();
        assert_eq!(rate::reserve(&a, &pace, 5).await.unwrap().granted, 5);
        let (given, slowed) =
            tokio::join!(rate::give_back(&a, &pace, 5), rate::slow(&b, &pace, 0.5, slow_for));
        given.unwrap();
        slowed.unwrap();
        let left = tokens(&a, &pace).await;
        assert!(left <= 0.0, "round {round}: {left} tokens at hand after a throttling answer");
        assert_eq!(rate::reserve(&a, &pace, 5).await.unwrap().granted, 0, "round {round}");
    }
}
