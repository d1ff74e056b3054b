//! Operating without SQL (issue 17): explain an event end to end, bulk recovery by filter with a dry
//! run, durable listener pauses held by the dispatcher, and the console's assets.
//!
//! Over the 500-line guideline: nine cases of one subject (operating without SQL) sharing one seeded
//! app and its helpers.

use super::support::{event_of, Scene};
use clinic_core::ids::EventId;
use serde_json::{json, Value};

async fn admin_get(scene: &Scene, path: &str) -> clinic_testkit::app::TestResponse {
    let admin = scene.app.workspace.admin.clone();
    scene.app.call("GET", path, Some(&admin), None).await
}

async fn admin_post(scene: &Scene, path: &str, body: Value) -> clinic_testkit::app::TestResponse {
    let admin = scene.app.workspace.admin.clone();
    scene.app.call("POST", path, Some(&admin), Some(body)).await
}

fn section<'a>(explanation: &'a Value, name: &str) -> &'a Vec<Value> {
    explanation["sections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no section {name}: {explanation}"))["rows"]
        .as_array()
        .unwrap()
}

#[tokio::test]
async fn explain_shows_the_whole_path_with_ids_and_codes_only_and_the_causation_chain_both_ways() {
    let scene = Scene::new().await;
    scene.dispatch_locally().await;
    let response = admin_get(&scene, &format!("/v1/system/events/{}", scene.created)).await;
    assert_eq!(response.status, 200, "{}", response.text);
    let body = &response.body;
    assert_eq!(body["publishedName"], "clinic.appointment.created.v1");
    // Issue 43 item 5: the trace the event was committed in, to jump to it.
    let traceparent = body["traceparent"].as_str().expect("the stored traceparent");
    assert!(clinic_core::telemetry::TraceParent::parse(traceparent).is_some(), "{traceparent}");
    assert_eq!(body["traceId"].as_str().unwrap(), &traceparent[3..35]);
    let names: Vec<&str> =
        body["sections"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "envelope",
            "links",
            "outbox",
            "listeners",
            "custody",
            "rejections",
            "deliveries",
            "causes",
            "caused",
            "actions",
            "webhook deliveries"
        ]
    );
    assert_eq!(section(body, "envelope")[0]["publishedName"], "clinic.appointment.created.v1");
    assert_eq!(section(body, "links").len(), 3, "appointment, patient and practitioner timelines");
    assert_eq!(section(body, "outbox")[0]["status"], "dispatched");
    let listeners = section(body, "listeners");
    assert_eq!(listeners.len(), 2);
    for listener in listeners {
        assert_eq!(listener["outcome"], "applied", "{listener}");
        assert!(listener["receivedAt"].is_string());
    }
    assert_eq!(section(body, "deliveries").len(), scene.notifications(scene.created).await as usize);
    assert!(!section(body, "deliveries").is_empty());
    assert_eq!(section(body, "causes")[0]["kind"], "request");
    for secret in ["Chest pain", "Grace", "Hopper"] {
        assert!(!response.text.contains(secret), "explain leaks {secret}");
    }

    // Deleting the patient cancels the appointment through a listener: a chain of two events.
    let admin = scene.app.workspace.admin.clone();
    let path = format!("/v1/patients/{}", scene.patient["id"].as_str().unwrap());
    assert_eq!(scene.app.call("DELETE", &path, Some(&admin), None).await.status, 204);
    scene.dispatch_locally().await;
    scene.dispatch_locally().await;
    let deleted = event_of(&scene.app, "patient.deleted").await;
    let cancelled = event_of(&scene.app, "appointment.cancelled").await;
    let down = admin_get(&scene, &format!("/v1/system/events/{deleted}")).await.body;
    assert_eq!(section(&down, "caused")[0]["eventId"], cancelled.to_string(), "{down}");
    let up = admin_get(&scene, &format!("/v1/system/events/{cancelled}")).await.body;
    assert_eq!(section(&up, "causes")[0]["eventId"], deleted.to_string(), "{up}");

    // Another workspace's admin, a staff token, a malformed id.
    let other = scene.app.add_workspace().await;
    let foreign = scene
        .app
        .call("GET", &format!("/v1/system/events/{}", scene.created), Some(&other.admin), None)
        .await;
    assert_eq!(foreign.status, 404);
    let staff = scene.app.workspace.staff.clone();
    let refused =
        scene.app.call("GET", &format!("/v1/system/events/{}", scene.created), Some(&staff), None).await;
    assert_eq!(refused.status, 403);
    assert_eq!(admin_get(&scene, "/v1/system/events/nope").await.status, 400);
}

