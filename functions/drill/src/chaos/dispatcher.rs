//! The dispatcher as a child process (`clinic dispatch-loop`, hidden) so the run can SIGKILL it for
//! real, with the custody reconciler beside it, and the planted permanent failure its local listeners
//! (and the run's SQS consumers) apply.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;

use anyhow::{anyhow, Context};
use clinic_core::db::{connect_pool, Tx};
use clinic_core::dispatch::{DispatchConfig, Dispatcher, LocalTransport, Transport};
use clinic_core::ids::EventId;
use clinic_core::listeners::notify::{DeliveryLog, NewNotification, Notified, Notifier, NotifyError};
use clinic_core::listeners::Listener;
use clinic_core::telemetry::{self, LogFormat};
use tokio::process::{Child, Command};

pub const FAIL_EVENT_VAR: &str = "CLINIC_CHAOS_FAIL_EVENT";
pub const FAIL_LISTENER_VAR: &str = "CLINIC_CHAOS_FAIL_LISTENER";
/// `sqs` makes `dispatch-loop` send to the queues of `CLINIC_SQS_QUEUE_URL_*` at `CLINIC_SQS_ENDPOINT`.
pub const TRANSPORT_VAR: &str = "CLINIC_CHAOS_TRANSPORT";

/// A notifier that fails permanently for one planted (event, listener) and records every other
/// notification in the built-in delivery log. Used only under `clinic chaos`.
pub struct ChaosNotifier {
    pub planted: Option<(EventId, Listener)>,
}

#[async_trait::async_trait]
impl Notifier for ChaosNotifier {
    async fn notify(&self, tx: &Tx<'_>, notification: &NewNotification) -> Result<Notified, NotifyError> {
        if self.planted == Some((notification.event_id, notification.listener)) {
            return Err(NotifyError::Provider {
                code: "chaos_planted_failure".into(),
                message: format!("planted permanent failure for event {}", notification.event_id),
                retryable: false,
            });
        }
        DeliveryLog.notify(tx, notification).await
    }
}

/// `clinic dispatch-loop`: the dispatcher on `DATABASE_URL` until killed — local listeners (with the
/// planted failure of `CLINIC_CHAOS_FAIL_EVENT` / `CLINIC_CHAOS_FAIL_LISTENER` when set), or SQS.
pub async fn dispatch_loop() -> anyhow::Result<()> {
    let settings = crate::settings::current();
    telemetry::init(LogFormat::Json, &settings.telemetry);
    let url = clinic::settings::current().database_url.clone().context("DATABASE_URL is required")?;
    let planted = match (settings.chaos_fail_event.clone(), settings.chaos_fail_listener.clone()) {
        (Some(event), Some(listener)) => Some((
            event.parse::<EventId>().map_err(|_| anyhow!("{FAIL_EVENT_VAR} must be an event id"))?,
            Listener::parse(&listener).ok_or_else(|| anyhow!("{FAIL_LISTENER_VAR} must name a listener"))?,
        )),
        _ => None,
    };
    let pool = connect_pool(&url, 8, None)?;
    let transport: Arc<dyn Transport> = if let Some(read) = &settings.chaos_sqs {
        let config = read.as_ref().map_err(|error| anyhow!("{error}"))?;
        let client = clinic_sqs::build_client(config.endpoint.as_deref()).await;
        Arc::new(clinic_sqs::SqsTransport::from_config(client, config))
    } else {
        Arc::new(
            LocalTransport::new(pool.clone())
                .with_notifier(Arc::new(ChaosNotifier { planted }))
                .with_metrics(clinic::settings::current().metrics),
        )
    };
    // The custody reconciler beside it, a pass every second (`CLINIC_CUSTODY_*`): what the drain
    // invocations and the scheduled passes do in AWS.
    let (_stop_reconciler, stopped) = tokio::sync::watch::channel(false);
    let every = std::time::Duration::from_secs(1);
    tokio::spawn(clinic::dev_dispatcher::reconcile_loop(pool.clone(), transport.clone(), stopped, every));
    let config: DispatchConfig = clinic::settings::current().dispatch;
    let dispatcher = Dispatcher::new(pool, transport, config).with_listen(url, None);
    let report = dispatcher
        .run_until(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await;
    tracing::info!(steps = report.steps, dispatched = report.totals.dispatched, "dispatch-loop stopped");
    Ok(())
}

/// The dispatcher child process: spawned, killed with SIGKILL, spawned again.
pub struct DispatcherChild {
    pub program: PathBuf,
    pub env: Vec<(String, String)>,
    pub log: PathBuf,
    pub child: Option<Child>,
    pub starts: u32,
}

impl DispatcherChild {
    pub fn spawn(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log)?;
        let child = Command::new(&self.program)
            .arg("dispatch-loop")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .kill_on_drop(true)
            .spawn()
            .context("starting `clinic dispatch-loop`")?;
        self.child = Some(child);
        self.starts += 1;
        Ok(())
    }

    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.start_kill(); // SIGKILL
            let _ = child.wait().await;
        }
    }

    /// Restarts the child if it exited on its own (it should not). True when it had exited.
    pub async fn ensure_running(&mut self) -> anyhow::Result<bool> {
        let exited = match &mut self.child {
            Some(child) => child.try_wait()?.is_some(),
            None => true,
        };
        if exited {
            self.child = None;
            self.spawn()?;
        }
        Ok(exited)
    }
}
