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

/// `$ref`s replaced by what they point at (within `document`), so a schema referenced in one document
/// and written inline in the other compares equal. A reference met again inside itself stays a `$ref`.
fn resolved(
    value: &serde_json::Value,
    document: &serde_json::Value,
    seen: &mut Vec<String>,
) -> serde_json::Value {
    match value {
        serde_json::Value::Object(map) => {
            if let Some(target) = map.get("$ref").and_then(|r| r.as_str()) {
                if let Some(pointer) = target.strip_prefix('#') {
                    if !seen.iter().any(|s| s == target) {
                        if let Some(pointed) = document.pointer(pointer) {
                            seen.push(target.to_string());
                            let out = resolved(pointed, document, seen);
                            seen.pop();
                            return out;
                        }
                    }
                }
            }
            map.iter().map(|(k, v)| (k.clone(), resolved(v, document, seen))).collect()
        }
        serde_json::Value::Array(items) => items.iter().map(|v| resolved(v, document, seen)).collect(),
        other => other.clone(),
    }
}

const METHODS: [&str; 5] = ["get", "put", "post", "delete", "patch"];

/// Spellings of the same meaning made one: `const: v` is `enum: [v]`; a request body's
/// `required: false` is its absence (the OpenAPI default).
fn canonical(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            if let Some(constant) = map.remove("const") {
                map.insert("enum".into(), serde_json::json!([constant]));
            }
            for item in map.values_mut() {
                canonical(item);
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(canonical),
        _ => {}
    }
}

/// One operation of `document`, `$ref`s resolved and spellings made canonical.
fn operation(document: &serde_json::Value, path: &str, method: &str) -> serde_json::Value {
    let mut operation = resolved(&document["paths"][path][method], document, &mut Vec::new());
    canonical(&mut operation);
    if let Some(body) = operation.get_mut("requestBody").and_then(|b| b.as_object_mut()) {
        if body.get("required") == Some(&serde_json::json!(false)) {
            body.remove("required");
        }
    }
    operation
}

/// Compares the generated document with the hand-written one (`$ref`s resolved), operation by
/// operation and for the top-level keys. Answers the differences, and the responses whose
/// `X-Correlation-Id` header the generated document states and the hand-written one left out (every
/// answer carries it: the correlation middleware sets it; the generated document says so on each).
fn compare(published: &serde_json::Value, generated: &serde_json::Value) -> (Vec<String>, usize) {
    let (mut differences, mut headers_added) = (Vec::new(), 0);
    for key in ["openapi", "info", "servers", "security"] {
        if published[key] != generated[key] {
            differences.push(format!("{key}: {} != {}", published[key], generated[key]));
        }
    }
    let components = |doc: &serde_json::Value| resolved(&doc["components"], doc, &mut Vec::new());
    if components(published) != components(generated) {
        differences.push("components differ".to_string());
    }
    let empty = serde_json::Map::new();
    let paths = |doc: &serde_json::Value| -> BTreeSet<String> {
        doc["paths"].as_object().unwrap_or(&empty).keys().cloned().collect()
    };
    for path in paths(published).union(&paths(generated)) {
        for method in METHODS {
            let (mut old, new) = (operation(published, path, method), operation(generated, path, method));
            match (old.is_null(), new.is_null()) {
                (true, true) => continue,
                (false, true) => differences.push(format!("{method} {path}: not generated")),
                (true, false) => differences.push(format!("{method} {path}: not published")),
                (false, false) => {
                    if let Some(responses) = old["responses"].as_object_mut() {
                        for (status, response) in responses {
                            if response.get("headers").is_none()
                                && !new["responses"][status]["headers"].is_null()
                            {
                                response["headers"] = new["responses"][status]["headers"].clone();
                                headers_added += 1;
                            }
                        }
                    }
                    let keys: BTreeSet<&String> =
                        old.as_object().unwrap().keys().chain(new.as_object().unwrap().keys()).collect();
                    for key in keys {
                        if old[key] != new[key] {
                            differences.push(format!("{method} {path}: {key}: {} != {}", old[key], new[key]));
                        }
                    }
                }
            }
        }
    }
    (differences, headers_added)
}

