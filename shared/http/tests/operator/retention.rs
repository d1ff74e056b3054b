//! The retention sweep deletes finished outbox rows, old listener starts and receipts — and keeps
//! everything live, the event log and the delivery log within its own retention.

use std::time::Duration;

use crate::support::{rfc3339, Scene};
use chrono::Utc;
use clinic_core::housekeeping::retention::{sweep, RetentionConfig};
use clinic_core::ids::EventId;
use serde_json::json;

const WEEK: Duration = Duration::from_secs(7 * 24 * 3600);

/// Books one more appointment `hours` from now and answers its `appointment.created` event.
async fn book(scene: &Scene, hours: i64) -> EventId {
    let admin = scene.app.workspace.admin.clone();
    let starts = Utc::now() + chrono::Duration::hours(hours);
    let body = json!({
        "patientId": scene.patient["id"], "practitionerId": scene.practitioner["id"],
        "startsAt": rfc3339(starts), "endsAt": rfc3339(starts + chrono::Duration::minutes(30)),
    });
    let response = scene.app.call("POST", "/v1/appointments", Some(&admin), Some(body)).await;
    assert_eq!(response.status, 201, "{}", response.text);
    let id = response.body["id"].as_str().unwrap().to_owned();
    let row = scene
        .app
        .db
        .client()
        .await
        .query_one(
            "SELECT e.id FROM events e WHERE e.type = 'appointment.created' AND e.resource_id = $1::text::uuid",
            &[&uuid_text(&id)],
        )
        .await
        .unwrap();
    row.get(0)
}

fn uuid_text(ulid: &str) -> String {
    uuid::Uuid::from(ulid.parse::<ulid::Ulid>().unwrap()).to_string()
}

async fn set_status(scene: &Scene, event: EventId, status: &str) {
    let client = scene.app.db.client().await;
    let sql = match status {
        "claimed" => {
            "UPDATE event_outbox SET status = 'claimed', claim_token = gen_random_uuid(), \
                      claimed_until = now() + interval '1 hour', available_at = now() + interval '1 hour' \
                      WHERE event_id = $1"
        }
        _ => "UPDATE event_outbox SET status = $2 WHERE event_id = $1",
    };
    if status == "claimed" {
        client.execute(sql, &[&event]).await.unwrap();
    } else {
        client.execute(sql, &[&event, &status]).await.unwrap();
    }
}

async fn bookkeeping(scene: &Scene, event: EventId, listener: &str) {
    let client = scene.app.db.client().await;
    client
        .execute("INSERT INTO listener_starts (event_id, listener) VALUES ($1, $2)", &[&event, &listener])
        .await
        .unwrap();
    client
        .execute("INSERT INTO listener_receipts (listener, event_id) VALUES ($1, $2)", &[&listener, &event])
        .await
        .unwrap();
}

async fn counts(scene: &Scene) -> [i64; 6] {
    let app = &scene.app;
    [
        app.count("SELECT 1 FROM event_outbox").await,
        app.count("SELECT 1 FROM listener_starts").await,
        app.count("SELECT 1 FROM listener_receipts").await,
        app.count("SELECT 1 FROM events").await,
        app.count("SELECT 1 FROM event_resources").await,
        app.count("SELECT 1 FROM notifications").await,
    ]
}

