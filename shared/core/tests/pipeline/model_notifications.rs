//! A model of the notification lease queue's states (DESIGN §5b), checked by seeded random walks
//! against real PostgreSQL like the outbox's in [`super::model`] (issue 38 item 6).
//!
//! The walk enqueues notifications (a booking and its confirmation listener), steps a [`Sender`]
//! through a provider stand-in whose answer it chooses (accept, permanent reject, throttle, a
//! timeout, a slow answer past the lease that a second sender takes over, a crash between the
//! provider call and the mark), lets time pass (leases and backoffs moved into the past) and retries
//! or discards rows as an operator. After every step, against the database:
//! - every enqueued row is there, in the status and with the attempts the model predicts;
//! - no provider call under an expired lease (the stand-in reads the row's lease at call time);
//! - no message accepted twice for a key except after its row went `uncertain` (the documented
//!   `resend` policy: a crash or a lease that ended while the provider was answering);
//! - after the walk, a healthy provider and time passing leave every row final, every operator
//!   retry has had its attempt, and every `sent` row reached the provider.
//!
//! `MODEL_SEED`, `MODEL_CASES`, `MODEL_STEPS` and `MODEL_MINUTES` work as for the outbox walk.
//!
//! Just over the 500-line guideline: the notification queue's model, transitions and invariants are one
//! state machine read together, like the outbox walk's.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use clinic_core::delivery::{
    Accepted, DeliveryConfig, NotifierKind, OutgoingMessage, Provider, ProviderError, Providers, Sender,
    UncertainPolicy,
};
use clinic_core::error::DomainError;
use clinic_core::ids::NotificationId;
use clinic_core::lease::ActionKind;
use clinic_core::listeners::{self, Listener, ListenerOutcome};
use clinic_core::operator::{ActionRequest, Notifications, OperatedQueue, Operator};
use clinic_core::outbox::{Backoff, Jitter};
use tokio::sync::Notify;

use super::support::Fixture;
use super::walk::{compare_rows, run_walks, walk, ModelWalk, Names, Rng};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Accept,
    /// A permanent refusal (`dead` at once).
    Reject,
    /// A retryable refusal (the attempt is spent).
    Throttle,
    /// No answer within the provider timeout (retryable).
    Timeout,
    /// The first call of the step outlives its lease: a second sender finds it expired, marks it
    /// `uncertain` and resends it before the first call answers (its mark must be fenced).
    Slow,
    /// The sender dies during its first provider call, before the mark.
    Crash,
}

const ANSWERS: [Answer; 6] =
    [Answer::Accept, Answer::Reject, Answer::Throttle, Answer::Timeout, Answer::Slow, Answer::Crash];

#[derive(Debug, Clone, Copy)]
enum Action {
    Enqueue,
    Step(Answer),
    TimePasses,
    Retry(usize),
    Discard(usize),
}

#[derive(Default)]
struct Calls {
    /// Provider calls per idempotency key that were (or may have been) accepted.
    accepted: HashMap<String, u32>,
    /// Keys called in the current step, in order (reset by the walk).
    called: Vec<String>,
    /// Calls made while the row's lease had expired or it was not `sending`.
    expired_lease_calls: Vec<String>,
}

struct StandIn {
    pool: deadpool_postgres::Pool,
    answer: Mutex<Answer>,
    calls: Mutex<Calls>,
    reached: Notify,
    release: Notify,
}

const LEASE_VALID: &str = "SELECT count(*) FROM notifications \
                           WHERE idempotency_key = $1 AND status = 'sending' AND claimed_until > now()";
const EXPIRE_LEASE_OF: &str = "UPDATE notifications SET available_at = now() - interval '1 second', \
                               claimed_until = now() - interval '1 second' \
                               WHERE idempotency_key = $1 AND status = 'sending'";

#[async_trait]
impl Provider for StandIn {
    fn name(&self) -> &'static str {
        "model"
    }

    async fn send(&self, message: &OutgoingMessage) -> Result<Accepted, ProviderError> {
        let key = message.idempotency_key.clone();
        let answer = *self.answer.lock().unwrap();
        {
            // Recorded before anything can be cut short by the sender's provider timeout.
            let mut calls = self.calls.lock().unwrap();
            calls.called.push(key.clone());
            if matches!(answer, Answer::Accept | Answer::Slow | Answer::Crash) {
                *calls.accepted.entry(key.clone()).or_default() += 1;
            }
        }
        let client = self.pool.get().await.expect("the stand-in's connection");
        let valid: i64 = client.query_one(LEASE_VALID, &[&key]).await.expect("the lease check").get(0);
        if valid != 1 {
            self.calls.lock().unwrap().expired_lease_calls.push(key.clone());
        }
        match answer {
            Answer::Accept => Ok(Accepted { provider_message_id: format!("m-{key}") }),
            Answer::Reject => Err(ProviderError::permanent("model_refused")),
            Answer::Throttle => Err(ProviderError::retryable("model_throttled")),
            Answer::Timeout => {
                drop(client);
                std::future::pending::<()>().await;
                unreachable!()
            }
            Answer::Slow => {
                client.execute(EXPIRE_LEASE_OF, &[&key]).await.expect("the stand-in moves time");
                drop(client);
                *self.answer.lock().unwrap() = Answer::Accept;
                self.reached.notify_one();
                self.release.notified().await;
                Ok(Accepted { provider_message_id: format!("m-{key}") })
            }
            Answer::Crash => {
                drop(client);
                self.reached.notify_one();
                std::future::pending::<()>().await;
                unreachable!()
            }
        }
    }
}

