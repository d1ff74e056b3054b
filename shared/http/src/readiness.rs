//! Readiness: whether this process can reach its database, checked at most once per interval.
//!
//! Invariants:
//! - Liveness (`GET /healthz`) never touches the database; only readiness (`GET /readyz`) does.
//! - A process runs at most one database check per [`Readiness::interval`]: the answer (ready or not)
//!   is cached for the interval, and callers arriving while a check runs wait for it instead of
//!   starting their own — a flood of probes costs the database one `SELECT 1` per interval per
//!   process, never a connection per request.
//! - A check is bounded by [`CHECK_TIMEOUT`] (pool checkout included); a slow database is not ready.

use std::sync::Arc;
use std::time::{Duration, Instant};

use deadpool_postgres::Pool;
use tokio::sync::Mutex;

/// The longest a readiness check waits for a connection and its answer.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(3);

/// The cached readiness of a process; clones share the cache.
#[derive(Clone)]
pub struct Readiness {
    interval: Duration,
    last: Arc<Mutex<Option<(Instant, bool)>>>,
}

impl std::fmt::Debug for Readiness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Readiness").field("interval", &self.interval).finish_non_exhaustive()
    }
}

impl Readiness {
    pub fn new(interval: Duration) -> Self {
        Self { interval, last: Arc::new(Mutex::new(None)) }
    }

    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// True when the database answered a check within the last interval (running one if none did).
    pub async fn is_ready(&self, pool: &Pool) -> bool {
        let mut last = self.last.lock().await;
        if let Some((at, ready)) = *last {
            if at.elapsed() < self.interval {
                return ready;
            }
        }
        let ready = matches!(tokio::time::timeout(CHECK_TIMEOUT, check(pool)).await, Ok(Ok(())));
        if !ready {
            tracing::warn!("readiness check failed: the database did not answer");
        }
        *last = Some((Instant::now(), ready));
        ready
    }
}

async fn check(pool: &Pool) -> Result<(), clinic_core::db::DbError> {
    let conn = pool.get().await?;
    conn.simple_query("SELECT 1").await?;
    Ok(())
}
