//! A model of the outbox lease queue's states, checked by seeded random walks against real
//! PostgreSQL (issue 38 item 6; DESIGN §5, §5a, §5b, §5d).
//!
//! Each case is a fresh database and a walk of random actions: commits of new events, dispatcher
//! steps through a transport stand-in whose answer the walk chooses (accept, per-message reject,
//! permanent reject, outage, a slow answer past the lease that another dispatcher takes over, a crash
//! between the start and the mark), time passing (leases and backoffs moved into the past, as the
//! other pipeline tests do), listener pause and resume, and operator retry / replay / discard and
//! bulk retry. A reference model predicts each row's status and attempts and which listeners each
//! claim starts; after EVERY step the walk checks against the database:
//! - no row lost: every committed event has its row, in a documented status, as the model predicts;
//! - held rows (outage, paused listener) spend no attempts;
//! - no listener started twice for an event except after a crash, a lease takeover or a replay (the
//!   stand-in counts starts per event and listener);
//! - no start under an expired lease (the stand-in reads the row's lease at call time);
//! - every operator retry or replay leads to a real attempt (checked when the walk ends, after a
//!   drain that resumes everything and lets time pass).
//!
//! Seeds: `MODEL_SEED=<n>` replays one case exactly; `MODEL_CASES` / `MODEL_STEPS` /
//! `MODEL_MINUTES` run longer by hand (docs/contributing.md). Every failure names the seed, the step
//! and the actions so far, and a shorter failing walk of the same seed (fewer steps).
//!
//! Longer than the 500-line guideline on purpose: the reference model, its random transitions, the
//! invariants checked after every step and the shrinking replay are one state machine read together.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use clinic_core::dispatch::testing::{fast_config, NoopTransport};
use clinic_core::dispatch::{
    DispatchConfig, Dispatcher, Start, StartError, StartResult, StepOutcome, Transport,
};
use clinic_core::events::EventType;
use clinic_core::ids::EventId;
use clinic_core::lease::ActionKind;
use clinic_core::listeners::{self, Listener};
use clinic_core::operator::{self, ActionRequest, BulkRequest, Operator, OutboxFilter, Reason};
use clinic_core::outbox::{Backoff, Jitter};
use tokio::sync::Notify;

use super::support::Fixture;
use super::walk::{compare_rows, run_walks, walk, ModelWalk, Names, Rng};

/// What the transport stand-in answers to one dispatcher call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Accept,
    /// Every start fails retryably (a per-message failure: the attempt is spent).
    Reject,
    /// Every start fails permanently (the row goes `dead`).
    Permanent,
    /// The transport is down: every start answers unavailable (a hold).
    Outage,
    /// Starts, then time passes beyond the lease and a second dispatcher takes the rows over before
    /// the first one marks (its mark must be fenced).
    Slow,
    /// Starts, then the dispatcher dies before marking.
    Crash,
}

const ANSWERS: [Answer; 6] =
    [Answer::Accept, Answer::Reject, Answer::Permanent, Answer::Outage, Answer::Slow, Answer::Crash];

#[derive(Debug, Clone, Copy)]
enum Action {
    Commit,
    Step(Answer),
    TimePasses,
    Pause(usize),
    Resume(usize),
    Retry(usize),
    Replay(usize),
    Discard(usize),
    /// A bulk retry of every `dead` or `retry` row of the walk's event type.
    BulkRetry,
}

/// The stand-in's record of one call: which rows (and listeners) it was asked to start.
#[derive(Default)]
struct Calls {
    /// Starts per (event, listener) that the transport accepted or that may have gone out (a crash
    /// or a slow answer sends before it dies).
    effects: HashMap<(EventId, Listener), u32>,
    /// Starts asked for in the current step (reset by the walk).
    asked: Vec<(EventId, Listener)>,
    /// Starts asked while the row's lease in the database had expired or another claim held it.
    expired_lease_starts: Vec<String>,
}

/// The transport stand-in: answers the next call as the walk chose; a slow or crashing call signals
/// `reached` and waits for `release` (a crash is never released: the walk drops the step).
struct StandIn {
    pool: deadpool_postgres::Pool,
    answer: Mutex<Answer>,
    calls: Mutex<Calls>,
    reached: Notify,
    release: Notify,
}

