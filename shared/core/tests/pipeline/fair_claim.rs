//! Fair claims across workspaces (issue 41 item 1, DESIGN §5d) on real PostgreSQL: one clinic's
//! burst of older due rows does not take a whole claim while other clinics have due rows too; a lone
//! busy clinic still gets every row a claim can take (work-conserving). Oldest-first claiming fails
//! both interleaving tests.

use std::time::Duration;

use clinic_core::delivery::{DeliveryConfig, NotifierKind, Providers, Sender};
use clinic_core::ids::{ClaimToken, WorkspaceId};
use clinic_core::webhooks::store as webhook_store;
use clinic_core::workspaces;

use super::support::Fixture;

/// A second (or third …) clinic in the fixture's database.
async fn clinic(fx: &Fixture, name: &str) -> WorkspaceId {
    let workspace = WorkspaceId::generate();
    workspaces::insert_workspace(&fx.db.client().await, workspace, name).await.unwrap();
    workspace
}

/// `count` due notifications of `workspace` with template `template`, due since `age_secs` ago
/// (older rows first by `available_at`), each for an unknown recipient: whatever the render makes
/// of them, the claim is what is under test (it counts an attempt on every row it takes).
pub async fn due_notifications(
    fx: &Fixture,
    workspace: WorkspaceId,
    template: &str,
    count: i64,
    age_secs: f64,
) {
    fx.db
        .client()
        .await
        .execute(
            "INSERT INTO notifications (id, workspace_id, event_id, listener, idempotency_key, recipient_kind, \
                 recipient_id, template, channel, status, available_at) \
             SELECT gen_random_uuid(), $1, e, 'patient_notice', e::text || ':patient_notice', 'patient', \
                 gen_random_uuid(), $2, 'auto', 'pending', \
                 now() - ($3::float8 - i * 0.001) * interval '1 second' \
             FROM (SELECT i, gen_random_uuid() AS e FROM generate_series(1, $4::bigint) AS i) AS rows",
            &[&workspace, &template, &age_secs, &count],
        )
        .await
        .unwrap();
}

/// How many of `workspace`'s notifications were claimed (an attempt counted).
async fn claimed_notifications(fx: &Fixture, workspace: WorkspaceId) -> i64 {
    fx.db
        .client()
        .await
        .query_one(
            "SELECT count(*) FROM notifications WHERE workspace_id = $1 AND attempts > 0",
            &[&workspace],
        )
        .await
        .unwrap()
        .get(0)
}

fn sender(fx: &Fixture, batch: i64) -> Sender {
    let mut config = DeliveryConfig::with_notifiers(vec![NotifierKind::Log]);
    config.batch = batch;
    Sender::new(fx.db.pool.clone(), Providers::default(), config)
}

#[tokio::test]
async fn a_notification_claim_interleaves_clinics_instead_of_taking_the_oldest_burst() {
    let fx = Fixture::new().await;
    let busy = fx.workspace;
    let quiet = [clinic(&fx, "Quiet one").await, clinic(&fx, "Quiet two").await];
    // The busy clinic's 50 reminders are all older than the quiet clinics' one row each.
    due_notifications(&fx, busy, "appointment.reminder", 50, 600.0).await;
    for workspace in quiet {
        due_notifications(&fx, workspace, "appointment.reminder", 1, 5.0).await;
    }

    let report = sender(&fx, 5).step_due().await.unwrap();

    assert_eq!(report.claimed, 5, "{report:?}");
    for workspace in quiet {
        assert_eq!(
            claimed_notifications(&fx, workspace).await,
            1,
            "a quiet clinic's row waited behind the burst"
        );
    }
    assert_eq!(claimed_notifications(&fx, busy).await, 3, "the rest of the claim is the busy clinic's");
}

#[tokio::test]
async fn a_lone_busy_clinic_gets_the_whole_claim() {
    let fx = Fixture::new().await;
    due_notifications(&fx, fx.workspace, "appointment.reminder", 20, 60.0).await;

    let report = sender(&fx, 5).step_due().await.unwrap();

    assert_eq!(report.claimed, 5, "{report:?}");
    assert_eq!(claimed_notifications(&fx, fx.workspace).await, 5);
}

/// One enabled endpoint of `workspace` with `count` due deliveries, due since `age_secs` ago.
async fn endpoint_with_deliveries(
    fx: &Fixture,
    workspace: WorkspaceId,
    count: i64,
    age_secs: f64,
) -> uuid::Uuid {
    let client = fx.db.client().await;
    let endpoint = uuid::Uuid::from(ulid::Ulid::generate());
    client
        .execute(
            "INSERT INTO webhook_endpoints (id, workspace_id, url, secret) VALUES ($1, $2, 'https://example.com/hook', 'sealed')",
            &[&endpoint, &workspace],
        )
        .await
        .unwrap();
    client
        .execute(
            "INSERT INTO webhook_deliveries (id, endpoint_id, workspace_id, event_id, event_type, available_at) \
             SELECT gen_random_uuid(), $1, $2, gen_random_uuid(), 'appointment.created', \
                 now() - ($3::float8 - i * 0.001) * interval '1 second' \
             FROM generate_series(1, $4::bigint) AS i",
            &[&endpoint, &workspace, &age_secs, &count],
        )
        .await
        .unwrap();
    endpoint
}

