//! The OpenAPI document, the route table and the router agree.

use std::collections::BTreeSet;

use clinic_http::{OPENAPI_JSON, ROUTES};
use clinic_testkit::app::TestApp;

fn documented() -> BTreeSet<(String, String)> {
    let doc: serde_json::Value = serde_json::from_str(OPENAPI_JSON).unwrap();
    let mut routes = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            routes.insert((method.clone(), path.clone()));
        }
    }
    routes
}

#[test]
fn the_document_lists_exactly_the_route_table() {
    let table: BTreeSet<(String, String)> =
        ROUTES.iter().map(|(method, path)| (method.to_string(), path.to_string())).collect();
    assert_eq!(documented(), table);
}

#[tokio::test]
async fn every_documented_route_is_served_and_other_methods_are_not() {
    let app = TestApp::new().await;
    let id = ulid::Ulid::generate().to_string();
    let token = app.workspace.admin.clone();
    let documented = documented();
    for (method, path) in &documented {
        let concrete = path.replace("{id}", &id);
        let response = app.call(&method.to_uppercase(), &concrete, Some(&token), None).await;
        assert_ne!(response.body["type"], "urn:clinic:problem:no-route", "{method} {path} is not routed");
        assert_ne!(response.status, 405, "{method} {path} is not routed");
        for other in ["get", "post", "patch", "delete", "put"] {
            if !documented.contains(&(other.to_string(), path.clone())) {
                let response = app.call(&other.to_uppercase(), &concrete, Some(&token), None).await;
                assert_eq!(response.status, 405, "{other} {path} is served but not documented");
            }
        }
    }
    let served = app.call("GET", "/openapi.json", None, None).await;
    assert_eq!(served.body["openapi"], "3.1.0");
}

/// Rules the document states, held by the code (the fuzzer's positive_data_acceptance found each
/// of these disagreeing once): JSON Schema integers include `1.0`; a PATCH must change a field
/// besides `expectedVersion`; optional text, when given, is not blank, with blank as Rust's trim
/// sees it (U+0085 included, which ECMA-262's `\s` lacks); bulk filter values are strings.
#[tokio::test]
async fn the_rules_the_document_states_hold_in_the_code() {
    let app = TestApp::new().await;
    let staff = app.workspace.staff.clone();
    let admin = app.workspace.admin.clone();
    let practitioner = app.create_practitioner(&staff).await;
    let path = format!("/v1/practitioners/{}", practitioner["id"].as_str().unwrap());

    let integral = app
        .call(
            "PATCH",
            &path,
            Some(&staff),
            Some(serde_json::json!({"active": false, "expectedVersion": 1.0})),
        )
        .await;
    assert_eq!(integral.status, 200, "{}", integral.text);
    assert_eq!(integral.body["version"], 2);
    let fraction = app
        .call("PATCH", &path, Some(&staff), Some(serde_json::json!({"active": true, "expectedVersion": 2.5})))
        .await;
    assert_eq!((fraction.status.as_u16(), fraction.body["field"].clone()), (422, "expectedVersion".into()));
    let only_version =
        app.call("PATCH", &path, Some(&staff), Some(serde_json::json!({"expectedVersion": 2}))).await;
    assert_eq!((only_version.status.as_u16(), only_version.body["field"].clone()), (422, "body".into()));

    for (body, field) in [
        (serde_json::json!({"displayName": "Dr. A", "specialty": ""}), "specialty"),
        (serde_json::json!({"displayName": "\u{85}"}), "displayName"),
        (serde_json::json!({"displayName": "Dr. \u{0}"}), "displayName"),
    ] {
        let refused = app.call("POST", "/v1/practitioners", Some(&staff), Some(body.clone())).await;
        assert_eq!((refused.status.as_u16(), refused.body["field"].clone()), (422, field.into()), "{body}");
    }

    let null_filter =
        serde_json::json!({"reason": "check", "dryRun": true, "filter": {"status": "dead", "to": null}});
    let refused = app.call("POST", "/v1/system/outbox/bulk/discard", Some(&admin), Some(null_filter)).await;
    assert_eq!((refused.status.as_u16(), refused.body["field"].clone()), (422, "filter.to".into()));
    let integral_limit =
        serde_json::json!({"reason": "check", "dryRun": true, "limit": 10.0, "filter": {"status": "dead"}});
    let dry_run =
        app.call("POST", "/v1/system/outbox/bulk/discard", Some(&admin), Some(integral_limit)).await;
    assert_eq!(dry_run.status, 200, "{}", dry_run.text);

    // Every filter the outbox listing reads is documented, and served.
    let doc: serde_json::Value = serde_json::from_str(OPENAPI_JSON).unwrap();
    let documented: BTreeSet<&str> = doc["paths"]["/v1/system/outbox"]["get"]["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    for name in ["status", "eventType", "olderThan", "listener", "errorCode", "from", "to", "resourceId"] {
        assert!(documented.contains(name), "GET /v1/system/outbox documents {name}");
    }
    let listed = app
        .call(
            "GET",
            &format!(
                "/v1/system/outbox?listener=patient_reminder&errorCode=x.y&from=2026-01-01T00:00:00Z&resourceId={}",
                practitioner["id"].as_str().unwrap()
            ),
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(listed.status, 200, "{}", listed.text);
}
