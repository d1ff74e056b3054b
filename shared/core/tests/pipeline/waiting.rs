//! Issue 38 item 7: the gauge of rows waiting for an operator, per queue, against real PostgreSQL —
//! dead outbox rows, dead notifications and failed webhook deliveries are counted while they wait
//! (whenever they died), rows in other statuses are not, and each count is bounded.

use clinic_core::housekeeping::waiting::{read, Waiting, CAP};
use clinic_testkit::seed::booked_appointments;

#[tokio::test]
async fn the_gauge_counts_each_queues_waiting_rows_and_is_bounded() {
    let db = clinic_testkit::fresh_db().await;
    let events = booked_appointments(&db, 4).await;
    let client = db.client().await;
    assert_eq!(read(&client).await.unwrap(), Waiting::default(), "nothing waits in a fresh database");

    // Two dead outbox rows (one died a week ago: still waiting), two others pending.
    let ids: Vec<uuid::Uuid> = events.iter().map(|event| event.id.uuid()).collect();
    client
        .execute(
            "UPDATE event_outbox SET status = 'dead', updated_at = now() - interval '7 days' WHERE event_id = ANY($1)",
            &[&&ids[..2]],
        )
        .await
        .unwrap();
    let workspace: uuid::Uuid =
        client.query_one("SELECT workspace_id FROM event_outbox LIMIT 1", &[]).await.unwrap().get(0);

    // Notifications: three dead, one sent, one in retry.
    for (index, status) in ["dead", "dead", "dead", "sent", "retry"].iter().enumerate() {
        client
            .execute(
                "INSERT INTO notifications (id, workspace_id, event_id, listener, idempotency_key, \
                     recipient_kind, recipient_id, template, channel, status) \
                 VALUES (gen_random_uuid(), $1, $2, 'patient_booking_confirmation', $3, 'patient', \
                     gen_random_uuid(), 'booking_confirmation', 'email', $4)",
                &[&workspace, &ids[0], &format!("waiting-test:{index}"), status],
            )
            .await
            .unwrap();
    }

    // Webhook deliveries: one failed, one delivered, one pending.
    let endpoint = uuid::Uuid::new_v4();
    client
        .execute(
            "INSERT INTO webhook_endpoints (id, workspace_id, url, secret) \
             VALUES ($1, $2, 'https://hooks.example.com/x', 'enc2:x:y')",
            &[&endpoint, &workspace],
        )
        .await
        .unwrap();
    for (index, status) in ["failed", "delivered", "pending"].iter().enumerate() {
        client
            .execute(
                "INSERT INTO webhook_deliveries (id, endpoint_id, workspace_id, event_id, event_type, status) \
                 VALUES (gen_random_uuid(), $1, $2, $3, 'appointment.created', $4)",
                &[&endpoint, &workspace, &ids[index], status],
            )
            .await
            .unwrap();
    }
    assert_eq!(read(&client).await.unwrap(), Waiting { outbox: 2, notifications: 3, webhook_deliveries: 1 });

    // An operator retries one dead outbox row and discards a dead notification: the gauge follows.
    client
        .execute("UPDATE event_outbox SET status = 'pending' WHERE event_id = $1", &[&ids[0]])
        .await
        .unwrap();
    client
        .execute(
            "UPDATE notifications SET status = 'discarded' WHERE id = \
                 (SELECT id FROM notifications WHERE status = 'dead' LIMIT 1)",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(read(&client).await.unwrap(), Waiting { outbox: 1, notifications: 2, webhook_deliveries: 1 });

    // Bounded: more failed deliveries than the cap are reported as the cap. Spread over 50 endpoints:
    // each delivery takes its endpoint's next number (V24's trigger updates the endpoint row), and
    // one statement numbering thousands of rows of one endpoint walks that row's versions each time.
    client
        .execute(
            "INSERT INTO webhook_endpoints (id, workspace_id, url, secret) \
             SELECT gen_random_uuid(), $1, 'https://hooks.example.com/' || n, 'enc2:x:y' \
             FROM generate_series(1, 50) n",
            &[&workspace],
        )
        .await
        .unwrap();
    client
        .execute(
            "INSERT INTO webhook_deliveries (id, endpoint_id, workspace_id, event_id, event_type, status) \
             SELECT gen_random_uuid(), (SELECT array_agg(id ORDER BY id) FROM webhook_endpoints \
                                        WHERE id <> $1)[1 + n % 50], \
                    $2, gen_random_uuid(), 'appointment.created', 'failed' \
             FROM generate_series(1, $3::bigint) n",
            &[&endpoint, &workspace, &(CAP + 5)],
        )
        .await
        .unwrap();
    assert_eq!(read(&client).await.unwrap().webhook_deliveries, CAP);

    // The counts read through the partial indexes of V19 (and the status index of the outbox).
    client.batch_execute("SET enable_seqscan = off").await.unwrap();
    let plan: Vec<String> = client
        .query("EXPLAIN SELECT 1 FROM notifications WHERE status = 'dead' LIMIT 10", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert!(plan.iter().any(|line| line.contains("notifications_dead_idx")), "{plan:?}");
}