/// The model of one notification row.
#[derive(Debug, Clone)]
struct Row {
    key: String,
    status: &'static str,
    attempts: i32,
    /// Due at the next claim (`pending`, `uncertain`, or moved into the past by the walk); for a
    /// `sending` row: its lease has expired.
    due: bool,
    /// Times the row went `uncertain` (each allows one more accepted call under `resend`).
    uncertain: u32,
    owed_attempt: bool,
}

struct Walk {
    fx: Fixture,
    seed: u64,
    stand_in: Arc<StandIn>,
    sender: Sender,
    successor: Sender,
    /// The sender of `Step(Timeout)`: a provider timeout of 100 ms, which every call of that step
    /// exceeds.
    impatient: Sender,
    max_attempts: i32,
    /// The case's `uncertain` policy: `Resend` claims an `uncertain` row again, `Hold` leaves it for
    /// an operator.
    resend: bool,
    patient: clinic_core::ids::PatientId,
    practitioner: clinic_core::ids::PractitionerId,
    rows: BTreeMap<NotificationId, Row>,
    order: Vec<NotificationId>,
    actions: Vec<Action>,
}

/// Backoffs, leases and the provider timeout far longer than a case: only the walk moves time.
fn model_config(policy: UncertainPolicy) -> DeliveryConfig {
    let mut config = DeliveryConfig::with_notifiers(vec![NotifierKind::Log]);
    config.batch = 100;
    config.max_attempts = 3;
    config.lease = Duration::from_secs(600);
    // Longer than any step of the walk under load: only `Step(Timeout)` (through the impatient
    // sender) times out.
    config.provider_timeout = Duration::from_secs(60);
    config.uncertain = policy;
    config.backoff =
        Backoff { base: Duration::from_secs(600), cap: Duration::from_secs(1200), jitter: Jitter::Equal };
    config
}

const MOVE_TIME: &str = "UPDATE notifications SET available_at = now() - interval '1 second', \
                         claimed_until = CASE WHEN status = 'sending' THEN now() - interval '1 second' END \
                         WHERE status IN ('sending', 'retry')";
const ROWS: &str = "SELECT id, status, attempts FROM notifications";
const ROW_OF: &str = "SELECT id, idempotency_key FROM notifications WHERE event_id = $1 AND listener = $2";

impl Walk {
    async fn new(seed: u64, policy: UncertainPolicy) -> Walk {
        let fx = Fixture::new().await;
        let patient = fx.create_patient().await;
        let practitioner = fx.create_practitioner().await;
        let stand_in = Arc::new(StandIn {
            pool: fx.db.pool.clone(),
            answer: Mutex::new(Answer::Accept),
            calls: Mutex::new(Calls::default()),
            reached: Notify::new(),
            release: Notify::new(),
        });
        let config = model_config(policy);
        let max_attempts = config.max_attempts;
        let sender = Sender::new(fx.db.pool.clone(), Providers::both(stand_in.clone()), config.clone());
        let successor = Sender::new(fx.db.pool.clone(), Providers::both(stand_in.clone()), config.clone());
        let impatient_config = DeliveryConfig { provider_timeout: Duration::from_millis(100), ..config };
        let impatient = Sender::new(fx.db.pool.clone(), Providers::both(stand_in.clone()), impatient_config);
        Walk {
            fx,
            seed,
            stand_in,
            sender,
            successor,
            impatient,
            max_attempts,
            resend: policy == UncertainPolicy::Resend,
            patient,
            practitioner,
            rows: BTreeMap::new(),
            order: Vec::new(),
            actions: Vec::new(),
        }
    }