/// `src/openapi.json`, the document `GET /openapi.json` serves, is the generated one (the handlers'
/// annotations, the router, `document::publish`); `UPDATE_OPENAPI=1` rewrites it instead. The
/// comparison names each operation that differs. (Before the file was generated, the same comparison
/// against the hand-written document found no difference but the 69 responses whose
/// `X-Correlation-Id` header it left out: see `compare`.)
#[test]
fn the_served_document_is_the_generated_one() {
    let generated = clinic_http::openapi_document();
    assert_eq!(generated["openapi"], "3.1.0");
    let text = serde_json::to_string_pretty(&generated).unwrap() + "\n";
    if std::env::var("UPDATE_OPENAPI").is_ok_and(|v| v == "1") {
        std::fs::write(concat!(env!("CARGO_MANIFEST_DIR"), "/src/openapi.json"), &text).unwrap();
        return;
    }
    let published: serde_json::Value = serde_json::from_str(OPENAPI_JSON).unwrap();
    let (differences, headers_added) = compare(&published, &generated);
    assert!(
        differences.is_empty() && headers_added == 0 && text == OPENAPI_JSON,
        "src/openapi.json is not the generated document ({} operations differ{}); run \
         `UPDATE_OPENAPI=1 cargo test -p clinic-http --test api -- openapi` and commit the result:\n{}",
        differences.len(),
        if headers_added > 0 { ", headers added" } else { "" },
        differences.join("\n")
    );
}

/// The 409 of each single-row retry or discard names the statuses the action accepts, as the lease
/// queue's operator rules decide them ([`clinic_core::lease::operator`]), and lists the queue's other
/// statuses in parentheses: a receiver reading the document learns the real rule.
#[test]
fn each_conflict_answer_names_the_statuses_its_action_accepts() {
    use clinic_core::lease::operator::{Actions, NOTIFICATION_ACTIONS, WEBHOOK_ACTIONS};
    use clinic_core::lease::ActionKind;

    fn names(list: &str) -> BTreeSet<String> {
        list.replace(" or ", ", ").split(", ").map(|name| name.trim().to_owned()).collect()
    }
    let doc: serde_json::Value = serde_json::from_str(OPENAPI_JSON).unwrap();
    let cases: [(&str, &str, &Actions, ActionKind); 4] = [
        ("/v1/system/deliveries/{id}/retry", "retryDelivery", &NOTIFICATION_ACTIONS, ActionKind::Retry),
        ("/v1/system/deliveries/{id}/discard", "discardDelivery", &NOTIFICATION_ACTIONS, ActionKind::Discard),
        (
            "/v1/system/webhook-deliveries/{id}/retry",
            "retryWebhookDelivery",
            &WEBHOOK_ACTIONS,
            ActionKind::Retry,
        ),
        (
            "/v1/system/webhook-deliveries/{id}/discard",
            "discardWebhookDelivery",
            &WEBHOOK_ACTIONS,
            ActionKind::Discard,
        ),
    ];
    for (path, operation, actions, kind) in cases {
        let answer = &doc["paths"][path]["post"];
        assert_eq!(answer["operationId"], operation);
        let text = answer["responses"]["409"]["description"].as_str().unwrap();
        let rest = text.strip_prefix("The delivery is not ").unwrap_or_else(|| panic!("{operation}: {text}"));
        let (accepted, others) = rest.split_once(" (").unwrap_or_else(|| panic!("{operation}: {text}"));
        let others = others.split_once(')').unwrap_or_else(|| panic!("{operation}: {text}")).0;
        let expected: BTreeSet<String> =
            actions.accepted_statuses(kind).into_iter().map(String::from).collect();
        let all: BTreeSet<String> = actions.queue.statuses().into_iter().map(String::from).collect();
        assert_eq!(names(accepted), expected, "{operation}: the accepted statuses in {text:?}");
        let rest_expected: BTreeSet<String> = all.difference(&expected).cloned().collect();
        assert_eq!(names(others), rest_expected, "{operation}: the other statuses in {text:?}");
    }
}
