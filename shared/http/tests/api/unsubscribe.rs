//! One-click unsubscribe (RFC 8058, issue 40 item 3): `GET|POST /v1/unsubscribe/{token}` with no
//! login. A GET writes nothing; a POST of `List-Unsubscribe=One-Click` opts the token's patient out
//! of its kind with one `patient.updated` event by the patient naming `contactOptOuts` only, and a
//! second POST writes nothing; bad, forged, expired and other-key tokens answer 400 naming `token`
//! and write nothing; an erased patient's link answers like a never-existing one and writes nothing;
//! no token reaches a log line, a span, an event or an outbox row.

use chrono::{TimeZone, Utc};
use clinic_core::delivery::unsubscribe::{Claims, UnsubscribeKeys};
use clinic_core::domain::contact::MessageKind;
use clinic_core::ids::{PatientId, WorkspaceId};
use clinic_testkit::app::{TestApp, TEST_SECRET};
use serde_json::{json, Value};

const ONE_CLICK: &str = "List-Unsubscribe=One-Click";

/// The keys the test API verifies with (TestApp's local keys: derived from its JWT secret).
fn keys() -> UnsubscribeKeys {
    UnsubscribeKeys::new(TEST_SECRET.as_bytes(), None)
}

fn token_for(
    keys: &UnsubscribeKeys,
    workspace: WorkspaceId,
    patient: &str,
    kind: MessageKind,
    days: i64,
) -> String {
    let expires = Utc.timestamp_opt((Utc::now() + chrono::Duration::days(days)).timestamp(), 0).unwrap();
    let patient_id: PatientId = patient.parse().unwrap();
    keys.issue(&Claims { workspace_id: workspace, patient_id, kind, expires_at: expires })
}

/// Everything the database holds that a write would change: the patient's opt-outs and version,
/// and the number of events and outbox rows.
async fn written(app: &TestApp, patient: &str) -> (Value, i64, i64, i64) {
    let read = app.call("GET", &format!("/v1/patients/{patient}"), Some(&app.workspace.staff), None).await;
    (
        read.body["contactOptOuts"].clone(),
        read.body["version"].as_i64().unwrap_or(-1),
        app.count("SELECT 1 FROM events").await,
        app.count("SELECT 1 FROM event_outbox").await,
    )
}

