//! The SQS side of issue 11 against moto and real PostgreSQL: an unreachable or hung SQS answers
//! *unavailable* within the client's timeouts (rows held, attempts unspent, nothing dead), the
//! per-queue breaker stops calling a dead endpoint, and a message lost after SQS accepted it (a purged
//! queue) is restarted by the custody reconciler under the same CloudEvents id.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clinic_core::dispatch::{DispatchConfig, Dispatcher, Start, Transport};
use clinic_core::housekeeping::reconcile::{reconcile, ReconcileConfig};
use clinic_core::listeners::Listener;
use clinic_core::outbox::{Backoff, Jitter};
use clinic_sqs::queues::create_queues;
use clinic_sqs::testing::{receive_all, Emulator};
use clinic_sqs::{build_client_with, parse_message, QueueMap, SqsTimeouts, SqsTransport};

fn config() -> DispatchConfig {
    DispatchConfig {
        lease: Duration::from_secs(5),
        backoff: Backoff {
            base: Duration::from_millis(20),
            cap: Duration::from_millis(100),
            jitter: Jitter::Equal,
        },
        max_attempts: 3,
        probe_max: Duration::from_millis(200),
        ..DispatchConfig::default()
    }
}

fn short_timeouts() -> SqsTimeouts {
    SqsTimeouts {
        operation: Duration::from_millis(800),
        attempt: Duration::from_millis(300),
        connect: Duration::from_millis(300),
    }
}

/// Every listener's queue at `endpoint` (which need not answer).
fn queues_at(endpoint: &str) -> QueueMap {
    let map: HashMap<Listener, String> = Listener::ALL
        .iter()
        .map(|l| (*l, format!("{endpoint}/000000000000/{}", l.as_str().replace('_', "-"))))
        .collect();
    QueueMap::new(map).unwrap()
}

async fn client_for(endpoint: &str) -> aws_sdk_sqs::Client {
    // The AWS SDK reads its credentials and region from the process environment: the emulator's.
    for (name, default) in
        [("AWS_ACCESS_KEY_ID", "test"), ("AWS_SECRET_ACCESS_KEY", "test"), ("AWS_REGION", "us-east-1")]
    {
        let value = clinic_testkit::test_env::var(name).unwrap_or_else(|| default.into());
        std::env::set_var(name, value);
    }
    build_client_with(Some(endpoint), short_timeouts()).await
}

#[tokio::test]
async fn a_hung_sqs_answers_unavailable_within_the_timeouts_and_buries_nothing() {
    clinic_testkit::init_test_logging();
    // Accepts connections and never answers: every call can only end by its timeouts.
    let hung = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", hung.local_addr().unwrap());
    let holder = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = hung.accept().await {
            held.push(socket);
        }
    });
    let db = clinic_testkit::fresh_db().await;
    let events = clinic_testkit::seed::booked_appointments(&db, 3).await;
    let transport = SqsTransport::new(client_for(&endpoint).await, queues_at(&endpoint), "/clinic");

    // One call: bounded by the operation timeout, answered as unavailable.
    let start = Start { envelope: &events[0], listener: Listener::PatientBookingConfirmation };
    let began = Instant::now();
    let results = transport.start(&[start]).await;
    let took = began.elapsed();
    let error = results[0].clone().unwrap_err();
    assert!(error.unavailable && !error.permanent, "{error:?}");
    assert!(took < Duration::from_secs(5), "bounded by the operation timeout: {took:?}");

    // The dispatcher holds the rows: many steps later, no attempt spent, nothing dead.
    let dispatcher = Dispatcher::new(db.pool.clone(), Arc::new(transport), config());
    for _ in 0..6 {
        dispatcher.drain_once().await.unwrap();
        let client = db.client().await;
        client
            .execute("UPDATE event_outbox SET available_at = now() WHERE status = 'retry'", &[])
            .await
            .unwrap();
    }
    let (dead, retry, attempts) = booked_rows(&db.client().await).await;
    assert_eq!((dead, retry), (0, 3));
    assert!(attempts <= 1, "held rows keep their attempts: {attempts}");
    holder.abort();
}

#[tokio::test]
async fn the_breaker_opens_on_an_unreachable_queue_and_answers_without_calling() {
    // A port nobody listens on: connection refused at once.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let db = clinic_testkit::fresh_db().await;
    let events = clinic_testkit::seed::booked_appointments(&db, 1).await;
    let transport = SqsTransport::new(client_for(&endpoint).await, queues_at(&endpoint), "/clinic");
    let start = Start { envelope: &events[0], listener: Listener::PatientBookingConfirmation };
    let mut codes = Vec::new();
    for _ in 0..5 {
        let error = transport.start(&[start]).await[0].clone().unwrap_err();
        assert!(error.unavailable, "{error:?}");
        codes.push(error.code);
    }
    assert_eq!(codes.last().map(String::as_str), Some("sqs_breaker_open"), "{codes:?}");
}

