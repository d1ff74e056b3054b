//! Webhook secrets sealed by KMS (moto) against real PostgreSQL: the API's encrypt-only key seals
//! what it creates; the sender opens it, once per process, for its own endpoint only; older keyring
//! values move to KMS in bounded batches; KMS unreachable seals and opens nothing.

use std::sync::Arc;

use aws_sdk_kms::config::Credentials;
use clinic_core::error::DomainError;
use clinic_core::ids::{WebhookEndpointId, WorkspaceId};
use clinic_core::webhooks::endpoints::{self, seal_clear, signing, NewEndpoint};
use clinic_core::webhooks::secret_box::{KeyService, OpenError, WebhookKey};
use clinic_core::webhooks::signing::Secret;
use clinic_secrets::kms::KmsKeys;

fn emulator() -> Option<String> {
    clinic_testkit::test_env::first(&["CLINIC_TEST_AWS_ENDPOINT", "CLINIC_TEST_SQS_ENDPOINT"])
}

async fn sdk(endpoint: &str) -> aws_config::SdkConfig {
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "tests"))
        .endpoint_url(endpoint)
        .timeout_config(clinic_secrets::timeouts())
        .retry_config(aws_config::retry::RetryConfig::disabled())
        .load()
        .await
}

async fn kms_key(sdk: &aws_config::SdkConfig) -> Arc<dyn KeyService> {
    let client = aws_sdk_kms::Client::new(sdk);
    let key = client.create_key().description("clinic webhook secrets (test)").send().await.unwrap();
    let key_id = key.key_metadata.unwrap().key_id;
    Arc::new(KmsKeys::new(sdk, key_id))
}

/// A KMS key on the emulator and a fresh database with one workspace; `None` (skipped, said so)
/// without an emulator.
async fn kms_and_database(
    clinic: &str,
) -> Option<(Arc<dyn KeyService>, clinic_testkit::TestDb, WorkspaceId)> {
    let Some(endpoint) = emulator() else {
        eprintln!("!!! SKIPPING KMS TEST: no KMS emulator (set CLINIC_TEST_AWS_ENDPOINT)");
        return None;
    };
    let service = kms_key(&sdk(&endpoint).await).await;
    let db = clinic_testkit::fresh_db().await;
    let workspace = WorkspaceId::generate();
    clinic_core::workspaces::insert_workspace(&db.client().await, workspace, clinic).await.unwrap();
    Some((service, db, workspace))
}

fn new_endpoint() -> NewEndpoint {
    NewEndpoint {
        url: "https://hooks.example.com/in".into(),
        description: String::new(),
        event_types: Vec::new(),
        heartbeat_seconds: 0,
        payload_format: "cloudevents",
    }
}

#[tokio::test]
async fn the_api_seals_with_kms_and_only_the_sender_opens_for_that_endpoint() {
    let Some((service, db, workspace)) = kms_and_database("KMS clinic").await else {
        return;
    };
    let conn = db.client().await;

    let api = WebhookKey::service_only(Arc::clone(&service));
    let created = endpoints::create(&conn, &api, workspace, &new_endpoint(), "test").await.unwrap();
    let id = created.endpoint.id;
    let stored: String =
        conn.query_one("SELECT secret FROM webhook_endpoints WHERE id = $1", &[&id]).await.unwrap().get(0);
    assert!(stored.starts_with("kms1:"), "{stored}");
    assert!(!stored.contains(created.secret.trim_start_matches("whsec_")), "never in clear at rest");

    // A sender (its keyring holds an older key; KMS seals) opens it.
    let sender = WebhookKey::from_bytes([4; 32]).with_service(Arc::clone(&service));
    let opened = signing(&conn, &sender, id).await.unwrap().unwrap().unwrap();
    assert_eq!(opened.current.expose(), created.secret);

    // A rotation keeps the rotated-out value sealed by KMS as it was, and seals the new one.
    let rotated = endpoints::rotate(&conn, &api, workspace, id, 24, "test").await.unwrap();
    let opened = signing(&conn, &sender, id).await.unwrap().unwrap().unwrap();
    assert_eq!(opened.current.expose(), rotated.secret);
    assert_eq!(opened.previous.map(|s| s.expose().to_owned()), Some(created.secret.clone()));

    // The blob copied into another endpoint's row: KMS refuses it under that endpoint's context.
    let other = endpoints::create(&conn, &api, workspace, &new_endpoint(), "test").await.unwrap().endpoint.id;
    conn.execute(
        "UPDATE webhook_endpoints SET secret = (SELECT secret FROM webhook_endpoints WHERE id = $1) WHERE id = $2",
        &[&id, &other],
    )
    .await
    .unwrap();
    let moved = signing(&conn, &sender, other).await.unwrap().unwrap();
    assert_eq!(moved.err(), Some(OpenError::Sealed));
    // A process without KMS cannot open it at all.
    let ring_only = WebhookKey::from_bytes([4; 32]);
    assert_eq!(signing(&conn, &ring_only, id).await.unwrap().unwrap().err(), Some(OpenError::UnknownKey));
}

