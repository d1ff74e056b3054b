//! The timed faults: SIGKILLs of the dispatcher child, one PostgreSQL restart, one SQS outage. The
//! message faults (forged, lost, lock) have files of their own.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::dispatcher::DispatcherChild;
use super::rng::Rng;
use clinic::local_pg::LocalPostgres;

/// After PostgreSQL is back, pooled connections broken by the restart are replaced on first use; a
/// 503 within this grace is still the restart's.
pub const PG_GRACE: Duration = Duration::from_secs(5);

/// What happened to PostgreSQL, for the 5xx check.
#[derive(Debug, Clone, Copy, Default)]
pub struct PgOutage {
    pub down_at: Option<Instant>,
    pub up_at: Option<Instant>,
}

impl PgOutage {
    pub fn covers(&self, at: Instant) -> bool {
        match (self.down_at, self.up_at) {
            (Some(down), Some(up)) => at >= down && at <= up + PG_GRACE,
            (Some(down), None) => at >= down,
            _ => false,
        }
    }

    pub fn downtime(&self) -> Duration {
        self.up_at.zip(self.down_at).map(|(up, down)| up - down).unwrap_or_default()
    }
}

pub async fn start_cluster(dir: PathBuf, port: u16) -> anyhow::Result<LocalPostgres> {
    tokio::task::spawn_blocking(move || LocalPostgres::ensure_started(&dir, port)).await?
}

/// (b) Stops PostgreSQL (fast shutdown: sessions are cut) at `at`, keeps it down for `down_for` and
/// starts it again. `cluster` holds the running cluster (taken while it is down).
pub async fn restart_postgres(
    cluster: &mut Option<LocalPostgres>,
    data: PathBuf,
    port: u16,
    at: Instant,
    down_for: Duration,
    started: Instant,
) -> anyhow::Result<PgOutage> {
    tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await;
    let mut outage = PgOutage { down_at: Some(Instant::now()), up_at: None };
    println!("  t={:>5.1}s stopping PostgreSQL", started.elapsed().as_secs_f64());
    if let Some(running) = cluster.take() {
        tokio::task::spawn_blocking(move || running.stop()).await??;
    }
    tokio::time::sleep(down_for).await;
    *cluster = Some(start_cluster(data, port).await?);
    outage.up_at = Some(Instant::now());
    println!(
        "  t={:>5.1}s PostgreSQL is back ({:.1} s down)",
        started.elapsed().as_secs_f64(),
        outage.downtime().as_secs_f64()
    );
    Ok(outage)
}

/// (a) SIGKILLs the dispatcher at random moments (every 1–5 s) and restarts it after a random pause,
/// until `stop` turns true; answers the child and the number of kills.
pub fn kill_dispatcher_repeatedly(
    mut dispatcher: DispatcherChild,
    seed: u64,
    mut stop: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<(DispatcherChild, u32)> {
    let mut rng = Rng::new(seed.rotate_left(17));
    tokio::spawn(async move {
        let mut kills = 0u32;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(rng.millis(1000, 5000)) => {}
                _ = stop.changed() => break,
            }
            dispatcher.kill().await;
            kills += 1;
            tokio::time::sleep(rng.millis(0, 800)).await;
            if let Err(error) = dispatcher.spawn() {
                eprintln!("clinic chaos: restarting the dispatcher: {error:#}");
            }
        }
        (dispatcher, kills)
    })
}

/// (c) The SQS endpoint unreachable from `at` (or once `after` resolved, whichever is later) for
/// `down_for`, for the dispatcher and the consumers alike (the proxy closes new connections at once
/// and cuts open ones).
pub fn cut_sqs(
    proxy: Arc<watch::Sender<bool>>,
    at: Instant,
    after: impl std::future::Future<Output: Send> + Send + 'static,
    down_for: Duration,
    started: Instant,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        tokio::join!(tokio::time::sleep_until(tokio::time::Instant::from_std(at)), after);
        println!(
            "  t={:>5.1}s cutting the SQS endpoint for {:.1} s",
            started.elapsed().as_secs_f64(),
            down_for.as_secs_f64()
        );
        let _ = proxy.send(false);
        tokio::time::sleep(down_for).await;
        let _ = proxy.send(true);
        println!("  t={:>5.1}s SQS endpoint reachable again", started.elapsed().as_secs_f64());
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_outage_window_includes_the_grace_after_restart() {
        let down = Instant::now();
        let up = down + Duration::from_secs(3);
        let outage = PgOutage { down_at: Some(down), up_at: Some(up) };
        assert!(outage.covers(down + Duration::from_secs(1)));
        assert!(outage.covers(up + PG_GRACE - Duration::from_millis(1)));
        assert!(!outage.covers(up + PG_GRACE + Duration::from_millis(1)));
        assert!(!PgOutage::default().covers(down));
    }
}