#[tokio::test]
async fn a_message_purged_after_sending_is_restarted_by_the_reconciler_with_the_same_id() {
    let Some(emulator) = Emulator::start() else { return };
    clinic_testkit::init_test_logging();
    let sqs = emulator.client();
    let queues = create_queues(&sqs, &format!("custody-{}", ulid::Ulid::generate()), false).await.unwrap();
    let db = clinic_testkit::fresh_db().await;
    let events = clinic_testkit::seed::booked_appointments(&db, 2).await;
    let transport = SqsTransport::new(sqs.clone(), queues.clone(), "/clinic");
    let dispatcher = Dispatcher::new(db.pool.clone(), Arc::new(transport.clone()), config());
    dispatcher.drain_once().await.unwrap();
    let client = db.client().await;
    assert_eq!(unsettled(&client).await, 4, "two bookings, two listeners each, in custody");
    // The messages are lost after SQS accepted them.
    let url = queues.url(Listener::PatientBookingConfirmation).unwrap().to_owned();
    let lost = receive_all(&sqs, &url).await;
    assert_eq!(lost.len(), 2);
    for message in &lost {
        sqs.delete_message()
            .queue_url(&url)
            .receipt_handle(message.receipt_handle().unwrap())
            .send()
            .await
            .unwrap();
    }
    // Overdue: the reconciler restarts every unsettled start through SQS.
    client
        .execute("UPDATE listener_starts SET started_at = started_at - interval '2 hours'", &[])
        .await
        .unwrap();
    client
        .execute(
            "UPDATE event_outbox SET dispatched_at = dispatched_at - interval '2 hours' \
             WHERE awaiting IS NOT NULL",
            &[],
        )
        .await
        .unwrap();
    let report = reconcile(&db.pool, &transport, &ReconcileConfig::default()).await.unwrap();
    assert_eq!(report.restarted, 4, "{report:?}");
    let again = receive_all(&sqs, &url).await;
    let mut ids: Vec<String> =
        again.iter().map(|m| parse_message(m.body().unwrap()).unwrap().1.id.to_string()).collect();
    ids.sort();
    let mut expected: Vec<String> = events.iter().map(|e| e.id.to_string()).collect();
    expected.sort();
    assert_eq!(ids, expected, "restarted under the same CloudEvents ids");
    // A listener committing its receipt settles the start.
    for event in &events {
        clinic_core::listeners::run(&db.pool, Listener::PatientBookingConfirmation, event).await.unwrap();
    }
    assert_eq!(unsettled(&client).await, 2, "the other listener's starts are still in custody");
}

/// The `appointment.created` outbox rows: how many are dead, how many in retry, and the most attempts.
async fn booked_rows(client: &deadpool_postgres::Object) -> (i64, i64, i32) {
    let row = client
        .query_one(
            "SELECT count(*) FILTER (WHERE status = 'dead'), count(*) FILTER (WHERE status = 'retry'), \
                    coalesce(max(attempts), 0) FROM event_outbox o JOIN events e ON e.id = o.event_id \
             WHERE e.type = 'appointment.created'",
            &[],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

async fn unsettled(client: &tokio_postgres::Client) -> i64 {
    client.query_one("SELECT count(*) FROM listener_custody", &[]).await.unwrap().get(0)
}

/// An SQS stand-in that answers every SendMessageBatch with each entry failed on the service's side
/// (`SenderFault: false`, `InternalError`), as SQS does in a partial incident.
async fn service_side_failures() -> (String, tokio::task::JoinHandle<()>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buffer = Vec::new();
                let mut chunk = [0u8; 8192];
                loop {
                    // One request: headers, then a body of Content-Length bytes.
                    let (head_end, length) = loop {
                        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                            let head = String::from_utf8_lossy(&buffer[..end]).to_ascii_lowercase();
                            let length = head
                                .lines()
                                .find_map(|line| line.strip_prefix("content-length:"))
                                .and_then(|value| value.trim().parse::<usize>().ok())
                                .unwrap_or(0);
                            break (end + 4, length);
                        }
                        match socket.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
                        }
                    };
                    while buffer.len() < head_end + length {
                        match socket.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let body: serde_json::Value =
                        serde_json::from_slice(&buffer[head_end..head_end + length]).unwrap_or_default();
                    buffer.drain(..head_end + length);
                    let failed: Vec<serde_json::Value> = body["Entries"]
                        .as_array()
                        .map(|entries| {
                            entries
                                .iter()
                                .map(|entry| {
                                    serde_json::json!({"Id": entry["Id"], "SenderFault": false,
                                        "Code": "InternalError", "Message": "service unavailable"})
                                })
                                .collect()
                        })
                        .unwrap_or_default();
                    let answer = serde_json::json!({"Successful": [], "Failed": failed}).to_string();
                    let response = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/x-amz-json-1.0\r\n\
                         x-amzn-RequestId: 00000000-0000-0000-0000-000000000000\r\n\
                         Content-Length: {}\r\n\r\n{answer}",
                        answer.len()
                    );
                    if socket.write_all(response.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (endpoint, server)
}

#[tokio::test]
async fn entries_failing_on_the_service_side_are_holds_not_attempts() {
    clinic_testkit::init_test_logging();
    let (endpoint, server) = service_side_failures().await;
    let db = clinic_testkit::fresh_db().await;
    let events = clinic_testkit::seed::booked_appointments(&db, 2).await;
    let transport = SqsTransport::new(client_for(&endpoint).await, queues_at(&endpoint), "/clinic");
    let start = Start { envelope: &events[0], listener: Listener::PatientBookingConfirmation };
    let error = transport.start(&[start]).await[0].clone().unwrap_err();
    assert!(error.unavailable && !error.permanent, "SenderFault = false is the service's: {error:?}");

    // Many steps past the attempt ceiling: every row held, no attempt spent, nothing dead.
    let dispatcher = Dispatcher::new(db.pool.clone(), Arc::new(transport), config());
    for _ in 0..(config().max_attempts * 2) {
        dispatcher.drain_once().await.unwrap();
        db.client()
            .await
            .execute("UPDATE event_outbox SET available_at = now() WHERE status = 'retry'", &[])
            .await
            .unwrap();
    }
    let (dead, retry, attempts) = booked_rows(&db.client().await).await;
    assert_eq!((dead, retry), (0, 2));
    assert!(attempts <= 1, "held rows keep their attempts: {attempts}");
    server.abort();
}
