//! The `webhooks` mode against a receiver that accepts connections and never answers (a local TCP
//! listener this test owns, loopback only): the run ends before the invocation's deadline, one
//! endpoint never has more than the cap of attempts in flight, and an endpoint failing for longer than
//! the threshold is disabled even though sending used up the time.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use clinic_core::dispatch::{DispatchConfig, Dispatcher, LocalTransport};
use clinic_core::housekeeping::{JobKind, JobReport};
use clinic_core::webhooks::client::Timeouts;
use clinic_core::webhooks::endpoints::{self, NewEndpoint};
use clinic_core::webhooks::guard::Egress;
use clinic_core::webhooks::{WebhookConfig, WebhookSender};
use clinic_dispatcher::{handle, Housekeeping, Mode, State};
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{json, Value};
use tokio::io::AsyncReadExt;

/// A listener that accepts every connection and never answers; it counts the connections open at
/// once (a connection ends when the client gives up and closes it).
struct Silent {
    port: u16,
    open: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
}

async fn silent() -> Silent {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (open, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (open_, most_) = (open.clone(), most.clone());
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else { return };
            let now = open_.fetch_add(1, Ordering::SeqCst) + 1;
            most_.fetch_max(now, Ordering::SeqCst);
            let open = open_.clone();
            tokio::spawn(async move {
                let mut sink = [0u8; 4096];
                while matches!(socket.read(&mut sink).await, Ok(n) if n > 0) {}
                open.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    Silent { port, open, most }
}

fn tick(deadline: SystemTime) -> LambdaEvent<EventBridgeEvent<Value>> {
    let payload = json!({
        "version": "0", "id": "webhooks", "detail-type": "Scheduled Event", "source": "clinic.housekeeping",
        "account": "", "time": "1970-01-01T00:00:00Z", "region": "", "resources": [],
        "detail": {"mode": "webhooks"}
    });
    let mut context = Context::default();
    context.deadline = deadline.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
    LambdaEvent::new(serde_json::from_value(payload).unwrap(), context)
}

/// Issue 38 defect 4 (failed against a86860d: the run kept sending past the deadline, one endpoint
/// took the whole batch, and failing endpoints were disabled only after the loop).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_never_answering_receiver_cannot_keep_the_webhook_run_past_its_deadline() {
    clinic_testkit::init_test_logging();
    let db = clinic_testkit::fresh_db().await;
    let events = clinic_testkit::seed::booked_appointments(&db, 20).await;
    let workspace = events[0].workspace_id;
    let (slow, others) = (silent().await, silent().await);
    let client = db.client().await;
    for n in 0..10 {
        let port = if n == 0 { slow.port } else { others.port };
        let new = NewEndpoint {
            url: format!("http://127.0.0.1:{port}/hook/{n}"),
            description: String::new(),
            event_types: vec![],
            heartbeat_seconds: 0,
            payload_format: "cloudevents",
        };
        endpoints::create(&client, &clinic_testkit::webhook_key(), workspace, &new, "test").await.unwrap();
    }
    // One delivery per (endpoint, event): 200 deliveries that all hang.
    client
        .execute(
            "INSERT INTO webhook_deliveries (id, endpoint_id, workspace_id, event_id, event_type) \
             SELECT gen_random_uuid(), w.id, w.workspace_id, e.id, e.type FROM webhook_endpoints w, events e \
             WHERE e.workspace_id = w.workspace_id",
            &[],
        )
        .await
        .unwrap();
    let deliveries: i64 =
        client.query_one("SELECT count(*) FROM webhook_deliveries", &[]).await.unwrap().get(0);
    assert!(deliveries >= 200, "{deliveries}");
    // One endpoint has failed for six days (the threshold is five).
    client
        .execute(
            "UPDATE webhook_endpoints SET failing_since = now() - interval '6 days' \
             WHERE url LIKE '%/hook/1'",
            &[],
        )
        .await
        .unwrap();

    let config = WebhookConfig {
        egress: Egress { allow_loopback_http: true },
        timeouts: Timeouts { connect: Duration::from_secs(1), total: Duration::from_secs(2) },
        ..WebhookConfig::default()
    };
    let body = clinic_sqs::webhook_body("/clinic");
    let sender = WebhookSender::new(db.pool.clone(), config, clinic_testkit::webhook_key(), body);
    let dispatcher = Dispatcher::new(
        db.pool.clone(),
        Arc::new(LocalTransport::new(db.pool.clone())),
        DispatchConfig::default(),
    );
    let housekeeping = Housekeeping { webhooks: Some(Arc::new(sender)), ..Default::default() };
    let state = State::new(dispatcher, Duration::from_secs(60), Mode::Job(JobKind::Webhooks), housekeeping);

    let budget = Duration::from_secs(12);
    let started = Instant::now();
    let answer = handle(&state, tick(SystemTime::now() + budget)).await.unwrap();
    let took = started.elapsed();
    assert!(took < budget, "the webhook run took {took:?}, past its {budget:?} deadline");
    let Some(JobReport::Webhooks(report)) = answer.job else { panic!("a webhook report: {answer:?}") };
    assert!(report.retried > 0, "it did send: {report:?}");
    assert!(report.stopped_at_deadline, "{report:?}");
    assert_eq!(report.disabled_endpoints, 1, "{report:?}");
    let disabled: i64 = client
        .query_one(
            "SELECT count(*) FROM webhook_endpoints WHERE NOT enabled AND disabled_reason = 'failing'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(disabled, 1);
    let most = slow.most.load(Ordering::SeqCst);
    assert!(most >= 1, "the hanging endpoint was tried");
    assert!(most <= 4, "one endpoint had {most} attempts in flight at once");
    let _ = (slow.open, others.open);
}
