//! A receiver's throttling answer (issue 41): a 429, or a 503 with `Retry-After`, is a hold of the
//! lease queue — the delivery is due again at the receiver's `Retry-After` (bounded; a short
//! backoff when it is absent), recorded `receiver_throttled`, and the attempt is given back, so a
//! throttling receiver never walks a delivery to `failed`. A 503 without `Retry-After` still spends
//! its attempt.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clinic_core::events::EventType;
use clinic_core::webhooks::client::Timeouts;
use clinic_core::webhooks::endpoints::{self, NewEndpoint};
use clinic_core::webhooks::guard::Egress;
use clinic_core::webhooks::sender::MAX_ATTEMPTS;
use clinic_core::webhooks::{fanout, WebhookConfig, WebhookSender};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::support::Fixture;

/// A receiver on 127.0.0.1 that answers every request with `status` and the extra `headers`.
pub(crate) async fn receiver(status: u16, headers: &'static str) -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let counted = counted.clone();
            tokio::spawn(async move {
                let (mut raw, mut buffer) = (Vec::new(), [0u8; 4096]);
                loop {
                    let Ok(read) = stream.read(&mut buffer).await else { return };
                    if read == 0 {
                        return;
                    }
                    raw.extend_from_slice(&buffer[..read]);
                    let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") else { continue };
                    let head = String::from_utf8_lossy(&raw[..end]).to_lowercase();
                    let length: usize = head
                        .lines()
                        .find_map(|line| line.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse().ok())
                        .unwrap_or(0);
                    if raw.len() >= end + 4 + length {
                        break;
                    }
                }
                counted.fetch_add(1, Ordering::SeqCst);
                let answer = format!(
                    "HTTP/1.1 {status} Answer\r\n{headers}content-length: 0\r\nconnection: close\r\n\r\n"
                );
                let _ = stream.write_all(answer.as_bytes()).await;
            });
        }
    });
    (url, calls)
}

/// One endpoint at `url` with one delivery fanned out; the sender that posts to loopback.
pub(crate) async fn one_delivery(fx: &Fixture, url: String) -> (WebhookSender, uuid::Uuid) {
    let key = clinic_testkit::webhook_key();
    let new = NewEndpoint {
        url,
        description: "throttle".into(),
        event_types: vec![EventType::AppointmentCreated],
        heartbeat_seconds: 0,
        payload_format: "cloudevents",
    };
    let client = fx.db.client().await;
    endpoints::create(&client, &key, fx.workspace, &new, "test").await.unwrap();
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    let (_, event) = fx.book(patient, practitioner, 30).await;
    assert_eq!(fanout::fan_out(&client, &event).await.unwrap(), 1);
    let id: uuid::Uuid = client.query_one("SELECT id FROM webhook_deliveries", &[]).await.unwrap().get(0);
    let config = WebhookConfig {
        egress: Egress { allow_loopback_http: true },
        timeouts: Timeouts { connect: Duration::from_secs(5), total: Duration::from_secs(10) },
        ..WebhookConfig::default()
    };
    (WebhookSender::new(fx.db.pool.clone(), config, key, clinic_sqs::webhook_body("/clinic")), id)
}

/// The delivery's status, attempts, error code and seconds until it is due.
pub(crate) async fn delivery(fx: &Fixture, id: uuid::Uuid) -> (String, i32, Option<String>, f64) {
    let row = fx
        .db
        .client()
        .await
        .query_one(
            "SELECT status, attempts, last_error_code, \
                 extract(epoch FROM available_at - now())::float8 FROM webhook_deliveries WHERE id = $1",
            &[&id],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1), row.get(2), row.get(3))
}

const DUE_NOW: &str = "UPDATE webhook_deliveries SET available_at = now() WHERE status = 'retry'";

#[tokio::test]
async fn a_receiver_answering_429_holds_the_delivery_and_never_walks_it_to_failed() {
    let fx = Fixture::new().await;
    let (url, calls) = receiver(429, "retry-after: 120\r\n").await;
    let (sender, id) = one_delivery(&fx, url).await;

    // Twice the attempt ceiling of throttling answers, each made due again at once.
    for _ in 0..(2 * MAX_ATTEMPTS) {
        sender.send_due(1).await.unwrap();
        let (status, attempts, code, due_in) = delivery(&fx, id).await;
        assert_eq!(status, "retry", "held, not failed");
        assert_eq!(attempts, 0, "a throttling answer gives its attempt back");
        assert_eq!(code.as_deref(), Some("receiver_throttled"));
        assert!((110.0..=121.0).contains(&due_in), "due at the receiver's Retry-After: {due_in}");
        fx.db.client().await.execute(DUE_NOW, &[]).await.unwrap();
    }
    assert_eq!(calls.load(Ordering::SeqCst), 2 * MAX_ATTEMPTS as usize);
    // Every answer is still recorded as an attempt row (it happened).
    assert_eq!(
        fx.count("SELECT count(*) FROM webhook_attempts WHERE status_code = 429").await,
        2 * i64::from(MAX_ATTEMPTS)
    );
}

#[tokio::test]
async fn a_throttling_receiver_s_retry_after_is_bounded_and_defaults_to_a_short_backoff() {
    let fx = Fixture::new().await;
    // A day asked for: held for at most an hour.
    let (url, _) = receiver(503, "retry-after: 86400\r\n").await;
    let (sender, id) = one_delivery(&fx, url).await;
    sender.send_due(1).await.unwrap();
    let (status, attempts, code, due_in) = delivery(&fx, id).await;
    assert_eq!((status.as_str(), attempts, code.as_deref()), ("retry", 0, Some("receiver_throttled")));
    assert!((3500.0..=3601.0).contains(&due_in), "bounded to an hour: {due_in}");

    // No (or an unreadable) Retry-After on a 429: a short backoff.
    let fx = Fixture::new().await;
    let (url, _) = receiver(429, "retry-after: soon\r\n").await;
    let (sender, id) = one_delivery(&fx, url).await;
    sender.send_due(1).await.unwrap();
    let (status, attempts, code, due_in) = delivery(&fx, id).await;
    assert_eq!((status.as_str(), attempts, code.as_deref()), ("retry", 0, Some("receiver_throttled")));
    assert!((0.0..=60.0).contains(&due_in), "a short backoff: {due_in}");

    // A 503 without Retry-After is an ordinary failure: the attempt is spent.
    let fx = Fixture::new().await;
    let (url, _) = receiver(503, "").await;
    let (sender, id) = one_delivery(&fx, url).await;
    sender.send_due(1).await.unwrap();
    let (status, attempts, _, _) = delivery(&fx, id).await;
    assert_eq!((status.as_str(), attempts), ("retry", 1));
}
