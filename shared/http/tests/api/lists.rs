//! The staff app's lists over HTTP: the schedule view, patient search and the practitioner list —
//! order, keyset paging, filters, bounds, roles and the disclosures each read records.

use clinic_http::auth::Role;
use clinic_testkit::app::{token, TestApp, TestResponse};
use serde_json::{json, Value};

/// Every page of `path` (which has no `cursor`), following `nextCursor` to the end.
async fn all_pages(app: &TestApp, token: &str, path: &str) -> Vec<Value> {
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..100 {
        let url = match &cursor {
            Some(cursor) => format!("{path}&cursor={cursor}"),
            None => path.to_owned(),
        };
        let page = app.call("GET", &url, Some(token), None).await;
        assert_eq!(page.status, 200, "{url}: {}", page.text);
        items.extend(page.body["items"].as_array().unwrap().iter().cloned());
        match page.body["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return items,
        }
    }
    panic!("{path}: more than 100 pages");
}

fn ids(items: &[Value]) -> Vec<String> {
    items.iter().map(|item| item["id"].as_str().unwrap().to_owned()).collect()
}

fn assert_bad(response: &TestResponse, field: &str) {
    assert_eq!(response.status, 400, "{}", response.text);
    assert_eq!(response.body["field"], field, "{}", response.text);
    assert_eq!(response.body["type"], "urn:clinic:problem:invalid-parameter");
}

async fn disclosures(app: &TestApp, purpose: &str, patient: &Value) -> i64 {
    let id: ulid::Ulid = patient["id"].as_str().unwrap().parse().unwrap();
    app.count(&format!(
        "SELECT 1 FROM patient_disclosures WHERE purpose = '{purpose}' AND patient_id = '{}'",
        uuid::Uuid::from(id)
    ))
    .await
}

const WINDOW: &str = "from=2031-03-01T00:00:00Z&to=2031-03-08T00:00:00Z";

#[tokio::test]
async fn the_schedule_is_ordered_by_start_then_id_and_pages_through_every_filter() {
    let app = TestApp::new().await;
    let staff = app.workspace.staff.clone();
    let doc = app.create_practitioner(&staff).await;
    let other_doc = app.create_practitioner(&staff).await;
    let ada = app.create_patient(&staff, json!({"givenName": "Ada", "familyName": "Lovelace"})).await;
    let bob = app.create_patient(&staff, json!({"givenName": "Bob", "familyName": "Babbage"})).await;
    // Five appointments of `doc` on two days, two of `other_doc` at the same instants (ties on startsAt
    // are ordered by id), one outside the window, one cancelled.
    let mut expected = Vec::new();
    for (day, hour, patient) in [(2, 9, &ada), (2, 10, &bob), (3, 9, &ada), (4, 8, &bob), (5, 16, &ada)] {
        let starts = format!("2031-03-0{day}T{hour:02}:00:00Z");
        let ends = format!("2031-03-0{day}T{hour:02}:30:00Z");
        let booked = app.book(&staff, patient, &doc, &starts, &ends).await;
        expected.push((starts.clone(), booked["id"].as_str().unwrap().to_owned(), "doc"));
        let tie = app.book(&staff, patient, &other_doc, &starts, &ends).await;
        expected.push((starts, tie["id"].as_str().unwrap().to_owned(), "other"));
    }
    app.book(&staff, &ada, &doc, "2031-03-09T09:00:00Z", "2031-03-09T09:30:00Z").await;
    let cancelled = expected[4].1.clone(); // ada with doc on 3 March
    let response = app
        .call("POST", &format!("/v1/appointments/{cancelled}/cancel"), Some(&staff), Some(json!({})))
        .await;
    assert_eq!(response.status, 200, "{}", response.text);
    expected.sort();

    let everything = all_pages(&app, &staff, &format!("/v1/appointments?{WINDOW}&limit=3")).await;
    assert_eq!(ids(&everything), expected.iter().map(|e| e.1.clone()).collect::<Vec<_>>());
    assert!(everything
        .iter()
        .all(|a| a.get("reason").is_some() && a["workspaceId"] == app.workspace.id.to_string()));

    let doc_id = doc["id"].as_str().unwrap();
    let of_doc =
        all_pages(&app, &staff, &format!("/v1/appointments?{WINDOW}&practitionerId={doc_id}&limit=2")).await;
    let expected_doc: Vec<String> = expected.iter().filter(|e| e.2 == "doc").map(|e| e.1.clone()).collect();
    assert_eq!(ids(&of_doc), expected_doc);

    let ada_id = ada["id"].as_str().unwrap();
    let of_ada =
        all_pages(&app, &staff, &format!("/v1/appointments?{WINDOW}&patientId={ada_id}&limit=1")).await;
    assert_eq!(of_ada.len(), 6);
    assert!(of_ada.iter().all(|a| a["patientId"] == ada["id"]));
    let both = all_pages(
        &app,
        &staff,
        &format!("/v1/appointments?{WINDOW}&patientId={ada_id}&practitionerId={doc_id}&status=booked"),
    )
    .await;
    assert_eq!(both.len(), 2, "ada's booked appointments with doc (one was cancelled)");
    let cancelled_only =
        all_pages(&app, &staff, &format!("/v1/appointments?{WINDOW}&status=cancelled")).await;
    assert_eq!(ids(&cancelled_only), vec![cancelled]);

    // A one-hour window holds exactly the two 09:00 appointments of 2 March.
    let hour =
        all_pages(&app, &staff, "/v1/appointments?from=2031-03-02T09:00:00Z&to=2031-03-02T10:00:00Z").await;
    assert_eq!(hour.len(), 2);
    // Every listed appointment's patient was disclosed to the reader, once per read.
    assert!(disclosures(&app, "GET /v1/appointments", &ada).await >= 6);
    assert!(disclosures(&app, "GET /v1/appointments", &bob).await >= 4);
}

