//! Least privilege for `clinic_app` (migration V4, issue 12 item 7): append-only audit trail and
//! disclosures, column-level updates on notifications, read-only tenants and members, and no CREATE
//! on schema public for PUBLIC — each proven by trying it as the role, and by the catalog.

use std::collections::BTreeSet;

use clinic_testkit::app::TestApp;
use serde_json::json;
use tokio_postgres::error::SqlState;

/// The exact table privileges `clinic_app` holds on the tables this migration tightened.
const EXPECTED: &[(&str, &[&str])] = &[
    ("operator_actions", &["INSERT", "SELECT"]),
    ("patient_disclosures", &["INSERT", "SELECT"]),
    ("events", &["INSERT", "SELECT"]),
    ("event_resources", &["INSERT", "SELECT"]),
    // Notifications: swept once ended and past their retention (V18); updated by column only.
    ("notifications", &["DELETE", "INSERT", "SELECT"]),
    ("workspaces", &["SELECT"]),
    ("members", &["SELECT"]),
    ("schema_migrations", &["SELECT"]),
    // Webhooks (V12): endpoints are the workspace's own configuration; deliveries change only their
    // lifecycle columns (checked below) and are swept when delivered; the endpoint audit is append-only.
    ("webhook_endpoints", &["DELETE", "INSERT", "SELECT", "UPDATE"]),
    ("webhook_deliveries", &["DELETE", "INSERT", "SELECT"]),
    ("webhook_attempts", &["DELETE", "INSERT", "SELECT"]),
    ("webhook_endpoint_actions", &["INSERT", "SELECT"]),
    // Issue 39 item 6: resources are soft-deleted, never deleted, and updated column by column (below);
    // receipts are inserted and swept; starts are inserted, settled/restarted (columns) and swept.
    ("patients", &["INSERT", "SELECT"]),
    ("appointments", &["INSERT", "SELECT"]),
    ("practitioners", &["INSERT", "SELECT"]),
    ("listener_receipts", &["DELETE", "INSERT", "SELECT"]),
    ("listener_starts", &["DELETE", "INSERT", "SELECT"]),
];

/// Exactly the columns `clinic_app` may UPDATE, where it updates by column: those the code writes.
const UPDATABLE: &[(&str, &[&str])] = &[
    (
        "patients",
        &[
            "contact_channels",
            "contact_opt_outs",
            "date_of_birth",
            "deleted_at",
            "email",
            "family_name",
            "given_name",
            "phone",
            "time_zone",
            "updated_at",
            "version",
        ],
    ),
    (
        "appointments",
        &[
            "cancellation_reason",
            "ends_at",
            "patient_erased",
            "reason",
            "starts_at",
            "status",
            "updated_at",
            "version",
        ],
    ),
    ("practitioners", &["active", "display_name", "specialty", "updated_at", "version"]),
    ("listener_starts", &["restarted_at", "restarts", "settled_at", "stuck_at"]),
];

async fn refused(client: &tokio_postgres::Client, statement: &str) {
    let error = client.batch_execute(statement).await.expect_err(statement);
    assert_eq!(error.code(), Some(&SqlState::INSUFFICIENT_PRIVILEGE), "{statement}: {error:?}");
}

