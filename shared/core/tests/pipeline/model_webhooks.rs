//! A model of the webhook delivery lease queue's states (DESIGN §5d), checked by seeded random walks
//! against real PostgreSQL like the outbox's ([`super::model`]) and the notifications'
//! ([`super::model_notifications`]) (issue 38 item 6).
//!
//! The walk fans events out to one endpoint, steps the real [`WebhookSender`] against a receiver on
//! 127.0.0.1 whose answer it chooses (accept, a final refusal, a retryable refusal, or a crash: the
//! sender dies while the receiver holds its request, between the call and the mark), lets time pass
//! (retry delays and leases moved into the past; between steps the walk moves them into the future,
//! so only the walk moves time), disables and enables the endpoint, and retries or discards rows as
//! an operator, one by one or in bulk. After every step, against the database:
//! - every fanned-out delivery is there, in the status and with the attempts the model predicts;
//! - no request reaches the receiver under an expired lease (it reads the row's lease at call time);
//! - no delivery is accepted more than once, except after its lease expired under a crashed sender
//!   (the documented re-claim: receivers deduplicate on `webhook-id`);
//! - a disabled endpoint's deliveries are held: no attempt is spent while it is off;
//! - after the walk, an enabled endpoint, a healthy receiver and time passing leave every row final,
//!   every operator retry has had its attempt, and every `delivered` row reached the receiver.
//!
//! `MODEL_SEED`, `MODEL_CASES`, `MODEL_STEPS` and `MODEL_MINUTES` work as for the outbox walk.
//!
//! Over the 500-line guideline: the webhook queue's model, transitions and invariants are one state
//! machine read together, like the outbox walk's.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use clinic_core::error::DomainError;
use clinic_core::events::EventType;
use clinic_core::ids::{WebhookDeliveryId, WebhookEndpointId};
use clinic_core::lease::ActionKind;
use clinic_core::operator::bulk::{self, BulkRequest};
use clinic_core::operator::{ActionRequest, OperatedQueue, Operator, RowFilter, WebhookDeliveries};
use clinic_core::webhooks::client::Timeouts;
use clinic_core::webhooks::endpoints::{self, EndpointChange, NewEndpoint};
use clinic_core::webhooks::guard::Egress;
use clinic_core::webhooks::sender::{MAX_ATTEMPTS, MAX_IN_FLIGHT_PER_ENDPOINT};
use clinic_core::webhooks::{fanout, WebhookConfig, WebhookSender};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;

use super::support::Fixture;
use super::walk::{compare_rows, run_walks, walk, ModelWalk, Names, Rng};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// 200: delivered.
    Accept,
    /// 410: failed for good.
    Reject,
    /// 503: the attempt is spent, retried after the schedule's delay (or failed at the ceiling).
    Unavailable,
    /// The receiver holds the first request and the sender dies before its mark.
    Crash,
}

const ANSWERS: [Answer; 4] = [Answer::Accept, Answer::Reject, Answer::Unavailable, Answer::Crash];

#[derive(Debug, Clone, Copy)]
enum Action {
    FanOut,
    Step(Answer),
    TimePasses,
    Disable,
    Enable,
    Retry(usize),
    Discard(usize),
    BulkRetry,
}

#[derive(Default)]
struct Seen {
    answer: Option<u16>,
    /// Hold every request for ever (the sender that made them crashes) until the walk clears it.
    hold_next: bool,
    /// Requests that were (or may have been) accepted, per webhook-id.
    accepted: HashMap<String, u32>,
    /// Requests made while the row's lease had expired or it was not `sending`.
    expired_lease_calls: Vec<String>,
    /// Told when a request is held (fresh for each step, so no permit of an earlier step is left).
    reached: Arc<Notify>,
}

/// A receiver on 127.0.0.1 answering what the walk chose; it reads each row's lease at call time.
struct Receiver {
    url: String,
    address: std::net::SocketAddr,
    seen: Arc<Mutex<Seen>>,
    /// Requests accepted and not yet judged (their lease read and recorded).
    judging: Arc<AtomicUsize>,
}

/// One accepted request being judged: counted from its accept until it is recorded (or its
/// connection ends first).
struct Judging(Arc<AtomicUsize>);