/// Books `n` more appointments (one `appointment.created` each) and buries everything due.
async fn bury_many(scene: &Scene, n: usize) -> Vec<EventId> {
    let admin = scene.app.workspace.admin.clone();
    for i in 0..n {
        let starts = chrono::Utc::now() + chrono::Duration::days(2 + i as i64);
        let ends = starts + chrono::Duration::minutes(30);
        let body = json!({
            "patientId": scene.patient["id"], "practitionerId": scene.practitioner["id"],
            "startsAt": super::support::rfc3339(starts), "endsAt": super::support::rfc3339(ends),
        });
        let response = scene.app.call("POST", "/v1/appointments", Some(&admin), Some(body)).await;
        assert_eq!(response.status, 201, "{}", response.text);
    }
    scene.bury().await;
    let client = scene.app.db.client().await;
    client
        .query("SELECT event_id FROM event_outbox WHERE status = 'dead' ORDER BY event_id", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect()
}

#[tokio::test]
async fn bulk_retry_dry_runs_then_applies_one_audit_row_per_target_under_one_batch() {
    let scene = Scene::new().await;
    let dead = bury_many(&scene, 4).await;
    assert_eq!(dead.len(), 5);
    let filter =
        json!({"status": "dead", "errorCode": "provider_rejected", "eventType": "appointment.created"});

    // Bad input names its field and writes nothing; the reason is checked first.
    for (body, field) in [
        (json!({"filter": {"status": "stuck"}}), "reason"),
        (json!({"reason": "x", "filter": {"status": "stuck"}}), "filter.status"),
        (json!({"reason": "x", "filter": {"colour": "red"}}), "filter.colour"),
        (json!({"reason": "x"}), "filter"),
        (json!({"reason": "x", "filter": filter, "limit": 0}), "limit"),
        (json!({"reason": "x", "filter": filter, "dryRun": "yes"}), "dryRun"),
        // Null is not the default: the contract types both (found by the API fuzzing).
        (json!({"reason": "x", "filter": filter, "limit": null}), "limit"),
        (json!({"reason": "x", "filter": filter, "dryRun": null}), "dryRun"),
    ] {
        let response = admin_post(&scene, "/v1/system/outbox/bulk/retry", body).await;
        assert!(matches!(response.status.as_u16(), 400 | 422), "{}", response.text);
        assert_eq!(response.body["field"], field, "{}", response.text);
    }

    let dry = admin_post(
        &scene,
        "/v1/system/outbox/bulk/retry",
        json!({"reason": "provider fixed", "filter": filter, "dryRun": true}),
    )
    .await;
    assert_eq!(dry.status, 200, "{}", dry.text);
    assert_eq!(dry.body["matched"], 5);
    assert_eq!(dry.body["sample"][0], dead[0].to_string(), "event order");
    assert_eq!(dry.body["applied"], 0);
    assert!(dry.body.get("batchId").is_none());
    assert_eq!(scene.app.count("SELECT 1 FROM operator_actions").await, 0, "a dry run writes nothing");
    assert_eq!(scene.app.count("SELECT 1 FROM event_outbox WHERE status = 'dead'").await, 5);

    let applied = admin_post(
        &scene,
        "/v1/system/outbox/bulk/retry",
        json!({"reason": "provider fixed", "filter": filter, "limit": 3}),
    )
    .await;
    assert_eq!(applied.status, 200, "{}", applied.text);
    assert_eq!(applied.body["applied"], 3);
    assert_eq!(applied.body["remaining"], 2);
    let batch = applied.body["batchId"].as_str().unwrap().to_owned();
    let batch_uuid: uuid::Uuid = batch.parse::<ulid::Ulid>().unwrap().into();
    let client = scene.app.db.client().await;
    let audit = client
        .query(
            "SELECT event_id, action, actor, reason, status_before, status_after FROM operator_actions \
             WHERE batch_id = $1 ORDER BY event_id",
            &[&batch_uuid],
        )
        .await
        .unwrap();
    assert_eq!(audit.len(), 3);
    for (row, expected) in audit.iter().zip(&dead[..3]) {
        assert_eq!(row.get::<_, EventId>(0), *expected, "the oldest first");
        assert_eq!(row.get::<_, String>(1), "retry");
        assert_eq!(row.get::<_, String>(2), scene.app.workspace.admin_id.to_string());
        assert_eq!(row.get::<_, String>(3), "provider fixed");
        assert_eq!((row.get::<_, String>(4), row.get::<_, String>(5)), ("dead".into(), "pending".into()));
    }
    // The rest, then nothing left; retried rows dispatch normally.
    let rest = admin_post(
        &scene,
        "/v1/system/outbox/bulk/retry",
        json!({"reason": "provider fixed", "filter": filter}),
    )
    .await;
    assert_eq!(
        (rest.body["applied"].clone(), rest.body["remaining"].clone()),
        (json!(2), json!(0)),
        "{}",
        rest.text
    );
    scene.dispatch_locally().await;
    assert_eq!(scene.app.count("SELECT 1 FROM event_outbox WHERE status = 'dispatched' AND event_id IN (SELECT event_id FROM operator_actions)").await, 5);

    // Another workspace's bulk action sees none of these rows.
    let other = scene.app.add_workspace().await;
    let foreign = scene
        .app
        .call(
            "POST",
            "/v1/system/outbox/bulk/replay",
            Some(&other.admin),
            Some(json!({"reason": "x", "filter": {"status": "dispatched"}})),
        )
        .await;
    assert_eq!(foreign.body["matched"], 0, "{}", foreign.text);
}

#[tokio::test]
async fn bulk_replay_can_name_listeners() {
    let scene = Scene::new().await;
    scene.dispatch_locally().await;
    let body = json!({"reason": "lost notices", "filter": {"listener": "practitioner_schedule_change"}, "listeners": ["practitioner_schedule_change"]});
    let response = admin_post(&scene, "/v1/system/outbox/bulk/replay", body).await;
    assert_eq!(response.status, 200, "{}", response.text);
    assert_eq!(response.body["applied"], 1, "only appointment.created routes to it");
    let row = scene
        .query_one("SELECT status, only_listeners FROM event_outbox WHERE event_id = $1", scene.created)
        .await;
    assert_eq!(row.get::<_, String>(0), "pending");
    assert_eq!(row.get::<_, Option<Vec<String>>>(1), Some(vec!["practitioner_schedule_change".to_owned()]));
}

#[tokio::test]
async fn a_bulk_replay_naming_only_unknown_listeners_is_refused_with_409_and_changes_nothing() {
    let scene = Scene::new().await;
    scene.dispatch_locally().await;
    let body = json!({"reason": "newer build", "filter": {}, "listeners": ["send_fax"]});
    let response = admin_post(&scene, "/v1/system/outbox/bulk/replay", body).await;
    assert_eq!(response.status, 409, "{}", response.text);
    assert_eq!(response.body["field"], "listeners");
    assert!(response.body["detail"].as_str().unwrap().contains("send_fax"), "{}", response.text);
    assert_eq!(scene.app.count("SELECT 1 FROM operator_actions").await, 0);
    assert_eq!(scene.app.count("SELECT 1 FROM event_outbox WHERE status <> 'dispatched'").await, 0);
}

#[tokio::test]
async fn a_paused_listener_holds_its_starts_while_the_others_flow_and_resume_releases_them() {
    let scene = Scene::new().await;
    let pause = json!({"listener": "patient_booking_confirmation", "reason": "template bug"});
    let response = admin_post(&scene, "/v1/system/listeners/pause", pause.clone()).await;
    assert_eq!(response.status, 200, "{}", response.text);
    assert_eq!(admin_post(&scene, "/v1/system/listeners/pause", pause).await.status, 409, "already paused");

    // A fresh dispatcher (as after a restart) still honours the pause.
    scene.dispatch_locally().await;
    let row = scene
        .query_one(
            "SELECT status, attempts, last_error_code FROM event_outbox WHERE event_id = $1",
            scene.created,
        )
        .await;
    assert_eq!(row.get::<_, String>(0), "retry", "held: still live");
    assert_eq!(row.get::<_, i32>(1), 0, "a hold spends no attempt");
    assert_eq!(row.get::<_, Option<String>>(2).as_deref(), Some("listener_paused"));
    let receipts = |listener: &'static str| {
        let scene = &scene;
        async move {
            scene
                .app
                .count(&format!(
                    "SELECT 1 FROM listener_receipts WHERE listener = '{listener}' AND event_id = '{}'",
                    uuid::Uuid::from(scene.created.ulid())
                ))
                .await
        }
    };
    assert_eq!(receipts("practitioner_schedule_change").await, 1, "the other listener flowed");
    assert_eq!(receipts("patient_booking_confirmation").await, 0, "the paused one did not run");

    let overview = admin_get(&scene, "/v1/system/overview").await;
    assert_eq!(
        overview.body["pausedListeners"][0]["listener"], "patient_booking_confirmation",
        "{}",
        overview.text
    );
    assert_eq!(overview.body["pausedListeners"][0]["held"], 1);
    let explained = admin_get(&scene, &format!("/v1/system/events/{}", scene.created)).await.body;
    let paused: Vec<&Value> =
        section(&explained, "listeners").iter().filter(|l| l["paused"] == true).collect();
    assert_eq!(paused.len(), 1);
    assert_eq!(paused[0]["outcome"], "not_started");

    let resumed = admin_post(
        &scene,
        "/v1/system/listeners/resume",
        json!({"listener": "patient_booking_confirmation", "reason": "fixed"}),
    )
    .await;
    assert_eq!(resumed.status, 200, "{}", resumed.text);
    assert_eq!(resumed.body["released"], 1);
    scene.dispatch_locally().await;
    assert_eq!(scene.status(scene.created).await, "dispatched");
    assert_eq!(receipts("patient_booking_confirmation").await, 1);
    assert_eq!(receipts("practitioner_schedule_change").await, 1, "not started twice");
    assert_eq!(scene.attempts(scene.created).await, 1);
    assert_eq!(
        scene
            .app
            .count("SELECT 1 FROM listener_pause_actions WHERE reason IN ('template bug', 'fixed')")
            .await,
        2,
        "both audited"
    );
    assert_eq!(
        admin_post(
            &scene,
            "/v1/system/listeners/resume",
            json!({"listener": "patient_booking_confirmation", "reason": "again"})
        )
        .await
        .status,
        409
    );
    let bad =
        admin_post(&scene, "/v1/system/listeners/pause", json!({"listener": "send_fax", "reason": "x"}))
            .await;
    assert_eq!(bad.body["field"], "listener", "{}", bad.text);
}