    async fn operator(&mut self, id: NotificationId, kind: ActionKind) -> Result<(), String> {
        let status = self.rows[&id].status;
        let fits = matches!(status, "dead" | "retry" | "uncertain" | "no_contact");
        let mut client = self.fx.db.client().await;
        let tx = client.transaction().await.map_err(|e| e.to_string())?;
        let request = ActionRequest::new(kind, "model walk", None).expect("a request");
        let operator = Operator::member(self.fx.member);
        match (
            Notifications::perform(&tx, Some(self.fx.workspace), id, &request, &operator, None).await,
            fits,
        ) {
            (Ok(_), true) => tx.commit().await.map_err(|e| e.to_string())?,
            (Err(DomainError::Conflict(_)), false) => return Ok(()),
            (other, _) => return Err(format!("{kind} of a {status} delivery answered {other:?}")),
        }
        let row = self.rows.get_mut(&id).expect("a modelled row");
        if kind == ActionKind::Retry {
            row.status = "pending";
            row.attempts = 0;
            row.due = true;
            row.owed_attempt = true;
        } else {
            row.status = "discarded";
            row.due = false;
        }
        Ok(())
    }

    /// One sender step with `answer` (the first call only, for `Slow` and `Crash`).
    async fn step(&mut self, answer: Answer) -> Result<(), String> {
        *self.stand_in.answer.lock().unwrap() = answer;
        self.stand_in.calls.lock().unwrap().called.clear();
        let bound = Duration::from_secs(60);
        let mut reached = false;
        {
            let sender = if answer == Answer::Timeout { &self.impatient } else { &self.sender };
            let first = sender.step_due();
            tokio::pin!(first);
            tokio::select! {
                outcome = &mut first => { outcome.map_err(|e| e.to_string())?; }
                _ = self.stand_in.reached.notified() => reached = true,
                _ = tokio::time::sleep(bound) => return Err("a send step took over a minute".into()),
            }
            if reached && answer == Answer::Slow {
                let takeover = tokio::time::timeout(bound, self.successor.step_due()).await;
                takeover.map_err(|_| "the takeover hung".to_string())?.map_err(|e| e.to_string())?;
                self.stand_in.release.notify_one();
                let outcome = tokio::time::timeout(bound, &mut first).await;
                outcome.map_err(|_| "the slow step hung".to_string())?.map_err(|e| e.to_string())?;
            }
            // A crash: `first` is dropped here, between the provider call and the mark.
        }
        let called = self.stand_in.calls.lock().unwrap().called.clone();
        let crashed = reached && answer == Answer::Crash;
        let first_key = called.first().cloned();
        let max = self.max_attempts;
        for (id, row) in self.rows.iter_mut() {
            // Expiry first: a `sending` row whose lease ended becomes `uncertain` (or `dead`).
            if row.status == "sending" && row.due {
                row.uncertain += 1;
                if row.attempts >= max {
                    row.status = "dead";
                    row.due = false;
                    continue;
                }
                row.status = "uncertain";
            }
            let calls = called.iter().filter(|key| **key == row.key).count();
            let claimed = row.due
                && (matches!(row.status, "pending" | "retry") || (row.status == "uncertain" && self.resend));
            if !claimed {
                if calls > 0 {
                    return Err(format!("delivery {id} ({}) reached the provider while not due", row.status));
                }
                continue;
            }
            row.owed_attempt = false;
            row.due = false;
            row.attempts += 1;
            let first = first_key.as_deref() == Some(row.key.as_str());
            if crashed {
                row.status = "sending";
                if calls != usize::from(first) {
                    return Err(format!("delivery {id}: {calls} calls in a step that crashed"));
                }
                continue;
            }
            // A slow first call is called again by the successor, unless its claim already used
            // the last attempt (the successor then buries it `dead` instead).
            let expected =
                if answer == Answer::Slow && first && row.attempts < max && self.resend { 2 } else { 1 };
            if calls != expected {
                return Err(format!("delivery {id}: {calls} provider calls, expected {expected}"));
            }
            let this = if first {
                answer
            } else if answer == Answer::Slow {
                Answer::Accept
            } else {
                answer
            };
            row.status = match this {
                Answer::Accept => "sent",
                Answer::Reject => "dead",
                Answer::Throttle | Answer::Timeout if row.attempts >= max => "dead",
                Answer::Throttle | Answer::Timeout => "retry",
                Answer::Slow => {
                    // Taken over: expired to `uncertain`, claimed again and sent by the successor
                    // (or buried at the ceiling; or left `uncertain` under `hold`); the first
                    // sender's mark is fenced.
                    row.uncertain += 1;
                    if row.attempts >= max {
                        "dead"
                    } else if !self.resend {
                        "uncertain"
                    } else {
                        row.attempts += 1;
                        "sent"
                    }
                }
                Answer::Crash => unreachable!("handled above"),
            };
        }
        Ok(())
    }
}