#[tokio::test]
async fn older_keyring_values_move_to_kms_in_batches() {
    let Some((service, db, workspace)) = kms_and_database("Moving clinic").await else {
        return;
    };
    let mut conn = db.client().await;
    let ring = WebhookKey::from_bytes([5; 32]);
    let mut rows = Vec::new();
    for n in 0..3 {
        let (id, secret) = (WebhookEndpointId::generate(), Secret::generate());
        // One legacy clear row, two sealed under the keyring.
        let stored = if n == 0 { secret.expose().to_owned() } else { ring.seal(id, &secret).await.unwrap() };
        conn.execute(
            "INSERT INTO webhook_endpoints (id, workspace_id, url, secret) VALUES ($1, $2, 'https://hooks.example.com/x', $3)",
            &[&id, &workspace, &stored],
        )
        .await
        .unwrap();
        rows.push((id, secret));
    }
    let sender = ring.clone().with_service(Arc::clone(&service));
    let mut batches = Vec::new();
    loop {
        let tx = conn.transaction().await.unwrap();
        let sealed = seal_clear(&tx, &sender, 2).await.unwrap();
        tx.commit().await.unwrap();
        batches.push(sealed);
        if sealed == 0 {
            break;
        }
    }
    assert_eq!(batches, vec![2, 1, 0]);
    let kms_only = WebhookKey::from_bytes([6; 32]).with_service(Arc::clone(&service));
    for (id, secret) in &rows {
        let opened = signing(&conn, &kms_only, *id).await.unwrap().unwrap().unwrap();
        assert_eq!(&opened.current, secret, "the keyring is no longer needed");
    }
}

#[tokio::test]
async fn with_kms_unreachable_nothing_is_sealed_or_sent() {
    let port = clinic_testkit::free_port().unwrap();
    let sdk = sdk(&format!("http://127.0.0.1:{port}")).await;
    let service: Arc<dyn KeyService> = Arc::new(KmsKeys::new(&sdk, "alias/clinic-webhooks"));
    let db = clinic_testkit::fresh_db().await;
    let conn = db.client().await;
    let workspace = WorkspaceId::generate();
    clinic_core::workspaces::insert_workspace(&conn, workspace, "Offline clinic").await.unwrap();
    let api = WebhookKey::service_only(Arc::clone(&service));
    let refused =
        endpoints::create(&conn, &api, workspace, &new_endpoint(), "test").await.map(|_| ()).unwrap_err();
    assert!(matches!(refused, DomainError::SealingUnavailable), "{refused}");
    assert!(refused.is_transient());
    let count: i64 = conn.query_one("SELECT count(*) FROM webhook_endpoints", &[]).await.unwrap().get(0);
    assert_eq!(count, 0, "nothing stored without a seal");
    // A value KMS sealed earlier does not open while KMS is away: no send, retried later.
    let id = WebhookEndpointId::generate();
    conn.execute(
        "INSERT INTO webhook_endpoints (id, workspace_id, url, secret) VALUES ($1, $2, 'https://hooks.example.com/x', 'kms1:AAAA')",
        &[&id, &workspace],
    )
    .await
    .unwrap();
    assert_eq!(signing(&conn, &api, id).await.unwrap().unwrap().err(), Some(OpenError::Unavailable));
}
