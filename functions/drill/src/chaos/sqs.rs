//! The SQS side of a run: a private emulator (`moto_server`, the run's own child), the proxy in front of it
//! (the fault), one queue per listener, and the listener side — consumers that run each batch
//! through the listener Lambda's own handler ([`clinic::sqs_consumer`]) and count what it decided.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, Context};
use aws_sdk_sqs::types::{Message, QueueAttributeName};
use clinic_core::ids::EventId;
use clinic_core::listeners::{Listener, ListenerOutcome};
use clinic_listener::{State, Verdict};
use tokio::sync::watch;

use super::dispatcher::ChaosNotifier;
use clinic::sqs_consumer::{ConsumerOptions, Observe};

/// Consumers per queue, like concurrent Lambda pollers.
const CONSUMERS_PER_QUEUE: usize = 2;
/// Messages of one batch run at once (the listener function's pool size in AWS is 2; more here, so a
/// batch of 10 never comes near its visibility timeout on a loaded machine).
const BATCH_CONCURRENCY: usize = 5;

/// What the listener side decided for the messages it received.
#[derive(Debug, Default, Clone)]
pub struct Consumed {
    pub runs: u64,
    pub duplicates: u64,
    /// Retryable failures by code (redelivered).
    pub retryable: BTreeMap<&'static str, u64>,
    pub receive_errors: u64,
    /// Rejected against the event log, by reason code: forged and altered messages.
    pub rejected: BTreeMap<&'static str, u64>,
    /// (event id, listener) of messages that failed permanently otherwise: what SQS redrive would move
    /// to the dead-letter queue. A set: a redelivered poison message is one message.
    pub dead_lettered: BTreeSet<(String, String)>,
    /// Retryable failures per event id with the code `db_lock_timeout` (the lock fault).
    pub lock_timeouts: BTreeMap<String, u64>,
}

impl Consumed {
    pub fn retryable_total(&self) -> u64 {
        self.retryable.values().sum()
    }
}

/// The consumers' shared tally.
pub struct Counter(Mutex<Consumed>);

impl Counter {
    fn lock(&self) -> std::sync::MutexGuard<'_, Consumed> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// What the consumers decided so far.
    pub fn snapshot(&self) -> Consumed {
        self.lock().clone()
    }
}

impl Observe for Counter {
    fn verdict(&self, message: &Message, verdict: &Verdict) {
        let parsed = message.body().and_then(|body| clinic_sqs::parse_message(body).ok());
        let mut consumed = self.lock();
        match verdict {
            Verdict::Done(outcome) => {
                consumed.runs += 1;
                consumed.duplicates += u64::from(*outcome == ListenerOutcome::Duplicate);
            }
            Verdict::Retry { code } => {
                *consumed.retryable.entry(code).or_default() += 1;
                if *code == "db_lock_timeout" {
                    let event = parsed.as_ref().map(|(_, e)| e.id.to_string()).unwrap_or_default();
                    *consumed.lock_timeouts.entry(event).or_default() += 1;
                }
            }
            Verdict::Permanent { code, rejected: true } => *consumed.rejected.entry(code).or_default() += 1,
            Verdict::Permanent { code, rejected: false } => {
                let entry = match parsed {
                    Some((listener, envelope)) => (envelope.id.to_string(), listener.as_str().to_owned()),
                    None => ("unreadable".into(), (*code).to_owned()),
                };
                consumed.dead_lettered.insert(entry);
            }
        }
    }

    fn receive_failed(&self) {
        self.lock().receive_errors += 1;
    }
}

pub struct Sqs {
    /// The proxy's URL: every SQS call of the run (dispatcher and listeners) goes through it.
    pub endpoint: String,
    pub queues: clinic_sqs::QueueMap,
    /// A client of the proxy (what the faults use to inject and steal messages).
    pub client: aws_sdk_sqs::Client,
    /// `false` cuts the endpoint (closes new connections at once and drops open ones), `true` restores it.
    pub proxy: Arc<watch::Sender<bool>>,
    consumers: Vec<tokio::task::JoinHandle<()>>,
    stop: watch::Sender<bool>,
    counter: Arc<Counter>,
    /// The emulator child (kept to be asked whether it still runs, and killed on drop).
    emulator: Mutex<clinic_sqs::testing::Emulator>,
}