#[tokio::test]
async fn a_webhook_claim_interleaves_clinics_instead_of_taking_the_oldest_burst() {
    let fx = Fixture::new().await;
    let busy = fx.workspace;
    let quiet = [clinic(&fx, "Quiet one").await, clinic(&fx, "Quiet two").await];
    endpoint_with_deliveries(&fx, busy, 50, 600.0).await;
    for workspace in quiet {
        endpoint_with_deliveries(&fx, workspace, 1, 5.0).await;
    }
    let lease_ms = Duration::from_secs(30).as_secs_f64() * 1000.0;

    let claimed =
        webhook_store::claim(&fx.db.client().await, 5, ClaimToken::generate(), lease_ms, None, 10, 100)
            .await
            .unwrap();

    assert_eq!(claimed.len(), 5);
    for workspace in quiet {
        assert_eq!(
            claimed.iter().filter(|row| row.workspace_id == workspace).count(),
            1,
            "a quiet clinic's delivery waited behind the burst"
        );
    }
    assert_eq!(claimed.iter().filter(|row| row.workspace_id == busy).count(), 3);
}

/// Claims of many senders at once: each due row is claimed exactly once (a row another claim took
/// after this claim's snapshot is re-checked when locked, not claimed again).
#[tokio::test]
async fn concurrent_fair_claims_never_take_a_row_twice() {
    let fx = Fixture::new().await;
    let mut clinics = vec![fx.workspace];
    for name in ["Two", "Three", "Four"] {
        clinics.push(clinic(&fx, name).await);
    }
    for workspace in &clinics {
        due_notifications(&fx, *workspace, "appointment.reminder", 60, 60.0).await;
        endpoint_with_deliveries(&fx, *workspace, 60, 60.0).await;
    }
    let lease_ms = Duration::from_secs(30).as_secs_f64() * 1000.0;
    let claimers = (0..6).map(|_| {
        let fx = &fx;
        async move {
            let sender = sender(fx, 3);
            let (mut notifications, mut webhooks, mut fenced) = (0, Vec::new(), 0);
            loop {
                let report = sender.step_due().await.unwrap();
                notifications += report.claimed;
                fenced += report.fenced;
                let client = fx.db.client().await;
                let claimed =
                    webhook_store::claim(&client, 3, ClaimToken::generate(), lease_ms, None, 10, 1000)
                        .await
                        .unwrap();
                webhooks.extend(claimed.into_iter().map(|row| row.id));
                if report.claimed == 0 && webhooks.len() >= 240 {
                    break;
                }
                if report.claimed == 0
                    && fx.count("SELECT count(*) FROM webhook_deliveries WHERE status = 'pending'").await == 0
                {
                    break;
                }
            }
            (notifications, webhooks, fenced)
        }
    });
    let results = futures::future::join_all(claimers).await;

    let notifications: usize = results.iter().map(|(n, _, _)| n).sum();
    let fenced: usize = results.iter().map(|(_, _, f)| f).sum();
    assert_eq!(notifications, 240, "every notification claimed once");
    assert_eq!(fenced, 0, "no claim was taken over by a second claim of the same row");
    let mut webhooks: Vec<_> = results.into_iter().flat_map(|(_, w, _)| w).collect();
    let total = webhooks.len();
    webhooks.sort_by_key(|id| id.to_string());
    webhooks.dedup();
    assert_eq!((total, webhooks.len()), (240, 240), "every delivery claimed once");
}

/// Weights (issue 41): a clinic of weight 3 gets three times the share of a contended claim of a
/// clinic of weight 1 — within one claim, and across many claims of a row or two (the turns carry
/// over from claim to claim).
#[tokio::test]
async fn a_clinic_of_weight_three_gets_three_times_the_share_of_contended_claims() {
    let fx = Fixture::new().await;
    let (heavy, light) = (fx.workspace, clinic(&fx, "Light").await);
    fx.db
        .client()
        .await
        .execute("UPDATE workspaces SET delivery_weight = 3 WHERE id = $1", &[&heavy])
        .await
        .unwrap();
    // Both have far more due than is claimed; the light clinic's rows are the older ones.
    due_notifications(&fx, heavy, "appointment.reminder", 100, 60.0).await;
    due_notifications(&fx, light, "appointment.reminder", 100, 600.0).await;

    let report = sender(&fx, 8).step_due().await.unwrap();
    assert_eq!(report.claimed, 8, "{report:?}");
    assert_eq!(claimed_notifications(&fx, heavy).await, 6, "three rows per turn of the light clinic's one");
    assert_eq!(claimed_notifications(&fx, light).await, 2);

    // Claims of one row each: the turns carry over from claim to claim.
    let single = sender(&fx, 1);
    for _ in 0..40 {
        assert_eq!(single.step_due().await.unwrap().claimed, 1);
    }
    let (heavy_claimed, light_claimed) =
        (claimed_notifications(&fx, heavy).await, claimed_notifications(&fx, light).await);
    assert_eq!(heavy_claimed + light_claimed, 48);
    assert!(
        (35..=37).contains(&heavy_claimed),
        "weight 3 against 1 takes three quarters of 48: {heavy_claimed} against {light_claimed}"
    );
}

/// Claims of one row (as many as the provider's rate allows) still take turns: a quiet clinic's
/// newer row is not left behind a busy clinic's older ones of the same priority.
#[tokio::test]
async fn single_row_claims_take_turns_across_clinics() {
    let fx = Fixture::new().await;
    let busy = fx.workspace;
    let quiet = clinic(&fx, "Quiet").await;
    due_notifications(&fx, busy, "appointment.reminder", 50, 600.0).await;
    let single = sender(&fx, 1);
    for _ in 0..5 {
        assert_eq!(single.step_due().await.unwrap().claimed, 1);
    }
    due_notifications(&fx, quiet, "appointment.reminder", 2, 1.0).await;

    for _ in 0..4 {
        assert_eq!(single.step_due().await.unwrap().claimed, 1);
    }
    assert_eq!(claimed_notifications(&fx, quiet).await, 2, "the quiet clinic's two rows went in turns");
    assert_eq!(claimed_notifications(&fx, busy).await, 7);
}
