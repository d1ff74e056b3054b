//! The dispatcher loop of `clinic dev`: drains the outbox in a background task until stopped, woken by
//! LISTEN on new commits and polling as a safety net, with the in-process (local) transport.

use std::sync::Arc;

use clinic_core::dispatch::{DispatchConfig, Dispatcher, LocalTransport};
use deadpool_postgres::Pool;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A running dispatcher loop.
pub struct DispatcherHandle {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl DispatcherHandle {
    /// Asks the loop to stop and waits for its current step to finish.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

/// Starts the dispatcher loop with the local transport on `pool`, listening on `url`.
pub async fn spawn_local(url: &str, pool: Pool) -> anyhow::Result<DispatcherHandle> {
    let config = DispatchConfig::from_env()?;
    let transport = Arc::new(LocalTransport::new(pool.clone()));
    let dispatcher = Dispatcher::new(pool, transport, config).with_listen(url, None);
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let report = dispatcher
            .run_until(async {
                let _ = stopped.await;
            })
            .await;
        tracing::info!(steps = report.steps, dispatched = report.totals.dispatched, "dispatcher stopped");
    });
    Ok(DispatcherHandle { stop, task })
}
