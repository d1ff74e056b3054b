//! `GET /v1/notifications` is newest first by `createdAt` (ties by id), whatever order the ids were
//! generated in, its cursor walks the same order, and an index serves both queries without a sort.

use clinic_testkit::app::TestApp;
use serde_json::Value;

/// Inserts a notification of the test workspace with the given id and creation time.
async fn insert(app: &TestApp, id: ulid::Ulid, created_at: &str) {
    let conn = app.db.pool.get().await.unwrap();
    let workspace: uuid::Uuid = app.workspace.id.ulid().into();
    let id: uuid::Uuid = id.into();
    conn.execute(
        "INSERT INTO notifications (id, workspace_id, event_id, listener, idempotency_key, recipient_kind, \
         recipient_id, template, channel, status, created_at) \
         VALUES ($1, $2, gen_random_uuid(), 'patient_booking_confirmation', $4, 'patient', \
         gen_random_uuid(), 'booking_confirmation', 'email', 'pending', $3::text::timestamptz)",
        &[&id, &workspace, &created_at, &id.to_string()],
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn notifications_are_newest_first_by_created_at_and_the_cursor_follows() {
    let app = TestApp::new().await;
    // Ids generated in one order, created_at in another (clocks of different machines), with a tie.
    let ids: Vec<ulid::Ulid> = (0..5).map(|_| ulid::Ulid::generate()).collect();
    let times = [
        "2030-01-01T10:00:03Z",
        "2030-01-01T10:00:01Z",
        "2030-01-01T10:00:05Z",
        "2030-01-01T10:00:03Z",
        "2030-01-01T10:00:00Z",
    ];
    for (id, at) in ids.iter().zip(times) {
        insert(&app, *id, at).await;
    }
    let mut expected: Vec<(String, ulid::Ulid)> =
        ids.iter().zip(times).map(|(id, at)| (at.to_owned(), *id)).collect();
    expected.sort_by(|a, b| b.cmp(a));
    let expected: Vec<String> = expected.into_iter().map(|(_, id)| id.to_string()).collect();

    let token = app.workspace.staff.clone();
    let all = app.call("GET", "/v1/notifications", Some(&token), None).await;
    assert_eq!(all.status, 200, "{}", all.text);
    let listed: Vec<String> =
        all.body["items"].as_array().unwrap().iter().map(|i| i["id"].as_str().unwrap().to_owned()).collect();
    assert_eq!(listed, expected, "newest first by createdAt, ties by id");

    // Pages of two walk the same order and end with a null cursor.
    let mut walked = Vec::new();
    let mut path = "/v1/notifications?limit=2".to_owned();
    loop {
        let page = app.call("GET", &path, Some(&token), None).await;
        assert_eq!(page.status, 200, "{}", page.text);
        walked.extend(
            page.body["items"].as_array().unwrap().iter().map(|i| i["id"].as_str().unwrap().to_owned()),
        );
        match &page.body["nextCursor"] {
            Value::String(cursor) => path = format!("/v1/notifications?limit=2&cursor={cursor}"),
            _ => break,
        }
        assert!(walked.len() <= expected.len(), "the cursor never repeats");
    }
    assert_eq!(walked, expected);
}

#[tokio::test]
async fn an_index_serves_both_pages_without_a_sort() {
    let app = TestApp::new().await;
    let conn = app.db.pool.get().await.unwrap();
    conn.batch_execute("SET enable_seqscan = off").await.unwrap();
    let workspace: uuid::Uuid = app.workspace.id.ulid().into();
    for query in [
        "EXPLAIN SELECT id FROM notifications WHERE workspace_id = $1 ORDER BY created_at DESC, id DESC LIMIT 50",
        "EXPLAIN SELECT id FROM notifications WHERE workspace_id = $1 AND (created_at, id) < \
         (SELECT created_at, id FROM notifications WHERE workspace_id = $1 AND id = $1) \
         ORDER BY created_at DESC, id DESC LIMIT 50",
    ] {
        let plan: Vec<String> =
            conn.query(query, &[&workspace]).await.unwrap().iter().map(|row| row.get(0)).collect();
        let plan = plan.join("\n");
        assert!(plan.contains("notifications_workspace_created_idx"), "{plan}");
        assert!(!plan.contains("Sort"), "{plan}");
    }
}