#[tokio::test]
async fn the_console_is_six_embedded_assets_under_a_strict_content_security_policy() {
    let scene = Scene::new().await;
    const SCRIPTS: [&str; 4] = [
        "/console/console-core.js",
        "/console/console-explain.js",
        "/console/console-queues.js",
        "/console/console.js",
    ];
    let assets = [("/console", "text/html"), ("/console/console.css", "text/css")]
        .into_iter()
        .chain(SCRIPTS.iter().map(|path| (*path, "text/javascript")));
    for (path, content_type) in assets {
        let response = scene.app.call("GET", path, None, None).await;
        assert_eq!(response.status, 200, "{path}");
        assert!(response.header("content-type").unwrap().starts_with(content_type), "{path}");
        assert!(
            response.header("content-security-policy").unwrap().starts_with("default-src 'self'"),
            "{path}"
        );
        assert_eq!(response.header("x-content-type-options"), Some("nosniff"), "{path}");
    }
    let page = scene.app.call("GET", "/console", None, None).await.text;
    assert_eq!(
        page.matches("<script").count(),
        page.matches("<script src=\"/console/").count(),
        "no inline script"
    );
    // Every script the page loads is served, in order: helpers first, start-up last.
    let loaded: Vec<&str> =
        page.split("<script src=\"").skip(1).filter_map(|s| s.split('"').next()).collect();
    assert_eq!(loaded, SCRIPTS, "the page loads the four scripts in order");
    for handler in ["onclick=", "onload=", "onsubmit=", "javascript:"] {
        assert!(!page.contains(handler), "no inline handler {handler}");
    }
    assert!(!page.contains("style="), "no inline style");
    assert!(!page.contains("http://") && !page.contains("https://"), "no other origin");
    let mut all = String::new();
    for path in SCRIPTS {
        let script = scene.app.call("GET", path, None, None).await.text;
        assert!(
            !script.contains("innerHTML") && !script.contains("insertAdjacentHTML"),
            "{path}: values are written as text"
        );
        assert!(!script.contains("localStorage"), "{path}: the token is never kept beyond the tab");
        assert!(script.lines().count() <= 400, "{path}: small files");
        all.push_str(&script);
    }
    assert!(all.contains("sessionStorage"));
}

