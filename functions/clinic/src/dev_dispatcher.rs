//! The in-process dispatcher loop of `clinic dev` (and of the latency bench's server, `clinic bench
//! serve`): not a subcommand of its own. Drains the outbox in a background task until stopped, woken
//! by LISTEN on new commits and polling as a safety net.
//!
//! Beside the loop, the custody reconciler runs every 30 s (restarting starts whose receipt is
//! overdue; see `clinic_core::housekeeping::reconcile`).
//!
//! Listeners run through the one listener host of the listener Lambda
//! (`clinic_core::listeners::ListenerHost`) with `clinic dev`'s senders: after each commit, the
//! notification fast path (the delivery sender `clinic dev` uses) and a fan-out's first webhook
//! attempts, awaited, exactly as in Lambda. The delivery and webhook loops beside it only pick up
//! what that step left (retries, rows it had no time for).
//!
//! Transport (`CLINIC_TRANSPORT`):
//! - `local` (default): listeners run in this process; a row is marked dispatched only after each
//!   listener committed its receipt (and its after-commit step ran).
//! - `sqs`: starts go to one SQS queue per listener (`CLINIC_SQS_QUEUE_URL_<LISTENER>`, or — with
//!   `CLINIC_SQS_ENDPOINT` set and no queue URLs — queues `clinic-dev-<listener>` created on that
//!   endpoint), and a consumer per queue feeds received batches to the listener Lambda's own handler,
//!   deleting only the messages it did not report as failed (what the Lambda event source mapping
//!   does in AWS; see `crate::sqs_consumer`).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clinic_core::delivery::Sender;
use clinic_core::dispatch::{DispatchConfig, Dispatcher, LocalTransport, Transport};
use clinic_core::listeners::{Deadline, ListenerHost};
use clinic_core::webhooks::WebhookSender;
use clinic_sqs::{QueueMap, SqsConfig, SqsTransport};
use deadpool_postgres::Pool;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A running dispatcher loop (and, in SQS mode, its queue consumers).
pub struct DispatcherHandle {
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl DispatcherHandle {
    /// Asks every task to stop and waits for their current step to finish.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|stopped| *stopped).await;
}

/// Starts the dispatcher loop on `pool`, listening on `url`, with the transport `CLINIC_TRANSPORT`
/// names; `sender` sends each committed notification right after its listener's commit.
pub async fn spawn(url: &str, pool: Pool, sender: Option<Sender>) -> anyhow::Result<DispatcherHandle> {
    spawn_with(url, pool, &crate::settings::current().transport, sender).await
}

/// Starts the dispatcher loop with the in-process transport, whatever the environment says, and no
/// notification fast path (the latency bench's server: it sends no notifications at all).
pub async fn spawn_local(url: &str, pool: Pool) -> anyhow::Result<DispatcherHandle> {
    spawn_with(url, pool, "local", None).await
}

async fn spawn_with(
    url: &str,
    pool: Pool,
    transport: &str,
    sender: Option<Sender>,
) -> anyhow::Result<DispatcherHandle> {
    let settings = crate::settings::current();
    let config = settings.dispatch;
    let (stop, stop_rx) = watch::channel(false);
    let mut tasks = Vec::new();
    // Webhooks in-process (docs/webhooks.md): first attempts right after each fan-out, retries by a
    // loop every second; plain http to loopback only with CLINIC_WEBHOOKS_ALLOW_LOOPBACK_HTTP=1.
    let source = &settings.listener.source_prefix;
    let webhooks = Arc::new(WebhookSender::new(
        pool.clone(),
        settings.webhooks,
        crate::settings::webhook_key()?,
        clinic_sqs::webhook_body(source),
    ));
    let retries = webhooks.clone();
    let retries_stop = stop_rx.clone();
    tasks.push(tokio::spawn(async move { retries.run(retries_stop, Duration::from_secs(1)).await }));
    // The one listener host: its deadline is set per transport below.
    let mut host = ListenerHost::new(pool.clone(), Deadline::PerRun(settings.local_listener_timeout))
        .with_webhooks(webhooks)
        .with_metrics(settings.metrics);
    if let Some(sender) = sender {
        host = host.with_sender(sender);
    }
    let transport: Arc<dyn Transport> = match transport {
        // As many runs as the pool has connections, minus one for the dispatcher's own marks.
        "local" => Arc::new(LocalTransport::from_host(
            host.with_concurrency(pool.status().max_size.saturating_sub(1)),
        )),
        "sqs" => {
            let (transport, queues, client) = sqs_transport().await?;
            let state = Arc::new(clinic_listener::State::configured(host, &settings.listener));
            for url in queues {
                let consumer = consume(client.clone(), url, state.clone(), stop_rx.clone());
                tasks.push(tokio::spawn(consumer));
            }
            Arc::new(transport)
        }
        other => anyhow::bail!("CLINIC_TRANSPORT must be `local` or `sqs` (got {other:?})"),
    };
    start_loop(url, pool, transport, config, (stop, stop_rx), tasks)
}

/// Starts the dispatcher loop with a given transport (the latency bench's broker stand-in).
pub fn spawn_transport(
    url: &str,
    pool: Pool,
    transport: Arc<dyn Transport>,
) -> anyhow::Result<DispatcherHandle> {
    let config = crate::settings::current().dispatch;
    start_loop(url, pool, transport, config, watch::channel(false), Vec::new())
}

/// The custody reconciler and the dispatcher loop, on `transport`, beside `tasks`.
fn start_loop(
    url: &str,
    pool: Pool,
    transport: Arc<dyn Transport>,
    config: DispatchConfig,
    (stop, stop_rx): (watch::Sender<bool>, watch::Receiver<bool>),
    mut tasks: Vec<JoinHandle<()>>,
) -> anyhow::Result<DispatcherHandle> {
    tasks.push(tokio::spawn(reconcile_loop(
        pool.clone(),
        transport.clone(),
        stop_rx.clone(),
        RECONCILE_EVERY,
    )));
    let dispatcher =
        Dispatcher::new(pool, transport, config).with_listen(url, crate::settings::current().ca_file.clone());
    tasks.push(tokio::spawn(async move {
        let report = dispatcher.run_until(stopped(stop_rx)).await;
        tracing::info!(steps = report.steps, dispatched = report.totals.dispatched, "dispatcher stopped");
    }));
    Ok(DispatcherHandle { stop, tasks })
}

/// How often `clinic dev` runs a custody pass (the Lambda runs one per drain invocation, once a
/// minute).
const RECONCILE_EVERY: Duration = Duration::from_secs(30);

/// The custody reconciler beside the loop: one pass every `every` ([`RECONCILE_EVERY`] here; `clinic
/// chaos` runs it more often) until stopped (`CLINIC_CUSTODY_*`, see docs/alarms.md). A failed pass
/// is logged and retried next time.
pub async fn reconcile_loop(
    pool: Pool,
    transport: Arc<dyn Transport>,
    mut stop: watch::Receiver<bool>,
    every: Duration,
) {
    use clinic_core::housekeeping::{Job, JobReport, Reconcile};
    let config = crate::settings::current().reconcile;
    // The housekeeping Lambda's `reconcile` job, with no deadline.
    let job = Reconcile { pool, transport, config };
    while !*stop.borrow() {
        match job.run(None).await {
            Ok(JobReport::Reconcile(report)) if report.restarted + report.stuck > 0 => {
                tracing::warn!(?report, "custody pass")
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(error = %error, "custody pass failed"),
        }
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.changed() => break,
        }
    }
}

async fn sqs_transport() -> anyhow::Result<(SqsTransport, Vec<String>, aws_sdk_sqs::Client)> {
    let settings = crate::settings::current();
    let endpoint = settings.sqs_endpoint.clone();
    let client = clinic_sqs::build_client(endpoint.as_deref()).await;
    let read = settings.sqs.as_ref().expect("read with CLINIC_TRANSPORT=sqs");
    let config = match read {
        Ok(config) => config.clone(),
        Err(missing) if endpoint.is_some() => {
            tracing::info!(reason = %missing, "creating local queues clinic-dev-* on the SQS endpoint");
            let queues: QueueMap = clinic_sqs::queues::create_queues(&client, "clinic-dev", false)
                .await
                .map_err(|e| anyhow::anyhow!("creating queues on CLINIC_SQS_ENDPOINT: {e}"))?;
            SqsConfig { queues, source_prefix: settings.listener.source_prefix.clone(), endpoint }
        }
        Err(missing) => return Err(anyhow::anyhow!("{missing}")).context("CLINIC_TRANSPORT=sqs"),
    };
    let urls = clinic_core::listeners::Listener::ALL
        .iter()
        .filter_map(|listener| config.queues.url(*listener).map(str::to_owned))
        .collect();
    Ok((SqsTransport::from_config(client.clone(), &config), urls, client))
}

/// Long-polls one queue and runs each batch through the listener Lambda's handler
/// ([`crate::sqs_consumer`]).
async fn consume(
    client: aws_sdk_sqs::Client,
    queue_url: String,
    state: Arc<clinic_listener::State>,
    stop: watch::Receiver<bool>,
) {
    let options = crate::sqs_consumer::ConsumerOptions::default();
    let quiet = Arc::new(crate::sqs_consumer::Quiet);
    crate::sqs_consumer::consume(client, queue_url, state, options, quiet, stop).await;
}
