//! Test support for the dispatcher: transports that fail on purpose, count what was asked or do
//! nothing, and one fast configuration.
//!
//! Compiled only for this crate's tests and with the `testing` feature, which the testkit and the
//! `clinic bench`/`clinic chaos` drills enable and the Lambdas never do (`cargo tree -e features -p
//! clinic-dispatcher` shows no `testing`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::transport::{Start, StartError, StartResult, Transport};
use super::DispatchConfig;
use crate::listeners::Listener;
use crate::outbox::{Backoff, Jitter};

/// Short leases and backoffs so retries and takeovers happen within milliseconds.
pub fn fast_config() -> DispatchConfig {
    DispatchConfig {
        batch: 100,
        lease: Duration::from_millis(300),
        backoff: Backoff {
            base: Duration::from_millis(20),
            cap: Duration::from_millis(400),
            jitter: Jitter::Equal,
        },
        max_attempts: 4,
        window: Duration::from_secs(2),
        poll_interval: Duration::from_millis(100),
        probe_max: Duration::from_millis(200),
        unknown_retry: Duration::from_millis(200),
        steps_in_flight: 2,
        full_scan_every: Duration::from_secs(1),
    }
}

/// Accepts every start and does nothing: for benchmarks of the outbox itself.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopTransport;

#[async_trait]
impl Transport for NoopTransport {
    fn name(&self) -> &'static str {
        "noop"
    }

    async fn start(&self, starts: &[Start<'_>]) -> Vec<StartResult> {
        starts.iter().map(|_| Ok(None)).collect()
    }
}

/// Fails the starts of chosen listeners (or all of them) with a fixed error, passing the others to an
/// inner transport. Counts every start it was asked for.
pub struct FailingTransport {
    inner: Option<Arc<dyn Transport>>,
    failing: Option<Vec<Listener>>,
    error: StartError,
    requested: AtomicUsize,
}

impl std::fmt::Debug for FailingTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FailingTransport")
            .field("failing", &self.failing)
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

impl FailingTransport {
    /// Every start fails with `error`.
    pub fn always(error: StartError) -> Self {
        Self { inner: None, failing: None, error, requested: AtomicUsize::new(0) }
    }

    /// Starts of `failing` listeners fail with `error`; the others go to `inner`.
    pub fn only(failing: Vec<Listener>, error: StartError, inner: Arc<dyn Transport>) -> Self {
        Self { inner: Some(inner), failing: Some(failing), error, requested: AtomicUsize::new(0) }
    }

    /// How many starts this transport was asked for so far.
    pub fn requested(&self) -> usize {
        self.requested.load(Ordering::SeqCst)
    }

    fn fails(&self, listener: Listener) -> bool {
        self.failing.as_ref().is_none_or(|failing| failing.contains(&listener))
    }
}

#[async_trait]
impl Transport for FailingTransport {
    fn name(&self) -> &'static str {
        "failing"
    }

    async fn start(&self, starts: &[Start<'_>]) -> Vec<StartResult> {
        self.requested.fetch_add(starts.len(), Ordering::SeqCst);
        let passed: Vec<Start<'_>> = starts.iter().copied().filter(|s| !self.fails(s.listener)).collect();
        let mut inner_results = match &self.inner {
            Some(inner) if !passed.is_empty() => inner.start(&passed).await,
            _ => passed.iter().map(|_| Ok(None)).collect(),
        }
        .into_iter();
        starts
            .iter()
            .map(|start| {
                if self.fails(start.listener) {
                    Err(self.error.clone())
                } else {
                    inner_results.next().unwrap_or_else(|| {
                        Err(StartError::retryable("transport_contract", "inner transport lost a result"))
                    })
                }
            })
            .collect()
    }
}

/// A transport that is down (every start answers *unavailable*, `sqs_unreachable`) while its switch
/// is on, and passes starts to an inner transport otherwise. Counts the starts asked while down.
pub struct OutageTransport {
    inner: Arc<dyn Transport>,
    down: std::sync::atomic::AtomicBool,
    asked_while_down: AtomicUsize,
}

impl std::fmt::Debug for OutageTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutageTransport").field("down", &self.is_down()).finish_non_exhaustive()
    }
}

impl OutageTransport {
    /// Starts down.
    pub fn down(inner: Arc<dyn Transport>) -> Self {
        Self { inner, down: std::sync::atomic::AtomicBool::new(true), asked_while_down: AtomicUsize::new(0) }
    }

    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    pub fn is_down(&self) -> bool {
        self.down.load(Ordering::SeqCst)
    }

    /// Starts asked for while down (the probes).
    pub fn asked_while_down(&self) -> usize {
        self.asked_while_down.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl Transport for OutageTransport {
    fn name(&self) -> &'static str {
        "outage"
    }

    async fn start(&self, starts: &[Start<'_>]) -> Vec<StartResult> {
        if self.is_down() {
            self.asked_while_down.fetch_add(starts.len(), Ordering::SeqCst);
            return starts
                .iter()
                .map(|_| Err(StartError::unavailable("sqs_unreachable", "connection refused")))
                .collect();
        }
        self.inner.start(starts).await
    }

    fn settles_on_start(&self) -> bool {
        self.inner.settles_on_start()
    }

    fn ordered(&self, listener: Listener) -> bool {
        self.inner.ordered(listener)
    }
}