/// Issue 44 item 5: every admin answer (`/v1/system/*`, `/v1/webhooks/*`), errors and refusals
/// included, is `nosniff` and `no-store`: an operator's answers are never cached or content-sniffed.
#[tokio::test]
async fn every_admin_answer_is_nosniff_and_no_store() {
    let scene = Scene::new().await;
    let admin = scene.app.workspace.admin.clone();
    let staff = scene.app.workspace.staff.clone();
    let id = ulid::Ulid::generate().to_string();
    let admin_routes: Vec<&(&str, &str)> = clinic_http::ROUTES
        .iter()
        .filter(|(_, path)| path.starts_with("/v1/system/") || path.starts_with("/v1/webhooks/"))
        .collect();
    assert!(admin_routes.len() >= 25, "{admin_routes:?}");
    let mut checked = 0;
    for (method, template) in admin_routes {
        let path = template.replace("{id}", &id);
        let body = (*method != "get").then(|| json!({}));
        for token in [Some(admin.as_str()), Some(staff.as_str()), None] {
            let response = scene.app.call(&method.to_uppercase(), &path, token, body.clone()).await;
            let what = format!("{method} {path} ({}) answered {}", token.is_some(), response.status);
            assert_eq!(response.header("x-content-type-options"), Some("nosniff"), "{what}");
            assert_eq!(response.header("cache-control"), Some("no-store"), "{what}");
            checked += 1;
        }
    }
    // An unknown path under the admin prefix too.
    let unknown = scene.app.call("GET", "/v1/system/nothing-here", Some(&admin), None).await;
    assert_eq!(unknown.header("cache-control"), Some("no-store"));
    assert!(checked >= 75);
    // The overview answers 200 with them (a success, not only refusals).
    let overview = scene.app.call("GET", "/v1/system/overview", Some(&admin), None).await;
    assert_eq!((overview.status.as_u16(), overview.header("cache-control")), (200, Some("no-store")));
}

