//! Delivery over the providers' real APIs: moto's SES v2 and SNS (served on the SQS emulator's
//! port). Sent messages are read back through moto's own inspection API (`GET /moto-api/data.json`:
//! `ses.RawMessage` and `sns.SMS` instances). Every test plants its own unique names, address and
//! phone, so tests sharing one emulator never see each other's messages.
//!
//! `tests/run` starts the emulator and exports `CLINIC_TEST_AWS_ENDPOINT` (and the SQS one).
//!
//! Over the 500-line guideline: ten cases against one emulator that share its seeding and message
//! lookups.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use aws_lambda_events::event::sqs::SqsEvent;
use clinic_core::delivery::unsubscribe::{UnsubscribeKeys, UnsubscribeLinks};
use clinic_core::delivery::{
    Accepted, DeliveryConfig, NotifierKind, OutgoingMessage, Provider, ProviderError, Providers, Sender,
    UncertainPolicy,
};
use clinic_core::events::Envelope;
use clinic_core::listeners::{self, Listener, ListenerOutcome};
use clinic_testkit::app::TestApp;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const FROM: &str = "clinic-tests@example.test";
/// 2027-01-12T13:30Z in Europe/Berlin.
const LOCAL_START: &str = "Tuesday 12 January 2027, 14:30 CET";

fn endpoint() -> Option<String> {
    clinic_testkit::test_env::first(&["CLINIC_TEST_AWS_ENDPOINT", "CLINIC_TEST_SQS_ENDPOINT"])
}

/// The emulator, or a fresh one (kept alive for the whole test binary).
fn emulator() -> Option<String> {
    static EMULATOR: std::sync::OnceLock<Option<clinic_sqs::testing::Emulator>> = std::sync::OnceLock::new();
    if let Some(endpoint) = endpoint() {
        return Some(endpoint);
    }
    EMULATOR.get_or_init(clinic_sqs::testing::Emulator::start).as_ref().map(|e| e.endpoint.clone())
}

async fn sdk(endpoint: &str) -> aws_config::SdkConfig {
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_sesv2::config::Credentials::new("test", "test", None, None, "tests"))
        .endpoint_url(endpoint)
        .timeout_config(clinic_notify_aws::timeouts())
        .load()
        .await
}

/// Fast settings for tests: short lease and backoff.
fn config(uncertain: UncertainPolicy) -> DeliveryConfig {
    let mut config = DeliveryConfig::with_notifiers(vec![NotifierKind::Ses, NotifierKind::Sns]);
    config.email_from = FROM.into();
    config.lease = Duration::from_secs(2);
    config.provider_timeout = Duration::from_secs(1);
    config.max_attempts = 3;
    config.backoff.base = Duration::from_millis(200);
    config.backoff.cap = Duration::from_secs(1);
    config.uncertain = uncertain;
    // One-click unsubscribe links, signed as the test API verifies them (TestApp's local keys).
    config.unsubscribe = Some(UnsubscribeLinks {
        base_url: BASE.into(),
        keys: UnsubscribeKeys::new(clinic_testkit::app::TEST_SECRET.as_bytes(), None),
        ttl: Duration::from_secs(60 * 86_400),
    });
    config
}

/// The public base URL of the unsubscribe links in these tests.
const BASE: &str = "https://api.clinic.test";

/// Everything a test plants: unique personal values, a booked appointment, its event.
struct Scene {
    app: TestApp,
    endpoint: String,
    given: String,
    family: String,
    email: Option<String>,
    phone: Option<String>,
    event: Envelope,
}

