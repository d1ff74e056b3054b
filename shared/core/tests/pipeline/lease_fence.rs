//! Issue 38 (DESIGN §5d): the claim token is the fence of a leased row, and the database keeps it so
//! for every queue — a `sending` notification or webhook delivery carries its claim's token, and no
//! row in another status carries one (V15 did this for the outbox, V21 for these two).

use clinic_testkit::seed::booked_appointments;

const NOTIFICATION: &str =
    "INSERT INTO notifications (id, workspace_id, event_id, listener, idempotency_key, \
         recipient_kind, recipient_id, template, channel, status, claim_token) \
     VALUES (gen_random_uuid(), $1, $2, 'patient_booking_confirmation', $3, 'patient', \
         gen_random_uuid(), 'booking_confirmation', 'email', $4, $5)";
const WEBHOOK_DELIVERY: &str =
    "INSERT INTO webhook_deliveries (id, endpoint_id, workspace_id, event_id, event_type, status, claim_token) \
     VALUES (gen_random_uuid(), $1, $2, $3, 'appointment.created', $4, $5)";

fn refused_by(result: Result<u64, tokio_postgres::Error>) -> String {
    let error = result.expect_err("the write was accepted");
    error.as_db_error().and_then(|e| e.constraint()).unwrap_or_default().to_owned()
}

#[tokio::test]
async fn a_sending_row_without_a_token_or_a_token_on_another_row_is_refused() {
    let db = clinic_testkit::fresh_db().await;
    let events = booked_appointments(&db, 4).await;
    let client = db.client().await;
    let workspace: uuid::Uuid =
        client.query_one("SELECT workspace_id FROM event_outbox LIMIT 1", &[]).await.unwrap().get(0);
    let event = events[0].id.uuid();
    let token = Some(uuid::Uuid::new_v4());
    let none: Option<uuid::Uuid> = None;

    // Notifications: a lease with its token and a sent row without one are fine; the two breaches
    // are refused by name.
    let insert = |key: &'static str, status: &'static str, token: Option<uuid::Uuid>| {
        let client = &client;
        async move { client.execute(NOTIFICATION, &[&workspace, &event, &key, &status, &token]).await }
    };
    insert("fence:1", "sending", token).await.unwrap();
    insert("fence:2", "sent", none).await.unwrap();
    let fence = "notifications_claim_token_exactly_while_sending";
    assert_eq!(refused_by(insert("fence:3", "sending", none).await), fence);
    assert_eq!(refused_by(insert("fence:4", "retry", token).await), fence);
    // A mark that forgets to clear the token is refused too.
    let forgot =
        client.execute("UPDATE notifications SET status = 'sent' WHERE status = 'sending'", &[]).await;
    assert_eq!(refused_by(forgot), fence);

    // Webhook deliveries: the same rule.
    let endpoint = uuid::Uuid::new_v4();
    client
        .execute(
            "INSERT INTO webhook_endpoints (id, workspace_id, url, secret) \
             VALUES ($1, $2, 'https://hooks.example.com/x', 'enc2:x:y')",
            &[&endpoint, &workspace],
        )
        .await
        .unwrap();
    let deliver = |index: usize, status: &'static str, token: Option<uuid::Uuid>| {
        let client = &client;
        let event = events[index].id.uuid();
        async move { client.execute(WEBHOOK_DELIVERY, &[&endpoint, &workspace, &event, &status, &token]).await }
    };
    deliver(0, "sending", token).await.unwrap();
    deliver(1, "delivered", none).await.unwrap();
    let fence = "webhook_deliveries_claim_token_exactly_while_sending";
    assert_eq!(refused_by(deliver(2, "sending", none).await), fence);
    assert_eq!(refused_by(deliver(3, "failed", token).await), fence);
    let forgot =
        client.execute("UPDATE webhook_deliveries SET status = 'retry' WHERE status = 'sending'", &[]).await;
    assert_eq!(refused_by(forgot), fence);
}
