//! Workspace isolation on EVERY route of [`ROUTES`] (so a route added later is covered without
//! editing this file): with two workspaces, each of A's tokens (admin, staff, patient) aimed at
//! workspace B's resources gets exactly the answer it gets for an id that was never used — always 404
//! for A's admin; a role refusal (403) only where the role is refused whatever the id — never B's
//! data, never a 403 that would confirm B's id exists, and B's rows are left exactly as they were.

use clinic_http::auth::Role;
use clinic_http::ROUTES;
use clinic_testkit::app::{token, TestApp, TestResponse};
use serde_json::{json, Value};

/// The request body each route is probed with: one that would succeed in B's own workspace.
fn body_for(method: &str, template: &str) -> Option<Value> {
    let body = match (method, template.rsplit('/').next().unwrap_or("")) {
        ("patch", _) if template.starts_with("/v1/practitioners/") => {
            json!({"displayName": "Isolation", "expectedVersion": 1})
        }
        ("patch", _) if template.starts_with("/v1/webhooks/") => json!({"description": "Isolation"}),
        ("patch", _) => json!({"givenName": "Isolation", "expectedVersion": 1}),
        ("post", "recover") => json!({"since": "2000-01-01T00:00:00Z"}),
        ("post", "reschedule") => {
            json!({"startsAt": "2035-05-02T09:00:00Z", "endsAt": "2035-05-02T09:30:00Z"})
        }
        ("post", "cancel" | "complete") => json!({}),
        // A bulk action with a filter that selects B's waiting rows when B asks.
        ("post", "retry" | "replay" | "discard") if template.contains("/bulk/") => {
            let status = if template.contains("webhook-deliveries") { "failed" } else { "dead" };
            json!({"reason": "isolation probe", "filter": {"status": status}})
        }
        ("post", "retry" | "replay" | "discard") => json!({"reason": "isolation probe"}),
        ("post", _) => json!({}),
        _ => return None,
    };
    Some(body)
}

/// The id of B's resource a path parameter names, chosen by the route's collection.
fn id_for<'a>(template: &str, b: &'a BIds) -> &'a str {
    if template.starts_with("/v1/patients/") {
        &b.patient
    } else if template.starts_with("/v1/practitioners/") {
        &b.practitioner
    } else if template.starts_with("/v1/appointments/") {
        &b.appointment
    } else if template.starts_with("/v1/system/outbox/") || template.starts_with("/v1/system/events/") {
        &b.dead_event
    } else if template.starts_with("/v1/system/deliveries/") {
        &b.dead_delivery
    } else if template.starts_with("/v1/system/webhook-deliveries/") {
        &b.failed_webhook_delivery
    } else if template.starts_with("/v1/webhooks/endpoints/") {
        &b.webhook_endpoint
    } else {
        panic!("{template}: unknown path parameter; teach isolation_every_route which of B's ids it takes")
    }
}

struct BIds {
    patient: String,
    practitioner: String,
    appointment: String,
    dead_event: String,
    dead_delivery: String,
    webhook_endpoint: String,
    failed_webhook_delivery: String,
}

