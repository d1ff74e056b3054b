//! `clinic workspaces create|list` against a fresh database: onboarding a clinic without SQL, then
//! using it through the API with a token carrying the documented claims (docs/onboarding.md).

use clinic_core::ids::WorkspaceId;
use clinic_http::auth::Role;
use clinic_testkit::app::{token, TestApp};
use serde_json::{json, Value};

use super::support::clinic;

async fn workspaces(app: &TestApp) -> i64 {
    app.count("SELECT 1 FROM workspaces").await
}

#[tokio::test]
async fn create_prints_only_the_id_and_the_workspace_is_usable_through_the_api() {
    let app = TestApp::new().await;
    let created =
        clinic(&app, &["workspaces", "create", "--name", "Clínica do Porto", "--time-zone", "Europe/Lisbon"])
            .await;
    assert_eq!(created.code, 0, "stderr: {}", created.stderr);
    let id: WorkspaceId = created.stdout.trim_end_matches('\n').parse().unwrap_or_else(|_| {
        panic!("stdout is exactly one workspace id: {:?}", created.stdout);
    });
    assert_eq!(created.stdout.lines().count(), 1);
    let plain = clinic(&app, &["workspaces", "create", "--name", "Second Clinic"]).await;
    assert_eq!(plain.code, 0, "stderr: {}", plain.stderr);

    let listed = clinic(&app, &["workspaces", "list"]).await;
    assert_eq!(listed.code, 0, "stderr: {}", listed.stderr);
    let listed: Value = serde_json::from_str(&listed.stdout).unwrap();
    let items = listed["items"].as_array().unwrap();
    let ours = items.iter().find(|w| w["id"] == id.to_string()).expect("listed");
    assert_eq!(ours["name"], "Clínica do Porto");
    assert_eq!(ours["timeZone"], "Europe/Lisbon");
    let second = items.iter().find(|w| w["id"] == plain.stdout.trim()).expect("listed");
    assert_eq!(second["timeZone"], "UTC", "the default time zone");
    assert_eq!(items.len() as i64, workspaces(&app).await);

    // The identity provider's claims for the new workspace: sub = the member, workspace_id = the
    // printed id, role = admin or staff. Such a token works at once; no member row is needed.
    let admin = token(id, ulid::Ulid::generate(), Role::Admin);
    let practitioner = app
        .call("POST", "/v1/practitioners", Some(&admin), Some(json!({"displayName": "Dr. Onboarded"})))
        .await;
    assert_eq!(practitioner.status, 201, "{}", practitioner.text);
    assert_eq!(practitioner.body["workspaceId"], id.to_string());
    let conn = app.db.pool.get().await.unwrap();
    let zone: String = clinic_core::workspaces::time_zone(&conn, id).await.unwrap().unwrap();
    assert_eq!(zone, "Europe/Lisbon");
}

#[tokio::test]
async fn bad_names_and_time_zones_are_refused_before_anything_is_written() {
    let app = TestApp::new().await;
    let before = workspaces(&app).await;
    for (args, named) in [
        (vec!["workspaces", "create", "--name", "Clinic", "--time-zone", "Mars/Olympus_Mons"], "--time-zone"),
        (vec!["workspaces", "create", "--name", "Clinic", "--time-zone", "+01:00"], "--time-zone"),
        (vec!["workspaces", "create", "--name", "   "], "--name"),
    ] {
        let refused = clinic(&app, &args).await;
        assert_ne!(refused.code, 0, "{args:?}");
        assert!(refused.stdout.is_empty(), "{args:?} printed {:?}", refused.stdout);
        assert!(refused.stderr.contains(named), "{args:?}: {}", refused.stderr);
    }
    let missing = clinic(&app, &["workspaces", "create"]).await;
    assert_ne!(missing.code, 0);
    assert!(missing.stderr.contains("--name"), "{}", missing.stderr);
    assert_eq!(workspaces(&app).await, before, "nothing was written");
}

/// The contact policy's workspace settings without SQL (issue 40): quiet hours and the one kind that
/// may bypass them; anything else is refused before it connects, and nothing changes.
#[tokio::test]
async fn quiet_hours_are_set_without_sql_and_only_change_notices_may_bypass() {
    let app = TestApp::new().await;
    let id = app.workspace.id.to_string();
    let set = clinic(
        &app,
        &[
            "workspaces",
            "quiet-hours",
            &id,
            "--start",
            "20:30",
            "--end",
            "07:15",
            "--bypass",
            "change_notice",
        ],
    )
    .await;
    assert_eq!(set.code, 0, "stderr: {}", set.stderr);
    let answer: Value = serde_json::from_str(&set.stdout).unwrap();
    assert_eq!(answer["quietHoursStart"], "20:30");
    assert_eq!(answer["quietHoursEnd"], "07:15");
    assert_eq!(answer["quietHoursBypass"], json!(["change_notice"]));
    for (args, named) in [
        (vec!["--bypass", "reminder"], "--bypass"),
        (vec!["--start", "25:00"], "--start"),
        (vec!["--end", "7"], "--end"),
    ] {
        let mut all = vec!["workspaces", "quiet-hours", id.as_str()];
        all.extend(args.iter().copied());
        let refused = clinic(&app, &all).await;
        assert_ne!(refused.code, 0, "{args:?}");
        assert!(refused.stderr.contains(named), "{args:?}: {}", refused.stderr);
    }
    let conn = app.db.pool.get().await.unwrap();
    let settings = clinic_core::workspaces::contact_settings(&conn, app.workspace.id).await.unwrap().unwrap();
    assert_eq!(settings.quiet_hours_bypass, vec!["change_notice".to_owned()], "unchanged by the refusals");
    assert_eq!(settings.quiet_hours_start.format("%H:%M").to_string(), "20:30");
}

/// A clinic's share of the senders' claims without SQL (issue 41): a whole number 1–100; anything
/// else is refused naming the argument, before it connects, and nothing changes.
#[tokio::test]
async fn a_delivery_weight_is_set_without_sql_and_bounded() {
    let app = TestApp::new().await;
    let id = app.workspace.id.to_string();
    let set = clinic(&app, &["workspaces", "weight", &id, "3"]).await;
    assert_eq!(set.code, 0, "stderr: {}", set.stderr);
    let answer: Value = serde_json::from_str(&set.stdout).unwrap();
    assert_eq!(answer["deliveryWeight"], json!(3.0));
    for (raw, named) in [("0", "<weight>"), ("101", "<weight>"), ("2.5", "<weight>"), ("many", "<weight>")] {
        let refused = clinic(&app, &["workspaces", "weight", &id, raw]).await;
        assert_ne!(refused.code, 0, "{raw}");
        assert!(refused.stderr.contains(named), "{raw}: {}", refused.stderr);
    }
    let unknown = clinic_core::ids::WorkspaceId::generate().to_string();
    let missing = clinic(&app, &["workspaces", "weight", &unknown, "2"]).await;
    assert_ne!(missing.code, 0);
    assert!(missing.stderr.contains("<workspace>"), "{}", missing.stderr);
    let stored: f64 = app
        .db
        .client()
        .await
        .query_one("SELECT delivery_weight::float8 FROM workspaces WHERE id = $1", &[&app.workspace.id])
        .await
        .unwrap()
        .get(0);
    assert_eq!(stored, 3.0, "unchanged by the refusals");
}
