//! The OpenAPI document, the route table and the router agree.

use std::collections::BTreeSet;

use clinic_core::http::{OPENAPI_JSON, ROUTES};
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
