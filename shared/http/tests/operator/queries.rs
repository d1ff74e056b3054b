//! The operator listing and stats (issue 12 item 9): every filter shape answers exactly the rows a
//! plain filter over all rows answers; the outbox carries its event's workspace whichever way the
//! row was written; dispatched history is counted up to a limit, everything else exactly.

use std::time::Duration;

use super::support::Scene;
use clinic_core::events::EventType;
use clinic_core::ids::{EventId, WorkspaceId};
use clinic_core::operator::{self, OutboxFilter, OutboxItem, DISPATCHED_COUNT_LIMIT};
use clinic_core::outbox::OutboxStatus;
use serde_json::json;

fn matches(item: &OutboxItem, filter: &OutboxFilter) -> bool {
    let age = chrono::Utc::now() - item.created_at;
    filter.workspace.is_none_or(|w| w == item.workspace_id)
        && filter.status.is_none_or(|s| s.as_str() == item.status)
        && filter.event_type.is_none_or(|t| t.as_str() == item.event_type)
        && filter.older_than.is_none_or(|min| age.to_std().unwrap_or_default() >= min)
        && filter.before.is_none_or(|before| item.event_id < before)
}

#[tokio::test]
async fn every_filter_shape_answers_what_a_plain_filter_answers() {
    let scene = Scene::new().await;
    let app = &scene.app;
    let admin = app.workspace.admin.clone();
    // A second workspace with rows of its own; two rows dead, the first workspace's rows dispatched.
    let other = app.add_workspace().await;
    for name in ["Ann", "Bob", "Cid"] {
        app.create_patient(&other.admin, json!({"givenName": name, "familyName": "Other"})).await;
    }
    scene.dispatch_locally().await;
    app.create_patient(&admin, json!({"givenName": "Late", "familyName": "Pending"})).await;
    let client = app.db.client().await;
    client
        .execute(
            "UPDATE event_outbox SET status = 'dead', last_error_code = 'provider_rejected' \
             WHERE event_id IN (SELECT event_id FROM event_outbox WHERE workspace_id = $1 ORDER BY event_id LIMIT 2)",
            &[&other.id],
        )
        .await
        .unwrap();
    // Some rows are old.
    client
        .execute(
            "UPDATE event_outbox SET created_at = now() - interval '3 hours' \
             WHERE event_id IN (SELECT event_id FROM event_outbox ORDER BY event_id LIMIT 3)",
            &[],
        )
        .await
        .unwrap();
    // The column matches the event's workspace on every row (written by the one write path).
    let mismatched = app
        .count("SELECT 1 FROM event_outbox o JOIN events e ON e.id = o.event_id WHERE o.workspace_id <> e.workspace_id")
        .await;
    assert_eq!(mismatched, 0);

    let everything = operator::list(&client, &OutboxFilter::default(), 100).await.unwrap();
    assert_eq!(everything.len() as i64, app.count("SELECT 1 FROM event_outbox").await);
    let middle = everything[everything.len() / 2].event_id;
    let workspaces: [Option<WorkspaceId>; 3] = [None, Some(app.workspace.id), Some(other.id)];
    let statuses =
        [None, Some(OutboxStatus::Dead), Some(OutboxStatus::Dispatched), Some(OutboxStatus::Pending)];
    let types = [None, Some(EventType::PatientCreated), Some(EventType::AppointmentCreated)];
    let ages = [None, Some(Duration::from_secs(3600)), Some(Duration::from_secs(400 * 366 * 86_400))];
    let befores: [Option<EventId>; 2] = [None, Some(middle)];
    let mut shapes = 0;
    for workspace in workspaces {
        for status in statuses {
            for event_type in types {
                for older_than in ages {
                    for before in befores {
                        let filter = OutboxFilter {
                            workspace,
                            status,
                            event_type,
                            older_than,
                            before,
                            ..Default::default()
                        };
                        let expected: Vec<EventId> = everything
                            .iter()
                            .filter(|item| matches(item, &filter))
                            .map(|item| item.event_id)
                            .collect();
                        let got: Vec<EventId> = operator::list(&client, &filter, 100)
                            .await
                            .unwrap()
                            .iter()
                            .map(|item| item.event_id)
                            .collect();
                        assert_eq!(got, expected, "{filter:?}");
                        let limited = operator::list(&client, &filter, 1).await.unwrap();
                        assert_eq!(limited.len(), expected.len().min(1), "{filter:?}");
                        shapes += 1;
                    }
                }
            }
        }
    }
    assert_eq!(shapes, 216);
    let some_dead =
        OutboxFilter { workspace: Some(other.id), status: Some(OutboxStatus::Dead), ..Default::default() };
    assert_eq!(
        operator::list(&client, &some_dead, 100).await.unwrap().len(),
        2,
        "the filters select something"
    );
}

#[tokio::test]
async fn dispatched_history_is_counted_up_to_the_limit_and_the_rest_exactly() {
    let scene = Scene::new().await;
    let app = &scene.app;
    let client = app.db.client().await;
    // History written by hand (no workspace given): the outbox row takes its event's workspace.
    let inserted = client
        .execute(
            "WITH e AS ( \
                 INSERT INTO events (id, workspace_id, type, version, actor_kind, occurred_at, resource_type, \
                                     resource_id, resource_version, correlation_id, causation_id) \
                 SELECT gen_random_uuid(), $1, 'patient.created', 1, 'system', now(), 'patient', \
                        gen_random_uuid(), 1, gen_random_uuid(), gen_random_uuid() \
                 FROM generate_series(1, $2::bigint) RETURNING id) \
             INSERT INTO event_outbox (event_id, status) SELECT id, 'dispatched' FROM e",
            &[&app.workspace.id, &(DISPATCHED_COUNT_LIMIT + 5)],
        )
        .await
        .unwrap();
    assert_eq!(inserted as i64, DISPATCHED_COUNT_LIMIT + 5);
    let elsewhere = format!("SELECT 1 FROM event_outbox WHERE workspace_id <> '{}'", app.workspace.id.uuid());
    let missing = app.count(&elsewhere).await;
    assert_eq!(missing, 0, "every row carries the workspace");

    let stats = operator::stats(&client, Some(app.workspace.id)).await.unwrap();
    assert_eq!(stats.by_status["dispatched"], DISPATCHED_COUNT_LIMIT);
    assert!(stats.dispatched_capped);
    assert_eq!(stats.by_status["pending"], 3, "the scene's three live rows, exactly");
    let all = operator::stats(&client, None).await.unwrap();
    assert_eq!(all.by_status["dispatched"], DISPATCHED_COUNT_LIMIT);
    assert!(all.dispatched_capped);
    assert_eq!(all.by_status["pending"], 3);

    // Under the limit the count is exact and not marked capped.
    let other = app.add_workspace().await;
    let theirs = operator::stats(&client, Some(other.id)).await.unwrap();
    assert_eq!(theirs.by_status["dispatched"], 0);
    assert!(!theirs.dispatched_capped);
}
