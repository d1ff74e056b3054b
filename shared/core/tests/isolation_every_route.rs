//! Workspace isolation on EVERY route of [`ROUTES`] (so a route added later is covered without
//! editing this file): with two workspaces, each of A's tokens (admin, staff, patient) aimed at
//! workspace B's resources gets exactly the answer it gets for an id that was never used — always 404
//! for A's admin; a role refusal (403) only where the role is refused whatever the id — never B's
//! data, never a 403 that would confirm B's id exists, and B's rows are left exactly as they were.

use clinic_core::http::auth::Role;
use clinic_core::http::ROUTES;
use clinic_testkit::app::{token, TestApp, TestResponse};
use serde_json::{json, Value};

/// The request body each route is probed with: one that would succeed in B's own workspace.
fn body_for(method: &str, template: &str) -> Option<Value> {
    let body = match (method, template.rsplit('/').next().unwrap_or("")) {
        ("patch", _) if template.starts_with("/v1/practitioners/") => {
            json!({"displayName": "Isolation", "expectedVersion": 1})
        }
        ("patch", _) => json!({"givenName": "Isolation", "expectedVersion": 1}),
        ("post", "reschedule") => {
            json!({"startsAt": "2035-05-02T09:00:00Z", "endsAt": "2035-05-02T09:30:00Z"})
        }
        ("post", "cancel" | "complete") => json!({}),
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
    } else if template.starts_with("/v1/system/outbox/") {
        &b.dead_event
    } else {
        panic!("{template}: unknown path parameter; teach isolation_every_route which of B's ids it takes")
    }
}

struct BIds {
    patient: String,
    practitioner: String,
    appointment: String,
    dead_event: String,
}

impl BIds {
    fn all(&self) -> [&str; 4] {
        [&self.patient, &self.practitioner, &self.appointment, &self.dead_event]
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
               (SELECT count(*)::text FROM operator_actions))",
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
    let practitioner = app.create_practitioner(&b.admin).await;
    let patient = app
        .create_patient(
            &b.admin,
            json!({"givenName": "Bathsheba", "familyName": "Onlyinb", "email": "b@only.test"}),
        )
        .await;
    let appointment =
        app.book(&b.admin, &patient, &practitioner, "2035-05-01T09:00:00Z", "2035-05-01T09:30:00Z").await;
    // A dead outbox row of B: the state in which every operator action would act.
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
    drop(conn);
    let b_ids = BIds {
        patient: patient["id"].as_str().unwrap().to_owned(),
        practitioner: practitioner["id"].as_str().unwrap().to_owned(),
        appointment: appointment["id"].as_str().unwrap().to_owned(),
        dead_event: ulid::Ulid::from(dead).to_string(),
    };
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
    for (method, template) in ROUTES {
        if !template.contains('{') {
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
    let with_ids = ROUTES.iter().filter(|(_, template)| template.contains('{')).count();
    assert_eq!(probed, tokens.len() * with_ids, "every route with an id was probed");

    // Routes without an id: A's lists hold none of B's rows; a booking naming B's ids is refused.
    for (method, template) in ROUTES.iter().filter(|(_, template)| !template.contains('{')) {
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