impl Sqs {
    /// Starts a private emulator (the shared one of `tests/run` has served every test before the
    /// run, and its state and load are not this run's), the proxy in front of it,
    /// one queue per listener, and the consumers running the listeners on `pool` (with the planted
    /// failure).
    pub async fn start(pool: deadpool_postgres::Pool, planted: (EventId, Listener)) -> anyhow::Result<Sqs> {
        let emulator = tokio::task::spawn_blocking(clinic_sqs::testing::Emulator::start_private)
            .await?
            .ok_or_else(|| anyhow!("no SQS emulator (install moto_server; tests/run installs it)"))?;
        let target: SocketAddr =
            emulator.endpoint.trim_start_matches("http://").trim_end_matches('/').parse().with_context(
                || format!("the emulator endpoint {} is not http://<ip>:<port>", emulator.endpoint),
            )?;
        anyhow::ensure!(target.ip().is_loopback(), "the SQS emulator must be on loopback, not {target}");
        let (proxy, up) = watch::channel(true);
        let (proxy_port, _) = super::proxy::start_proxy(target, up).await.context("binding the SQS proxy")?;
        let endpoint = format!("http://127.0.0.1:{proxy_port}");
        // The run's own calls (consumers, injected and stolen messages, queue depth) wait for the
        // emulator as long as it takes; the dispatcher child keeps the deployed timeouts.
        let client =
            clinic_sqs::build_client_with(Some(&endpoint), clinic_sqs::testing::PATIENT_TIMEOUTS).await;
        let prefix = format!("chaos-{}", ulid::Ulid::generate().to_string().to_lowercase());
        let queues =
            clinic_sqs::queues::create_queues_when_ready(&client, &prefix, false, Duration::from_secs(5))
                .await
                .map_err(|error| anyhow!("could not create the queues on the emulator: {error}"))?;
        let state = Arc::new(
            State::from_host(
                clinic_core::listeners::ListenerHost::new(
                    pool,
                    clinic_core::listeners::Deadline::Invocation {
                        margin: clinic_listener::DEFAULT_DEADLINE_MARGIN,
                    },
                )
                .with_metrics(clinic::settings::current().metrics),
            )
            .with_notifier(Arc::new(ChaosNotifier { planted: Some(planted) }))
            .with_concurrency(BATCH_CONCURRENCY),
        );
        let options = ConsumerOptions {
            visibility: 60,
            deadline_slack: Duration::from_secs(15),
            // No long polling: moto_server answers one long poll at a time per worker, and idle
            // queues polling for a second each would starve the busy ones. An idle consumer pauses
            // half a second: moto is one Python process (one core at most), and empty receives
            // every 100 ms from every consumer took CPU from the calls that carry messages — load
            // that helped tip a busy machine's emulator into the slowdown docs/chaos.md describes.
            wait_seconds: 0,
            idle_pause: Duration::from_millis(500),
            retry_after: Some(Duration::from_secs(1)),
            dead_letter: true,
            call_timeout: Duration::from_secs(20),
        };
        let counter = Arc::new(Counter(Mutex::default()));
        let (stop, stopped) = watch::channel(false);
        let consumers = Listener::ALL
            .iter()
            .flat_map(|listener| [*listener; CONSUMERS_PER_QUEUE])
            .map(|listener| {
                let url = queues.url(listener).unwrap_or_default().to_owned();
                let observer: Arc<dyn Observe> = counter.clone();
                let consume = clinic::sqs_consumer::consume(
                    client.clone(),
                    url,
                    state.clone(),
                    options,
                    observer,
                    stopped.clone(),
                );
                tokio::spawn(consume)
            })
            .collect();
        Ok(Sqs {
            endpoint,
            queues,
            client,
            proxy: Arc::new(proxy),
            consumers,
            stop,
            counter,
            emulator: Mutex::new(emulator),
        })
    }

    /// The consumers' tally (for faults that watch it while the run goes on).
    pub fn counter(&self) -> Arc<Counter> {
        self.counter.clone()
    }

    /// Messages in the listener queues, visible or in flight (`None` when the emulator did not answer).
    pub async fn depth(&self) -> Option<u64> {
        let mut total = 0;
        for listener in Listener::ALL {
            let url = self.queues.url(*listener)?;
            let answer = self
                .client
                .get_queue_attributes()
                .queue_url(url)
                .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
                .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
                .send();
            let answer = tokio::time::timeout(Duration::from_secs(20), answer).await.ok()?.ok()?;
            total += answer
                .attributes()
                .map(|attributes| attributes.values().filter_map(|v| v.parse::<u64>().ok()).sum::<u64>())
                .unwrap_or_default();
        }
        Some(total)
    }

    /// Why the queues cannot be read, for a run that stalled with `depth` answering `None`: whether
    /// the emulator process exited, and whether it answers when asked directly, not through the proxy.
    pub async fn diagnose(&self) -> String {
        let (direct, exited) = {
            let mut emulator = self.emulator.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            (emulator.client(), emulator.exited())
        };
        if let Some(status) = exited {
            return format!("the SQS emulator exited ({status})");
        }
        let answer = tokio::time::timeout(Duration::from_secs(20), direct.list_queues().send()).await;
        let up = *self.proxy.borrow();
        match answer {
            Ok(Ok(_)) => {
                format!("the SQS emulator answers directly but not through the proxy (proxy up: {up})")
            }
            Ok(Err(error)) => format!(
                "the SQS emulator runs but fails directly too: {}",
                aws_sdk_sqs::error::DisplayErrorContext(error)
            ),
            Err(_) => "the SQS emulator runs but did not answer directly within 20 s".into(),
        }
    }

    /// Stops the consumers (after their current batch) and answers what they decided.
    pub async fn stop(self) -> Consumed {
        let _ = self.stop.send(true);
        for consumer in self.consumers {
            if tokio::time::timeout(Duration::from_secs(90), consumer).await.is_err() {
                eprintln!("clinic chaos: a consumer did not stop within 90 s");
            }
        }
        self.counter.lock().clone()
    }
}
