//! Waiting for the pipeline to settle after the writers stop — on progress, not on a fixed deadline.
//!
//! Settled: no outbox row pending, claimed or in retry, every expected receipt in (the listener map
//! over the event log, minus the planted failure), and (SQS) no message left in a listener queue.
//! The wait polls those figures; as long as any of them moves it keeps waiting, up to a generous
//! overall bound. It gives up early only when nothing has moved for the stall limit — a busy machine
//! makes the run slower, not red.

use std::time::{Duration, Instant};

use clinic_core::events::EventType;
use clinic_core::listeners::listeners;

use super::dispatcher::DispatcherChild;
use super::sqs::Sqs;

/// One poll of the pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Progress {
    pub open_rows: i64,
    pub receipts: i64,
    pub expected_receipts: i64,
    pub queued: Option<u64>,
}

impl Progress {
    pub fn settled(&self) -> bool {
        self.open_rows == 0 && self.receipts >= self.expected_receipts && self.queued.unwrap_or(0) == 0
    }
}

/// How the wait ended.
#[derive(Debug, Clone, Copy)]
pub struct Settled {
    pub last: Progress,
    pub took: Duration,
    pub settled: bool,
    pub stalled: bool,
}

async fn poll(client: &tokio_postgres::Client, sqs: Option<&Sqs>, planted: i64) -> anyhow::Result<Progress> {
    let row = client
        .query_one(
            "SELECT (SELECT count(*) FROM event_outbox WHERE status IN ('pending', 'claimed', 'retry')), \
                    (SELECT count(*) FROM listener_receipts)",
            &[],
        )
        .await?;
    let mut expected = -planted;
    for row in client.query("SELECT type, count(*) FROM events GROUP BY type", &[]).await? {
        if let Some(event_type) = EventType::parse(row.get(0)) {
            expected += listeners(event_type).len() as i64 * row.get::<_, i64>(1);
        }
    }
    let queued = match sqs {
        Some(sqs) => sqs.depth().await,
        None => Some(0),
    };
    Ok(Progress { open_rows: row.get(0), receipts: row.get(1), expected_receipts: expected, queued })
}

/// Waits until settled, `bound` overall, giving up after `stall` without progress; keeps the
/// dispatcher child running meanwhile.
pub async fn wait(
    client: &tokio_postgres::Client,
    sqs: Option<&Sqs>,
    planted_receipts_missing: i64,
    bound: Duration,
    stall: Duration,
    started: Instant,
    dispatcher: &mut DispatcherChild,
) -> anyhow::Result<Settled> {
    let began = Instant::now();
    let mut last = Progress::default();
    let mut moved_at = Instant::now();
    let mut printed_at = Instant::now();
    loop {
        let now = poll(client, sqs, planted_receipts_missing).await?;
        if now != last {
            moved_at = Instant::now();
            last = now;
        }
        if now.settled() {
            return Ok(Settled { last: now, took: began.elapsed(), settled: true, stalled: false });
        }
        let stalled = moved_at.elapsed() >= stall;
        if stalled || began.elapsed() >= bound {
            if let (Some(sqs), None) = (sqs, now.queued) {
                println!("  the listener queues could not be read: {}", sqs.diagnose().await);
            }
            return Ok(Settled { last: now, took: began.elapsed(), settled: false, stalled });
        }
        if printed_at.elapsed() >= Duration::from_secs(10) {
            printed_at = Instant::now();
            println!(
                "  t={:>5.1}s settling: {} outbox rows open, receipts {} / {}, queued {}",
                started.elapsed().as_secs_f64(),
                now.open_rows,
                now.receipts,
                now.expected_receipts,
                now.queued.map_or("?".into(), |n| n.to_string())
            );
        }
        if dispatcher.ensure_running().await? {
            eprintln!("clinic chaos: the dispatcher had exited; restarted it");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
