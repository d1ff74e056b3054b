//! Overlapped steps (several batches between claim and mark) against real PostgreSQL: no row is
//! started twice, every batch is marked, a batch whose claim was taken over while in flight is
//! fenced, and starts of one FIFO group keep their order across batches in flight.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::support::{drain, fast_config, Fixture};
use async_trait::async_trait;
use clinic_core::dispatch::{DispatchConfig, Start, StartResult, Transport};
use clinic_core::listeners::Listener;

/// Accepts every start after a delay that shrinks call by call (so a later batch would finish
/// first), recording when each start was accepted and how many calls ran at once.
#[derive(Default)]
struct Slow {
    calls: AtomicUsize,
    running: AtomicUsize,
    most_at_once: AtomicUsize,
    accepted: Mutex<Vec<(String, Listener, String)>>,
    ordered: bool,
}

#[async_trait]
impl Transport for Slow {
    fn name(&self) -> &'static str {
        "slow"
    }

    async fn start(&self, starts: &[Start<'_>]) -> Vec<StartResult> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst);
        let running = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_at_once.fetch_max(running, Ordering::SeqCst);
        let delay = 20 + 60u64.saturating_sub(15 * (call as u64 % 5));
        tokio::time::sleep(Duration::from_millis(delay)).await;
        self.accepted.lock().unwrap().extend(
            starts
                .iter()
                .map(|s| (s.envelope.id.to_string(), s.listener, s.envelope.resource_id.to_string())),
        );
        self.running.fetch_sub(1, Ordering::SeqCst);
        starts.iter().map(|_| Ok(Some(format!("m-{call}")))).collect()
    }

    fn ordered(&self, _listener: Listener) -> bool {
        self.ordered
    }
}

fn overlapped(batch: i64, steps_in_flight: usize) -> DispatchConfig {
    DispatchConfig { batch, steps_in_flight, lease: Duration::from_secs(30), ..fast_config() }
}

#[tokio::test]
async fn batches_in_flight_never_start_a_row_twice_and_all_are_marked_with_their_custody() {
    let fx = Fixture::new().await;
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    let booked = fx.book_many(patient, practitioner, 24, 40).await;
    let transport = Arc::new(Slow::default());
    let dispatcher = fx.dispatcher(transport.clone(), overlapped(3, 4));
    let report = drain(&dispatcher).await;
    assert_eq!(report.totals.dispatched, 42, "{report:?}");
    assert_eq!(report.totals.fenced, 0, "{report:?}");
    let accepted = transport.accepted.lock().unwrap().clone();
    let pairs: HashSet<(String, Listener)> = accepted.iter().map(|(e, l, _)| (e.clone(), *l)).collect();
    assert_eq!(accepted.len(), 80, "two listeners per booking, each started once");
    assert_eq!(pairs.len(), 80, "no (event, listener) started twice");
    let most = transport.most_at_once.load(Ordering::SeqCst);
    assert!((2..=4).contains(&most), "batches overlapped, within the bound: {most} at once");
    // Every started pair is in custody until its receipt, recorded on the outbox row.
    assert_eq!(fx.count("SELECT count(*) FROM listener_custody").await, 80);
    assert_eq!(fx.count("SELECT count(*) FROM listener_starts").await, 0, "no per-start rows");
    assert_eq!(fx.count("SELECT count(*) FROM event_outbox WHERE status <> 'dispatched'").await, 0);
    // A receipt takes its pair out of custody in the listener's transaction.
    clinic_core::listeners::run(&fx.db.pool, Listener::PatientBookingConfirmation, &booked[0].1)
        .await
        .unwrap();
    assert_eq!(fx.count("SELECT count(*) FROM listener_custody").await, 79);
}

/// Expires and takes over the claim of the rows of its first call (another dispatcher, `thief`,
/// claims them meanwhile), then accepts everything.
struct Thief {
    pool: deadpool_postgres::Pool,
    done: AtomicUsize,
    stolen: Mutex<Vec<clinic_core::ids::EventId>>,
}