#[tokio::test]
async fn the_sweep_deletes_only_finished_old_bookkeeping() {
    let scene = Scene::new().await;
    scene.dispatch_locally().await; // patient, practitioner, appointment #1: dispatched, 2 receipts.
    bookkeeping(&scene, scene.created, "extra_listener").await; // old starts of a dispatched event go too.

    let mut live = Vec::new();
    for (hours, status) in [(40, "pending"), (42, "claimed"), (44, "retry"), (46, "dead")] {
        let event = book(&scene, hours).await;
        if status != "pending" {
            set_status(&scene, event, status).await;
        }
        bookkeeping(&scene, event, "patient_booking_confirmation").await;
        live.push((event, status));
    }
    let discarded = book(&scene, 48).await;
    set_status(&scene, discarded, "discarded").await;
    bookkeeping(&scene, discarded, "patient_booking_confirmation").await;

    let before = counts(&scene).await;
    // Nothing is older than a week yet: a sweep now deletes nothing.
    let config = RetentionConfig {
        retention: WEEK,
        batch: 2,
        budget: Duration::from_secs(60),
        ..RetentionConfig::default()
    };
    let report = sweep(&scene.app.state.pool, &config, Utc::now()).await.unwrap();
    assert!(report.complete);
    assert_eq!((report.outbox_rows, report.listener_starts, report.listener_receipts), (0, 0, 0));
    assert_eq!(counts(&scene).await, before);

    // Eight days later everything above is older than the retention.
    let later = Utc::now() + chrono::Duration::days(8);
    let report = sweep(&scene.app.state.pool, &config, later).await.unwrap();
    assert!(report.complete);
    assert!(report.batches > 3, "bounded batches: {report:?}");
    // Gone: 3 dispatched + 1 discarded outbox rows; the starts and receipts of those events.
    assert_eq!(report.outbox_rows, 4, "{report:?}");
    assert_eq!(report.listener_starts, 2, "{report:?}");
    assert_eq!(report.listener_receipts, 4, "{report:?}");

    let after = counts(&scene).await;
    assert_eq!(after[0], before[0] - 4);
    assert_eq!(
        after[3..],
        before[3..],
        "events and event_resources are never swept; notifications not before their own retention"
    );
    for (event, status) in &live {
        assert_eq!(scene.status(*event).await, *status, "{status} row kept");
        let kept: i64 = scene
            .query_one(
                "SELECT (SELECT count(*) FROM listener_starts WHERE event_id = $1) \
                      + (SELECT count(*) FROM listener_receipts WHERE event_id = $1)",
                *event,
            )
            .await
            .get(0);
        assert_eq!(kept, 2, "bookkeeping of the {status} row kept");
    }
    for gone in [scene.created, discarded] {
        let left: i64 =
            scene.query_one("SELECT count(*) FROM event_outbox WHERE event_id = $1", gone).await.get(0);
        assert_eq!(left, 0);
    }

    // A swept event cannot be acted on any more.
    let admin = scene.app.workspace.admin.clone();
    let path = format!("/v1/system/outbox/{}/replay", scene.created);
    let response = scene.app.call("POST", &path, Some(&admin), Some(json!({"reason": "too late"}))).await;
    assert_eq!(response.status, 404);

    // Sweeping again finds nothing more.
    let again = sweep(&scene.app.state.pool, &config, later).await.unwrap();
    assert_eq!((again.outbox_rows, again.listener_starts, again.listener_receipts), (0, 0, 0));
}

#[tokio::test]
async fn the_sweep_stops_when_its_time_budget_is_spent() {
    let scene = Scene::new().await;
    scene.dispatch_locally().await;
    let before = counts(&scene).await;
    let config = RetentionConfig {
        retention: WEEK,
        batch: 1000,
        budget: Duration::ZERO,
        ..RetentionConfig::default()
    };
    let report = sweep(&scene.app.state.pool, &config, Utc::now() + chrono::Duration::days(8)).await.unwrap();
    assert!(!report.complete);
    assert_eq!(report.batches, 0);
    assert_eq!(counts(&scene).await, before);
}

