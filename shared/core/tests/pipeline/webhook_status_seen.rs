//! The status a receiver sees of a webhook endpoint (`active`, `error`, `off`, and `off` for every
//! endpoint while the workspace's fan-out is paused) and its audit: every change of the seen status
//! is one `status` row `{from, to}`, so an endpoint's rows form a chain — each `from` is the previous
//! row's `to` (the first is the status its `create` row says it showed) and the last `to` is the
//! status seen now. These tests race a pause or a resume of the fan-out against an endpoint's own change
//! (an operator's enable or disable, a failed attempt's health), with one transaction held open
//! while the other runs, in both orders.

use std::time::Duration;

use clinic_core::ids::WebhookEndpointId;
use clinic_core::listeners::Listener;
use clinic_core::operator::{pause, Operator, Reason};
use clinic_core::webhooks::endpoints::{self, EndpointChange};
use clinic_core::webhooks::store;

use crate::support::Fixture;

/// The status the endpoint showed when created, its status rows in order, and the status it shows now.
async fn chain(fx: &Fixture, id: WebhookEndpointId) -> (String, Vec<(String, String)>, String) {
    let client = fx.db.client().await;
    let created: String = client
        .query_one(
            "SELECT detail->>'status' FROM webhook_endpoint_actions WHERE endpoint_id = $1 AND action = 'create'",
            &[&id],
        )
        .await
        .unwrap()
        .get(0);
    let rows = client
        .query(
            "SELECT detail->>'from', detail->>'to' FROM webhook_endpoint_actions \
             WHERE endpoint_id = $1 AND action = 'status' ORDER BY created_at, id",
            &[&id],
        )
        .await
        .unwrap();
    let steps = rows.iter().map(|row| (row.get(0), row.get(1))).collect();
    (created, steps, endpoints::get(&client, fx.workspace, id).await.unwrap().status)
}

/// The chain holds: each `from` is the previous `to`, starting at the created status, ending at the
/// status seen.
fn assert_chain(case: &str, (created, steps, seen): &(String, Vec<(String, String)>, String)) {
    let mut at = created.clone();
    for (from, to) in steps {
        assert_eq!(from, &at, "{case}: a status row from {from} while the endpoint showed {at}: {steps:?}");
        at = to.clone();
    }
    assert_eq!(&at, seen, "{case}: the rows end at {at}, the endpoint shows {seen}: {steps:?}");
}

fn operator() -> (Operator, Reason) {
    (Operator::parse("ops:test").unwrap(), Reason::parse("receiver migration").unwrap())
}

fn change(enabled: bool) -> EndpointChange {
    EndpointChange { enabled: Some(enabled), ..EndpointChange::default() }
}

/// Holds a pause (`paused`) or a resume of the fan-out open while `other` runs on its own
/// connection, then commits it; `other` either finishes before the commit or waits for it (on a
/// lock: the test waits until PostgreSQL shows it waiting, with a generous bound).
async fn race<F>(fx: &Fixture, paused: bool, other: F)
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let (who, why) = operator();
    let mut client = fx.db.pool.get().await.unwrap();
    let tx = client.transaction().await.unwrap();
    if paused {
        pause::pause(&tx, fx.workspace, Listener::WebhookFanOut, &who, &why).await.unwrap();
    } else {
        pause::resume(&tx, fx.workspace, Listener::WebhookFanOut, &who, &why).await.unwrap();
    }
    let task = tokio::spawn(other);
    finished_or_waiting(fx, &task, "the other change").await;
    tx.commit().await.unwrap();
    task.await.unwrap();
}