async fn patient(app: &TestApp) -> String {
    let body = json!({"givenName": "Una", "familyName": "Subscribe", "email": "una@example.test"});
    app.create_patient(&app.workspace.staff, body).await["id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_one_click_post_opts_out_of_that_kind_once_with_one_event_by_the_patient() {
    let logs = clinic_testkit::capture_logs();
    let app = TestApp::new().await;
    let id = patient(&app).await;
    let token = token_for(&keys(), app.workspace.id, &id, MessageKind::Reminder, 60);
    let path = format!("/v1/unsubscribe/{token}");
    let before = written(&app, &id).await;

    // GET: a page with a button that POSTs the one-click body; nothing written.
    let page = app.call("GET", &path, None, None).await;
    assert_eq!(page.status, 200, "{}", page.text);
    assert!(page.header("content-type").unwrap().starts_with("text/html"));
    assert!(page.text.contains("method=\"post\"") && page.text.contains("name=\"List-Unsubscribe\""));
    assert!(page.text.contains("value=\"One-Click\""), "{}", page.text);
    assert_eq!(page.header("referrer-policy"), Some("no-referrer"));
    assert_eq!(page.header("cache-control"), Some("no-store"));
    assert_eq!(written(&app, &id).await, before, "a GET writes nothing");

    // A POST without the one-click body: refused, naming the field; nothing written.
    for (content_type, body) in [("application/json", "{}"), ("application/x-www-form-urlencoded", "x=1")] {
        let request = axum::http::Request::builder()
            .method("POST")
            .uri(&path)
            .header("content-type", content_type)
            .body(axum::body::Body::from(body))
            .unwrap();
        let refused = app.send(request).await;
        assert_eq!(refused.status, 400, "{}", refused.text);
        assert_eq!(refused.body["field"], "List-Unsubscribe");
    }
    assert_eq!(written(&app, &id).await, before);

    let done = app.post_form(&path, ONE_CLICK).await;
    assert_eq!(done.status, 200, "{}", done.text);
    let (opt_outs, version, events, outbox) = written(&app, &id).await;
    assert_eq!(opt_outs, json!(["reminder"]), "exactly the token's kind");
    assert_eq!((version, events, outbox), (before.1 + 1, before.2 + 1, before.3 + 1));
    let conn = app.db.client().await;
    let event = conn
        .query_one(
            "SELECT changed_fields, actor_kind, actor_id::text, resource_id::text FROM events \
             WHERE type = 'patient.updated'",
            &[],
        )
        .await
        .expect("exactly one patient.updated event");
    assert_eq!(event.get::<_, Vec<String>>(0), vec!["contactOptOuts".to_owned()], "field names only");
    assert_eq!(event.get::<_, String>(1), "patient");
    let patient_uuid = uuid::Uuid::from(id.parse::<ulid::Ulid>().unwrap()).to_string();
    assert_eq!((event.get::<_, String>(2), event.get::<_, String>(3)), (patient_uuid.clone(), patient_uuid));

    // A second click (or the mail client retrying): the same answer, nothing written.
    let again = app.post_form(&path, ONE_CLICK).await;
    assert_eq!((again.status, again.text.clone()), (done.status, done.text.clone()));
    assert_eq!(written(&app, &id).await, (json!(["reminder"]), version, events, outbox));
    // The multipart form of RFC 8058's senders is read too (already recorded: nothing written).
    let multipart =
        "--b\r\nContent-Disposition: form-data; name=\"List-Unsubscribe\"\r\n\r\nOne-Click\r\n--b--\r\n";
    let request = axum::http::Request::builder()
        .method("POST")
        .uri(&path)
        .header("content-type", "multipart/form-data; boundary=b")
        .body(axum::body::Body::from(multipart))
        .unwrap();
    assert_eq!(app.send(request).await.status, 200);
    assert_eq!(written(&app, &id).await.2, events);

    // Another kind's link opts out of that kind only.
    let booking = token_for(&keys(), app.workspace.id, &id, MessageKind::BookingConfirmation, 60);
    assert_eq!(app.post_form(&format!("/v1/unsubscribe/{booking}"), ONE_CLICK).await.status, 200);
    assert_eq!(written(&app, &id).await.0, json!(["booking_confirmation", "reminder"]));

    // No token in any log line or span, event or outbox row.
    let stored: String = conn
        .query_one(
            "SELECT coalesce((SELECT string_agg(e::text, ' ') FROM events e), '') || \
             coalesce((SELECT string_agg(o::text, ' ') FROM event_outbox o), '')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let logged = logs.text();
    assert!(logged.contains("/v1/unsubscribe/{token}"), "the route template is logged");
    for token in [&token, &booking] {
        assert!(!logged.contains(token.as_str()), "a token was logged");
        assert!(!logged.contains(&token[..24]), "part of a token was logged");
        assert!(!stored.contains(token.as_str()), "a token was stored");
    }
}

#[tokio::test]
async fn bad_forged_expired_and_other_key_tokens_are_refused_naming_token_and_write_nothing() {
    let logs = clinic_testkit::capture_logs();
    let app = TestApp::new().await;
    let id = patient(&app).await;
    let before = written(&app, &id).await;
    let genuine = token_for(&keys(), app.workspace.id, &id, MessageKind::Reminder, 60);
    let other_key = UnsubscribeKeys::new(b"another-deployments-secret-0123", None);
    let mut altered: Vec<char> = genuine.chars().collect();
    altered[40] = if altered[40] == 'A' { 'B' } else { 'A' };
    let refused_tokens = [
        token_for(&other_key, app.workspace.id, &id, MessageKind::Reminder, 60),
        token_for(&keys(), app.workspace.id, &id, MessageKind::Reminder, -1),
        altered.into_iter().collect(),
        "not-a-token".to_owned(),
        "A".repeat(78),
        format!("{genuine}A"),
    ];
    for token in &refused_tokens {
        let path = format!("/v1/unsubscribe/{token}");
        for response in [app.call("GET", &path, None, None).await, app.post_form(&path, ONE_CLICK).await] {
            assert_eq!(response.status, 400, "{token}: {}", response.text);
            assert_eq!(response.body["field"], "token", "{}", response.text);
            assert_eq!(response.header("content-type"), Some("application/problem+json"));
        }
    }
    let expired = app.post_form(&format!("/v1/unsubscribe/{}", refused_tokens[1]), ONE_CLICK).await;
    assert_eq!(expired.body["detail"], "token: has expired");
    assert_eq!(written(&app, &id).await, before, "nothing written");
    let logged = logs.text();
    for token in &refused_tokens[..3] {
        assert!(!logged.contains(token.as_str()), "a refused token was logged");
    }
}

#[tokio::test]
async fn an_erased_patients_link_answers_like_a_stranger_and_writes_nothing() {
    let app = TestApp::new().await;
    let id = patient(&app).await;
    let token = token_for(&keys(), app.workspace.id, &id, MessageKind::Reminder, 60);
    let deleted = app.call("DELETE", &format!("/v1/patients/{id}"), Some(&app.workspace.staff), None).await;
    assert!(deleted.status.is_success(), "{}", deleted.text);
    let events = app.count("SELECT 1 FROM events").await;

    let erased = app.post_form(&format!("/v1/unsubscribe/{token}"), ONE_CLICK).await;
    let stranger =
        token_for(&keys(), app.workspace.id, &ulid::Ulid::generate().to_string(), MessageKind::Reminder, 60);
    let never = app.post_form(&format!("/v1/unsubscribe/{stranger}"), ONE_CLICK).await;
    // Another workspace's patient through this workspace's id: the same again.
    let elsewhere = app.add_workspace().await;
    let foreign = token_for(&keys(), elsewhere.id, &id, MessageKind::Reminder, 60);
    let across = app.post_form(&format!("/v1/unsubscribe/{foreign}"), ONE_CLICK).await;
    for answer in [&erased, &never, &across] {
        assert_eq!((answer.status, answer.text.as_str()), (erased.status, erased.text.as_str()));
    }
    assert_eq!(erased.status, 200);
    assert_eq!(app.count("SELECT 1 FROM events").await, events, "nothing written");
    let conn = app.db.client().await;
    let opt_outs: Vec<String> =
        conn.query_one("SELECT contact_opt_outs FROM patients", &[]).await.unwrap().get(0);
    assert!(opt_outs.is_empty());
}

/// The patient's `patient.updated` events: (resource version, actor kind, changed fields), in order.
async fn updates(app: &TestApp, patient: &str) -> Vec<(i32, String, Vec<String>)> {
    let id: PatientId = patient.parse().unwrap();
    let conn = app.db.client().await;
    conn.query(
        "SELECT resource_version, actor_kind, changed_fields FROM events \
         WHERE type = 'patient.updated' AND resource_id = $1 ORDER BY resource_version",
        &[&id.uuid()],
    )
    .await
    .unwrap()
    .iter()
    .map(|row| (row.get(0), row.get(1), row.get(2)))
    .collect()
}

/// A one-click opt-out racing a staff PATCH of the same patient: both lock the patient's row, so
/// they run one after the other and neither write is lost, whichever goes first. The opt-out stays,
/// the staff's change stays, the version moves by two and each event names its own fields with its
/// own actor. A PATCH carrying the version read before the opt-out is refused (409) rather than
/// undoing the opt-out from a stale view.
#[tokio::test]
async fn a_one_click_opt_out_racing_a_staff_patch_loses_neither() {
    let app = TestApp::new().await;
    let staff = app.workspace.staff.clone();
    for round in 0..8 {
        let id = patient(&app).await;
        let token = token_for(&keys(), app.workspace.id, &id, MessageKind::Reminder, 60);
        let unsubscribe = format!("/v1/unsubscribe/{token}");
        let patient_path = format!("/v1/patients/{id}");
        let phone = format!("+1555000{round:04}");
        let change = json!({"phone": phone, "contactChannels": ["email"]});
        let (opted_out, patched) = tokio::join!(
            app.post_form(&unsubscribe, ONE_CLICK),
            app.call("PATCH", &patient_path, Some(&staff), Some(change)),
        );
        assert_eq!(opted_out.status, 200, "{}", opted_out.text);
        assert_eq!(patched.status, 200, "{}", patched.text);

        let read = app.call("GET", &patient_path, Some(&staff), None).await;
        assert_eq!(read.body["contactOptOuts"], json!(["reminder"]), "round {round}: the opt-out stays");
        assert_eq!(read.body["phone"], json!(phone), "round {round}: the staff's change stays");
        assert_eq!(read.body["contactChannels"], json!(["email"]));
        assert_eq!(read.body["version"], 3, "round {round}: two writes, one after the other");
        let mut events = updates(&app, &id).await;
        assert_eq!(events.iter().map(|e| e.0).collect::<Vec<_>>(), [2, 3], "round {round}: {events:?}");
        events.sort_by(|a, b| a.1.cmp(&b.1));
        assert_eq!(events[0].1, "member");
        assert_eq!(events[0].2, ["phone", "contactChannels"]);
        assert_eq!(
            (events[1].1.as_str(), events[1].2.clone()),
            ("patient", vec!["contactOptOuts".to_owned()])
        );
    }

    // A stale PATCH (the version read before the opt-out) does not undo it.
    let id = patient(&app).await;
    let token = token_for(&keys(), app.workspace.id, &id, MessageKind::Reminder, 60);
    assert_eq!(app.post_form(&format!("/v1/unsubscribe/{token}"), ONE_CLICK).await.status, 200);
    let stale = json!({"contactOptOuts": [], "expectedVersion": 1});
    let refused = app.call("PATCH", &format!("/v1/patients/{id}"), Some(&staff), Some(stale)).await;
    assert_eq!(refused.status, 409, "{}", refused.text);
    let read = app.call("GET", &format!("/v1/patients/{id}"), Some(&staff), None).await;
    assert_eq!(
        (read.body["contactOptOuts"].clone(), read.body["version"].clone()),
        (json!(["reminder"]), json!(2))
    );
}
