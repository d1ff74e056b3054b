//! The harness the three model walks share (the outbox, the notifications and the webhook
//! deliveries; `model*.rs`): the seeded generator, the walk (an action, then every invariant, each
//! step; then the settle), the comparison of the database's rows with the model's, and the runner
//! (cases, replay of one seed, a shorter failing walk).
//!
//! Seeds: `MODEL_SEED=<n>` replays one case exactly; `MODEL_CASES` / `MODEL_STEPS` /
//! `MODEL_MINUTES` run longer by hand (docs/contributing.md).

use std::collections::BTreeMap;
use std::fmt::{Debug, Display};
use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use async_trait::async_trait;

/// splitmix64: a tiny deterministic generator (the same seed walks the same actions).
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub(super) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// One model walk of a queue: its actions, the model they update, and its invariants.
#[async_trait]
pub(super) trait ModelWalk: Send {
    type Action: Send + Debug;

    /// The next action (from `rng` only, so a seed replays the same walk).
    fn choose(&self, rng: &mut Rng) -> Self::Action;
    /// Runs one action and updates the model; `Err` names a broken expectation.
    async fn act(&mut self, action: Self::Action) -> Result<(), String>;
    /// The invariants, checked after every step.
    async fn check(&self) -> Result<(), String>;
    /// Ends the walk: lets everything finish, then checks what must hold at the end.
    async fn settle(&mut self, steps: usize) -> Result<(), String>;
    /// What the failure text calls this walk (e.g. "model walk").
    fn name(&self) -> &'static str;
    /// The seed as the failure text gives it (with anything else a replay needs).
    fn seed(&self) -> String;
    /// The actions so far.
    fn actions(&self) -> &[Self::Action];

    /// The failure text: the seed, `step`, `why` and the actions so far.
    fn fail(&self, step: usize, why: String) -> String {
        let actions = self.actions();
        format!(
            "{} failed: MODEL_SEED={} step {step}: {why}\nactions so far ({}): {actions:?}",
            self.name(),
            self.seed(),
            actions.len(),
        )
    }
}

/// Walks `steps` steps of `walk` from `seed`, checking the invariants after each, then settles.
pub(super) async fn walk<W: ModelWalk>(mut walk: W, seed: u64, steps: usize) -> Result<(), String> {
    let mut rng = Rng(seed);
    for step in 0..steps {
        let action = walk.choose(&mut rng);
        if let Err(why) = walk.act(action).await {
            return Err(walk.fail(step, why));
        }
        if let Err(why) = walk.check().await {
            return Err(walk.fail(step, why));
        }
    }
    walk.settle(steps).await.map_err(|why| walk.fail(steps, why))
}

/// How a comparison names what it compares: `rows` (e.g. "outbox rows"), one `row` (e.g. "row")
/// and how rows came to be (e.g. "committed").
pub(super) struct Names {
    pub rows: &'static str,
    pub row: &'static str,
    pub came: &'static str,
}

/// The database's rows (`id`, `status`, `attempts`, in that column order) against the model's: the
/// same ids, and each with the model's status and attempt count (`of` reads them off a model row).
pub(super) fn compare_rows<Id, R>(
    stored: Vec<tokio_postgres::Row>,
    model: &BTreeMap<Id, R>,
    of: impl Fn(&R) -> (&str, i32),
    names: Names,
) -> Result<(), String>
where
    Id: for<'a> tokio_postgres::types::FromSql<'a> + Ord + Display,
    R: Debug,
{
    if stored.len() != model.len() {
        return Err(format!("{} {}, {} {}", stored.len(), names.rows, model.len(), names.came));
    }
    for db_row in stored {
        let id: Id = db_row.get(0);
        let status: String = db_row.get(1);
        let attempts: i32 = db_row.get(2);
        let Some(row) = model.get(&id) else {
            return Err(format!("{} {id} was never {}", names.row, names.came));
        };
        let (expected_status, expected_attempts) = of(row);
        if status != expected_status || attempts != expected_attempts {
            return Err(format!(
                "{} {id}: database {status}/{attempts} attempts, model {expected_status}/{expected_attempts} ({row:?})",
                names.row
            ));
        }
    }
    Ok(())
}

fn env<T: std::str::FromStr>(name: &str) -> Option<T> {
    clinic_testkit::test_env::var(name).and_then(|value| value.parse().ok())
}

/// A case of a walk: `Err` is the failure text (seed, step, actions).
pub(super) type Case = fn(u64, usize) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;

/// Runs `MODEL_CASES` (default 20) cases of `MODEL_STEPS` (default 60) steps, or one with
/// `MODEL_SEED`, or as many as fit in `MODEL_MINUTES`; on a failure, panics with its text and the
/// shorter failing walk of the same seed (fewer steps).
pub(super) async fn run_walks(queue: &str, case: Case) {
    let steps: usize = env("MODEL_STEPS").unwrap_or(60);
    let fixed: Option<u64> = env("MODEL_SEED");
    let cases: usize = if fixed.is_some() { 1 } else { env("MODEL_CASES").unwrap_or(20) };
    let deadline = env::<u64>("MODEL_MINUTES").map(|m| Instant::now() + Duration::from_secs(60 * m));
    let base = fixed.unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
    });
    println!(
        "{queue} model walk: base seed {base} ({cases} cases x {steps} steps; MODEL_SEED=<seed> replays one)"
    );
    let started = Instant::now();
    let mut done = 0usize;
    loop {
        let more = match deadline {
            Some(deadline) => Instant::now() < deadline,
            None => done < cases,
        };
        if !more {
            break;
        }
        let seed = if fixed.is_some() { base } else { Rng(base.wrapping_add(done as u64)).next() };
        if let Err(failure) = case(seed, steps).await {
            // A failure during the walk names its step (the walk stops there); one found while
            // settling may show after fewer steps: halve the walk while it still fails.
            let mut shortest = steps;
            while shortest > 1 && case(seed, shortest / 2).await.is_err() {
                shortest /= 2;
            }
            panic!("{failure}\nshorter failing walk: MODEL_SEED={seed} MODEL_STEPS={shortest}");
        }
        done += 1;
    }
    println!("{queue} model walk: {done} cases x {steps} steps passed in {:.1?}", started.elapsed());
}