#[async_trait]
impl ModelWalk for Walk {
    type Action = Action;

    fn choose(&self, rng: &mut Rng) -> Action {
        let pick = |rng: &mut Rng| rng.below(self.order.len().max(1));
        match rng.below(16) {
            0..=3 => Action::Enqueue,
            4..=10 => Action::Step(ANSWERS[rng.below(ANSWERS.len())]),
            11..=12 => Action::TimePasses,
            13..=14 => Action::Retry(pick(rng)),
            _ => Action::Discard(pick(rng)),
        }
    }

    fn name(&self) -> &'static str {
        "notification model walk"
    }

    fn seed(&self) -> String {
        format!("{} (resend: {})", self.seed, self.resend)
    }

    fn actions(&self) -> &[Action] {
        &self.actions
    }

    async fn act(&mut self, action: Action) -> Result<(), String> {
        self.actions.push(action);
        match action {
            Action::Enqueue => {
                if self.order.len() >= 30 {
                    return Ok(());
                }
                let hours = 24 + self.order.len() as i64;
                let (_, event) = self.fx.book(self.patient, self.practitioner, hours).await;
                let listener = Listener::PatientBookingConfirmation;
                let outcome =
                    listeners::run(&self.fx.db.pool, listener, &event).await.map_err(|e| e.to_string())?;
                if outcome != (ListenerOutcome::Applied { effects: 1 }) {
                    return Err(format!("the confirmation listener answered {outcome:?}"));
                }
                let client = self.fx.db.client().await;
                let row = client
                    .query_one(ROW_OF, &[&event.id, &listener.as_str()])
                    .await
                    .map_err(|e| e.to_string())?;
                let id: NotificationId = row.get(0);
                let key: String = row.get(1);
                self.rows.insert(
                    id,
                    Row { key, status: "pending", attempts: 0, due: true, uncertain: 0, owed_attempt: false },
                );
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
            Action::Retry(i) | Action::Discard(i) => {
                let Some(&id) = self.order.get(i) else { return Ok(()) };
                let kind =
                    if matches!(action, Action::Retry(_)) { ActionKind::Retry } else { ActionKind::Discard };
                self.operator(id, kind).await?;
            }
        }
        Ok(())
    }

    async fn check(&self) -> Result<(), String> {
        let client = self.fx.db.client().await;
        let stored = client.query(ROWS, &[]).await.map_err(|e| e.to_string())?;
        let names = Names { rows: "notifications", row: "delivery", came: "enqueued" };
        compare_rows(stored, &self.rows, |row| (row.status, row.attempts), names)?;
        let calls = self.stand_in.calls.lock().unwrap();
        if let Some(key) = calls.expired_lease_calls.first() {
            return Err(format!("a provider call under an expired lease: key {key}"));
        }
        for row in self.rows.values() {
            let accepted = calls.accepted.get(&row.key).copied().unwrap_or(0);
            if accepted > 1 + row.uncertain {
                return Err(format!(
                    "key {} accepted {accepted} times, went uncertain {} times",
                    row.key, row.uncertain
                ));
            }
        }
        Ok(())
    }

    async fn settle(&mut self, step: usize) -> Result<(), String> {
        for _ in 0..(self.max_attempts as usize + 3) {
            self.act(Action::TimePasses).await?;
            if !self.resend {
                // Under `hold` an operator decides: retry every `uncertain` row.
                for i in 0..self.order.len() {
                    if self.rows[&self.order[i]].status == "uncertain" {
                        self.act(Action::Retry(i)).await?;
                    }
                }
            }
            self.act(Action::Step(Answer::Accept)).await?;
            self.check().await.map_err(|why| format!("settling after step {step}: {why}"))?;
        }
        let calls = self.stand_in.calls.lock().unwrap();
        for (id, row) in &self.rows {
            if !matches!(row.status, "sent" | "dead" | "discarded") {
                return Err(format!("delivery {id} is still {} after settling", row.status));
            }
            if row.owed_attempt {
                return Err(format!("delivery {id}: an operator retry led to no attempt"));
            }
            if row.status == "sent" && !calls.accepted.contains_key(&row.key) {
                return Err(format!("delivery {id} is sent but never reached the provider"));
            }
        }
        Ok(())
    }
}

async fn run_case(seed: u64, steps: usize) -> Result<(), String> {
    // From the seed itself (not the generator), so the walk of a seed stays the same.
    let policy = if seed % 3 == 0 { UncertainPolicy::Hold } else { UncertainPolicy::Resend };
    walk(Walk::new(seed, policy).await, seed, steps).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_walks_of_the_notifications_keep_the_lease_queue_invariants() {
    run_walks("notifications", |seed, steps| Box::pin(run_case(seed, steps))).await;
}
