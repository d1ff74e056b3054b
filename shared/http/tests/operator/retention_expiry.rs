//! Retention of what used to grow without a policy (issue 12 item 10): idempotency keys expire after
//! their time to live and reminder claims of long-past start times go, in bounded batches, run by
//! the app role; everything younger stays, and an expired key is a new request.

use std::time::Duration;

use chrono::Utc;
use clinic_core::config::Env;
use clinic_core::housekeeping::retention::{sweep, RetentionConfig};
use clinic_testkit::app::TestApp;
use serde_json::json;

async fn create_with_key(app: &TestApp, key: &str) -> (u16, String) {
    let body = json!({"givenName": "Keyed", "familyName": key});
    let response = app
        .call_with(
            "POST",
            "/v1/patients",
            Some(&app.workspace.staff),
            Some(body),
            &[("Idempotency-Key", key)],
        )
        .await;
    (response.status.as_u16(), response.body["id"].as_str().unwrap_or_default().to_owned())
}

#[tokio::test]
async fn expired_idempotency_keys_and_past_reminder_claims_are_swept_in_batches() {
    let app = TestApp::new().await;
    let mut first = Vec::new();
    for n in 0..5 {
        let (status, id) = create_with_key(&app, &format!("key-{n}")).await;
        assert_eq!(status, 201);
        first.push(id);
    }
    let owner = app.db.client().await;
    // Three keys are eight days old; two are fresh.
    owner
        .execute(
            "UPDATE idempotency_keys SET created_at = now() - interval '8 days' WHERE key IN ('key-0', 'key-1', 'key-2')",
            &[],
        )
        .await
        .unwrap();
    // Reminder claims: three for start times sixteen days ago (past the 15-day default retention), two
    // for tomorrow.
    owner
        .execute(
            "INSERT INTO appointment_reminders (appointment_id, starts_at, event_id) \
             SELECT gen_random_uuid(), now() + (CASE WHEN g <= 3 THEN interval '-16 days' ELSE interval '1 day' END), \
                    gen_random_uuid() FROM generate_series(1, 5) AS g",
            &[],
        )
        .await
        .unwrap();

    let config = RetentionConfig {
        idempotency_ttl: Duration::from_secs(7 * 24 * 3600),
        batch: 2,
        ..RetentionConfig::default()
    };
    // As the service runs it: on the app role's pool.
    let report = sweep(&app.state.pool, &config, Utc::now()).await.unwrap();
    assert!(report.complete, "{report:?}");
    assert_eq!(report.idempotency_keys, 3, "{report:?}");
    assert_eq!(report.appointment_reminders, 3, "{report:?}");
    assert!(report.batches >= 2 + 2 + 3, "two-row batches: {report:?}");
    assert_eq!(app.count("SELECT 1 FROM idempotency_keys").await, 2);
    assert_eq!(app.count("SELECT 1 FROM appointment_reminders WHERE starts_at > now()").await, 2);
    assert_eq!(app.count("SELECT 1 FROM appointment_reminders").await, 2);

    // A fresh key still replays the first answer; an expired one is a new request.
    let (status, id) = create_with_key(&app, "key-4").await;
    assert_eq!((status, id.as_str()), (201, first[4].as_str()), "replayed");
    let (status, id) = create_with_key(&app, "key-0").await;
    assert_eq!(status, 201);
    assert_ne!(id, first[0], "the expired key was forgotten");

    // Nothing left to do.
    let again = sweep(&app.state.pool, &config, Utc::now()).await.unwrap();
    assert_eq!((again.idempotency_keys, again.appointment_reminders), (0, 0));
}

#[tokio::test]
async fn the_time_to_live_is_configurable_and_bounded() {
    let env = |value: &str| Env::from_pairs([("CLINIC_IDEMPOTENCY_TTL_HOURS", value)]);
    assert_eq!(RetentionConfig::read(&env("1")).unwrap().idempotency_ttl, Duration::from_secs(3600));
    for bad in ["0", "87601", "soon"] {
        let error = RetentionConfig::read(&env(bad)).unwrap_err();
        assert!(error.to_string().contains("CLINIC_IDEMPOTENCY_TTL_HOURS"), "{bad}: {error}");
    }
    assert_eq!(
        RetentionConfig::read(&Env::default()).unwrap().idempotency_ttl,
        Duration::from_secs(7 * 24 * 3600)
    );
}

/// Recorded listener rejections (V10) are bounded: rows older than their retention go, in batches,
/// run by the app role; younger ones stay.
#[tokio::test]
async fn old_listener_rejections_are_swept_and_recent_ones_stay() {
    let app = TestApp::new().await;
    let owner = app.db.client().await;
    owner
        .batch_execute(
            "INSERT INTO listener_rejections (id, event_id, workspace_id, listener, reason, transport, rejected_at) \
             SELECT gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), 'patient_reminder', 'unknown_event', \
                    'sqs', now() - (g * interval '1 day') FROM generate_series(0, 4) AS g",
        )
        .await
        .unwrap();
    let config = RetentionConfig {
        rejection_retention: Duration::from_secs(36 * 3600),
        batch: 2,
        ..RetentionConfig::default()
    };
    let report = sweep(&app.state.pool, &config, Utc::now()).await.unwrap();
    assert!(report.complete, "{report:?}");
    assert_eq!(report.listener_rejections, 3, "2, 3 and 4 days old: {report:?}");
    assert_eq!(app.count("SELECT 1 FROM listener_rejections").await, 2);
}
