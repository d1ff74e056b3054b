//! A list of nasty inputs (odd bodies, content types, path ids, headers, methods and query strings,
//! the bodies read from `fixtures/nasty_inputs.txt`) that must never produce a 5xx: every request
//! answers below 500, with a problem document when it is an error.

use axum::body::Body;
use axum::http::Request;
use clinic_testkit::app::{TestApp, TestResponse};
use serde_json::json;

use crate::hostile_input::{assert_problem, raw};

/// Every request of the list answers below 500, with a problem document when it is an error.
#[tokio::test]
async fn nasty_inputs_never_answer_5xx() {
    let app = TestApp::new().await;
    let token = app.workspace.admin.clone();
    let auth = format!("Bearer {token}");
    let practitioner = app.create_practitioner(&token).await;
    let patient = app.create_patient(&token, json!({"givenName": "Nasty", "familyName": "Inputs"})).await;
    let appointment =
        app.book(&token, &patient, &practitioner, "2032-01-01T09:00:00Z", "2032-01-01T09:30:00Z").await;
    let (pa, pr, ap) = (
        patient["id"].as_str().unwrap(),
        practitioner["id"].as_str().unwrap(),
        appointment["id"].as_str().unwrap(),
    );

    let json_bodies = nasty_bodies(pa, pr, ap);
    let mut checked = 0;
    for (path, body) in &json_bodies {
        for content_type in ["application/json", "application/merge-patch+json"] {
            let response = raw(
                &app,
                "POST",
                path,
                &[("authorization", &auth), ("content-type", content_type)],
                body.clone().into_bytes(),
            )
            .await;
            check_no_5xx(&response, &format!("POST {path} {}", &body[..body.len().min(80)]));
            checked += 1;
        }
    }
    // The same bodies on PATCH.
    for (_, body) in json_bodies.iter().take(22) {
        let response = raw(
            &app,
            "PATCH",
            &format!("/v1/patients/{pa}"),
            &[("authorization", &auth), ("content-type", "application/json")],
            body.clone().into_bytes(),
        )
        .await;
        check_no_5xx(&response, &format!("PATCH {}", &body[..body.len().min(80)]));
        checked += 1;
    }
    // Wrong content types, and empty bodies on creates.
    for content_type in [
        "text/plain",
        "application/xml",
        "multipart/form-data; boundary=x",
        "application/x-www-form-urlencoded",
        "json",
        "",
        "application/json; charset=latin1",
        "application/jsonx",
    ] {
        let response = raw(
            &app,
            "POST",
            "/v1/patients",
            &[("authorization", &auth), ("content-type", content_type)],
            br#"{"givenName":"a","familyName":"b"}"#.to_vec(),
        )
        .await;
        check_no_5xx(&response, &format!("content-type {content_type:?}"));
        checked += 1;
    }
    for path in [
        "/v1/patients",
        "/v1/practitioners",
        "/v1/appointments",
        &format!("/v1/appointments/{ap}/reschedule"),
    ] {
        for headers in [
            vec![("authorization", auth.as_str())],
            vec![("authorization", auth.as_str()), ("content-type", "application/json")],
        ] {
            let response = raw(&app, "POST", path, &headers, Vec::new()).await;
            check_no_5xx(&response, &format!("empty body {path}"));
            assert_eq!(response.status, 422, "an empty body reads as {{}}: required fields are named");
            checked += 1;
        }
    }
    // Path ids that are not ULIDs (or overflow one), on every route with an id.
    let bad_ids = [
        "not-a-ulid",
        "8ZZZZZZZZZZZZZZZZZZZZZZZZZ",
        "7ZZZZZZZZZZZZZZZZZZZZZZZZZ",
        "00000000000000000000000000",
        "01ARZ3NDEKTSV4RRFFQ69G5FAVX",
        "01ARZ3NDEKTSV4RRFFQ69G5FA",
        "%00",
        "%FF%FE",
        "%27%20OR%201%3D1--",
        "..%2F..%2Fetc%2Fpasswd",
        "%F0%9F%A6%B7",
        "550e8400-e29b-41d4-a716-446655440000",
        &"9".repeat(5000),
    ];
    let templates = [
        ("GET", "/v1/patients/{}"),
        ("PATCH", "/v1/patients/{}"),
        ("DELETE", "/v1/patients/{}"),
        ("GET", "/v1/patients/{}/timeline"),
        ("GET", "/v1/practitioners/{}"),
        ("GET", "/v1/practitioners/{}/timeline"),
        ("GET", "/v1/appointments/{}"),
        ("POST", "/v1/appointments/{}/reschedule"),
        ("POST", "/v1/appointments/{}/cancel"),
        ("POST", "/v1/appointments/{}/complete"),
        ("GET", "/v1/appointments/{}/timeline"),
    ];
    for id in bad_ids {
        for (method, template) in templates {
            let path = template.replace("{}", id);
            let body = (method != "GET" && method != "DELETE").then(|| json!({"givenName": "x"}));
            let response = app.call(method, &path, Some(&token), body).await;
            check_no_5xx(&response, &format!("{method} {}", &path[..path.len().min(80)]));
            assert!(
                matches!(response.status.as_u16(), 400 | 404 | 422),
                "{method} {path}: {}",
                response.status
            );
            checked += 1;
        }
    }
    // Odd headers: idempotency keys and correlation ids that are not what they should be.
    for (name, value) in [
        ("idempotency-key", &b"\xff\xfe"[..]),
        ("idempotency-key", b"has space"),
        ("idempotency-key", b"'; DROP TABLE idempotency_keys;--"),
        ("x-correlation-id", b"\xff\xfe"),
        ("x-correlation-id", b"'; DROP TABLE events;--"),
        ("x-correlation-id", b"00000000-0000-0000-0000-000000000000"),
    ] {
        let request = Request::builder()
            .method("POST")
            .uri("/v1/practitioners")
            .header("authorization", auth.as_str())
            .header("content-type", "application/json")
            .header(name, axum::http::HeaderValue::from_bytes(value).unwrap())
            .body(Body::from(r#"{"displayName":"Header probe"}"#))
            .unwrap();
        let response = app.send(request).await;
        check_no_5xx(&response, &format!("{name}: {}", String::from_utf8_lossy(value)));
        checked += 1;
    }
    let long_key = "k".repeat(256);
    let response = app
        .call_with(
            "POST",
            "/v1/practitioners",
            Some(&token),
            Some(json!({"displayName": "x"})),
            &[("idempotency-key", &long_key)],
        )
        .await;
    assert_problem(&response, 400, "256-character idempotency key");
    // Odd methods and query strings.
    for (method, path) in [
        ("PUT", "/v1/patients".to_string()),
        ("TRACE", format!("/v1/patients/{pa}")),
        ("OPTIONS", "/v1/appointments".to_string()),
        ("GET", format!("/v1/patients/{pa}/timeline?limit=1&limit=2&cursor=&cursor=x")),
        ("GET", "/v1/notifications?%ZZ=%ZZ&limit=%ZZ".to_string()),
        ("GET", format!("/v1/appointments/{ap}/timeline?{}", "a=b&".repeat(2000))),
        ("GET", "/v1//patients".to_string()),
        ("GET", "/v1/patients/".to_string()),
    ] {
        let response = app.call(method, &path, Some(&token), None).await;
        check_no_5xx(&response, &format!("{method} {}", &path[..path.len().min(80)]));
        checked += 1;
    }
    assert!(checked > 150, "{checked} requests checked");
    // Whatever was accepted (a leap second may be) reads back without a 5xx.
    let conn = app.db.pool.get().await.unwrap();
    for row in conn.query("SELECT id FROM appointments", &[]).await.unwrap() {
        let id = ulid::Ulid::from(row.get::<_, uuid::Uuid>(0));
        let response = app.call("GET", &format!("/v1/appointments/{id}"), Some(&token), None).await;
        assert_eq!(response.status, 200, "{}", response.text);
    }
}

/// The request bodies of `fixtures/nasty_inputs.txt` (its header describes the format), in file order,
/// with the ids filled in and the generated bodies built.
fn nasty_bodies(pa: &str, pr: &str, ap: &str) -> Vec<(String, String)> {
    let fill = |text: &str| text.replace("{pa}", pa).replace("{pr}", pr).replace("{ap}", ap);
    include_str!("../fixtures/nasty_inputs.txt")
        .lines()
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| {
            let (path, body) = line.split_once(' ').expect("a fixture line is `<path> <body>`");
            let body = match body {
                "{deep_array}" => format!("{}{}", "[".repeat(30_000), "]".repeat(30_000)),
                "{deep_object}" => format!("{}1{}", "{\"a\":".repeat(10_000), "}".repeat(10_000)),
                "{long_key}" => format!(r#"{{"{}":1,"givenName":"a","familyName":"b"}}"#, "k".repeat(10_000)),
                body => fill(body),
            };
            (fill(path), body)
        })
        .collect()
}

fn check_no_5xx(response: &TestResponse, context: &str) {
    assert!(response.status.as_u16() < 500, "{context}: {} {}", response.status, response.text);
    if response.status.is_client_error() {
        assert_eq!(
            response.header("content-type"),
            Some("application/problem+json"),
            "{context}: {}",
            response.text
        );
        assert!(
            response.body["type"].as_str().is_some_and(|t| t.starts_with("urn:clinic:problem:")),
            "{context}"
        );
    }
    assert!(response.header("x-correlation-id").is_some(), "{context}");
}
