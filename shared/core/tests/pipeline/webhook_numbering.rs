//! Issue 42 item 1: each webhook endpoint numbers its deliveries densely (1, 2, 3 … no gap, no
//! reuse) in the fan-out's transaction, on real PostgreSQL, under concurrent fan-outs, rolled-back
//! fan-outs and duplicate runs.

use std::time::Duration;

use clinic_core::webhooks::fanout;

use crate::support::Fixture;

async fn numbers(fx: &Fixture, endpoint: clinic_core::ids::WebhookEndpointId) -> (Vec<i64>, i64) {
    let client = fx.db.client().await;
    let rows = client
        .query(
            "SELECT sequence FROM webhook_deliveries WHERE endpoint_id = $1 ORDER BY sequence",
            &[&endpoint],
        )
        .await
        .unwrap();
    let last: i64 = client
        .query_one("SELECT last_sequence FROM webhook_endpoints WHERE id = $1", &[&endpoint])
        .await
        .unwrap()
        .get(0);
    (rows.iter().map(|row| row.get(0)).collect(), last)
}

#[tokio::test]
async fn concurrent_fan_outs_number_each_endpoints_deliveries_densely() {
    let fx = Fixture::new().await;
    let (first, second) = (fx.webhook_endpoint("a").await, fx.webhook_endpoint("b").await);
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    let events: Vec<_> =
        fx.book_many(patient, practitioner, 48, 30).await.into_iter().map(|(_, event)| event).collect();

    // 30 fan-outs at once, each holding its transaction open a little so they overlap; every third
    // one rolls back first (its numbers must come back) and is then run again.
    let runs = events.iter().enumerate().map(|(i, event)| {
        let pool = fx.db.pool.clone();
        let event = event.clone();
        async move {
            let rounds = if i % 3 == 0 { 2 } else { 1 };
            for round in 0..rounds {
                let mut client = pool.get().await.unwrap();
                let tx = client.transaction().await.unwrap();
                let created = fanout::fan_out(&tx, &event).await.unwrap();
                assert_eq!(created, 2, "one delivery per endpoint");
                tokio::time::sleep(Duration::from_millis(5 + (i as u64 * 7) % 20)).await;
                if round + 1 < rounds {
                    tx.rollback().await.unwrap();
                } else {
                    tx.commit().await.unwrap();
                }
            }
        }
    });
    futures::future::join_all(runs).await;

    // A duplicate run (a redelivered fan-out, an operator replay) takes no number.
    for event in events.iter().take(5) {
        let client = fx.db.client().await;
        assert_eq!(fanout::fan_out(&client, event).await.unwrap(), 0);
    }
    // Two runs of one event at the same time: one numbers it, the other takes none (it finds the
    // delivery, or fails on UNIQUE(endpoint_id, event_id) and is retried like any listener error).
    let late = fx.book(patient, practitioner, 200).await.1;
    let duplicate = |hold: u64| {
        let pool = fx.db.pool.clone();
        let event = late.clone();
        async move {
            let mut client = pool.get().await.unwrap();
            let tx = client.transaction().await.unwrap();
            let created = fanout::fan_out(&tx, &event).await;
            tokio::time::sleep(Duration::from_millis(hold)).await;
            match created {
                Ok(n) => {
                    tx.commit().await.unwrap();
                    n
                }
                Err(_) => 0,
            }
        }
    };
    let (a, b) = tokio::join!(duplicate(50), duplicate(0));
    assert_eq!(a + b, 2, "the late event got one delivery per endpoint in all");

    for endpoint in [first, second] {
        let (numbers, last) = numbers(&fx, endpoint).await;
        assert_eq!(numbers, (1..=31).collect::<Vec<i64>>(), "dense, no gap, no reuse");
        assert_eq!(last, 31, "the endpoint's counter is its last number");
    }
    assert_eq!(
        fx.count("SELECT count(DISTINCT event_id) FROM webhook_deliveries").await,
        31,
        "each event once per endpoint"
    );
}