impl Drop for Judging {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

const LEASE_VALID: &str =
    "SELECT count(*) FROM webhook_deliveries WHERE id = $1 AND status = 'sending' AND available_at > now()";

impl Receiver {
    async fn start(pool: deadpool_postgres::Pool) -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let address = listener.local_addr().expect("an address");
        let url = format!("http://{address}/hook");
        let seen = Arc::new(Mutex::new(Seen::default()));
        let judging = Arc::new(AtomicUsize::new(0));
        let (state, counter) = (seen.clone(), judging.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                let (state, pool, judging) = (state.clone(), pool.clone(), Judging(counter.clone()));
                tokio::spawn(async move { serve(stream, state, pool, judging).await });
            }
        });
        Receiver { url, address, seen, judging }
    }

    /// Waits until every request that reached the receiver before now has been judged. After a
    /// crash the dropped run's other requests may still sit in the receiver's socket buffers; judged
    /// later, after the walk moved their lease, they would read as calls under an expired lease. A
    /// barrier connection is accepted after all of them (the listen queue is in order), so once it is
    /// answered and nothing is being judged, they all were.
    async fn settle(&self) -> Result<(), String> {
        let mut barrier = tokio::net::TcpStream::connect(self.address).await.map_err(|e| e.to_string())?;
        barrier
            .write_all(b"GET /barrier HTTP/1.1\r\ncontent-length: 0\r\n\r\n")
            .await
            .map_err(|e| e.to_string())?;
        let mut answer = Vec::new();
        barrier.read_to_end(&mut answer).await.map_err(|e| e.to_string())?;
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while self.judging.load(Ordering::SeqCst) > 0 {
            if std::time::Instant::now() > deadline {
                return Err("the receiver did not judge its requests within a minute".into());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Ok(())
    }
}

async fn serve(
    mut stream: tokio::net::TcpStream,
    seen: Arc<Mutex<Seen>>,
    pool: deadpool_postgres::Pool,
    judging: Judging,
) {
    let mut raw = Vec::new();
    let mut buffer = [0u8; 4096];
    let head_end = loop {
        let Ok(read) = stream.read(&mut buffer).await else { return };
        if read == 0 {
            return;
        }
        raw.extend_from_slice(&buffer[..read]);
        if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
    };
    let head = String::from_utf8_lossy(&raw[..head_end]).to_lowercase();
    if head.starts_with("get /barrier ") {
        let _ = stream.write_all(b"HTTP/1.1 204 Barrier\r\nconnection: close\r\n\r\n").await;
        return;
    }
    let header = |name: &str| {
        head.lines().find_map(|line| line.strip_prefix(&format!("{name}:")).map(|v| v.trim().to_owned()))
    };
    let length: usize = header("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
    while raw.len() < head_end + length {
        let Ok(read) = stream.read(&mut buffer).await else { return };
        if read == 0 {
            return;
        }
        raw.extend_from_slice(&buffer[..read]);
    }
    let id = header("webhook-id").unwrap_or_default().to_uppercase();
    let row: Option<WebhookDeliveryId> = id.parse().ok();
    let client = pool.get().await.expect("the receiver's connection");
    let valid: i64 = client.query_one(LEASE_VALID, &[&row]).await.expect("the lease check").get(0);
    drop(client);
    let (status, hold, reached) = {
        let mut seen = seen.lock().unwrap();
        if valid != 1 {
            seen.expired_lease_calls.push(id.clone());
        }
        let hold = seen.hold_next;
        let status = seen.answer.unwrap_or(200);
        if hold || status == 200 {
            *seen.accepted.entry(id.clone()).or_default() += 1;
        }
        (status, hold, seen.reached.clone())
    };
    drop(judging);
    if hold {
        reached.notify_one();
        std::future::pending::<()>().await;
    }
    let answer = format!("HTTP/1.1 {status} Model\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
    let _ = stream.write_all(answer.as_bytes()).await;
}

/// The model of one delivery.
#[derive(Debug, Clone)]
struct Row {
    status: &'static str,
    attempts: i32,
    /// Due at the next claim of an enabled endpoint (`pending`, a retry whose delay the walk moved
    /// into the past, or a `sending` row whose lease it moved into the past).
    due: bool,
    /// Times its lease expired under a crashed sender (each allows one more accepted request).
    crashes: u32,
    owed_attempt: bool,
}

struct Walk {
    fx: Fixture,
    seed: u64,
    receiver: Receiver,
    sender: WebhookSender,
    endpoint: WebhookEndpointId,
    enabled: bool,
    patient: clinic_core::ids::PatientId,
    practitioner: clinic_core::ids::PractitionerId,
    rows: BTreeMap<WebhookDeliveryId, Row>,
    order: Vec<WebhookDeliveryId>,
    actions: Vec<Action>,
}

/// Retry delays and leases (`available_at`) into the past: what the walk's `TimePasses` does.
const MOVE_TIME: &str = "UPDATE webhook_deliveries SET available_at = now() - interval '1 second' \
                         WHERE status IN ('sending', 'retry')";
/// Between steps nothing becomes due by itself: delays and leases are pushed a day ahead.
const HOLD_TIME: &str = "UPDATE webhook_deliveries SET available_at = now() + interval '1 day' \
                         WHERE status IN ('sending', 'retry') AND available_at > now()";
const ROWS: &str = "SELECT id, status, attempts FROM webhook_deliveries";
const ROWS_OF: &str = "SELECT id FROM webhook_deliveries WHERE event_id = $1";
/// The rows under a live lease: held by an earlier crashed run (pushed a day ahead) or claimed by the
/// run that just crashed; a `sending` row whose lease the walk moved into the past and that no run
/// claimed again is not one.
const SENDING: &str = "SELECT id FROM webhook_deliveries WHERE status = 'sending' AND available_at > now()";

impl Walk {
    async fn new(seed: u64) -> Walk {
        let fx = Fixture::new().await;
        let patient = fx.create_patient().await;
        let practitioner = fx.create_practitioner().await;
        let receiver = Receiver::start(fx.db.pool.clone()).await;
        let key = clinic_testkit::webhook_key();
        let new = NewEndpoint {
            url: receiver.url.clone(),
            description: "model".into(),
            event_types: vec![EventType::AppointmentCreated],
            heartbeat_seconds: 0,
            payload_format: "cloudevents",
        };
        let endpoint = {
            let client = fx.db.client().await;
            endpoints::create(&client, &key, fx.workspace, &new, "model")
                .await
                .expect("an endpoint")
                .endpoint
                .id
        };
        let config = WebhookConfig {
            egress: Egress { allow_loopback_http: true },
            timeouts: Timeouts { connect: Duration::from_secs(5), total: Duration::from_secs(30) },
            lease: Duration::from_secs(600),
            ..WebhookConfig::default()
        };
        // The production body (the identifier-only CloudEvent): tests/run validates every captured one.
        let body = clinic_sqs::webhook_body("/clinic");
        let sender = WebhookSender::new(fx.db.pool.clone(), config, key, body);
        Walk {
            fx,
            seed,
            receiver,
            sender,
            endpoint,
            enabled: true,
            patient,
            practitioner,
            rows: BTreeMap::new(),
            order: Vec::new(),
            actions: Vec::new(),
        }
    }

    fn retried(row: &mut Row) {
        row.status = "pending";
        row.attempts = 0;
        row.due = true;
        row.owed_attempt = true;
    }

    async fn operator(&mut self, id: WebhookDeliveryId, kind: ActionKind) -> Result<(), String> {
        let status = self.rows[&id].status;
        let fits = matches!(status, "failed" | "retry");
        let mut client = self.fx.db.client().await;
        let tx = client.transaction().await.map_err(|e| e.to_string())?;
        let request = ActionRequest::new(kind, "model walk", None).expect("a request");
        let operator = Operator::member(self.fx.member);
        match (
            WebhookDeliveries::perform(&tx, Some(self.fx.workspace), id, &request, &operator, None).await,
            fits,
        ) {
            (Ok(_), true) => tx.commit().await.map_err(|e| e.to_string())?,
            (Err(DomainError::Conflict(_)), false) => return Ok(()),
            (other, _) => return Err(format!("{kind} of a {status} webhook delivery answered {other:?}")),
        }
        let row = self.rows.get_mut(&id).expect("a modelled row");
        if kind == ActionKind::Retry {
            Self::retried(row);
        } else {
            row.status = "discarded";
            row.due = false;
        }
        Ok(())
    }

    /// A bulk retry by filter (not a dry run): every `failed` or `retry` row gets a fresh budget.
    async fn bulk_retry(&mut self) -> Result<(), String> {
        let request = BulkRequest {
            filter: RowFilter { event_type: Some(EventType::AppointmentCreated), ..RowFilter::default() },
            workspace: Some(self.fx.workspace),
            action: ActionRequest::new(ActionKind::Retry, "model walk", None).expect("a request"),
            dry_run: false,
            limit: 5_000,
        };
        let operator = Operator::member(self.fx.member);
        let mut client = self.fx.db.client().await;
        let answer = bulk::run::<WebhookDeliveries>(&mut client, &request, &operator)
            .await
            .map_err(|e| e.to_string())?;
        let fitting: Vec<WebhookDeliveryId> = self
            .rows
            .iter()
            .filter(|(_, row)| matches!(row.status, "failed" | "retry"))
            .map(|(id, _)| *id)
            .collect();
        if answer.applied != fitting.len() || !answer.skipped.is_empty() {
            return Err(format!(
                "bulk retry applied {} of {} ({:?})",
                answer.applied,
                fitting.len(),
                answer.skipped
            ));
        }
        for id in fitting {
            Self::retried(self.rows.get_mut(&id).expect("a modelled row"));
        }
        Ok(())
    }

    /// One sender run with `answer` (the first request only, for `Crash`).
    async fn step(&mut self, answer: Answer) -> Result<(), String> {
        {
            let mut seen = self.receiver.seen.lock().unwrap();
            seen.answer = Some(match answer {
                Answer::Accept | Answer::Crash => 200,
                Answer::Reject => 410,
                Answer::Unavailable => 503,
            });
            seen.hold_next = answer == Answer::Crash;
            seen.reached = Arc::new(Notify::new());
        }
        let reached = self.receiver.seen.lock().unwrap().reached.clone();
        let bound = Duration::from_secs(60);
        let mut crashed = false;
        {
            let run = self.sender.send_due(50);
            tokio::pin!(run);
            tokio::select! {
                report = &mut run => { report.map_err(|e| e.to_string())?; }
                _ = reached.notified() => crashed = true,
                _ = tokio::time::sleep(bound) => return Err("a send run took over a minute".into()),
            }
            // A crash: `run` is dropped here, between the request and the mark.
        }
        self.receiver.seen.lock().unwrap().hold_next = false;
        if crashed {
            self.receiver.settle().await?;
        }
        let client = self.fx.db.client().await;
        // Burial first: a row whose lease expired at the ceiling is failed, never sent again.
        for row in self.rows.values_mut() {
            if row.status == "sending" && row.due && row.attempts >= MAX_ATTEMPTS {
                row.status = "failed";
                row.due = false;
            }
        }
        let live_leases = self.rows.values().filter(|row| row.status == "sending" && !row.due).count() as i64;
        let claimable: Vec<WebhookDeliveryId> = self
            .rows
            .iter()
            .filter(|(_, row)| row.due && matches!(row.status, "pending" | "retry" | "sending"))
            .map(|(id, _)| *id)
            .collect();
        if !self.enabled || live_leases >= MAX_IN_FLIGHT_PER_ENDPOINT {
            // Held (disabled endpoint) or no room in flight: nothing is claimed, no attempt spent.
        } else if crashed {
            // The rows the dead sender held: claimed (attempt spent), never marked.
            let sending: Vec<WebhookDeliveryId> = client
                .query(SENDING, &[])
                .await
                .map_err(|e| e.to_string())?
                .iter()
                .map(|r| r.get(0))
                .collect();
            for id in &sending {
                let Some(row) = self.rows.get_mut(id) else { return Err(format!("{id} is not modelled")) };
                if row.status == "sending" && !row.due {
                    continue;
                }
                if !claimable.contains(id) {
                    return Err(format!("{id} ({}) was claimed while not due", row.status));
                }
                row.status = "sending";
                row.attempts += 1;
                row.due = false;
                row.owed_attempt = false;
                row.crashes += 1;
            }
            let taken = sending.len() as i64 - live_leases;
            let room = MAX_IN_FLIGHT_PER_ENDPOINT - live_leases;
            if taken < 1 || taken > room.min(claimable.len() as i64) {
                return Err(format!(
                    "the crashed run held {taken} deliveries ({} due, room {room})",
                    claimable.len()
                ));
            }
        } else {
            for id in claimable {
                let row = self.rows.get_mut(&id).expect("a modelled row");
                row.attempts += 1;
                row.owed_attempt = false;
                row.due = false;
                row.status = match answer {
                    Answer::Accept | Answer::Crash => "delivered",
                    Answer::Reject => "failed",
                    Answer::Unavailable if row.attempts >= MAX_ATTEMPTS => "failed",
                    Answer::Unavailable => "retry",
                };
            }
        }
        client.execute(HOLD_TIME, &[]).await.map_err(|e| e.to_string())?;
        Ok(())
    }
}

#[async_trait]
impl ModelWalk for Walk {
    type Action = Action;

    fn choose(&self, rng: &mut Rng) -> Action {
        let pick = |rng: &mut Rng| rng.below(self.order.len().max(1));
        match rng.below(20) {
            0..=3 => Action::FanOut,
            4..=10 => Action::Step(ANSWERS[rng.below(ANSWERS.len())]),
            11..=12 => Action::TimePasses,
            13 => Action::Disable,
            14 => Action::Enable,
            15..=16 => Action::Retry(pick(rng)),
            17..=18 => Action::Discard(pick(rng)),
            _ => Action::BulkRetry,
        }
    }

    fn name(&self) -> &'static str {
        "webhook model walk"
    }

    fn seed(&self) -> String {
        self.seed.to_string()
    }

    fn actions(&self) -> &[Action] {
        &self.actions
    }

    async fn act(&mut self, action: Action) -> Result<(), String> {
        self.actions.push(action);
        match action {
            Action::FanOut => {
                if self.order.len() >= 24 {
                    return Ok(());
                }
                let hours = 24 + self.order.len() as i64;
                let (_, event) = self.fx.book(self.patient, self.practitioner, hours).await;
                let client = self.fx.db.client().await;
                let created = fanout::fan_out(&client, &event).await.map_err(|e| e.to_string())?;
                if created != 1 {
                    return Err(format!("the fan-out created {created} deliveries"));
                }
                let row = client.query_one(ROWS_OF, &[&event.id]).await.map_err(|e| e.to_string())?;
                let id: WebhookDeliveryId = row.get(0);
                let new = Row { status: "pending", attempts: 0, due: true, crashes: 0, owed_attempt: false };
                self.rows.insert(id, new);
                self.order.push(id);
            }
            Action::Step(answer) => self.step(answer).await?,
            Action::TimePasses => {
                self.fx.db.client().await.execute(MOVE_TIME, &[]).await.map_err(|e| e.to_string())?;
                for row in self.rows.values_mut() {
                    if matches!(row.status, "sending" | "retry") {
                        row.due = true;
                    }
                }
            }
            Action::Disable | Action::Enable => {
                let enabled = matches!(action, Action::Enable);
                let change = EndpointChange { enabled: Some(enabled), ..EndpointChange::default() };
                let client = self.fx.db.client().await;
                endpoints::update(&client, self.fx.workspace, self.endpoint, &change, "model")
                    .await
                    .map_err(|e| e.to_string())?;
                self.enabled = enabled;
            }
            Action::Retry(i) | Action::Discard(i) => {
                let Some(&id) = self.order.get(i) else { return Ok(()) };
                let kind =
                    if matches!(action, Action::Retry(_)) { ActionKind::Retry } else { ActionKind::Discard };
                self.operator(id, kind).await?;
            }
            Action::BulkRetry => self.bulk_retry().await?,
        }
        Ok(())
    }

    async fn check(&self) -> Result<(), String> {
        let client = self.fx.db.client().await;
        let stored = client.query(ROWS, &[]).await.map_err(|e| e.to_string())?;
        let names = Names { rows: "webhook deliveries", row: "delivery", came: "fanned out" };
        compare_rows(stored, &self.rows, |row| (row.status, row.attempts), names)?;
        let seen = self.receiver.seen.lock().unwrap();
        if let Some(id) = seen.expired_lease_calls.first() {
            return Err(format!("a request under an expired lease: delivery {id}"));
        }
        for (id, row) in &self.rows {
            let accepted = seen.accepted.get(&id.to_string()).copied().unwrap_or(0);
            if accepted > 1 + row.crashes {
                return Err(format!("delivery {id} accepted {accepted} times, {} crashes", row.crashes));
            }
        }
        Ok(())
    }

    async fn settle(&mut self, step: usize) -> Result<(), String> {
        self.act(Action::Enable).await?;
        for _ in 0..(MAX_ATTEMPTS as usize + 3) {
            self.act(Action::TimePasses).await?;
            self.act(Action::Step(Answer::Accept)).await?;
            self.check().await.map_err(|why| format!("settling after step {step}: {why}"))?;
        }
        let seen = self.receiver.seen.lock().unwrap();
        for (id, row) in &self.rows {
            if !matches!(row.status, "delivered" | "failed" | "discarded") {
                return Err(format!("delivery {id} is still {} after settling", row.status));
            }
            if row.owed_attempt {
                return Err(format!("delivery {id}: an operator retry led to no attempt"));
            }
            if row.status == "delivered" && !seen.accepted.contains_key(&id.to_string()) {
                return Err(format!("delivery {id} is delivered but never reached the receiver"));
            }
        }
        Ok(())
    }
}

async fn run_case(seed: u64, steps: usize) -> Result<(), String> {
    walk(Walk::new(seed).await, seed, steps).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_walks_of_the_webhook_deliveries_keep_the_lease_queue_invariants() {
    run_walks("webhook deliveries", |seed, steps| Box::pin(run_case(seed, steps))).await;
}
