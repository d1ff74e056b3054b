//! `clinic outbox …` and `clinic reminders run` against a fresh database: every operator action from
//! the CLI with its audit row (actor = `--actor`), refusals that record nothing, stats, sweep.

use std::sync::Arc;
use std::time::Duration;

use clinic_core::dispatch::testing::FailingTransport;
use clinic_core::dispatch::{DispatchConfig, Dispatcher, LocalTransport, StartError, Transport};
use clinic_core::ids::EventId;
use clinic_testkit::app::TestApp;
use serde_json::{json, Value};

use super::support::clinic;

fn config() -> DispatchConfig {
    DispatchConfig { max_attempts: 3, ..DispatchConfig::default() }
}

async fn drain(app: &TestApp, transport: Arc<dyn Transport>) {
    Dispatcher::new(app.state.pool.clone(), transport, config()).drain_once().await.unwrap();
}

async fn bury(app: &TestApp) {
    let failing = FailingTransport::always(StartError::permanent("provider_rejected", "provider said no"));
    drain(app, Arc::new(failing)).await;
}

async fn dispatch(app: &TestApp) {
    drain(app, Arc::new(LocalTransport::new(app.state.pool.clone()))).await;
}

fn at(hours: u64) -> String {
    let instant = clinic_core::domain::values::now() + Duration::from_secs(hours * 3600);
    instant.format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Books an appointment `hours` from now and answers its `appointment.created` event id.
async fn book(app: &TestApp, patient: &Value, practitioner: &Value, hours: u64) -> EventId {
    app.book(&app.workspace.admin, patient, practitioner, &at(hours), &at(hours + 1)).await;
    let row = app
        .db
        .client()
        .await
        .query_one("SELECT id FROM events WHERE type = 'appointment.created' ORDER BY id DESC LIMIT 1", &[])
        .await
        .unwrap();
    row.get(0)
}

async fn one(app: &TestApp, sql: &str, event: EventId) -> tokio_postgres::Row {
    app.db.client().await.query_one(sql, &[&event]).await.unwrap()
}

/// `outbox ACTION ID --actor ACTOR --reason REASON` and then `more`.
fn act<'a>(action: &'a str, id: &'a str, actor: &'a str, reason: &'a str, more: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["outbox", action, id, "--actor", actor, "--reason", reason];
    args.extend_from_slice(more);
    args
}

async fn audits(app: &TestApp) -> i64 {
    app.count("SELECT 1 FROM operator_actions").await
}

