//! The published event contract (DESIGN §4a) through the API: every catalog type is emitted by the
//! route the catalog names, envelopes carry the contract fields (published name, producer, metadata,
//! changed field names, the keyed idempotency digest), and the schemas and the AsyncAPI document are
//! served without authentication, byte for byte the checked-in files.

use chrono::{Duration, SecondsFormat, Utc};
use clinic_core::contract::{self, catalog};
use clinic_core::events::EventType;
use clinic_testkit::app::TestApp;
use serde_json::{json, Value};

fn at(hours: i64) -> String {
    (Utc::now() + Duration::hours(hours)).to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn uuid_of(id: &str) -> uuid::Uuid {
    uuid::Uuid::from(ulid::Ulid::from_string(id).expect("a ULID"))
}

/// The types of the events recorded about resource `id`, oldest first.
async fn types_about(app: &TestApp, id: &str) -> Vec<String> {
    let conn = app.db.pool.get().await.expect("connection");
    let rows = conn
        .query("SELECT type FROM events WHERE resource_id = $1 ORDER BY id", &[&uuid_of(id)])
        .await
        .expect("events");
    rows.iter().map(|row| row.get(0)).collect()
}

/// Books the next free two-hour slot; answers the appointment id.
async fn book(app: &TestApp, patient: &Value, practitioner: &Value, hour: &mut i64) -> String {
    *hour += 2;
    let booked = app.book(&app.workspace.admin, patient, practitioner, &at(*hour), &at(*hour + 1)).await;
    booked["id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn every_catalog_type_is_emitted_by_its_documented_route() {
    let app = TestApp::new().await;
    let admin = app.workspace.admin.clone();
    let patient = app.create_patient(&admin, json!({"givenName": "Ada", "familyName": "Lovelace"})).await;
    let practitioner = app.create_practitioner(&admin).await;
    let mut hour = 48;
    for event_type in EventType::ALL {
        let emission = catalog::emitted_by(*event_type);
        let Some((method, path)) = emission.route else {
            // The one type without a route: the reminders schedule.
            assert_eq!(*event_type, EventType::AppointmentReminderDue);
            let soon = app.book(&admin, &patient, &practitioner, &at(2), &at(3)).await;
            let id = soon["id"].as_str().unwrap();
            let lead = std::time::Duration::from_secs(24 * 3600);
            clinic_core::housekeeping::reminders::run(&app.db.pool, lead, Utc::now())
                .await
                .expect("reminders");
            assert!(types_about(&app, id).await.contains(&event_type.as_str().to_owned()), "{event_type}");
            continue;
        };
        // One driver per documented route: an undocumented or changed route fails here.
        let (concrete, body, about) = match (method, path) {
            ("post", "/v1/patients") => {
                (path.to_owned(), json!({"givenName": "Grace", "familyName": "Hopper"}), None)
            }
            ("patch", "/v1/patients/{id}") => {
                let id = patient["id"].as_str().unwrap();
                (format!("/v1/patients/{id}"), json!({"email": "ada@example.test"}), Some(id.to_owned()))
            }
            ("delete", "/v1/patients/{id}") => {
                let gone =
                    app.create_patient(&admin, json!({"givenName": "Gone", "familyName": "Soon"})).await;
                let id = gone["id"].as_str().unwrap().to_owned();
                (format!("/v1/patients/{id}"), Value::Null, Some(id))
            }
            ("post", "/v1/practitioners") => (path.to_owned(), json!({"displayName": "Dr. Who"}), None),
            ("patch", "/v1/practitioners/{id}") => {
                let id = practitioner["id"].as_str().unwrap();
                (format!("/v1/practitioners/{id}"), json!({"specialty": "Cardiology"}), Some(id.to_owned()))
            }
            ("post", "/v1/appointments") => {
                hour += 2;
                let body = json!({"patientId": patient["id"], "practitionerId": practitioner["id"],
                                  "startsAt": at(hour), "endsAt": at(hour + 1)});
                (path.to_owned(), body, None)
            }
            ("post", "/v1/appointments/{id}/reschedule") => {
                let id = book(&app, &patient, &practitioner, &mut hour).await;
                hour += 2;
                let body = json!({"startsAt": at(hour + 100), "endsAt": at(hour + 101)});
                (format!("/v1/appointments/{id}/reschedule"), body, Some(id))
            }
            ("post", "/v1/appointments/{id}/cancel") => {
                let id = book(&app, &patient, &practitioner, &mut hour).await;
                (format!("/v1/appointments/{id}/cancel"), json!({}), Some(id))
            }
            ("post", "/v1/appointments/{id}/complete") => {
                let id = book(&app, &patient, &practitioner, &mut hour).await;
                (format!("/v1/appointments/{id}/complete"), json!({}), Some(id))
            }
            other => panic!("{event_type}: the catalog names {other:?}, which this test cannot drive"),
        };
        let body = (!body.is_null()).then_some(body);
        let response = app.call(&method.to_uppercase(), &concrete, Some(&admin), body).await;
        assert!(response.status.is_success(), "{event_type} via {method} {path}: {}", response.text);
        let about = about.unwrap_or_else(|| response.body["id"].as_str().expect("the created id").to_owned());
        let types = types_about(&app, &about).await;
        assert_eq!(
            types.last().map(String::as_str),
            Some(event_type.as_str()),
            "{method} {path} emitted {types:?}"
        );
    }
}

#[tokio::test]
async fn envelopes_carry_the_contract_fields() {
    let app = TestApp::new().await;
    let admin = app.workspace.admin.clone();
    let patient = app.create_patient(&admin, json!({"givenName": "Ada", "familyName": "Lovelace"})).await;
    let id = patient["id"].as_str().unwrap();
    let key = "change-ada-email-lovelace";
    let changed = app
        .call_with(
            "PATCH",
            &format!("/v1/patients/{id}"),
            Some(&admin),
            Some(json!({"email": "ada@example.test", "givenName": "Ada"})),
            &[("idempotency-key", key)],
        )
        .await;
    assert_eq!(changed.status, 200, "{}", changed.text);
    let timeline = app.call("GET", &format!("/v1/patients/{id}/timeline"), Some(&admin), None).await;
    let items = timeline.body["items"].as_array().unwrap();
    let (updated, created) = (&items[0], &items[1]);
    assert_eq!(updated["type"], "patient.updated");
    assert_eq!(updated["publishedName"], "clinic.patient.updated.v1");
    assert_eq!(updated["producer"], "clinic-core/patients");
    // Only the field whose value changed, by name; the unchanged given name is not listed.
    assert_eq!(updated["changedFields"], json!(["email"]));
    assert!(!timeline.text.contains("ada@example.test"), "no value in an envelope");
    let digest = updated["idempotencyKey"].as_str().expect("the request's key, as a digest");
    assert!(digest.starts_with("hmac-sha256:") && digest.len() == "hmac-sha256:".len() + 64, "{digest}");
    assert!(!timeline.text.contains(key) && !timeline.text.contains("lovelace"), "never the key itself");
    // Keyed by workspace: the same key in another workspace gives another digest.
    let other = app.add_workspace().await;
    let theirs = app.create_patient(&other.admin, json!({"givenName": "B", "familyName": "C"})).await;
    let theirs_id = theirs["id"].as_str().unwrap();
    let path = format!("/v1/patients/{theirs_id}");
    let body = Some(json!({"email": "b@example.test"}));
    assert_eq!(
        app.call_with("PATCH", &path, Some(&other.admin), body, &[("idempotency-key", key)]).await.status,
        200
    );
    let their_timeline = app.call("GET", &format!("{path}/timeline"), Some(&other.admin), None).await;
    assert_ne!(their_timeline.body["items"][0]["idempotencyKey"], updated["idempotencyKey"]);

    assert!(created.get("changedFields").is_none() && created.get("idempotencyKey").is_none(), "{created}");
    assert_eq!(created["metadata"]["envelopeVersion"], 1);
    let dataschema = created["metadata"]["dataschema"].as_str().unwrap();
    assert_eq!(dataschema, contract::dataschema(EventType::PatientCreated, 1));

    // The dataschema resolves through the API (no token) to the schema the envelope validates against.
    let served_path =
        format!("/{}", dataschema.split_once("/schemas/").map(|(_, p)| format!("schemas/{p}")).unwrap());
    let schema = app.call("GET", &served_path, None, None).await;
    assert_eq!(schema.status, 200, "{served_path}");
    assert_eq!(schema.body["properties"]["type"]["const"], "patient.created");

    // A reschedule names the moved bounds.
    let practitioner = app.create_practitioner(&admin).await;
    let (starts, ends, later) = (at(30), at(31), at(32));
    let booked = app.book(&admin, &patient, &practitioner, &starts, &ends).await;
    let appointment = booked["id"].as_str().unwrap();
    let moved = json!({"startsAt": starts, "endsAt": later});
    let path = format!("/v1/appointments/{appointment}/reschedule");
    assert_eq!(app.call("POST", &path, Some(&admin), Some(moved)).await.status, 200);
    let timeline =
        app.call("GET", &format!("/v1/appointments/{appointment}/timeline"), Some(&admin), None).await;
    assert_eq!(timeline.body["items"][0]["changedFields"], json!(["endsAt"]));
}

#[tokio::test]
async fn the_contract_documents_are_served_without_authentication() {
    let app = TestApp::new().await;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for path in [
        "schemas/events/appointment.created/v1.json",
        "schemas/cloudevent/v1.json",
        "schemas/webhooks/heartbeat/v1.json",
        "schemas/webhooks/fhir-id-only/v1.json",
        "asyncapi.yaml",
    ] {
        let served = app.call("GET", &format!("/{path}"), None, None).await;
        assert_eq!(served.status, 200, "{path}");
        let file = std::fs::read_to_string(root.join(path)).unwrap();
        assert_eq!(served.text, file, "/{path} serves the checked-in {path}");
    }
    for missing in [
        "/schemas/events/appointment.exploded/v1.json",
        "/schemas/events/appointment.created/v9.json",
        "/schemas/webhooks/heartbeat/v9.json",
        "/schemas/webhooks/../cloudevent/v1.json",
    ] {
        let response = app.call("GET", missing, None, None).await;
        assert_eq!(response.status, 404, "{missing}");
        assert_eq!(response.header("content-type"), Some("application/problem+json"));
    }
}