#[tokio::test]
async fn clinic_app_holds_only_what_the_code_uses() {
    let app = TestApp::new().await;
    let admin = app.workspace.admin.clone();
    // Real rows in every table concerned: a booking, its notifications, an operator action.
    let practitioner = app.create_practitioner(&admin).await;
    let patient = app.create_patient(&admin, json!({"givenName": "Least", "familyName": "Privilege"})).await;
    app.book(&admin, &patient, &practitioner, "2036-02-01T09:00:00Z", "2036-02-01T09:30:00Z").await;
    app.call("GET", &format!("/v1/patients/{}", patient["id"].as_str().unwrap()), Some(&admin), None).await;
    let owner = app.db.client().await;
    let event: clinic_core::ids::EventId =
        owner.query_one("SELECT id FROM events ORDER BY id LIMIT 1", &[]).await.unwrap().get(0);
    owner.execute("UPDATE event_outbox SET status = 'dead' WHERE event_id = $1", &[&event]).await.unwrap();
    let path = format!("/v1/system/outbox/{event}/retry");
    let response = app.call("POST", &path, Some(&admin), Some(json!({"reason": "provider fixed"}))).await;
    assert_eq!(response.status, 200, "{}", response.text);
    owner
        .execute(
            "INSERT INTO notifications (id, workspace_id, event_id, listener, idempotency_key, recipient_kind, \
             recipient_id, template, channel, status) \
             VALUES (gen_random_uuid(), $1, $2, 'patient_booking_confirmation', 'k', 'patient', gen_random_uuid(), \
                     't', 'email', 'pending')",
            &[&app.workspace.id, &event],
        )
        .await
        .unwrap();

    let role = clinic_core::db::connect_single(&app.db.url_for_role("clinic_app"), None, None).await.unwrap();
    // What it keeps.
    for table in ["operator_actions", "patient_disclosures", "notifications", "workspaces", "members"] {
        let count: i64 = role.query_one(&format!("SELECT count(*) FROM {table}"), &[]).await.unwrap().get(0);
        assert!(count >= 1, "{table} is readable and has rows");
    }
    role.batch_execute("UPDATE notifications SET status = 'sent'").await.unwrap();

    // The audit trail: append-only for the role (privileges) and for everyone (triggers).
    for statement in [
        "UPDATE operator_actions SET reason = 'rewritten'",
        "DELETE FROM operator_actions",
        "TRUNCATE operator_actions",
        "UPDATE patient_disclosures SET purpose = 'x'",
        "DELETE FROM patient_disclosures",
        // Notifications: only lifecycle columns, never content; deleted only row by row (the sweep).
        "UPDATE notifications SET template = 'other'",
        "UPDATE notifications SET recipient_id = gen_random_uuid()",
        "TRUNCATE notifications",
        // Tenants and members are the owner's.
        "INSERT INTO workspaces (id, name) VALUES (gen_random_uuid(), 'rogue')",
        "UPDATE workspaces SET name = 'renamed'",
        "DELETE FROM workspaces",
        "INSERT INTO members (id, workspace_id, role, display_name) \
         SELECT gen_random_uuid(), id, 'admin', 'rogue' FROM workspaces",
        "UPDATE members SET role = 'admin'",
        "DELETE FROM members",
        "CREATE TABLE public.scratch (id int)",
        "UPDATE webhook_endpoint_actions SET actor = 'x'",
        "DELETE FROM webhook_endpoint_actions",
        "TRUNCATE webhook_endpoint_actions",
        "UPDATE webhook_deliveries SET event_id = gen_random_uuid()",
        "UPDATE webhook_deliveries SET endpoint_id = gen_random_uuid()",
        "UPDATE webhook_attempts SET status_code = 200",
        // Resources are soft-deleted, never deleted; their ids, workspace and creation never change.
        "DELETE FROM patients",
        "DELETE FROM appointments",
        "DELETE FROM practitioners",
        "UPDATE patients SET workspace_id = workspace_id",
        "UPDATE patients SET notifications_opt_out = true",
        "UPDATE appointments SET patient_id = patient_id",
        "UPDATE appointments SET created_at = created_at",
        "UPDATE practitioners SET member_id = NULL",
        // Receipts are never rewritten; starts keep their pair and start time.
        "UPDATE listener_receipts SET received_at = now()",
        "UPDATE listener_starts SET started_at = now()",
        "UPDATE listener_starts SET event_id = event_id",
    ] {
        refused(&role, statement).await;
    }
    for statement in ["UPDATE operator_actions SET reason = 'rewritten'", "DELETE FROM operator_actions"] {
        let error = owner.batch_execute(statement).await.expect_err(statement);
        assert!(error.to_string().contains("append-only") || error.as_db_error().is_some(), "{error}");
    }
    assert_eq!(app.count("SELECT 1 FROM operator_actions WHERE reason = 'provider fixed'").await, 1);

    // The catalog agrees: exactly these table privileges, and UPDATE on notifications by column only.
    for (table, expected) in EXPECTED {
        let held: BTreeSet<String> = owner
            .query(
                "SELECT privilege_type::text FROM information_schema.role_table_grants \
                 WHERE grantee = 'clinic_app' AND table_schema = 'public' AND table_name = $1",
                &[table],
            )
            .await
            .unwrap()
            .iter()
            .map(|row| row.get(0))
            .collect();
        let expected: BTreeSet<String> = expected.iter().map(|p| p.to_string()).collect();
        assert_eq!(held, expected, "{table}");
    }
    let updatable: BTreeSet<String> = owner
        .query(
            "SELECT column_name::text FROM information_schema.column_privileges \
             WHERE grantee = 'clinic_app' AND table_name = 'notifications' AND privilege_type = 'UPDATE'",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert!(updatable.contains("status"), "{updatable:?}");
    for content in
        ["id", "workspace_id", "event_id", "listener", "idempotency_key", "recipient_id", "template"]
    {
        assert!(!updatable.contains(content), "{content} must not be updatable: {updatable:?}");
    }
    for (table, expected) in UPDATABLE {
        let held: BTreeSet<String> = owner
            .query(
                "SELECT column_name::text FROM information_schema.column_privileges \
                 WHERE grantee = 'clinic_app' AND table_schema = 'public' AND table_name = $1 \
                   AND privilege_type = 'UPDATE'",
                &[table],
            )
            .await
            .unwrap()
            .iter()
            .map(|row| row.get(0))
            .collect();
        let expected: BTreeSet<String> = expected.iter().map(|c| c.to_string()).collect();
        assert_eq!(held, expected, "UPDATE columns of {table}");
    }
    let anywhere: i64 = owner
        .query_one(
            "SELECT count(*) FROM information_schema.role_table_grants WHERE grantee = 'clinic_app' \
             AND privilege_type IN ('TRUNCATE', 'REFERENCES', 'TRIGGER')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(anywhere, 0, "no TRUNCATE, REFERENCES or TRIGGER on any table");
}

/// PostgreSQL ≤ 14 lets PUBLIC create in schema public; the migrations take that away. Simulated on
/// a fresh database where PUBLIC holds CREATE, then migrated.
#[tokio::test]
async fn the_migrations_revoke_create_on_schema_public_from_public() {
    let admin = clinic_testkit::admin_client().await;
    let name = format!("clinic_i12_schema_{}", ulid::Ulid::generate().to_string().to_lowercase());
    admin.batch_execute(&format!("CREATE DATABASE {name}")).await.unwrap();
    let url = with_database(&clinic_testkit::admin_url(), &name);
    let outcome = async {
        let mut client = clinic_core::db::connect_single(&url, None, None).await.unwrap();
        client.batch_execute("GRANT CREATE ON SCHEMA public TO PUBLIC").await.unwrap();
        let public_may_create = "SELECT count(*) FROM pg_namespace n, aclexplode(n.nspacl) a \
             WHERE n.nspname = 'public' AND a.grantee = 0 AND a.privilege_type = 'CREATE'";
        let before: i64 = client.query_one(public_may_create, &[]).await.unwrap().get(0);
        assert_eq!(before, 1, "the simulated old default");
        clinic_core::db::migrate(&mut client).await.unwrap();
        let after: i64 = client.query_one(public_may_create, &[]).await.unwrap().get(0);
        assert_eq!(after, 0, "PUBLIC may no longer create in schema public");
        let app_may: bool = client
            .query_one("SELECT has_schema_privilege('clinic_app', 'public', 'CREATE')", &[])
            .await
            .unwrap()
            .get(0);
        assert!(!app_may);
    }
    .await;
    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).await.unwrap();
    outcome
}

fn with_database(url: &str, name: &str) -> String {
    let (base, query) = url.split_once('?').map_or((url, None), |(base, query)| (base, Some(query)));
    let base = base.rsplit_once('/').map_or(base, |(prefix, _)| prefix);
    match query {
        Some(query) => format!("{base}/{name}?{query}"),
        None => format!("{base}/{name}"),
    }
}