#[tokio::test]
async fn every_operator_action_works_from_the_cli_and_is_audited() {
    clinic_testkit::init_test_logging();
    let app = TestApp::new().await;
    let admin = app.workspace.admin.clone();
    let patient = app.create_patient(&admin, json!({"givenName": "Ada", "familyName": "Lovelace"})).await;
    let practitioner = app.create_practitioner(&admin).await;
    let first = book(&app, &patient, &practitioner, 30).await;
    let second = book(&app, &patient, &practitioner, 40).await;
    bury(&app).await;
    let (first_id, second_id) = (first.to_string(), second.to_string());

    // list and stats
    let listed = clinic(&app, &["outbox", "list", "--status", "dead"]).await.json();
    let ids: Vec<&str> =
        listed["items"].as_array().unwrap().iter().map(|i| i["eventId"].as_str().unwrap()).collect();
    assert_eq!(ids, [second_id.as_str(), first_id.as_str()]);
    assert!(!listed.to_string().contains("Lovelace"));
    let page = clinic(&app, &["outbox", "list", "--limit", "1"]).await.json();
    assert_eq!(page["items"].as_array().unwrap().len(), 1);
    let before = page["nextBefore"].as_str().unwrap().to_owned();
    let next = clinic(&app, &["outbox", "list", "--limit", "1", "--before", &before]).await.json();
    assert_ne!(next["items"][0]["eventId"], page["items"][0]["eventId"]);
    let stats = clinic(&app, &["outbox", "stats"]).await.json();
    assert_eq!(stats["byStatus"]["dead"], 2);
    assert_eq!(stats["byStatus"]["dispatched"], 2, "patient.created and practitioner.created");
    assert_eq!(stats["byStatus"]["pending"], 0);
    assert_eq!(stats["deadByErrorCode"]["provider_rejected"], 2);
    assert_eq!(stats["oldestPendingAgeMs"], 0);

    // Refusals before the database: no actor, no reason, blank reason, bad id.
    let no_actor = clinic(&app, &["outbox", "retry", &first_id, "--reason", "fixed"]).await;
    assert_eq!(no_actor.code, 2, "{}", no_actor.stderr);
    let no_reason = clinic(&app, &["outbox", "retry", &first_id, "--actor", "ops:alice"]).await;
    assert_eq!(no_reason.code, 2, "{}", no_reason.stderr);
    let blank = clinic(&app, &act("retry", &first_id, "ops:alice", "  ", &[])).await;
    assert_eq!(blank.code, 1);
    assert!(blank.stderr.contains("reason"), "{}", blank.stderr);
    let blank_actor = clinic(&app, &act("retry", &first_id, " ", "x", &[])).await;
    assert_eq!(blank_actor.code, 1);
    assert_eq!(audits(&app).await, 0);

    // retry: dead → pending, audited with the CLI actor; stats see it due.
    let retried = clinic(&app, &act("retry", &first_id, "ops:alice", "provider fixed", &[])).await.json();
    assert_eq!(retried["statusBefore"], "dead");
    assert_eq!(retried["statusAfter"], "pending");
    assert_eq!(retried["actor"], "ops:alice");
    let audit = one(
        &app,
        "SELECT action, actor, reason, status_before, status_after FROM operator_actions WHERE event_id = $1",
        first,
    )
    .await;
    let audit: (String, String, String, String, String) =
        (audit.get(0), audit.get(1), audit.get(2), audit.get(3), audit.get(4));
    assert_eq!(
        audit,
        ("retry".into(), "ops:alice".into(), "provider fixed".into(), "dead".into(), "pending".into())
    );
    let stats = clinic(&app, &["outbox", "stats"]).await.json();
    assert_eq!(stats["byStatus"]["pending"], 1);

    // A second retry does not fit a pending row: refused, nothing recorded.
    let again = clinic(&app, &act("retry", &first_id, "ops:alice", "again", &[])).await;
    assert_eq!(again.code, 1);
    assert!(again.stderr.contains("refused"), "{}", again.stderr);
    assert_eq!(audits(&app).await, 1);

    // replay of named listeners once dispatched; no duplicate notification.
    dispatch(&app).await;
    assert_eq!(app.count("SELECT 1 FROM notifications").await, 2);
    let replayed = clinic(
        &app,
        &act(
            "replay",
            &first_id,
            "ops:bob",
            "check the notice",
            &["--listener", "patient_booking_confirmation"],
        ),
    )
    .await
    .json();
    assert_eq!(replayed["statusBefore"], "dispatched");
    assert_eq!(replayed["listeners"], json!(["patient_booking_confirmation"]));
    let only: Option<Vec<String>> =
        one(&app, "SELECT only_listeners FROM event_outbox WHERE event_id = $1", first).await.get(0);
    assert_eq!(only, Some(vec!["patient_booking_confirmation".to_owned()]));
    dispatch(&app).await;
    assert_eq!(app.count("SELECT 1 FROM notifications").await, 2, "receipts absorb the replay");
    let bad_listener =
        clinic(&app, &act("replay", &first_id, "ops:bob", "x", &["--listener", "send_fax"])).await;
    assert_eq!(bad_listener.code, 1);
    assert!(
        bad_listener.stderr.contains("409") && bad_listener.stderr.contains("send_fax"),
        "{}",
        bad_listener.stderr
    );
    let mixed = clinic(
        &app,
        &act(
            "replay",
            &first_id,
            "ops:bob",
            "x",
            &["--listener", "send_fax", "--listener", "patient_booking_confirmation"],
        ),
    )
    .await;
    assert_eq!(mixed.code, 1);
    assert!(
        mixed.stderr.contains("invalid --listener") && mixed.stderr.contains("send_fax"),
        "{}",
        mixed.stderr
    );

    // discard: dead → discarded; another workspace's scope does not find it.
    let other = WorkspaceIdText::new();
    let scoped =
        clinic(&app, &act("discard", &second_id, "ops:carol", "past", &["--workspace", &other.0])).await;
    assert_eq!(scoped.code, 1);
    assert!(scoped.stderr.contains("no outbox row"), "{}", scoped.stderr);
    let discarded =
        clinic(&app, &act("discard", &second_id, "ops:carol", "appointment past", &["--workspace"])).await;
    assert_eq!(discarded.code, 2, "--workspace needs a value");
    let workspace = app.workspace.id.to_string();
    let discarded = clinic(
        &app,
        &act("discard", &second_id, "ops:carol", "appointment past", &["--workspace", &workspace]),
    )
    .await
    .json();
    assert_eq!(discarded["statusAfter"], "discarded");
    let status: String =
        one(&app, "SELECT status FROM event_outbox WHERE event_id = $1", second).await.get(0);
    assert_eq!(status, "discarded");
    assert_eq!(audits(&app).await, 3);

    // show: the row, its receipts and its history with reasons.
    let shown = clinic(&app, &["outbox", "show", &first_id]).await.json();
    assert_eq!(shown["eventId"], first_id);
    assert_eq!(shown["status"], "dispatched");
    let actions: Vec<&str> =
        shown["actions"].as_array().unwrap().iter().map(|a| a["action"].as_str().unwrap()).collect();
    assert_eq!(actions, ["retry", "replay"]);
    assert_eq!(shown["actions"][0]["reason"], "provider fixed");
    assert_eq!(shown["receipts"].as_object().unwrap().len(), 2);
    let missing = clinic(&app, &["outbox", "show", &EventId::generate().to_string()]).await;
    assert_eq!(missing.code, 1);

    // sweep: nothing is old enough yet.
    let swept = clinic(&app, &["outbox", "sweep", "--retention-hours", "1"]).await.json();
    assert_eq!(swept["complete"], true);
    assert_eq!(swept["outboxRows"], 0);
    assert_eq!(app.count("SELECT 1 FROM event_outbox").await, 4);
}