impl Scene {
    async fn new(with_email: bool, with_phone: bool) -> Option<Scene> {
        let Some(endpoint) = emulator() else {
            eprintln!("!!! SKIPPING DELIVERY TEST: no SES/SNS emulator (set CLINIC_TEST_AWS_ENDPOINT)");
            return None;
        };
        clinic_testkit::init_test_logging();
        let ses = aws_sdk_sesv2::Client::new(&sdk(&endpoint).await);
        let _ = ses.create_email_identity().email_identity(FROM).send().await;
        let app = TestApp::new().await;
        let conn = app.db.client().await;
        conn.execute("UPDATE workspaces SET time_zone = 'Europe/Berlin' WHERE id = $1", &[&app.workspace.id])
            .await
            .unwrap();
        let tag = ulid::Ulid::generate().to_string().to_lowercase();
        let given = format!("Plantgiven{}", &tag[16..]);
        let family = format!("Plantfamily{}", &tag[16..]);
        let email = with_email.then(|| format!("plant-{tag}@example.test"));
        let mut digits: String = tag.bytes().rev().take(7).map(|b| char::from(b'0' + b % 10)).collect();
        // moto's SNS opt-out list is every number ending in 99: only the opt-out test plants one.
        if digits.ends_with("99") {
            digits.replace_range(6.., "0");
        }
        let phone = with_phone.then(|| format!("+1555{digits}"));
        let mut body = json!({"givenName": given, "familyName": family});
        if let Some(email) = &email {
            body["email"] = json!(email);
        }
        if let Some(phone) = &phone {
            body["phone"] = json!(phone);
        }
        let token = app.workspace.staff.clone();
        let patient = app.create_patient(&token, body).await;
        let practitioner = app.create_practitioner(&token).await;
        let appointment =
            app.book(&token, &patient, &practitioner, "2027-01-12T13:30:00Z", "2027-01-12T14:00:00Z").await;
        let event = app.created_event(&appointment).await;
        Some(Scene { app, endpoint, given, family, email, phone, event })
    }

    async fn sender(&self, config: DeliveryConfig) -> Sender {
        let providers = clinic_notify_aws::providers_from(&config, Some(&sdk(&self.endpoint).await));
        Sender::new(self.app.state.pool.clone(), providers, config)
    }

    async fn run_listener(&self, listener: Listener) -> ListenerOutcome {
        listeners::run(&self.app.state.pool, listener, &self.event).await.unwrap()
    }