#[tokio::test]
async fn the_schedule_refuses_missing_unbounded_and_malformed_filters() {
    let app = TestApp::new().await;
    let staff = app.workspace.staff.clone();
    let call = |path: String| {
        let app = &app;
        let staff = staff.clone();
        async move { app.call("GET", &path, Some(&staff), None).await }
    };
    assert_bad(&call("/v1/appointments".into()).await, "from");
    assert_bad(&call("/v1/appointments?from=2031-03-01T00:00:00Z".into()).await, "to");
    assert_bad(&call("/v1/appointments?from=2031-03-01&to=2031-03-02T00:00:00Z".into()).await, "from");
    assert_bad(
        &call("/v1/appointments?from=2031-03-01T00:00:00%2B01:00&to=2031-03-02T00:00:00Z".into()).await,
        "from",
    );
    assert_bad(
        &call("/v1/appointments?from=2031-03-01T00:00:00Z&to=2031-04-01T00:00:01Z".into()).await,
        "to",
    );
    assert_bad(
        &call("/v1/appointments?from=2031-03-02T00:00:00Z&to=2031-03-01T00:00:00Z".into()).await,
        "to",
    );
    assert_bad(&call(format!("/v1/appointments?{WINDOW}&status=pending")).await, "status");
    assert_bad(&call(format!("/v1/appointments?{WINDOW}&practitionerId=nope")).await, "practitionerId");
    assert_bad(&call(format!("/v1/appointments?{WINDOW}&patientId=1234")).await, "patientId");
    assert_bad(&call(format!("/v1/appointments?{WINDOW}&limit=0")).await, "limit");
    assert_bad(&call(format!("/v1/appointments?{WINDOW}&cursor=forged")).await, "cursor");
    // 31 days exactly is allowed.
    let month = call("/v1/appointments?from=2031-03-01T00:00:00Z&to=2031-04-01T00:00:00Z".into()).await;
    assert_eq!(month.status, 200, "{}", month.text);

    // A cursor is bound to its filters: one issued for another window does not open.
    let doc = app.create_practitioner(&staff).await;
    let patient = app.create_patient(&staff, json!({"givenName": "C", "familyName": "D"})).await;
    for hour in [9, 10] {
        let (starts, ends) = (format!("2031-03-02T{hour:02}:00:00Z"), format!("2031-03-02T{hour:02}:30:00Z"));
        app.book(&staff, &patient, &doc, &starts, &ends).await;
    }
    let first = call(format!("/v1/appointments?{WINDOW}&limit=1")).await;
    let cursor = first.body["nextCursor"].as_str().unwrap().to_owned();
    let moved = call(format!(
        "/v1/appointments?from=2031-03-01T00:00:00Z&to=2031-03-09T00:00:00Z&limit=1&cursor={cursor}"
    ))
    .await;
    assert_bad(&moved, "cursor");
}