/// Issue 44 item 1: the notification and webhook delivery listings select by their queue's bulk
/// filter (the same fields, the same rows a bulk action would consider), so the console lists what
/// it then acts on; a bad field answers 400 naming it.
#[tokio::test]
async fn the_delivery_listings_select_by_their_bulk_filter() {
    let scene = Scene::new().await;
    scene.dispatch_locally().await;
    let buried = scene
        .execute(
            "UPDATE notifications SET status = 'dead', last_error_code = 'ses_throttled' \
             WHERE event_id = $1 AND listener = 'patient_booking_confirmation'",
            scene.created,
        )
        .await;
    assert_eq!(buried, 1);
    let ids = |response: &clinic_testkit::app::TestResponse| -> Vec<String> {
        assert_eq!(response.status, 200, "{}", response.text);
        response.body["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let dead = admin_get(&scene, "/v1/system/deliveries?status=dead&errorCode=ses_throttled").await;
    assert_eq!(ids(&dead).len(), 1, "{}", dead.text);
    assert_eq!(dead.body["items"][0]["listener"], "patient_booking_confirmation");
    let dry = admin_post(
        &scene,
        "/v1/system/deliveries/bulk/retry",
        json!({"reason": "x", "dryRun": true, "filter": {"status": "dead", "errorCode": "ses_throttled"}}),
    )
    .await;
    assert_eq!(dry.body["sample"], json!(ids(&dead)), "the listing lists what the bulk action selects");
    for (query, expected) in [
        ("listener=patient_booking_confirmation", 1),
        ("listener=practitioner_schedule_change&status=dead", 0),
        ("errorCode=ses_throttled&olderThan=1h", 0),
        ("template=appointment.booking_confirmation", 1),
        ("", 2),
    ] {
        let listed = admin_get(&scene, &format!("/v1/system/deliveries?{query}")).await;
        assert_eq!(ids(&listed).len(), expected, "{query}: {}", listed.text);
    }
    for (query, field) in [
        ("status=stuck", "status"),
        ("errorCode=no%20spaces", "errorCode"),
        ("listener=send_fax", "listener"),
        ("olderThan=soon", "olderThan"),
    ] {
        let refused = admin_get(&scene, &format!("/v1/system/deliveries?{query}")).await;
        assert_eq!((refused.status.as_u16(), refused.body["field"].as_str()), (400, Some(field)), "{query}");
    }

    // Webhook deliveries: one failed with a code, one delivered, to one endpoint.
    let client = scene.app.db.client().await;
    let endpoint: uuid::Uuid = client
        .query_one(
            "INSERT INTO webhook_endpoints (id, workspace_id, url, secret) SELECT gen_random_uuid(), \
             workspace_id, 'https://hooks.example.com/c', 'whsec_probe' FROM events WHERE id = $1 RETURNING id",
            &[&scene.created],
        )
        .await
        .unwrap()
        .get(0);
    client
        .execute(
            "INSERT INTO webhook_deliveries (id, endpoint_id, workspace_id, event_id, event_type, status, \
               last_error_code, sequence) \
             SELECT gen_random_uuid(), $1, e.workspace_id, e.id, e.type, \
               CASE WHEN e.id = $2 THEN 'failed' ELSE 'delivered' END, \
               CASE WHEN e.id = $2 THEN 'http_5xx' END, CASE WHEN e.id = $2 THEN 1 ELSE 2 END \
             FROM events e WHERE e.id = $2 OR e.type = 'patient.created' AND e.workspace_id = \
               (SELECT workspace_id FROM events WHERE id = $2)",
            &[&endpoint, &scene.created],
        )
        .await
        .unwrap();
    let endpoint = ulid::Ulid::from(endpoint).to_string();
    for (query, expected) in [
        (format!("endpointId={endpoint}"), 2),
        ("status=failed&errorCode=http_5xx".to_owned(), 1),
        ("errorCode=http_5xx&eventType=appointment.created".to_owned(), 1),
        ("eventType=patient.created".to_owned(), 1),
        (format!("eventId={}&status=failed", scene.created), 1),
        (format!("eventId={}&status=delivered", scene.created), 0),
    ] {
        let listed = admin_get(&scene, &format!("/v1/webhooks/deliveries?{query}")).await;
        assert_eq!(ids(&listed).len(), expected, "{query}: {}", listed.text);
    }
    for (query, field) in
        [("status=dead", "status"), ("eventType=nope", "eventType"), ("olderThan=x", "olderThan")]
    {
        let refused = admin_get(&scene, &format!("/v1/webhooks/deliveries?{query}")).await;
        assert_eq!((refused.status.as_u16(), refused.body["field"].as_str()), (400, Some(field)), "{query}");
    }
    // Another workspace lists none of them.
    let other = scene.app.add_workspace().await;
    let foreign = scene.app.call("GET", "/v1/webhooks/deliveries", Some(&other.admin), None).await;
    assert_eq!(ids(&foreign).len(), 0);
    let foreign = scene.app.call("GET", "/v1/system/deliveries", Some(&other.admin), None).await;
    assert_eq!(ids(&foreign).len(), 0);
}

/// Issue 44 item 5: the overview names the workspace (id and name, for the console's header) and
/// the attempt ceiling (the N of "attempt n of N").
#[tokio::test]
async fn the_overview_names_its_workspace_and_the_attempt_ceiling() {
    let scene = Scene::new().await;
    let overview = admin_get(&scene, "/v1/system/overview").await;
    assert_eq!(overview.status, 200, "{}", overview.text);
    assert_eq!(overview.body["workspace"]["id"], scene.app.workspace.id.to_string());
    let name: String = scene
        .app
        .db
        .client()
        .await
        .query_one("SELECT name FROM workspaces WHERE id = $1", &[&scene.app.workspace.id])
        .await
        .unwrap()
        .get(0);
    assert_eq!(overview.body["workspace"]["name"], name);
    assert_eq!(overview.body["outboxMaxAttempts"], 10);
}
