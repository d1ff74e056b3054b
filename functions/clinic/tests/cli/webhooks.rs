//! `clinic webhooks …` against a fresh database: create (secret shown once, URL checked by the SSRF
//! guard), list without secrets, rotate, disable/enable, recover, deliveries and delete — each change
//! audited.

use clinic_testkit::app::TestApp;

use super::support::{clinic, clinic_with};

const LOOPBACK: &[(&str, &str)] = &[("CLINIC_WEBHOOKS_ALLOW_LOOPBACK_HTTP", "1")];

#[tokio::test]
async fn endpoints_are_managed_and_audited_from_the_cli() {
    let app = TestApp::new().await;
    let workspace = app.workspace.id.to_string();
    let ws = workspace.as_str();

    // The guard refuses private addresses and plain http (without the dev setting) before storing.
    for url in ["https://10.1.2.3/hook", "http://127.0.0.1:9/hook", "https://[fd00::1]/"] {
        let refused =
            clinic(&app, &["webhooks", "create", "--workspace", ws, "--url", url, "--actor", "ops:t"]).await;
        assert_ne!(refused.code, 0, "{url} was accepted: {}", refused.stdout);
        assert!(refused.stderr.contains("--url"), "{}", refused.stderr);
    }
    assert_eq!(app.count("SELECT 1 FROM webhook_endpoints").await, 0);

    let args = ["webhooks", "create", "--workspace", ws, "--url", "http://127.0.0.1:9/hook"];
    let created = clinic_with(
        &app,
        LOOPBACK,
        &[&args[..], &["--event-type", "appointment.created", "--actor", "ops:t"]].concat(),
    )
    .await
    .json();
    let secret = created["secret"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("whsec_"));
    assert_eq!(created["eventTypes"], serde_json::json!(["appointment.created"]));
    let id = created["id"].as_str().unwrap().to_owned();

    let listed = clinic(&app, &["webhooks", "list", "--workspace", ws]).await;
    assert!(!listed.stdout.contains(&secret), "list never shows a secret");
    assert_eq!(listed.json()["items"].as_array().unwrap().len(), 1);
    // Each endpoint's status and last delivery number (issue 42).
    assert_eq!(listed.json()["items"][0]["status"], "active");
    assert_eq!(listed.json()["items"][0]["lastSequence"], 0);

    // The heartbeat interval and the body format have flags (the API's fields, checked the same way).
    assert_eq!(created["heartbeatSeconds"], 300);
    assert_eq!(created["payloadFormat"], "cloudevents");
    let shape = ["webhooks", "update", &id, "--workspace", ws, "--actor", "ops:t"];
    let reshaped = clinic(
        &app,
        &[&shape[..], &["--heartbeat-seconds", "60", "--payload-format", "fhir-id-only"]].concat(),
    )
    .await
    .json();
    assert_eq!(
        (reshaped["heartbeatSeconds"].as_i64(), reshaped["payloadFormat"].as_str()),
        (Some(60), Some("fhir-id-only"))
    );
    for (flag, value) in [("--heartbeat-seconds", "86401"), ("--payload-format", "xml")] {
        let refused = clinic(&app, &[&shape[..], &[flag, value]].concat()).await;
        assert_ne!(refused.code, 0, "{flag} {value} was accepted: {}", refused.stdout);
        assert!(refused.stderr.contains(&format!("invalid {flag}")), "{}", refused.stderr);
    }
    let shown = clinic(&app, &["webhooks", "show", &id, "--workspace", ws]).await.json();
    assert_eq!(
        (shown["heartbeatSeconds"].as_i64(), shown["payloadFormat"].as_str()),
        (Some(60), Some("fhir-id-only"))
    );
    let args_quiet = ["webhooks", "create", "--workspace", ws, "--url", "http://127.0.0.1:9/quiet"];
    let quiet = clinic_with(
        &app,
        LOOPBACK,
        &[
            &args_quiet[..],
            &["--heartbeat-seconds", "0", "--payload-format", "fhir-id-only", "--actor", "ops:t"],
        ]
        .concat(),
    )
    .await
    .json();
    assert_eq!(
        (quiet["heartbeatSeconds"].as_i64(), quiet["payloadFormat"].as_str()),
        (Some(0), Some("fhir-id-only"))
    );
    let quiet_id = quiet["id"].as_str().unwrap();
    clinic(&app, &["webhooks", "delete", quiet_id, "--workspace", ws, "--actor", "ops:t"]).await;

    let rotated =
        clinic(&app, &["webhooks", "rotate", &id, "--workspace", ws, "--actor", "ops:t"]).await.json();
    assert_ne!(rotated["secret"], secret.as_str());
    assert!(rotated["previousSecretExpiresAt"].is_string(), "the old secret signs during the overlap");

    let disabled =
        clinic(&app, &["webhooks", "disable", &id, "--workspace", ws, "--actor", "ops:t"]).await.json();
    assert_eq!(disabled["enabled"], false);
    assert_eq!(disabled["disabledReason"], "operator");
    assert_eq!(disabled["status"], "off");
    let enabled =
        clinic(&app, &["webhooks", "enable", &id, "--workspace", ws, "--actor", "ops:t"]).await.json();
    assert_eq!(enabled["enabled"], true);
    assert_eq!(enabled["status"], "active");

    let recover = [
        "webhooks",
        "recover",
        &id,
        "--workspace",
        ws,
        "--actor",
        "ops:t",
        "--since",
        "2026-01-01T00:00:00Z",
    ];
    assert_eq!(clinic(&app, &recover).await.json()["recovered"], 0);
    let deliveries = clinic(&app, &["webhooks", "deliveries", "--workspace", ws]).await.json();
    assert_eq!(deliveries["items"], serde_json::json!([]));

    // Operator actions on one delivery and by filter (issue 38 items 1 and 2), on a failed delivery
    // planted for the endpoint: a dry run counts it, retry-delivery gives it a fresh budget with an
    // audit row, and a pointless discard is refused, recording nothing.
    let planted: clinic_core::ids::WebhookDeliveryId = app
        .db
        .pool
        .get()
        .await
        .unwrap()
        .query_one(
            "INSERT INTO webhook_deliveries (id, endpoint_id, workspace_id, event_id, event_type, status, attempts) \
             SELECT gen_random_uuid(), id, workspace_id, gen_random_uuid(), 'appointment.created', 'failed', 8 \
             FROM webhook_endpoints RETURNING id",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let delivery = planted.to_string();
    let bulk = ["webhooks", "bulk", "retry", "--status", "failed", "--actor", "ops:t", "--reason", "count"];
    let dry = clinic(&app, &[&bulk[..], &["--dry-run", "--workspace", ws]].concat()).await.json();
    assert_eq!(
        (dry["queue"].as_str(), dry["matched"].as_i64()),
        (Some("webhook_deliveries"), Some(1)),
        "{dry}"
    );
    let act = |action: &'static str| {
        [action, delivery.as_str(), "--workspace", ws, "--actor", "ops:t", "--reason", "receiver fixed"]
    };
    let retried = clinic(&app, &[&["webhooks"][..], &act("retry-delivery")].concat()).await.json();
    assert_eq!(
        (retried["webhookDeliveryId"].as_str(), retried["statusAfter"].as_str()),
        (Some(delivery.as_str()), Some("pending")),
        "{retried}"
    );
    let refused = clinic(&app, &[&["webhooks"][..], &act("discard-delivery")].concat()).await;
    assert_ne!(refused.code, 0, "a pending delivery cannot be discarded");
    assert!(refused.stderr.contains("refused"), "{}", refused.stderr);
    assert_eq!(app.count("SELECT 1 FROM operator_actions WHERE webhook_delivery_id IS NOT NULL").await, 1);

    // Another workspace's id looks missing; nothing changes.
    let other = ulid::Ulid::generate().to_string();
    let missing =
        clinic(&app, &["webhooks", "disable", &id, "--workspace", &other, "--actor", "ops:t"]).await;
    assert_ne!(missing.code, 0);

    assert_eq!(
        clinic(&app, &["webhooks", "delete", &id, "--workspace", ws, "--actor", "ops:t"]).await.json()
            ["deleted"],
        id.as_str()
    );
    let actions: Vec<String> = app
        .db
        .pool
        .get()
        .await
        .unwrap()
        .query("SELECT action FROM webhook_endpoint_actions ORDER BY created_at, id", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    // Each status change (active → off → active) is audited beside the change that caused it.
    assert_eq!(
        actions,
        [
            "create", "update", "create", "delete", "rotate", "disable", "status", "enable", "status",
            "recover", "delete"
        ]
    );
    let query = format!(
        "SELECT 1 FROM webhook_endpoint_actions WHERE detail::text LIKE '%{}%' OR actor LIKE '%whsec%'",
        &secret[6..20]
    );
    assert_eq!(app.count(&query).await, 0, "no secret in the audit");
}