/// Delivered and discarded webhook deliveries older than the retention go (with their attempts);
/// newer ones and failed ones stay (recover-since and the operator retry need them). The discarded
/// part is issue 38 item 2 (V21's `discarded`; the status did not exist on e6934c2).
#[tokio::test]
async fn the_sweep_removes_old_delivered_and_discarded_webhook_deliveries_only() {
    let scene = Scene::new().await;
    let client = scene.app.db.client().await;
    let workspace = scene.app.workspace.id;
    client
        .execute(
            "INSERT INTO webhook_endpoints (id, workspace_id, url, secret) \
             VALUES (gen_random_uuid(), $1, 'https://hooks.example.com/', 'whsec_x')",
            &[&workspace],
        )
        .await
        .unwrap();
    let rows = [
        ("delivered", 400),
        ("delivered", 1),
        ("discarded", 400),
        ("discarded", 1),
        ("failed", 400),
        ("retry", 400),
    ];
    for (status, age_hours) in rows {
        client
            .execute(
                "WITH d AS (INSERT INTO webhook_deliveries (id, endpoint_id, workspace_id, event_id, event_type, \
                   status, updated_at) SELECT gen_random_uuid(), id, workspace_id, gen_random_uuid(), \
                   'appointment.created', $1, now() - $2::float8 * interval '1 hour' FROM webhook_endpoints \
                   RETURNING id, endpoint_id, workspace_id) \
                 INSERT INTO webhook_attempts (id, delivery_id, endpoint_id, workspace_id, attempt, duration_ms) \
                 SELECT gen_random_uuid(), id, endpoint_id, workspace_id, 1, 5 FROM d",
                &[&status, &(age_hours as f64)],
            )
            .await
            .unwrap();
    }
    let report = sweep(&scene.app.db.pool, &RetentionConfig::default(), Utc::now()).await.unwrap();
    assert_eq!(report.webhook_deliveries, 2, "the old delivered and the old discarded one");
    assert!(report.complete);
    let left: Vec<(String, bool)> = client
        .query(
            "SELECT status, updated_at > now() - interval '2 hours' FROM webhook_deliveries ORDER BY 1, 2",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    assert_eq!(
        left,
        vec![
            ("delivered".into(), true),
            ("discarded".into(), true),
            ("failed".into(), false),
            ("retry".into(), false)
        ]
    );
    assert_eq!(
        scene.app.count("SELECT 1 FROM webhook_attempts").await,
        4,
        "attempts went with their delivery"
    );
}

/// Issue 39 item 3, webhook part (failed against a86860d: a rotated-out secret stayed in the row
/// after its overlap, and a rotation without overlap kept the old secret too): the sweep clears a
/// previous secret whose overlap ended; one still in its overlap stays; `overlapHours: 0` keeps none.
#[tokio::test]
async fn the_sweep_clears_rotated_out_webhook_secrets_once_their_overlap_ended() {
    use clinic_core::webhooks::endpoints::{self, NewEndpoint};
    let scene = Scene::new().await;
    let client = scene.app.db.client().await;
    let workspace = scene.app.workspace.id;
    let new = NewEndpoint {
        url: "https://hooks.example.com/a".into(),
        description: String::new(),
        event_types: vec![],
        heartbeat_seconds: 0,
        payload_format: "cloudevents",
    };
    let mut ids = Vec::new();
    for overlap in [1, 1, 0] {
        let created = endpoints::create(&client, &clinic_testkit::webhook_key(), workspace, &new, "test")
            .await
            .unwrap();
        let rotated = endpoints::rotate(
            &client,
            &clinic_testkit::webhook_key(),
            workspace,
            created.endpoint.id,
            overlap,
            "test",
        )
        .await
        .unwrap();
        assert_eq!(rotated.endpoint.previous_secret_expires_at.is_some(), overlap > 0, "overlap {overlap}");
        ids.push(created.endpoint.id);
    }
    let (ended, overlapping, at_once) = (ids[0], ids[1], ids[2]);
    client
        .execute(
            "UPDATE webhook_endpoints SET previous_expires_at = now() - interval '1 minute' WHERE id = $1",
            &[&ended],
        )
        .await
        .unwrap();
    let report = sweep(&scene.app.db.pool, &RetentionConfig::default(), Utc::now()).await.unwrap();
    assert!(report.complete);
    assert_eq!(report.webhook_previous_secrets, 1);
    for (id, kept) in [(ended, false), (overlapping, true), (at_once, false)] {
        let row = client
            .query_one(
                "SELECT previous_secret IS NOT NULL, previous_expires_at IS NOT NULL FROM webhook_endpoints \
                 WHERE id = $1",
                &[&id],
            )
            .await
            .unwrap();
        assert_eq!((row.get::<_, bool>(0), row.get::<_, bool>(1)), (kept, kept), "{id}");
    }
}

/// Notifications that ended (`sent`, `stale`, `opted_out`, `discarded`) go once older than their
/// retention and once their event's outbox row is gone (no replay or redelivery can need their
/// idempotency key any more), in batches of `batch` rows; `dead`, `no_contact` and every live row
/// wait for an operator (issue 38 item 7).
#[tokio::test]
async fn the_sweep_deletes_ended_notifications_past_their_retention_in_bounded_batches() {
    let scene = Scene::new().await;
    let (ended, waiting, in_custody) =
        (book(&scene, 40).await, book(&scene, 50).await, book(&scene, 60).await);
    scene.dispatch_locally().await;
    let client = scene.app.db.client().await;
    let mark = "UPDATE notifications SET status = $2 \
                WHERE id = (SELECT id FROM notifications WHERE event_id = $1 ORDER BY id LIMIT 1 OFFSET $3)";
    for (event, statuses) in [
        (scene.created, ["sent", "stale"]),
        (ended, ["opted_out", "discarded"]),
        (waiting, ["dead", "no_contact"]),
        (in_custody, ["sent", "sent"]),
    ] {
        for (offset, status) in statuses.into_iter().enumerate() {
            client.execute(mark, &[&event, &status, &(offset as i64)]).await.unwrap();
        }
    }
    // The outbox rows of the first three events were swept long ago; the last one's is dead (kept).
    for event in [scene.created, ended, waiting] {
        client.execute("DELETE FROM event_outbox WHERE event_id = $1", &[&event]).await.unwrap();
    }
    client
        .execute("UPDATE event_outbox SET status = 'dead' WHERE event_id = $1", &[&in_custody])
        .await
        .unwrap();
    let left = |event: EventId| {
        let client = &client;
        async move {
            let row = client
                .query_one("SELECT count(*) FROM notifications WHERE event_id = $1", &[&event])
                .await
                .unwrap();
            row.get::<_, i64>(0)
        }
    };
    let config = RetentionConfig {
        retention: WEEK,
        notification_retention: WEEK,
        batch: 1,
        budget: Duration::from_secs(60),
        ..RetentionConfig::default()
    };

    // Within the retention: kept.
    let report = sweep(&scene.app.state.pool, &config, Utc::now()).await.unwrap();
    assert!(report.complete);
    assert_eq!(report.notifications, 0, "{report:?}");
    assert_eq!(left(scene.created).await + left(ended).await, 4);

    // Past it: the four ended rows without an outbox row go, one per statement.
    let later = Utc::now() + chrono::Duration::days(8);
    let before =
        sweep(&scene.app.state.pool, &RetentionConfig { notification_retention: WEEK * 52, ..config }, later)
            .await
            .unwrap();
    assert_eq!(before.notifications, 0, "younger than their own retention: {before:?}");
    let report = sweep(&scene.app.state.pool, &config, later).await.unwrap();
    assert!(report.complete);
    assert_eq!(report.notifications, 4, "{report:?}");
    // Six ended rows examined one per statement, and the empty last one.
    assert!(report.batches >= 7, "one row per batch: {report:?}");
    assert_eq!((left(scene.created).await, left(ended).await), (0, 0));
    assert_eq!(left(waiting).await, 2, "dead and no_contact wait for an operator");
    assert_eq!(left(in_custody).await, 2, "its outbox row is still there");
    let again = sweep(&scene.app.state.pool, &config, later).await.unwrap();
    assert_eq!(again.notifications, 0);
}