    /// The patient's delivery row: (status, channel, attempts, last_error_code, provider id).
    async fn row(&self) -> (String, String, i32, Option<String>, Option<String>) {
        let conn = self.app.db.client().await;
        let row = conn
            .query_one(
                "SELECT status, channel, attempts, last_error_code, provider_message_id FROM notifications \
                 WHERE event_id = $1 AND listener = 'patient_booking_confirmation'",
                &[&self.event.id],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4))
    }

    /// Raw emails moto accepted for the planted address.
    async fn emails(&self) -> Vec<String> {
        self.emails_to(&self.email.clone().unwrap()).await
    }

    /// Raw emails moto accepted for `email`.
    async fn emails_to(&self, email: &str) -> Vec<String> {
        moto_data(&self.endpoint).await["ses"]["RawMessage"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|m| m["destinations"].as_array().is_some_and(|d| d.iter().any(|a| a == &json!(email))))
            .map(|m| m["raw_data"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    /// SMS moto accepted for the planted phone: (message id, text).
    async fn sms(&self) -> Vec<(String, String)> {
        self.sms_to(&self.phone.clone().unwrap()).await
    }

    /// The SMS moto accepted for `phone`: (message id, text).
    async fn sms_to(&self, phone: &str) -> Vec<(String, String)> {
        moto_data(&self.endpoint).await["sns"]["SMS"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|m| m["phone_number"] == json!(phone))
            .map(|m| {
                (m["message_id"].as_str().unwrap().to_owned(), m["message"].as_str().unwrap().to_owned())
            })
            .collect()
    }

    fn planted(&self) -> Vec<String> {
        let mut values = vec![self.given.clone(), self.family.clone()];
        values.extend(self.email.clone());
        values.extend(self.phone.clone());
        values
    }
}

/// moto's inspection API: every model instance of every backend.
async fn moto_data(endpoint: &str) -> Value {
    let authority = endpoint.trim_start_matches("http://").trim_end_matches('/');
    let mut stream = tokio::net::TcpStream::connect(authority).await.expect("emulator reachable");
    let request = format!("GET /moto-api/data.json HTTP/1.0\r\nHost: {authority}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut response)).await.unwrap().unwrap();
    let text = String::from_utf8_lossy(&response);
    let (_, body) = text.split_once("\r\n\r\n").expect("an HTTP response");
    serde_json::from_str(body).expect("moto data is JSON")
}

/// Steps `sender` until `done` holds for the row, within a generous bound.
async fn step_until(scene: &Scene, sender: &Sender, done: impl Fn(&str) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        sender.step_due().await.unwrap();
        if done(&scene.row().await.0) {
            return;
        }
        assert!(Instant::now() < deadline, "row stuck at {:?}", scene.row().await);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_booking_sends_exactly_one_email_in_the_workspace_zone_and_leaks_nothing() {
    let logs = clinic_testkit::capture_logs();
    let Some(scene) = Scene::new(true, true).await else { return };
    let sender = scene.sender(config(UncertainPolicy::Resend)).await;
    assert_eq!(
        scene.run_listener(Listener::PatientBookingConfirmation).await,
        ListenerOutcome::Applied { effects: 1 }
    );
    let report = sender.send_due(10).await.unwrap();
    assert_eq!(report.sent, 1, "{report:?}");

    let emails = scene.emails().await;
    assert_eq!(emails.len(), 1, "exactly one email to the planted address");
    let email = &emails[0];
    assert!(email.contains("X-Clinic-Template: appointment.booking_confirmation"), "{email}");
    let key = format!("X-Clinic-Idempotency-Key: {}:patient_booking_confirmation", scene.event.id);
    assert!(email.contains(&key), "{email}");
    assert!(email.contains(LOCAL_START), "time in the workspace's zone: {email}");
    assert!(email.contains(&format!("Hello {} {}", scene.given, scene.family)));
    assert!(email.contains(&format!("From: {FROM}")));
    assert!(!email.contains(scene.phone.as_deref().unwrap()), "no more than the template needs");

    let (status, channel, attempts, code, provider_id) = scene.row().await;
    assert_eq!((status.as_str(), channel.as_str(), attempts, code), ("sent", "email", 1, None));
    assert!(provider_id.is_some_and(|id| !id.is_empty()));
    // The render disclosed the patient's fields, once, for this listener and event.
    let disclosed = scene
        .app
        .count(&format!(
            "SELECT 1 FROM patient_disclosures WHERE purpose = 'render:patient_booking_confirmation' AND event_id = '{}'",
            uuid::Uuid::from(scene.event.id.ulid())
        ))
        .await;
    assert_eq!(disclosed, 1);

    // The PHI scan: the values reached the provider, and nothing else.
    let conn = scene.app.db.client().await;
    let mut stored = String::new();
    for table in [
        "events",
        "event_outbox",
        "event_resources",
        "notifications",
        "listener_receipts",
        "listener_starts",
        "operator_actions",
        "patient_disclosures",
    ] {
        let dump: String = conn
            .query_one(&format!("SELECT coalesce(string_agg(t::text, ' '), '') FROM {table} t"), &[])
            .await
            .unwrap()
            .get(0);
        stored.push_str(&dump);
    }
    let message = serde_json::to_string(&clinic_sqs::to_cloud_event(
        &scene.event,
        Listener::PatientBookingConfirmation,
        "/clinic",
    ))
    .unwrap();
    let logged = logs.text();
    for value in scene.planted() {
        assert!(!stored.contains(&value), "{value} stored in a pipeline table");
        assert!(!message.contains(&value), "{value} in the listener message");
        assert!(!logged.contains(&value), "{value} logged (logs and metric lines)");
    }
    assert!(email.contains(&scene.given) && email.contains(scene.email.as_deref().unwrap()));
}

#[tokio::test]
async fn a_patient_with_only_a_phone_gets_an_sms() {
    let Some(scene) = Scene::new(false, true).await else { return };
    let sender = scene.sender(config(UncertainPolicy::Resend)).await;
    scene.run_listener(Listener::PatientBookingConfirmation).await;
    assert_eq!(sender.send_due(10).await.unwrap().sent, 1);
    let sms = scene.sms().await;
    assert_eq!(sms.len(), 1);
    assert!(sms[0].1.contains(LOCAL_START), "{}", sms[0].1);
    assert!(!sms[0].1.contains(&scene.family), "an SMS carries no more than its template needs");
    let (status, channel, _, _, provider_id) = scene.row().await;
    assert_eq!((status.as_str(), channel.as_str()), ("sent", "sms"));
    assert_eq!(provider_id.as_deref(), Some(sms[0].0.as_str()));
}

/// SMS STOP is the provider's job (DESIGN §5e): before each SMS the sender asks SNS whether the
/// number opted out (`CheckIfPhoneNumberIsOptedOut`; moto's list is every number ending in 99). An
/// opted-out number gets nothing, the message ends `suppressed` (`opted_out`), and the opt-out is
/// recorded on the patient at once — one `patient.updated` event by the patient naming
/// `contactChannels` — so the next message goes by email or not at all.
#[tokio::test]
async fn a_number_on_the_sns_opt_out_list_gets_nothing_and_the_opt_out_is_recorded() {
    let Some(scene) = Scene::new(false, true).await else { return };
    let conn = scene.app.db.client().await;
    let opted_out_phone = format!("{}99", &scene.phone.as_deref().unwrap()[..10]);
    conn.execute("UPDATE patients SET phone = $1", &[&opted_out_phone]).await.unwrap();
    let sender = scene.sender(config(UncertainPolicy::Resend)).await;
    scene.run_listener(Listener::PatientBookingConfirmation).await;
    let report = sender.send_due(10).await.unwrap();
    assert_eq!((report.suppressed, report.sent), (1, 0), "{report:?}");
    let (status, channel, _, code, provider_id) = scene.row().await;
    assert_eq!(
        (status.as_str(), channel.as_str(), code.as_deref()),
        ("suppressed", "sms", Some("opted_out"))
    );
    assert_eq!(provider_id, None);
    assert!(scene.sms_to(&opted_out_phone).await.is_empty(), "nothing published to the opted-out number");
    let patient = conn.query_one("SELECT contact_channels, version FROM patients", &[]).await.unwrap();
    assert_eq!(patient.get::<_, Vec<String>>(0), vec!["email".to_owned()]);
    let event = conn
        .query_one(
            "SELECT changed_fields, actor_kind FROM events WHERE type = 'patient.updated' ORDER BY id DESC LIMIT 1",
            &[],
        )
        .await;
    let event = event.expect("one patient.updated event");
    assert_eq!(event.get::<_, Vec<String>>(0), vec!["contactChannels".to_owned()]);
    assert_eq!(event.get::<_, String>(1), "patient");
}

#[tokio::test]
async fn no_contact_and_opt_out_are_outcomes_not_errors() {
    let Some(scene) = Scene::new(false, false).await else { return };
    let sender = scene.sender(config(UncertainPolicy::Resend)).await;
    scene.run_listener(Listener::PatientBookingConfirmation).await;
    // The practitioner has no contact data either.
    scene.run_listener(Listener::PractitionerScheduleChange).await;
    let report = sender.send_due(10).await.unwrap();
    assert_eq!((report.no_contact, report.sent), (2, 0), "{report:?}");
    assert_eq!(scene.row().await.0, "no_contact");

    let Some(opted) = Scene::new(true, false).await else { return };
    let conn = opted.app.db.client().await;
    conn.execute("UPDATE patients SET notifications_opt_out = true", &[]).await.unwrap();
    opted.run_listener(Listener::PatientBookingConfirmation).await;
    assert_eq!(opted.sender(config(UncertainPolicy::Resend)).await.send_due(10).await.unwrap().suppressed, 1);
    let (status, _, _, code, _) = opted.row().await;
    assert_eq!((status.as_str(), code.as_deref()), ("suppressed", Some("opted_out")));
    assert!(opted.emails().await.is_empty());
}

#[tokio::test]
async fn a_provider_failure_retries_with_backoff_then_goes_dead() {
    let Some(scene) = Scene::new(true, false).await else { return };
    // SES at a closed port: the real client fails to connect (retryable).
    let mut unreachable = config(UncertainPolicy::Resend);
    unreachable.notifiers = vec![NotifierKind::Ses];
    // Room for the SDK's own retries inside one attempt (the client's operation timeout is 8 s).
    unreachable.lease = Duration::from_secs(30);
    unreachable.provider_timeout = Duration::from_secs(15);
    let providers = clinic_notify_aws::providers_from(&unreachable, Some(&sdk("http://127.0.0.1:9").await));
    let sender = Sender::new(scene.app.state.pool.clone(), providers, unreachable);
    scene.run_listener(Listener::PatientBookingConfirmation).await;

    assert_eq!(sender.step_due().await.unwrap().retried, 1);
    let (status, _, attempts, code, _) = scene.row().await;
    assert_eq!((status.as_str(), attempts, code.as_deref()), ("retry", 1, Some("provider_unreachable")));
    // Backoff: not due again at once.
    let conn = scene.app.db.client().await;
    let wait: f64 = conn
        .query_one("SELECT extract(epoch FROM available_at - updated_at)::float8 FROM notifications WHERE status = 'retry'", &[])
        .await
        .unwrap()
        .get(0);
    assert!((0.09..=0.21).contains(&wait), "first backoff within [base/2, base]: {wait}");
    step_until(&scene, &sender, |status| status == "dead").await;
    let (_, _, attempts, code, _) = scene.row().await;
    assert_eq!((attempts, code.as_deref()), (3, Some("provider_unreachable")));
    assert!(scene.emails().await.is_empty());
}

/// Sends through the inner provider, reports it, then never returns: the sender "crashes" between
/// the provider's acceptance and the mark.
struct CrashAfterSend(Arc<dyn Provider>, Arc<tokio::sync::Notify>);

#[async_trait]
impl Provider for CrashAfterSend {
    fn name(&self) -> &'static str {
        "crash-after-send"
    }

    async fn send(&self, message: &OutgoingMessage) -> Result<Accepted, ProviderError> {
        self.0.send(message).await?;
        self.1.notify_one();
        std::future::pending().await
    }
}

/// Claims and sends once, then dies before marking; the row is left `sending` under its lease.
async fn crash_between_send_and_mark(scene: &Scene, policy: UncertainPolicy) {
    crash_with(scene, config(policy)).await;
}

async fn crash_with(scene: &Scene, mut crashing: DeliveryConfig) {
    crashing.provider_timeout = Duration::from_secs(30);
    crashing.lease = Duration::from_secs(2);
    let real = clinic_notify_aws::providers_from(&crashing, Some(&sdk(&scene.endpoint).await));
    let sent = Arc::new(tokio::sync::Notify::new());
    let email: Arc<dyn Provider> = Arc::new(CrashAfterSend(real.email.unwrap(), Arc::clone(&sent)));
    let sender =
        Sender::new(scene.app.state.pool.clone(), Providers { email: Some(email), sms: None }, crashing);
    let task = tokio::spawn(async move { sender.step_due().await });
    tokio::time::timeout(Duration::from_secs(30), sent.notified()).await.expect("the provider was called");
    task.abort();
    assert_eq!(scene.row().await.0, "sending");
    assert_eq!(scene.emails().await.len(), 1);
}

#[tokio::test]
async fn a_crash_between_send_and_mark_is_sent_again_under_the_resend_policy() {
    let Some(scene) = Scene::new(true, false).await else { return };
    scene.run_listener(Listener::PatientBookingConfirmation).await;
    crash_between_send_and_mark(&scene, UncertainPolicy::Resend).await;
    let sender = scene.sender(config(UncertainPolicy::Resend)).await;
    step_until(&scene, &sender, |status| status == "sent").await;
    let (_, _, attempts, _, _) = scene.row().await;
    assert_eq!(attempts, 2);
    // What a duplicate looks like: the same message twice, with the same idempotency key.
    let emails = scene.emails().await;
    assert_eq!(emails.len(), 2);
    let key = format!("X-Clinic-Idempotency-Key: {}:patient_booking_confirmation", scene.event.id);
    assert!(emails.iter().all(|email| email.contains(&key)));
}

#[tokio::test]
async fn a_sender_that_dies_at_the_attempt_ceiling_buries_the_delivery() {
    let Some(scene) = Scene::new(true, false).await else { return };
    scene.run_listener(Listener::PatientBookingConfirmation).await;
    let mut once = config(UncertainPolicy::Resend);
    once.max_attempts = 1;
    crash_with(&scene, once.clone()).await;
    let sender = scene.sender(once).await;
    step_until(&scene, &sender, |status| status == "dead").await;
    let (_, _, attempts, code, _) = scene.row().await;
    assert_eq!((attempts, code.as_deref()), (1, Some("attempts_exhausted")));
    assert_eq!(scene.emails().await.len(), 1, "not sent again past the ceiling");
}

#[tokio::test]
async fn a_crash_between_send_and_mark_is_held_for_operators_under_the_hold_policy() {
    let Some(scene) = Scene::new(true, false).await else { return };
    scene.run_listener(Listener::PatientBookingConfirmation).await;
    crash_between_send_and_mark(&scene, UncertainPolicy::Hold).await;
    let sender = scene.sender(config(UncertainPolicy::Hold)).await;
    step_until(&scene, &sender, |status| status == "uncertain").await;
    assert_eq!(sender.send_due(5).await.unwrap().claimed, 0, "held: not sent again");
    assert_eq!(scene.emails().await.len(), 1);

    // Operators see it and decide (HTTP, admin only, audited).
    let app = &scene.app;
    let listed =
        app.call("GET", "/v1/system/deliveries?status=uncertain", Some(&app.workspace.admin), None).await;
    assert_eq!(listed.status, 200, "{}", listed.text);
    let id = listed.body["items"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(listed.body["items"][0]["lastErrorCode"], "lease_expired");
    let path = format!("/v1/system/deliveries/{id}/retry");
    let staff = app.call("POST", &path, Some(&app.workspace.staff), Some(json!({"reason": "x"}))).await;
    assert_eq!(staff.status, 403);
    let blank = app.call("POST", &path, Some(&app.workspace.admin), Some(json!({"reason": " "}))).await;
    assert_eq!(blank.status, 422, "{}", blank.text);
    let retried = app
        .call("POST", &path, Some(&app.workspace.admin), Some(json!({"reason": "checked: not received"})))
        .await;
    assert_eq!(retried.status, 200, "{}", retried.text);
    assert_eq!(
        (retried.body["statusBefore"].as_str(), retried.body["statusAfter"].as_str()),
        (Some("uncertain"), Some("pending"))
    );
    let again = app.call("POST", &path, Some(&app.workspace.admin), Some(json!({"reason": "twice"}))).await;
    assert_eq!(again.status, 409, "pending does not fit retry: {}", again.text);
    assert_eq!(app.count("SELECT 1 FROM operator_actions WHERE notification_id IS NOT NULL").await, 1);
    step_until(&scene, &sender, |status| status == "sent").await;
    assert_eq!(scene.emails().await.len(), 2);
    let discard = format!("/v1/system/deliveries/{id}/discard");
    let final_row =
        app.call("POST", &discard, Some(&app.workspace.admin), Some(json!({"reason": "done"}))).await;
    assert_eq!(final_row.status, 409, "a sent delivery cannot be discarded");
}

/// An SQS event as Lambda delivers it, with one record.
fn sqs_event(message_id: &str, body: String, listener: &str) -> lambda_runtime::LambdaEvent<SqsEvent> {
    let payload: SqsEvent = serde_json::from_value(json!({ "Records": [{
        "messageId": message_id, "receiptHandle": format!("AQEB{message_id}"), "body": body,
        "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1764460800000",
                       "SenderId": "AIDAEXAMPLE", "ApproximateFirstReceiveTimestamp": "1764460800001"},
        "messageAttributes": {"listener": {"stringValue": listener, "stringListValues": [], "binaryListValues": [], "dataType": "String"}},
        "md5OfBody": "e4e68fb7bd0e697a0ae8f1bb342846b3", "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:clinic-listener", "awsRegion": "us-east-1"
    }]}))
    .unwrap();
    lambda_runtime::LambdaEvent::new(payload, lambda_runtime::Context::default())
}

#[tokio::test]
async fn the_listener_lambda_sends_at_once_and_a_duplicate_message_sends_nothing_new() {
    let Some(scene) = Scene::new(true, false).await else { return };
    let sender = scene.sender(config(UncertainPolicy::Resend)).await;
    let state = clinic_listener::State::new(scene.app.state.pool.clone()).with_sender(sender.clone());
    let listener = Listener::PatientBookingConfirmation;
    let body = serde_json::to_string(&clinic_sqs::to_cloud_event(&scene.event, listener, "/clinic")).unwrap();
    for message_id in ["m-first", "m-redelivered"] {
        let answer = clinic_listener::handle(&state, sqs_event(message_id, body.clone(), listener.as_str()))
            .await
            .unwrap();
        assert!(answer.batch_item_failures.is_empty());
    }
    // The fast path sent it right after the commit; the redelivery was a duplicate.
    assert_eq!(scene.row().await.0, "sent");
    assert_eq!(scene.emails().await.len(), 1);
    assert_eq!(sender.send_due(5).await.unwrap().claimed, 0);
    // A receipt lost while the notification stayed (e.g. restored from a backup): the key was used,
    // the run reports it as already sent, and nothing new is sent.
    let conn = scene.app.db.client().await;
    conn.execute("DELETE FROM listener_receipts WHERE event_id = $1", &[&scene.event.id]).await.unwrap();
    assert_eq!(scene.run_listener(listener).await, ListenerOutcome::AlreadySent);
    assert_eq!(sender.send_due(5).await.unwrap().claimed, 0);
    assert_eq!(scene.emails().await.len(), 1);
    assert_eq!(scene.app.count("SELECT 1 FROM notifications").await, 1);
}

/// The value of header `name` in a raw email (RFC 5322, unfolded lines), if present.
fn header<'a>(raw: &'a str, name: &str) -> Option<&'a str> {
    let (head, _) = raw.split_once("\r\n\r\n")?;
    head.split("\r\n").find_map(|line| line.strip_prefix(name)?.strip_prefix(": "))
}

/// RFC 8058 through SES v2, read back from moto's store of sent messages: an email of a kind the
/// patient may opt out of carries `List-Unsubscribe: <https://…/v1/unsubscribe/{token}>` and
/// `List-Unsubscribe-Post: List-Unsubscribe=One-Click`; a practitioner's notice (no patient kind)
/// carries neither. POSTing the one-click body to the link opts out of exactly that kind: the next
/// booking confirmation ends `suppressed` (`opted_out`) and never reaches SES, while a cancellation
/// notice (another kind) is still sent. The token is in no log line and no pipeline table.
#[tokio::test]
async fn an_optional_email_carries_one_click_headers_and_its_link_opts_out_of_exactly_that_kind() {
    let logs = clinic_testkit::capture_logs();
    let Some(scene) = Scene::new(true, false).await else { return };
    let sender = scene.sender(config(UncertainPolicy::Resend)).await;
    let practitioner_email = format!("doc-{}", scene.email.as_deref().unwrap());
    let conn = scene.app.db.client().await;
    conn.execute("UPDATE practitioners SET email = $1", &[&practitioner_email]).await.unwrap();
    scene.run_listener(Listener::PatientBookingConfirmation).await;
    scene.run_listener(Listener::PractitionerScheduleChange).await;
    assert_eq!(sender.send_due(10).await.unwrap().sent, 2);

    let emails = scene.emails().await;
    assert_eq!(emails.len(), 1);
    let link = header(&emails[0], "List-Unsubscribe").expect("List-Unsubscribe on a booking confirmation");
    assert_eq!(header(&emails[0], "List-Unsubscribe-Post"), Some("List-Unsubscribe=One-Click"));
    let url = link.strip_prefix('<').and_then(|l| l.strip_suffix('>')).expect("<https://…>");
    let path = url.strip_prefix(BASE).expect("under the public base URL");
    assert!(path.starts_with("/v1/unsubscribe/"), "{url}");
    let token = path.trim_start_matches("/v1/unsubscribe/").to_owned();
    for value in scene.planted() {
        assert!(!token.contains(&value) && !url.contains(&value), "no personal data in the link");
    }
    let to_practitioner = scene.emails_to(&practitioner_email).await;
    assert_eq!(to_practitioner.len(), 1);
    assert_eq!(header(&to_practitioner[0], "List-Unsubscribe"), None, "not a kind a patient opts out of");
    assert_eq!(header(&to_practitioner[0], "List-Unsubscribe-Post"), None);

    let app = &scene.app;
    assert_eq!(app.call("GET", path, None, None).await.status, 200);
    let clicked = app.post_form(path, "List-Unsubscribe=One-Click").await;
    assert_eq!(clicked.status, 200, "{}", clicked.text);

    // A later booking confirmation: suppressed, never sent.
    let staff = app.workspace.staff.clone();
    let patient_id = conn.query_one("SELECT id::text FROM patients", &[]).await.unwrap().get::<_, String>(0);
    let patient = json!({"id": ulid::Ulid::from(uuid::Uuid::parse_str(&patient_id).unwrap()).to_string()});
    let practitioner_id: uuid::Uuid =
        conn.query_one("SELECT id FROM practitioners", &[]).await.unwrap().get(0);
    let practitioner = json!({"id": ulid::Ulid::from(practitioner_id).to_string()});
    let later =
        app.book(&staff, &patient, &practitioner, "2027-01-13T13:30:00Z", "2027-01-13T14:00:00Z").await;
    let created = app.created_event(&later).await;
    let pool = &app.state.pool;
    listeners::run(pool, Listener::PatientBookingConfirmation, &created).await.unwrap();
    let report = sender.send_due(10).await.unwrap();
    assert_eq!((report.suppressed, report.sent), (1, 0), "{report:?}");
    let suppressed = conn
        .query_one("SELECT status, last_error_code FROM notifications WHERE event_id = $1", &[&created.id])
        .await
        .unwrap();
    assert_eq!(
        (suppressed.get::<_, String>(0), suppressed.get::<_, Option<String>>(1)),
        ("suppressed".to_owned(), Some("opted_out".to_owned()))
    );
    assert_eq!(scene.emails().await.len(), 1, "nothing more reached SES");

    // Another kind is still sent: cancelling the first appointment sends its notice, with its own link.
    let first = scene.event.resource_id.to_string();
    let cancel =
        app.call("POST", &format!("/v1/appointments/{first}/cancel"), Some(&staff), Some(json!({}))).await;
    assert_eq!(cancel.status, 200, "{}", cancel.text);
    let row = conn
        .query_one(
            "SELECT id FROM events WHERE type = 'appointment.cancelled' AND resource_id = $1",
            &[&uuid::Uuid::from(scene.event.resource_id)],
        )
        .await
        .unwrap();
    let cancelled = clinic_core::events::read::find(&conn, row.get(0)).await.unwrap().unwrap();
    listeners::run(pool, Listener::PatientCancellationNotice, &cancelled).await.unwrap();
    assert_eq!(sender.send_due(10).await.unwrap().sent, 1);
    let emails = scene.emails().await;
    assert_eq!(emails.len(), 2);
    let notice = emails.iter().find(|email| email.contains("appointment.cancellation_notice")).unwrap();
    let notice_link =
        header(notice, "List-Unsubscribe").expect("a change notice is a kind a patient may opt out of");
    assert_ne!(notice_link, link);

    // The token is in no log line or span and no pipeline table.
    let mut stored = String::new();
    for table in ["events", "event_outbox", "notifications", "listener_receipts", "patient_disclosures"] {
        let dump: String = conn
            .query_one(&format!("SELECT coalesce(string_agg(t::text, ' '), '') FROM {table} t"), &[])
            .await
            .unwrap()
            .get(0);
        stored.push_str(&dump);
    }
    let logged = logs.text();
    assert!(!logged.contains(&token) && !logged.contains(&token[..24]), "the token was logged");
    assert!(!stored.contains(&token), "the token was stored");
}