#[async_trait]
impl Transport for Thief {
    fn name(&self) -> &'static str {
        "thief"
    }

    async fn start(&self, starts: &[Start<'_>]) -> Vec<StartResult> {
        if self.done.fetch_add(1, Ordering::SeqCst) == 0 {
            let mut ids: Vec<_> = starts.iter().map(|s| s.envelope.id).collect();
            ids.dedup(); // one event's starts are adjacent
            let mut client = self.pool.get().await.unwrap();
            // Expire the lease and take the rows in one transaction (its row locks keep the drain's
            // own next claim off them); the oldest clock puts them first in the claim order.
            let tx = client.transaction().await.unwrap();
            tx.execute("UPDATE event_outbox SET available_at = 'epoch' WHERE event_id = ANY($1)", &[&ids])
                .await
                .unwrap();
            let taken = clinic_core::outbox::claim(&tx, ids.len() as i64, Duration::from_secs(60), "thief")
                .await
                .unwrap();
            tx.commit().await.unwrap();
            self.stolen.lock().unwrap().extend(taken.rows.iter().map(|r| r.envelope.id));
        }
        starts.iter().map(|_| Ok(None)).collect()
    }
}

#[tokio::test]
async fn a_batch_whose_claim_was_taken_over_in_flight_is_fenced_and_records_nothing() {
    let fx = Fixture::new().await;
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    fx.book_many(patient, practitioner, 24, 6).await;
    // The two events without listeners go first, so the first start call is the first booking's.
    let thief =
        Arc::new(Thief { pool: fx.db.pool.clone(), done: AtomicUsize::new(0), stolen: Mutex::default() });
    let dispatcher = fx.dispatcher(thief.clone(), overlapped(1, 3));
    let report = drain(&dispatcher).await;
    let stolen = thief.stolen.lock().unwrap().clone();
    assert_eq!(stolen.len(), 1, "{stolen:?}");
    assert_eq!(report.totals.fenced, 1, "{report:?}");
    assert_eq!(report.totals.dispatched, 7, "{report:?}");
    let client = fx.db.client().await;
    let row = client
        .query_one(
            "SELECT status, claimed_by, awaiting IS NULL FROM event_outbox WHERE event_id = $1",
            &[&stolen[0]],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "claimed", "the fenced mark changed nothing");
    assert_eq!(row.get::<_, String>(1), "thief");
    assert!(row.get::<_, bool>(2), "a fenced mark records no custody (the new holder will)");
}

#[tokio::test]
async fn starts_of_one_fifo_group_keep_their_order_across_batches_in_flight() {
    let fx = Fixture::new().await;
    let patient = fx.create_patient().await;
    let practitioner = fx.create_practitioner().await;
    let mut order = Vec::new();
    for i in 0..3 {
        let (appointment, created) = fx.book(patient, practitioner, 24 + i).await;
        order.push(created.id.to_string());
        for hours in [48 + i, 72 + i] {
            order.push(fx.reschedule(appointment, hours).await.id.to_string());
        }
        order.push(fx.cancel(appointment).await.id.to_string());
    }
    let transport = Arc::new(Slow { ordered: true, ..Slow::default() });
    // One event per batch, four batches in flight, later calls faster than earlier ones.
    let report = drain(&fx.dispatcher(transport.clone(), overlapped(1, 4))).await;
    assert_eq!(report.totals.dispatched, 14, "{report:?}");
    assert!(transport.most_at_once.load(Ordering::SeqCst) >= 2, "batches overlapped");
    let accepted = transport.accepted.lock().unwrap().clone();
    let mut groups: HashMap<(Listener, String), Vec<usize>> = HashMap::new();
    for (event, listener, resource) in &accepted {
        let position = order.iter().position(|e| e == event).unwrap();
        groups.entry((*listener, resource.clone())).or_default().push(position);
    }
    assert!(groups.values().any(|g| g.len() > 1), "some group has several events: {groups:?}");
    for (group, positions) in &groups {
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "group {group:?} out of order: {positions:?}");
    }
}