#[tokio::test]
async fn reminders_run_from_the_cli_emits_once() {
    clinic_testkit::init_test_logging();
    let app = TestApp::new().await;
    let admin = app.workspace.admin.clone();
    let patient = app.create_patient(&admin, json!({"givenName": "Ada", "familyName": "Lovelace"})).await;
    let practitioner = app.create_practitioner(&admin).await;
    book(&app, &patient, &practitioner, 2).await;
    book(&app, &patient, &practitioner, 30).await;

    let report = clinic(&app, &["reminders", "run"]).await.json();
    assert_eq!(report["emitted"], 1, "only the appointment within 24 h");
    let report = clinic(&app, &["reminders", "run", "--lead-hours", "48"]).await.json();
    assert_eq!(report["emitted"], 1, "the second one, now within the lead time");
    let report = clinic(&app, &["reminders", "run", "--lead-hours", "48"]).await.json();
    assert_eq!(report["emitted"], 0);
    assert_eq!(app.count("SELECT 1 FROM events WHERE type = 'appointment.reminder_due'").await, 2);
    let bad = clinic(&app, &["reminders", "run", "--lead-hours", "0"]).await;
    assert_eq!(bad.code, 1);
}

/// A workspace id nobody uses.
struct WorkspaceIdText(String);

impl WorkspaceIdText {
    fn new() -> Self {
        Self(clinic_core::ids::WorkspaceId::generate().to_string())
    }
}
