//! The restricted `clinic_app` role (migration V2) is what keeps the event log append-only and the
//! schema fixed, not the triggers alone: with the append-only triggers dropped by a superuser, the
//! role still cannot UPDATE or DELETE `events`/`event_resources`, cannot TRUNCATE or DROP any table,
//! cannot CREATE or ALTER tables, and cannot switch the triggers off.

use clinic_testkit::app::TestApp;
use serde_json::json;
use tokio_postgres::error::SqlState;

#[tokio::test]
async fn clinic_app_cannot_rewrite_history_or_change_the_schema_even_without_triggers() {
    let app = TestApp::new().await;
    let staff = app.workspace.staff.clone();
    let practitioner = app.create_practitioner(&staff).await;
    let patient = app.create_patient(&staff, json!({"givenName": "Priv", "familyName": "Ilege"})).await;
    app.book(&staff, &patient, &practitioner, "2036-01-01T09:00:00Z", "2036-01-01T09:30:00Z").await;
    let events_before = app.count("SELECT 1 FROM events").await;
    let links_before = app.count("SELECT 1 FROM event_resources").await;
    assert!(events_before >= 3 && links_before >= 5);

    // As the superuser: drop every user trigger on the two append-only tables.
    let admin = app.db.pool.get().await.unwrap();
    let triggers = admin
        .query(
            "SELECT tgname::text, tgrelid::regclass::text FROM pg_trigger \
             WHERE NOT tgisinternal AND tgrelid IN ('events'::regclass, 'event_resources'::regclass)",
            &[],
        )
        .await
        .unwrap();
    assert!(!triggers.is_empty(), "the append-only triggers exist before the test drops them");
    for row in &triggers {
        let (name, table): (String, String) = (row.get(0), row.get(1));
        admin.batch_execute(&format!("DROP TRIGGER \"{name}\" ON {table}")).await.unwrap();
    }
    // Proof the triggers are gone: the superuser itself may now update (inside a rolled-back transaction).
    admin
        .batch_execute("BEGIN; UPDATE events SET resource_version = resource_version; ROLLBACK")
        .await
        .unwrap();

    let app_role =
        clinic_core::db::connect_single(&app.db.url_for_role("clinic_app"), None, None).await.unwrap();
    let whoami: String = app_role.query_one("SELECT current_user::text", &[]).await.unwrap().get(0);
    assert_eq!(whoami, "clinic_app");
    // What the role must keep being able to do.
    app_role.query("SELECT count(*) FROM events", &[]).await.unwrap();
    app_role.query("SELECT count(*) FROM event_resources", &[]).await.unwrap();

    let refused = [
        "UPDATE events SET resource_version = resource_version + 1",
        "UPDATE events SET type = 'patient.deleted' WHERE type = 'appointment.created'",
        "DELETE FROM events",
        "UPDATE event_resources SET resource_type = resource_type",
        "DELETE FROM event_resources",
        "TRUNCATE events",
        "TRUNCATE event_resources",
        "TRUNCATE patients",
        "TRUNCATE event_outbox",
        "DROP TABLE events",
        "DROP TABLE event_resources",
        "DROP TABLE patients",
        "DROP TABLE event_outbox",
        "DROP TABLE schema_migrations",
        "ALTER TABLE events DISABLE TRIGGER ALL",
        "ALTER TABLE events ADD COLUMN note text",
        "ALTER TABLE patients DROP COLUMN given_name",
        "CREATE TABLE scratch (id int)",
        "CREATE TABLE public.events_copy AS SELECT * FROM events",
        "CREATE INDEX scratch_idx ON events (type)",
        "CREATE FUNCTION scratch() RETURNS int LANGUAGE sql AS 'SELECT 1'",
        "CREATE SCHEMA scratch",
        "INSERT INTO schema_migrations (version, name, checksum) VALUES (999, 'x', 'x')",
        "ALTER ROLE clinic_app SUPERUSER",
    ];
    for statement in refused {
        let error = app_role
            .batch_execute(statement)
            .await
            .expect_err(&format!("clinic_app must not be allowed: {statement}"));
        assert_eq!(
            error.code(),
            Some(&SqlState::INSUFFICIENT_PRIVILEGE),
            "{statement}: expected insufficient_privilege, got {error:?}"
        );
    }

    // GRANT without the grant option is not an error, only a warning that nothing was granted.
    app_role
        .batch_execute("GRANT UPDATE, DELETE, TRUNCATE ON events, event_resources TO clinic_app")
        .await
        .unwrap();
    let granted: bool = admin
        .query_one(
            "SELECT bool_or(has_table_privilege('clinic_app', t, p)) FROM unnest(ARRAY['events', 'event_resources']) t, \
             unnest(ARRAY['UPDATE', 'DELETE', 'TRUNCATE']) p",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(!granted, "clinic_app cannot grant itself UPDATE, DELETE or TRUNCATE on the event log");

    assert_eq!(app.count("SELECT 1 FROM events").await, events_before, "no event changed or vanished");
    assert_eq!(app.count("SELECT 1 FROM event_resources").await, links_before);
    let tables: i64 = admin
        .query_one(
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename IN \
             ('events', 'event_resources', 'patients', 'event_outbox', 'schema_migrations')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(tables, 5, "every table is still there");
    // The API (connected as clinic_app) still works on the untouched schema.
    let again = app.create_patient(&staff, json!({"givenName": "Still", "familyName": "Works"})).await;
    assert_eq!(again["version"], 1);
}