impl BIds {
    /// A practitioner, a patient (`patient_body`), its appointment at `starts_at` (30 minutes) and a dead
    /// outbox row — the state in which every operator action would act — created with `admin`.
    async fn seed(app: &TestApp, admin: &str, patient_body: Value, starts_at: &str) -> BIds {
        let practitioner = app.create_practitioner(admin).await;
        let patient = app.create_patient(admin, patient_body).await;
        let start = chrono::DateTime::parse_from_rfc3339(starts_at).unwrap();
        let ends_at = (start + chrono::Duration::minutes(30)).to_rfc3339();
        let appointment = app.book(admin, &patient, &practitioner, starts_at, &ends_at).await;
        let conn = app.db.pool.get().await.unwrap();
        let dead: uuid::Uuid = conn
            .query_one(
                "UPDATE event_outbox SET status = 'dead', last_error_code = 'probe' WHERE event_id = \
                 (SELECT id FROM events WHERE type = 'appointment.created' LIMIT 1) RETURNING event_id",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        // A dead delivery: the state in which every delivery action would act.
        let dead_delivery: uuid::Uuid = conn
            .query_one(
                "INSERT INTO notifications (id, workspace_id, event_id, listener, idempotency_key, \
                 recipient_kind, recipient_id, template, channel, status, last_error_code) \
                 SELECT gen_random_uuid(), workspace_id, id, 'patient_booking_confirmation', \
                 id::text || ':probe', 'patient', resource_id, 'appointment.booking_confirmation', \
                 'auto', 'dead', 'probe' FROM events WHERE id = $1 RETURNING id",
                &[&dead],
            )
            .await
            .unwrap()
            .get(0);
        // A webhook endpoint of B's (and a failed delivery, the state recover would act on).
        let endpoint: uuid::Uuid = conn
            .query_one(
                "INSERT INTO webhook_endpoints (id, workspace_id, url, secret) SELECT gen_random_uuid(),                  workspace_id, 'https://hooks.example.com/b', 'whsec_probe' FROM events WHERE id = $1 RETURNING id",
                &[&dead],
            )
            .await
            .unwrap()
            .get(0);
        let failed_webhook_delivery: uuid::Uuid = conn
            .query_one(
                "INSERT INTO webhook_deliveries (id, endpoint_id, workspace_id, event_id, event_type, status) \
                 SELECT gen_random_uuid(), $1, workspace_id, id, type, 'failed' FROM events WHERE id = $2 \
                 RETURNING id",
                &[&endpoint, &dead],
            )
            .await
            .unwrap()
            .get(0);
        BIds {
            webhook_endpoint: ulid::Ulid::from(endpoint).to_string(),
            failed_webhook_delivery: ulid::Ulid::from(failed_webhook_delivery).to_string(),
            patient: patient["id"].as_str().unwrap().to_owned(),
            practitioner: practitioner["id"].as_str().unwrap().to_owned(),
            appointment: appointment["id"].as_str().unwrap().to_owned(),
            dead_event: ulid::Ulid::from(dead).to_string(),
            dead_delivery: ulid::Ulid::from(dead_delivery).to_string(),
        }
    }

    fn all(&self) -> [&str; 7] {
        [
            &self.patient,
            &self.practitioner,
            &self.appointment,
            &self.dead_event,
            &self.dead_delivery,
            &self.webhook_endpoint,
            &self.failed_webhook_delivery,
        ]
    }
}

/// Everything of B's that must not change: resources, events, links, outbox rows, audit records.
async fn b_state(app: &TestApp, workspace: &str) -> String {
    let conn = app.db.pool.get().await.unwrap();
    let uuid: uuid::Uuid = workspace.parse::<ulid::Ulid>().unwrap().into();
    let row = conn
        .query_one(
            "SELECT concat_ws('|', \
               (SELECT string_agg(t::text, ',' ORDER BY t.id) FROM patients t WHERE workspace_id = $1), \
               (SELECT string_agg(t::text, ',' ORDER BY t.id) FROM practitioners t WHERE workspace_id = $1), \
               (SELECT string_agg(t::text, ',' ORDER BY t.id) FROM appointments t WHERE workspace_id = $1), \
               (SELECT string_agg(t::text, ',' ORDER BY t.id) FROM events t WHERE workspace_id = $1), \
               (SELECT count(*)::text FROM event_resources WHERE workspace_id = $1), \
               (SELECT string_agg(o.event_id::text || o.status || o.attempts, ',' ORDER BY o.event_id) \
                  FROM event_outbox o JOIN events e ON e.id = o.event_id WHERE e.workspace_id = $1), \
               (SELECT string_agg(n.id::text || n.status || n.attempts, ',' ORDER BY n.id) \
                  FROM notifications n WHERE n.workspace_id = $1), \
               (SELECT count(*)::text FROM operator_actions), \
               (SELECT string_agg(w::text, ',' ORDER BY w.id) FROM webhook_endpoints w WHERE workspace_id = $1), \
               (SELECT string_agg(d::text, ',' ORDER BY d.id) FROM webhook_deliveries d WHERE workspace_id = $1), \
               (SELECT count(*)::text FROM webhook_endpoint_actions))",
            &[&uuid],
        )
        .await
        .unwrap();
    row.get(0)
}

fn shape(response: &TestResponse) -> (u16, Value) {
    let mut body = response.body.clone();
    if let Some(object) = body.as_object_mut() {
        object.remove("instance");
    }
    (response.status.as_u16(), body)
}

#[tokio::test]
async fn every_route_of_workspace_b_looks_missing_to_workspace_a() {
    let app = TestApp::new().await;
    let b = app.add_workspace().await;
    let b_ids = BIds::seed(
        &app,
        &b.admin,
        json!({"givenName": "Bathsheba", "familyName": "Onlyinb", "email": "b@only.test"}),
        "2035-05-01T09:00:00Z",
    )
    .await;
    let b_workspace = b.id.to_string();
    let before = b_state(&app, &b_workspace).await;

    let a = app.workspace.clone();
    let a_patient = app.create_patient(&a.staff, json!({"givenName": "A", "familyName": "Patient"})).await;
    let a_patient_id: ulid::Ulid = a_patient["id"].as_str().unwrap().parse().unwrap();
    let tokens = [
        ("admin", a.admin.clone()),
        ("staff", a.staff.clone()),
        ("patient", token(a.id, a_patient_id, Role::Patient)),
    ];
    let mut probed = 0;
    for (method, template) in ROUTES.iter() {
        if !template.contains("{id}") {
            continue;
        }
        let b_path = template.replace("{id}", id_for(template, &b_ids));
        let never_used = template.replace("{id}", &ulid::Ulid::generate().to_string());
        for (role, token) in &tokens {
            let body = body_for(method, template);
            let upper = method.to_uppercase();
            let on_b = app.call(&upper, &b_path, Some(token), body.clone()).await;
            let on_nothing = app.call(&upper, &never_used, Some(token), body).await;
            let context = format!("{role} {upper} {template}: {}", on_b.text);
            assert!(!on_b.status.is_success(), "{context}");
            assert_eq!(
                shape(&on_b),
                shape(&on_nothing),
                "B's id must look exactly like a missing one: {context}"
            );
            if *role == "admin" {
                assert_eq!(on_b.status, 404, "{context}");
            }
            for leaked in b_ids.all().into_iter().chain([b_workspace.as_str(), "Bathsheba", "Onlyinb"]) {
                assert!(!on_b.text.contains(leaked), "{context} leaks {leaked}");
            }
            probed += 1;
        }
    }
    let with_ids = ROUTES.iter().filter(|(_, template)| template.contains("{id}")).count();
    assert_eq!(probed, tokens.len() * with_ids, "every route with an id was probed");

    // Routes without an id: A's lists hold none of B's rows; a booking naming B's ids is refused.
    for (method, template) in ROUTES.iter().filter(|(_, template)| !template.contains("{id}")) {
        let upper = method.to_uppercase();
        let body = match *template {
            "/v1/appointments" => Some(json!({
                "patientId": b_ids.patient, "practitionerId": b_ids.practitioner,
                "startsAt": "2035-05-03T09:00:00Z", "endsAt": "2035-05-03T09:30:00Z",
            })),
            _ => body_for(method, template),
        };
        // List routes are probed with filters that list B's rows when B asks.
        let query = match (*method, *template) {
            ("get", "/v1/appointments") => "?from=2035-05-01T00:00:00Z&to=2035-05-02T00:00:00Z",
            ("get", "/v1/patients") => "?q=Onlyinb",
            _ => "",
        };
        let response = app.call(&upper, &format!("{template}{query}"), Some(&a.admin), body).await;
        assert!(response.status.as_u16() < 500, "{upper} {template}: {}", response.text);
        if *method == "post" && *template == "/v1/appointments" {
            assert_eq!(response.status, 422, "{}", response.text);
        }
        if !query.is_empty() {
            assert_eq!(response.status, 200, "{upper} {template}{query}: {}", response.text);
        }
        for leaked in b_ids.all().into_iter().chain([b_workspace.as_str(), "Bathsheba", "Onlyinb"]) {
            assert!(!response.text.contains(leaked), "{upper} {template} leaks {leaked}");
        }
    }
    // Filters and cursors cannot reach across either.
    for query in ["?status=dead", "?status=dead&eventType=appointment.created", "?limit=100"] {
        let response = app.call("GET", &format!("/v1/system/outbox{query}"), Some(&a.admin), None).await;
        assert_eq!(response.status, 200, "{}", response.text);
        assert!(!response.text.contains(&b_ids.dead_event), "outbox{query} leaks B's row");
    }

    assert_eq!(b_state(&app, &b_workspace).await, before, "B's rows are untouched");
    // And B itself still sees everything of its own.
    for path in [
        format!("/v1/patients/{}", b_ids.patient),
        format!("/v1/appointments/{}/timeline", b_ids.appointment),
    ] {
        assert_eq!(app.call("GET", &path, Some(&b.admin), None).await.status, 200, "{path}");
    }
    for path in
        ["/v1/appointments?from=2035-05-01T00:00:00Z&to=2035-05-02T00:00:00Z", "/v1/patients?q=Onlyinb"]
    {
        let listed = app.call("GET", path, Some(&b.admin), None).await;
        assert!(listed.text.contains(&b_ids.patient), "{path}: {}", listed.text);
    }
    let listed = app.call("GET", "/v1/system/outbox?status=dead", Some(&b.admin), None).await;
    assert!(listed.text.contains(&b_ids.dead_event), "{}", listed.text);
}

/// The patient role inside its own workspace: every route with an id, aimed at ANOTHER patient's
/// records (patient, appointment) or at anything a patient may not touch, answers exactly as for an
/// id that was never used — 404 for another patient's records, a role refusal (403) where the role is
/// refused whatever the id — and nothing of the other patient leaks or changes.
#[tokio::test]
async fn every_route_of_another_patient_looks_missing_to_a_patient() {
    let app = TestApp::new().await;
    let a = app.workspace.clone();
    let theirs = BIds::seed(
        &app,
        &a.admin,
        json!({"givenName": "Otheria", "familyName": "Notyours", "phone": "+15550100"}),
        "2035-06-01T09:00:00Z",
    )
    .await;
    let me = app.create_patient(&a.staff, json!({"givenName": "Me", "familyName": "Patient"})).await;
    let me_id: ulid::Ulid = me["id"].as_str().unwrap().parse().unwrap();
    let practitioner = json!({"id": theirs.practitioner});
    let mine = app.book(&a.staff, &me, &practitioner, "2035-06-01T10:00:00Z", "2035-06-01T10:30:00Z").await;
    let patient = token(a.id, me_id, Role::Patient);
    let workspace = a.id.to_string();
    let before = b_state(&app, &workspace).await;

    let mut not_found = 0;
    for (method, template) in ROUTES.iter().filter(|(_, template)| template.contains("{id}")) {
        let upper = method.to_uppercase();
        let path = template.replace("{id}", id_for(template, &theirs));
        let never_used = template.replace("{id}", &ulid::Ulid::generate().to_string());
        let body = body_for(method, template);
        let on_theirs = app.call(&upper, &path, Some(&patient), body.clone()).await;
        let on_nothing = app.call(&upper, &never_used, Some(&patient), body).await;
        let context = format!("patient {upper} {template}: {}", on_theirs.text);
        assert!(matches!(on_theirs.status.as_u16(), 403 | 404), "{context}");
        assert_eq!(
            shape(&on_theirs),
            shape(&on_nothing),
            "another patient's id must look missing: {context}"
        );
        not_found += usize::from(on_theirs.status == 404);
        for leaked in theirs.all().into_iter().chain(["Otheria", "Notyours", "+15550100"]) {
            assert!(!on_theirs.text.contains(leaked), "{context} leaks {leaked}");
        }
    }
    // GET and PATCH of the patient (a patient changes its own contact preferences, issue 40), GET and
    // cancel of the appointment: the patient's own routes; DELETE is refused to the role (403)
    // whatever the id.
    assert_eq!(not_found, 4, "the routes open to a patient answer 404 for another patient's ids");
    assert_eq!(b_state(&app, &workspace).await, before, "nothing of the workspace changed");
    // The patient's own records stay reachable.
    for path in
        [format!("/v1/patients/{me_id}"), format!("/v1/appointments/{}", mine["id"].as_str().unwrap())]
    {
        assert_eq!(app.call("GET", &path, Some(&patient), None).await.status, 200, "{path}");
    }
}