const LEASE_OF: &str = "SELECT event_id FROM event_outbox \
                        WHERE event_id = ANY($1) AND (status <> 'claimed' OR claimed_until <= now())";
const EXPIRE_LEASES_OF: &str = "UPDATE event_outbox SET available_at = now() - interval '1 second', \
                                claimed_until = now() - interval '1 second' \
                                WHERE event_id = ANY($1) AND status = 'claimed'";

#[async_trait]
impl Transport for StandIn {
    fn name(&self) -> &'static str {
        "model"
    }

    async fn start(&self, starts: &[Start<'_>]) -> Vec<StartResult> {
        let answer = *self.answer.lock().unwrap();
        let ids: Vec<EventId> = starts.iter().map(|s| s.envelope.id).collect();
        let client = self.pool.get().await.expect("the stand-in's connection");
        let expired = client.query(LEASE_OF, &[&ids]).await.expect("the stand-in's lease check");
        {
            let mut calls = self.calls.lock().unwrap();
            for row in expired {
                let id: EventId = row.get(0);
                calls.expired_lease_starts.push(id.to_string());
            }
            calls.asked.extend(starts.iter().map(|s| (s.envelope.id, s.listener)));
            if matches!(answer, Answer::Accept | Answer::Slow | Answer::Crash) {
                for start in starts {
                    *calls.effects.entry((start.envelope.id, start.listener)).or_default() += 1;
                }
            }
        }
        match answer {
            Answer::Accept => starts.iter().map(|_| Ok(None)).collect(),
            Answer::Reject => {
                starts.iter().map(|_| Err(StartError::retryable("model_rejected", "rejected"))).collect()
            }
            Answer::Permanent => {
                starts.iter().map(|_| Err(StartError::permanent("model_refused", "refused"))).collect()
            }
            Answer::Outage => {
                starts.iter().map(|_| Err(StartError::unavailable("model_down", "unreachable"))).collect()
            }
            Answer::Slow => {
                client.execute(EXPIRE_LEASES_OF, &[&ids]).await.expect("the stand-in moves time");
                drop(client);
                // Answers Accept to the dispatcher that takes over; this call waits for it.
                *self.answer.lock().unwrap() = Answer::Accept;
                self.reached.notify_one();
                self.release.notified().await;
                starts.iter().map(|_| Ok(None)).collect()
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Pending,
    Claimed,
    Dispatched,
    Retry,
    Dead,
    Discarded,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Claimed => "claimed",
            Status::Dispatched => "dispatched",
            Status::Retry => "retry",
            Status::Dead => "dead",
            Status::Discarded => "discarded",
        }
    }
}

/// The model of one outbox row.
#[derive(Debug, Clone)]
struct Row {
    event_type: EventType,
    status: Status,
    attempts: i32,
    /// Due at the next claim (pending; or moved into the past by the walk).
    due: bool,
    /// Held for a paused listener (released at once by resume).
    held_for_pause: bool,
    /// Crashes, lease takeovers and replays: each allows one more start per listener.
    redeliveries: u32,
    /// An operator retry or replay whose attempt has not happened yet.
    owed_attempt: bool,
    /// Listeners a held attempt started (`listener_starts`): a later claim starts only the others.
    recorded: BTreeSet<Listener>,
}

struct Walk {
    fx: Fixture,
    seed: u64,
    stand_in: Arc<StandIn>,
    dispatcher: Dispatcher,
    successor: Dispatcher,
    config: DispatchConfig,
    patient: clinic_core::ids::PatientId,
    practitioner: clinic_core::ids::PractitionerId,
    setup: Vec<EventId>,
    rows: BTreeMap<EventId, Row>,
    order: Vec<EventId>,
    paused: Vec<Listener>,
    actions: Vec<Action>,
}

/// Every listener `appointment.created` routes to (the events this walk commits).
fn walk_listeners() -> Vec<Listener> {
    listeners::routed(EventType::AppointmentCreated, false).collect()
}

/// Backoffs, holds and leases far longer than a case: only the walk moves time.
fn model_config() -> DispatchConfig {
    DispatchConfig {
        lease: Duration::from_secs(600),
        backoff: Backoff {
            base: Duration::from_secs(600),
            cap: Duration::from_secs(1200),
            jitter: Jitter::Equal,
        },
        probe_max: Duration::from_secs(1200),
        unknown_retry: Duration::from_secs(1200),
        max_attempts: 3,
        ..fast_config()
    }
}

const MOVE_TIME: &str = "UPDATE event_outbox SET available_at = now() - interval '1 second', \
                         claimed_until = CASE WHEN status = 'claimed' THEN now() - interval '1 second' END \
                         WHERE status IN ('claimed', 'retry')";
const ROWS: &str = "SELECT event_id, status, attempts FROM event_outbox WHERE event_id <> ALL($1)";
/// The fixture's own events (its patient and practitioner): dispatched before the walk, not modelled.
const SETUP_ROWS: &str = "SELECT event_id FROM event_outbox";

impl Walk {
    async fn new(seed: u64) -> Walk {
        let fx = Fixture::new().await;
        let patient = fx.create_patient().await;
        let practitioner = fx.create_practitioner().await;
        let setup = fx.dispatcher(Arc::new(NoopTransport), fast_config());
        while let StepOutcome::Dispatched(_) = setup.step().await.expect("the setup rows dispatch") {}
        let client = fx.db.client().await;
        let setup: Vec<EventId> =
            client.query(SETUP_ROWS, &[]).await.expect("the setup rows").iter().map(|r| r.get(0)).collect();
        drop(client);
        let stand_in = Arc::new(StandIn {
            pool: fx.db.pool.clone(),
            answer: Mutex::new(Answer::Accept),
            calls: Mutex::new(Calls::default()),
            reached: Notify::new(),
            release: Notify::new(),
        });
        let config = model_config();
        let dispatcher = fx.dispatcher(stand_in.clone(), config).with_id(format!("model-a-{seed}"));
        let successor = fx.dispatcher(stand_in.clone(), config).with_id(format!("model-b-{seed}"));
        Walk {
            fx,
            seed,
            stand_in,
            dispatcher,
            successor,
            config,
            patient,
            practitioner,
            setup,
            rows: BTreeMap::new(),
            order: Vec::new(),
            paused: Vec::new(),
            actions: Vec::new(),
        }
    }

    async fn operator(&mut self, id: EventId, kind: ActionKind) -> Result<(), String> {
        let row = self.rows.get(&id).expect("a modelled row").clone();
        let fits = match kind {
            ActionKind::Retry => matches!(row.status, Status::Dead | Status::Retry),
            ActionKind::Replay => row.status == Status::Dispatched,
            ActionKind::Discard => row.status == Status::Dead,
        };
        let mut client = self.fx.db.client().await;
        let tx = client.transaction().await.map_err(|e| e.to_string())?;
        let request = ActionRequest::new(kind, "model walk", None).expect("a request");
        let operator = Operator::member(self.fx.member);
        let answer = operator::perform(&tx, Some(self.fx.workspace), id, &request, &operator).await;
        match (answer, fits) {
            (Ok(_), true) => tx.commit().await.map_err(|e| e.to_string())?,
            (Err(clinic_core::error::DomainError::Conflict(_)), false) => return Ok(()),
            (other, _) => return Err(format!("{kind} of a {} row answered {other:?}", row.status.as_str())),
        }
        let row = self.rows.get_mut(&id).expect("a modelled row");
        match kind {
            ActionKind::Discard => {
                row.status = Status::Discarded;
                row.due = false;
            }
            ActionKind::Retry | ActionKind::Replay => {
                row.status = Status::Pending;
                row.attempts = 0;
                row.due = true;
                row.held_for_pause = false;
                row.owed_attempt = true;
                if kind == ActionKind::Replay {
                    row.redeliveries += 1;
                    row.recorded.clear();
                }
            }
        }
        Ok(())
    }

    /// A bulk retry (not a dry run): every `dead` or `retry` row gets a fresh budget, nothing else
    /// changes.
    async fn bulk_retry(&mut self) -> Result<(), String> {
        let request = BulkRequest {
            filter: OutboxFilter {
                workspace: Some(self.fx.workspace),
                event_type: Some(EventType::AppointmentCreated),
                ..OutboxFilter::default()
            },
            workspace: Some(self.fx.workspace),
            action: ActionRequest::new(ActionKind::Retry, "model walk", None).expect("a request"),
            dry_run: false,
            limit: 5_000,
        };
        let operator = Operator::member(self.fx.member);
        let mut client = self.fx.db.client().await;
        let answer = operator::bulk::run::<operator::Outbox>(&mut client, &request, &operator)
            .await
            .map_err(|e| e.to_string())?;
        let fitting: Vec<EventId> = self
            .rows
            .iter()
            .filter(|(_, row)| matches!(row.status, Status::Dead | Status::Retry))
            .map(|(id, _)| *id)
            .collect();
        if answer.applied != fitting.len() || !answer.skipped.is_empty() {
            return Err(format!("bulk retry of {} dead or retry rows answered {answer:?}", fitting.len()));
        }
        for id in fitting {
            let row = self.rows.get_mut(&id).expect("a modelled row");
            row.status = Status::Pending;
            row.attempts = 0;
            row.due = true;
            row.held_for_pause = false;
            row.owed_attempt = true;
        }
        Ok(())
    }

    /// One dispatcher step with `answer`; predicts the rows it claimed from the model's due set.
    async fn step(&mut self, answer: Answer) -> Result<(), String> {
        *self.stand_in.answer.lock().unwrap() = answer;
        self.stand_in.calls.lock().unwrap().asked.clear();
        let bound = Duration::from_secs(60);
        let mut crashed = false;
        match answer {
            Answer::Crash | Answer::Slow => {
                let first = self.dispatcher.step();
                tokio::pin!(first);
                let reached = tokio::select! {
                    outcome = &mut first => {
                        outcome.map_err(|e| e.to_string())?;
                        false
                    }
                    _ = self.stand_in.reached.notified() => true,
                    _ = tokio::time::sleep(bound) => return Err("a step took over a minute".into()),
                };
                if reached && answer == Answer::Slow {
                    // The lease has expired (the stand-in moved it): the successor takes over.
                    let takeover = tokio::time::timeout(bound, self.successor.step()).await;
                    takeover.map_err(|_| "the takeover hung".to_string())?.map_err(|e| e.to_string())?;
                    self.stand_in.release.notify_one();
                    let outcome = tokio::time::timeout(bound, &mut first).await;
                    match outcome.map_err(|_| "the slow step hung".to_string())? {
                        Ok(StepOutcome::Dispatched(report)) if report.dispatched + report.retried > 0 => {
                            return Err(format!("a mark after a takeover was not fenced: {report:?}"));
                        }
                        Ok(_) => {}
                        Err(e) => return Err(e.to_string()),
                    }
                }
                // A crash: `first` is dropped here, between the start and the mark.
                crashed = reached && answer == Answer::Crash;
            }
            _ => {
                let outcome = tokio::time::timeout(bound, self.dispatcher.step()).await;
                outcome.map_err(|_| "a step hung".to_string())?.map_err(|e| e.to_string())?;
            }
        }
        let asked: Vec<(EventId, Listener)> = self.stand_in.calls.lock().unwrap().asked.clone();
        let max = self.config.max_attempts;
        for (id, row) in self.rows.iter_mut() {
            let started: BTreeSet<Listener> =
                asked.iter().filter(|(event, _)| event == id).map(|(_, listener)| *listener).collect();
            let seen = !started.is_empty();
            let remaining: BTreeSet<Listener> =
                listeners::routed(row.event_type, false).filter(|l| !row.recorded.contains(l)).collect();
            let paused = remaining.iter().any(|l| self.paused.contains(l));
            let expected: BTreeSet<Listener> =
                remaining.iter().copied().filter(|l| !self.paused.contains(l)).collect();
            if row.due && row.attempts < max && started != expected {
                return Err(format!(
                    "row {id}: started {started:?}, expected the missing unpaused listeners {expected:?}"
                ));
            }
            if !row.due {
                if seen {
                    return Err(format!("row {id} ({}) was started while not due", row.status.as_str()));
                }
                continue;
            }
            if row.attempts >= max {
                // Buried at claim time: its last dispatcher died before marking it.
                row.status = Status::Dead;
                row.due = false;
                if seen {
                    return Err(format!("row {id} at its ceiling was started instead of buried"));
                }
                continue;
            }
            row.owed_attempt = false;
            if crashed && !seen {
                // Claimed in the crashed step but nothing to start: no mark, the lease stays.
                row.status = Status::Claimed;
                row.attempts += 1;
                row.due = false;
                continue;
            }
            if !seen {
                // Nothing to start: every remaining listener is paused, so the row is held.
                if !paused {
                    return Err(format!("due row {id} was not started and no listener is paused"));
                }
                row.status = Status::Retry;
                row.held_for_pause = true;
                row.due = false;
                continue;
            }
            let attempts = row.attempts + 1;
            row.held_for_pause = false;
            row.due = false;
            match answer {
                Answer::Accept if paused => {
                    row.status = Status::Retry;
                    row.held_for_pause = true;
                    row.recorded.extend(started);
                }
                Answer::Accept => {
                    row.status = Status::Dispatched;
                    row.attempts = attempts;
                }
                Answer::Reject if attempts >= max => {
                    row.status = Status::Dead;
                    row.attempts = attempts;
                }
                Answer::Reject => {
                    row.status = Status::Retry;
                    row.attempts = attempts;
                }
                Answer::Permanent => {
                    row.status = Status::Dead;
                    row.attempts = attempts;
                }
                Answer::Outage => row.status = Status::Retry,
                Answer::Crash => {
                    row.status = Status::Claimed;
                    row.attempts = attempts;
                    row.redeliveries += 1;
                }
                Answer::Slow => {
                    row.redeliveries += 1;
                    if paused {
                        // The first dispatcher's hold mark is fenced, but the starts it made are
                        // recorded (not fenced: they did happen), whatever the takeover found.
                        row.recorded.extend(started.iter().copied());
                    }
                    if attempts >= max {
                        row.status = Status::Dead;
                        row.attempts = attempts;
                    } else if paused {
                        row.status = Status::Retry;
                        row.held_for_pause = true;
                        row.attempts = attempts;
                    } else {
                        row.status = Status::Dispatched;
                        row.attempts = attempts + 1;
                    }
                }
            }
        }
        Ok(())
    }
}

#[async_trait]
impl ModelWalk for Walk {
    type Action = Action;

    fn choose(&self, rng: &mut Rng) -> Action {
        let pick = |rng: &mut Rng| rng.below(self.order.len().max(1));
        match rng.below(21) {
            0..=3 => Action::Commit,
            4..=11 => Action::Step(ANSWERS[rng.below(ANSWERS.len())]),
            12..=13 => Action::TimePasses,
            14 => Action::Pause(rng.below(walk_listeners().len())),
            15 => Action::Resume(rng.below(walk_listeners().len())),
            16..=17 => Action::Retry(pick(rng)),
            18 => Action::Replay(pick(rng)),
            19 => Action::Discard(pick(rng)),
            _ => Action::BulkRetry,
        }
    }

    fn name(&self) -> &'static str {
        "model walk"
    }

    fn seed(&self) -> String {
        self.seed.to_string()
    }

    fn actions(&self) -> &[Action] {
        &self.actions
    }

    /// Runs one action and updates the model; `Err` names a broken expectation.
    async fn act(&mut self, action: Action) -> Result<(), String> {
        self.actions.push(action);
        match action {
            Action::Commit => {
                if self.order.len() >= 40 {
                    return Ok(());
                }
                let hours = 24 + self.order.len() as i64;
                let (_, event) = self.fx.book(self.patient, self.practitioner, hours).await;
                self.rows.insert(
                    event.id,
                    Row {
                        event_type: event.event_type,
                        status: Status::Pending,
                        attempts: 0,
                        due: true,
                        held_for_pause: false,
                        redeliveries: 0,
                        owed_attempt: false,
                        recorded: BTreeSet::new(),
                    },
                );
                self.order.push(event.id);
            }
            Action::Step(answer) => self.step(answer).await?,
            Action::TimePasses => {
                self.fx.db.client().await.execute(MOVE_TIME, &[]).await.map_err(|e| e.to_string())?;
                for row in self.rows.values_mut() {
                    if matches!(row.status, Status::Claimed | Status::Retry) {
                        row.due = true;
                    }
                }
            }
            Action::Pause(i) | Action::Resume(i) => {
                let listener = walk_listeners()[i];
                let pause = matches!(action, Action::Pause(_));
                let was_paused = self.paused.contains(&listener);
                let mut client = self.fx.db.client().await;
                let tx = client.transaction().await.map_err(|e| e.to_string())?;
                let operator = Operator::member(self.fx.member);
                let reason = Reason::parse("model walk").expect("a reason");
                let answer = if pause {
                    operator::pause::pause(&tx, self.fx.workspace, listener, &operator, &reason).await
                } else {
                    operator::pause::resume(&tx, self.fx.workspace, listener, &operator, &reason).await
                };
                match (answer, pause == was_paused) {
                    (Err(clinic_core::error::DomainError::Conflict(_)), true) => return Ok(()),
                    (Ok(_), false) => tx.commit().await.map_err(|e| e.to_string())?,
                    (other, _) => return Err(format!("{action:?} with paused {:?}: {other:?}", self.paused)),
                }
                if pause {
                    self.paused.push(listener);
                } else {
                    self.paused.retain(|l| *l != listener);
                    // Resume releases the rows held for paused listeners at once.
                    for row in self.rows.values_mut() {
                        if row.held_for_pause && row.status == Status::Retry {
                            row.due = true;
                        }
                    }
                }
            }
            Action::BulkRetry => self.bulk_retry().await?,
            Action::Retry(i) | Action::Replay(i) | Action::Discard(i) => {
                let Some(&id) = self.order.get(i) else { return Ok(()) };
                let kind = match action {
                    Action::Retry(_) => ActionKind::Retry,
                    Action::Replay(_) => ActionKind::Replay,
                    _ => ActionKind::Discard,
                };
                self.operator(id, kind).await?;
            }
        }
        Ok(())
    }

    /// The invariants, after every step.
    async fn check(&self) -> Result<(), String> {
        let client = self.fx.db.client().await;
        let stored = client.query(ROWS, &[&self.setup]).await.map_err(|e| e.to_string())?;
        let names = Names { rows: "outbox rows", row: "row", came: "committed" };
        compare_rows(stored, &self.rows, |row| (row.status.as_str(), row.attempts), names)?;
        let calls = self.stand_in.calls.lock().unwrap();
        if let Some(first) = calls.expired_lease_starts.first() {
            return Err(format!("a start under an expired or foreign lease: row {first}"));
        }
        for ((id, listener), count) in &calls.effects {
            let allowed = 1 + self.rows.get(id).map_or(0, |row| row.redeliveries);
            if *count > allowed {
                return Err(format!(
                    "{listener} started {count} times for row {id}, at most {allowed} allowed"
                ));
            }
        }
        Ok(())
    }

    /// Resumes everything, lets time pass and steps with a healthy transport until nothing is live;
    /// then every row is final and every operator retry or replay got its attempt.
    async fn settle(&mut self, step: usize) -> Result<(), String> {
        for i in 0..walk_listeners().len() {
            if self.paused.contains(&walk_listeners()[i]) {
                self.act(Action::Resume(i)).await?;
            }
        }
        for _ in 0..(self.config.max_attempts as usize + 3) {
            self.act(Action::TimePasses).await?;
            self.act(Action::Step(Answer::Accept)).await?;
            self.check().await.map_err(|why| format!("settling after step {step}: {why}"))?;
        }
        let calls = self.stand_in.calls.lock().unwrap();
        for (id, row) in &self.rows {
            if !matches!(row.status, Status::Dispatched | Status::Dead | Status::Discarded) {
                return Err(format!("row {id} is still {} after settling", row.status.as_str()));
            }
            if row.owed_attempt {
                return Err(format!("row {id}: an operator retry or replay led to no attempt"));
            }
            if row.status == Status::Dispatched {
                for listener in listeners::routed(row.event_type, false) {
                    if !calls.effects.contains_key(&(*id, listener)) {
                        return Err(format!("row {id} is dispatched but {listener} never started"));
                    }
                }
            }
        }
        Ok(())
    }
}

/// One case: `steps` random actions from `seed`, then settling. `Err` is the failure text.
async fn run_case(seed: u64, steps: usize) -> Result<(), String> {
    walk(Walk::new(seed).await, seed, steps).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_walks_of_the_outbox_keep_the_lease_queue_invariants() {
    run_walks("outbox", |seed, steps| Box::pin(run_case(seed, steps))).await;
}