#[tokio::test]
async fn a_patient_token_sees_only_its_own_appointments() {
    let app = TestApp::new().await;
    let staff = app.workspace.staff.clone();
    let doc = app.create_practitioner(&staff).await;
    let ada = app.create_patient(&staff, json!({"givenName": "Ada", "familyName": "Own"})).await;
    let eve = app.create_patient(&staff, json!({"givenName": "Eve", "familyName": "Other"})).await;
    let mine = app.book(&staff, &ada, &doc, "2031-03-02T09:00:00Z", "2031-03-02T09:30:00Z").await;
    app.book(&staff, &eve, &doc, "2031-03-02T10:00:00Z", "2031-03-02T10:30:00Z").await;
    let ada_id: ulid::Ulid = ada["id"].as_str().unwrap().parse().unwrap();
    let ada_token = token(app.workspace.id, ada_id, Role::Patient);

    let own = all_pages(&app, &ada_token, &format!("/v1/appointments?{WINDOW}")).await;
    assert_eq!(ids(&own), vec![mine["id"].as_str().unwrap().to_owned()]);
    let eve_id = eve["id"].as_str().unwrap();
    let theirs = app
        .call("GET", &format!("/v1/appointments?{WINDOW}&patientId={eve_id}"), Some(&ada_token), None)
        .await;
    assert_eq!(theirs.status, 200, "{}", theirs.text);
    assert_eq!(theirs.body["items"], json!([]));
    assert_eq!(disclosures(&app, "GET /v1/appointments", &eve).await, 0, "nothing of eve's was read");
    let actor_kind = app
        .count(&format!(
            "SELECT 1 FROM patient_disclosures WHERE actor_kind = 'patient' AND actor_id = '{}'",
            uuid::Uuid::from(ada_id)
        ))
        .await;
    assert_eq!(actor_kind, 1, "the patient's own read is accounted for, with the patient as actor");
    // Search and the practitioner list are staff routes.
    for path in ["/v1/patients?q=ad", "/v1/practitioners"] {
        let refused = app.call("GET", path, Some(&ada_token), None).await;
        assert_eq!(refused.status, 403, "{path}: {}", refused.text);
    }
}

#[tokio::test]
async fn patient_search_matches_name_prefixes_once_each_in_name_order_and_skips_deleted_patients() {
    let app = TestApp::new().await;
    let staff = app.workspace.staff.clone();
    let mut made = Vec::new();
    for (given, family, born) in [
        ("Mara", "Zed", "1980-01-01"),
        ("Ann", "Mason", "1990-02-02"),
        ("Mark", "Abbott", "1980-01-01"),
        ("Maddy", "Madsen", "1970-03-03"), // matches on both names: listed once, under "madsen"
        ("Tom", "MACKAY", "1960-04-04"),
        ("Zoe", "Smith", "1950-05-05"), // no match
        ("Öma", "Ölund", "1940-06-06"),
    ] {
        let body = json!({"givenName": given, "familyName": family, "dateOfBirth": born});
        made.push(app.create_patient(&staff, body).await);
    }
    let gone = app.create_patient(&staff, json!({"givenName": "Mallory", "familyName": "Gone"})).await;
    let deleted = app
        .call("DELETE", &format!("/v1/patients/{}", gone["id"].as_str().unwrap()), Some(&staff), None)
        .await;
    assert_eq!(deleted.status, 204);

    let names = |items: &[Value]| -> Vec<String> {
        items
            .iter()
            .map(|p| format!("{} {}", p["givenName"].as_str().unwrap(), p["familyName"].as_str().unwrap()))
            .collect()
    };
    // Ordered by the matched name: mackay, madsen, mara (given), mark (given), mason.
    let hits = all_pages(&app, &staff, "/v1/patients?q=MA&limit=2").await;
    assert_eq!(names(&hits), ["Tom MACKAY", "Maddy Madsen", "Mara Zed", "Mark Abbott", "Ann Mason"]);
    assert!(hits.iter().all(|p| p.get("email").is_some() && p.get("dateOfBirth").is_some()));
    let one_by_one = all_pages(&app, &staff, "/v1/patients?q=ma&limit=1").await;
    assert_eq!(ids(&one_by_one), ids(&hits), "paging one by one gives the same sequence");
    assert_eq!(
        names(&all_pages(&app, &staff, "/v1/patients?q=%20mar%20").await),
        ["Mara Zed", "Mark Abbott"]
    );
    assert_eq!(names(&all_pages(&app, &staff, "/v1/patients?q=%C3%B6l").await), ["Öma Ölund"]);
    let born = all_pages(&app, &staff, "/v1/patients?q=ma&dateOfBirth=1980-01-01").await;
    assert_eq!(names(&born), ["Mara Zed", "Mark Abbott"]);
    assert_eq!(
        all_pages(&app, &staff, "/v1/patients?q=mallory").await,
        Vec::<Value>::new(),
        "deleted: never listed"
    );
    assert_eq!(all_pages(&app, &staff, "/v1/patients?q=gone").await, Vec::<Value>::new());
    // `%` and `_` are text, not patterns.
    assert_eq!(all_pages(&app, &staff, "/v1/patients?q=m%25").await, Vec::<Value>::new());
    assert_eq!(all_pages(&app, &staff, "/v1/patients?q=m_").await, Vec::<Value>::new());

    // Each listed patient is a disclosure; the unlisted one is not.
    assert_eq!(disclosures(&app, "GET /v1/patients", &made[4]).await, 2, "one per read that listed it");
    assert_eq!(disclosures(&app, "GET /v1/patients", &made[5]).await, 0);

    // The cursor seals the name it carries.
    let first = app.call("GET", "/v1/patients?q=ma&limit=1", Some(&staff), None).await;
    let cursor = first.body["nextCursor"].as_str().unwrap();
    use base64::Engine;
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(cursor).unwrap();
    assert!(!raw.windows(6).any(|w| w.eq_ignore_ascii_case(b"mackay")), "the cursor hides the name");
    let other_query =
        app.call("GET", &format!("/v1/patients?q=mar&cursor={cursor}"), Some(&staff), None).await;
    assert_bad(&other_query, "cursor");
}