/// Returns once `task` has finished or some session waits on a lock (PostgreSQL shows it not
/// granted), within a generous bound: `who` neither finished nor waited otherwise.
async fn finished_or_waiting(fx: &Fixture, task: &tokio::task::JoinHandle<()>, who: &str) {
    let watcher = fx.db.client().await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let waiting: i64 =
            watcher.query_one("SELECT count(*) FROM pg_locks WHERE NOT granted", &[]).await.unwrap().get(0);
        if task.is_finished() || waiting > 0 {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{who} neither finished nor waited");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn pause_now(fx: &Fixture, paused: bool) {
    let (who, why) = operator();
    let client = fx.db.client().await;
    if paused {
        pause::pause(&client, fx.workspace, Listener::WebhookFanOut, &who, &why).await.unwrap();
    } else {
        pause::resume(&client, fx.workspace, Listener::WebhookFanOut, &who, &why).await.unwrap();
    }
}

fn set_enabled(fx: &Fixture, id: WebhookEndpointId, enabled: bool) -> impl std::future::Future<Output = ()> {
    let (pool, workspace) = (fx.db.pool.clone(), fx.workspace);
    async move {
        let mut client = pool.get().await.unwrap();
        let tx = client.transaction().await.unwrap();
        endpoints::update(&tx, workspace, id, &change(enabled), "member").await.unwrap();
        tx.commit().await.unwrap();
    }
}

#[tokio::test]
async fn a_pause_racing_a_disable_audits_the_one_change_receivers_see() {
    let fx = Fixture::new().await;
    let id = fx.webhook_endpoint("seen").await;
    race(&fx, true, set_enabled(&fx, id, false)).await;
    assert_chain("pause racing a disable", &chain(&fx, id).await);
}

#[tokio::test]
async fn a_pause_racing_an_enable_leaves_the_endpoint_off_in_its_audit_too() {
    let fx = Fixture::new().await;
    let id = fx.webhook_endpoint("seen").await;
    set_enabled(&fx, id, false).await;
    race(&fx, true, set_enabled(&fx, id, true)).await;
    assert_chain("pause racing an enable", &chain(&fx, id).await);
}

#[tokio::test]
async fn a_resume_racing_an_enable_or_a_disable_keeps_the_chain() {
    for enable in [true, false] {
        let fx = Fixture::new().await;
        let id = fx.webhook_endpoint("seen").await;
        if enable {
            set_enabled(&fx, id, false).await;
        }
        pause_now(&fx, true).await;
        race(&fx, false, set_enabled(&fx, id, enable)).await;
        assert_chain(&format!("resume racing enabled={enable}"), &chain(&fx, id).await);
    }
}

#[tokio::test]
async fn a_pause_racing_a_failed_attempt_keeps_the_chain() {
    let fx = Fixture::new().await;
    let id = fx.webhook_endpoint("seen").await;
    let pool = fx.db.pool.clone();
    // A failure older than the error threshold (0 s) turns the endpoint `error`, unless paused.
    race(&fx, true, async move {
        let mut client = pool.get().await.unwrap();
        let tx = client.transaction().await.unwrap();
        store::record_health(&tx, id, false, Duration::ZERO).await.unwrap();
        tx.commit().await.unwrap();
    })
    .await;
    assert_chain("pause racing a failed attempt", &chain(&fx, id).await);
}

#[tokio::test]
async fn an_automatic_disable_while_paused_changes_nothing_receivers_see() {
    let fx = Fixture::new().await;
    let id = fx.webhook_endpoint("seen").await;
    let client = fx.db.client().await;
    client
        .execute(
            "UPDATE webhook_endpoints SET failing_since = now() - interval '3 days' WHERE id = $1",
            &[&id],
        )
        .await
        .unwrap();
    pause_now(&fx, true).await;
    let tx_client = fx.db.client().await;
    let disabled = store::auto_disable(&tx_client, 24.0).await.unwrap();
    assert_eq!(disabled.len(), 1);
    for off in &disabled {
        endpoints::audit_status(
            &tx_client,
            off.workspace,
            off.endpoint,
            &off.previous_status,
            "off",
            "system",
        )
        .await
        .unwrap();
    }
    assert_chain("automatic disable while paused", &chain(&fx, id).await);
}

#[tokio::test]
async fn an_endpoint_created_while_paused_starts_its_chain_off_and_a_create_racing_a_pause_keeps_it() {
    let fx = Fixture::new().await;
    pause_now(&fx, true).await;
    let during = fx.webhook_endpoint("seen").await;
    pause_now(&fx, false).await;
    assert_chain("created while paused, then resumed", &chain(&fx, during).await);

    let created = std::sync::Arc::new(std::sync::Mutex::new(None));
    let (pool, workspace, out) = (fx.db.pool.clone(), fx.workspace, created.clone());
    race(&fx, true, async move {
        let client = pool.get().await.unwrap();
        *out.lock().unwrap() = Some(Fixture::webhook_endpoint_on(&client, workspace, "racing").await);
    })
    .await;
    let racing = created.lock().unwrap().expect("created");
    assert_chain("created racing a pause", &chain(&fx, racing).await);
}

/// The endpoint's audit actions in order: after a delete there is nothing more to see, so `delete`
/// must be the last, whichever of the delete and a pause of the fan-out commits first.
async fn actions(fx: &Fixture, id: WebhookEndpointId) -> Vec<String> {
    let client = fx.db.client().await;
    let rows = client
        .query(
            "SELECT action || COALESCE(':' || (detail->>'to'), '') FROM webhook_endpoint_actions \
             WHERE endpoint_id = $1 ORDER BY created_at, id",
            &[&id],
        )
        .await
        .unwrap();
    rows.iter().map(|row| row.get(0)).collect()
}

fn delete(fx: &Fixture, id: WebhookEndpointId) -> impl std::future::Future<Output = ()> {
    let (pool, workspace) = (fx.db.pool.clone(), fx.workspace);
    async move {
        let mut client = pool.get().await.unwrap();
        let tx = client.transaction().await.unwrap();
        endpoints::delete(&tx, workspace, id, "member").await.unwrap();
        tx.commit().await.unwrap();
    }
}

#[tokio::test]
async fn a_delete_racing_a_pause_ends_the_endpoint_audit_with_the_delete_in_both_orders() {
    // The pause first: the delete waits for the pause's lock on the endpoint, then deletes it.
    let fx = Fixture::new().await;
    let id = fx.webhook_endpoint("seen").await;
    race(&fx, true, delete(&fx, id)).await;
    assert_eq!(actions(&fx, id).await, ["create", "status:off", "delete"], "pause, then delete");

    // The delete first, held open while the pause runs: the pause waits for the deleted row, then
    // finds it gone and audits nothing for it (and does not fail).
    let fx = Fixture::new().await;
    let id = fx.webhook_endpoint("seen").await;
    let other = fx.webhook_endpoint("kept").await;
    let mut client = fx.db.pool.get().await.unwrap();
    let tx = client.transaction().await.unwrap();
    endpoints::delete(&tx, fx.workspace, id, "member").await.unwrap();
    let pool = fx.db.pool.clone();
    let workspace = fx.workspace;
    let pausing = tokio::spawn(async move {
        let (who, why) = operator();
        let client = pool.get().await.unwrap();
        pause::pause(&client, workspace, Listener::WebhookFanOut, &who, &why).await.unwrap();
    });
    finished_or_waiting(&fx, &pausing, "the pause").await;
    tx.commit().await.unwrap();
    pausing.await.unwrap();
    assert_eq!(actions(&fx, id).await, ["create", "delete"], "delete, then pause");
    assert_chain("the endpoint kept beside the deleted one", &chain(&fx, other).await);
    assert_eq!(chain(&fx, other).await.2, "off", "the pause took effect for the rest");
}