#[tokio::test]
async fn patient_search_refuses_short_long_and_malformed_queries() {
    let app = TestApp::new().await;
    let staff = app.workspace.staff.clone();
    for path in [
        "/v1/patients",
        "/v1/patients?q=",
        "/v1/patients?q=a",
        "/v1/patients?q=%20a%20",
        "/v1/patients?q=a%00b",
    ] {
        assert_bad(&app.call("GET", path, Some(&staff), None).await, "q");
    }
    let long = format!("/v1/patients?q={}", "a".repeat(101));
    assert_bad(&app.call("GET", &long, Some(&staff), None).await, "q");
    for path in ["/v1/patients?q=ab&dateOfBirth=1980-13-01", "/v1/patients?q=ab&dateOfBirth=2999-01-01"] {
        assert_bad(&app.call("GET", path, Some(&staff), None).await, "dateOfBirth");
    }
    assert_bad(&app.call("GET", "/v1/patients?q=ab&limit=101", Some(&staff), None).await, "limit");
    let admin = app.call("GET", "/v1/patients?q=ab", Some(&app.workspace.admin), None).await;
    assert_eq!(admin.status, 200, "{}", admin.text);
    assert_eq!(admin.body, json!({"items": [], "nextCursor": null}));
}

#[tokio::test]
async fn practitioners_are_listed_oldest_first_and_filtered_by_active() {
    let app = TestApp::new().await;
    let staff = app.workspace.staff.clone();
    let mut made = Vec::new();
    for _ in 0..5 {
        made.push(app.create_practitioner(&staff).await["id"].as_str().unwrap().to_owned());
    }
    let listed = all_pages(&app, &staff, "/v1/practitioners?limit=2").await;
    assert_eq!(ids(&listed), made);
    assert!(listed.iter().all(|p| p["active"] == true));
    let off = app
        .call(
            "PATCH",
            &format!("/v1/practitioners/{}", made[1]),
            Some(&staff),
            Some(json!({"active": false})),
        )
        .await;
    assert_eq!(off.status, 200, "{}", off.text);
    let active = all_pages(&app, &staff, "/v1/practitioners?active=true&limit=2").await;
    assert_eq!(ids(&active), [made[0].clone(), made[2].clone(), made[3].clone(), made[4].clone()]);
    let inactive = all_pages(&app, &staff, "/v1/practitioners?active=false").await;
    assert_eq!(ids(&inactive), [made[1].clone()]);
    assert_bad(&app.call("GET", "/v1/practitioners?active=yes", Some(&staff), None).await, "active");
    let first = app.call("GET", "/v1/practitioners?limit=1", Some(&staff), None).await;
    let cursor = first.body["nextCursor"].as_str().unwrap();
    let moved =
        app.call("GET", &format!("/v1/practitioners?active=true&cursor={cursor}"), Some(&staff), None).await;
    assert_bad(&moved, "cursor");
}
