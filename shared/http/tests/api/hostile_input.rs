//! Hostile input: oversized and malformed bodies, SQL meta-characters and Unicode edge cases, forged
//! tokens and tampered cursors (the list of nasty inputs that must never produce a 5xx is in
//! [`crate::nasty_inputs`]).
//!
//! Every rejection is a problem document (`application/problem+json`) with a 4xx status, and nothing
//! the caller sent is echoed back in it.

use axum::body::Body;
use axum::http::Request;
use base64::Engine;
use clinic_http::auth::Role;
use clinic_testkit::app::{TestApp, TestResponse, TEST_SECRET};
use serde_json::{json, Value};

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::URL_SAFE_NO_PAD;

pub(crate) fn assert_problem(response: &TestResponse, status: u16, context: &str) {
    assert_eq!(response.status.as_u16(), status, "{context}: {}", response.text);
    assert_eq!(response.header("content-type"), Some("application/problem+json"), "{context}");
    assert_eq!(response.body["status"], status, "{context}: {}", response.text);
}

/// Sends raw bytes with the given headers.
pub(crate) async fn raw(
    app: &TestApp,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> TestResponse {
    let mut builder = Request::builder().method(method).uri(path);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    app.send(builder.body(Body::from(body)).unwrap()).await
}

#[tokio::test]
async fn a_one_mebibyte_body_answers_413_and_writes_nothing() {
    let app = TestApp::new().await;
    let auth = format!("Bearer {}", app.workspace.staff);
    let huge = format!(r#"{{"givenName":"{}","familyName":"X"}}"#, "a".repeat(1024 * 1024));
    let length = huge.len().to_string();
    // Declared length (rejected before reading) and no declared length (rejected while reading).
    let declared = raw(
        &app,
        "POST",
        "/v1/patients",
        &[("authorization", &auth), ("content-type", "application/json"), ("content-length", &length)],
        huge.clone().into_bytes(),
    )
    .await;
    assert_problem(&declared, 413, "declared length");
    let streamed = raw(
        &app,
        "POST",
        "/v1/patients",
        &[("authorization", &auth), ("content-type", "application/json")],
        huge.into_bytes(),
    )
    .await;
    assert_problem(&streamed, 413, "undeclared length");
    assert!(streamed.text.len() < 1024, "the body is not echoed");
    assert_eq!(app.count("SELECT 1 FROM patients").await, 0);
    assert_eq!(app.count("SELECT 1 FROM events").await, 0);
}

#[tokio::test]
async fn malformed_json_answers_400() {
    let app = TestApp::new().await;
    let auth = format!("Bearer {}", app.workspace.staff);
    let bodies: &[&[u8]] = &[
        b"{",
        b"{\"givenName\":}",
        b"{\"givenName\":\"a\",}",
        b"{\"givenName\":\"a\"} trailing",
        b"[1, 2",
        b"\xff\xfe{}",
        b"{\"givenName\":\"\xc3\x28\"}",
        b"{\"givenName\":\"\\ud800\",\"familyName\":\"x\"}",
        b"{\"givenName\":\"a\x00b\"}",
        b"'single quotes'",
        b"NaN",
    ];
    for body in bodies {
        let response = raw(
            &app,
            "POST",
            "/v1/patients",
            &[("authorization", &auth), ("content-type", "application/json")],
            body.to_vec(),
        )
        .await;
        assert_problem(&response, 400, &String::from_utf8_lossy(body));
    }
    assert_eq!(app.count("SELECT 1 FROM events").await, 0);
}

/// Text that must survive a round trip through the API and the database byte for byte.
fn nasty_strings() -> Vec<String> {
    let mut values: Vec<String> = [
        "O'Brien",
        "\"double\" and 'single' quotes",
        "Robert'); DROP TABLE patients;--",
        "'; DROP TABLE events; --",
        "1' OR '1'='1",
        "%_ LIKE wildcards \\ backslash \\\\",
        "$1 $$dollar$$ E'\\x00' -- /* comment */ ;",
        "<script>alert(1)</script>&amp;",
        "👩\u{200D}⚕️ 🦷🩺 emoji with ZWJ",
        "\u{200F}שלום\u{200E} RTL marks",
        "\u{202E}evil override\u{202C}",
        "e\u{301}\u{302}\u{303} combining a\u{30A}",
        "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𠜎𠜱 four-byte",
        "\u{FEFF}BOM and zero\u{200B}width",
        "tab\tnew\nline\r\ncr \u{1} \u{1F} \u{7F} controls",
        "  leading and trailing spaces  ",
        "ǅungla İstanbul ß ﬁ",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // Long but allowed: exactly 200 characters, each four bytes in UTF-8.
    values.push("𝕬".repeat(200));
    values
}

#[tokio::test]
async fn meta_characters_and_unicode_are_stored_and_returned_verbatim() {
    let app = TestApp::new().await;
    let token = app.workspace.staff.clone();
    let practitioner = app.create_practitioner(&token).await;
    for (index, value) in nasty_strings().into_iter().enumerate() {
        let email = format!("o'hara+{index};--%_$@exam'ple.test");
        let created = app
            .call(
                "POST",
                "/v1/patients",
                Some(&token),
                Some(json!({"givenName": value, "familyName": value, "email": email})),
            )
            .await;
        assert_eq!(created.status, 201, "{value:?}: {}", created.text);
        assert_eq!(created.body["givenName"], value.as_str());
        let id = created.body["id"].as_str().unwrap().to_owned();
        let read = app.call("GET", &format!("/v1/patients/{id}"), Some(&token), None).await;
        assert_eq!(read.status, 200);
        assert_eq!(read.body["givenName"], value.as_str(), "GET returns it verbatim");
        assert_eq!(read.body["familyName"], value.as_str());
        assert_eq!(read.body["email"], email.as_str());
        let patched = app
            .call("PATCH", &format!("/v1/patients/{id}"), Some(&token), Some(json!({"familyName": value})))
            .await;
        assert_eq!(patched.status, 200, "{}", patched.text);
        assert_eq!(patched.body["familyName"], value.as_str());

        let practitioner_created = app
            .call(
                "POST",
                "/v1/practitioners",
                Some(&token),
                Some(json!({"displayName": value, "specialty": value})),
            )
            .await;
        assert_eq!(practitioner_created.status, 201, "{}", practitioner_created.text);
        assert_eq!(practitioner_created.body["specialty"], value.as_str());

        let hour = index % 20;
        let booked = app
            .call(
                "POST",
                "/v1/appointments",
                Some(&token),
                Some(json!({
                    "patientId": id, "practitionerId": practitioner["id"],
                    "startsAt": format!("2031-01-01T{hour:02}:00:00Z"),
                    "endsAt": format!("2031-01-01T{hour:02}:30:00Z"),
                    "reason": value,
                })),
            )
            .await;
        assert_eq!(booked.status, 201, "{}", booked.text);
        assert_eq!(booked.body["reason"], value.as_str());
        let appointment = booked.body["id"].as_str().unwrap();
        let cancelled = app
            .call(
                "POST",
                &format!("/v1/appointments/{appointment}/cancel"),
                Some(&token),
                Some(json!({"reason": value})),
            )
            .await;
        assert_eq!(cancelled.status, 200, "{}", cancelled.text);
        let read = app.call("GET", &format!("/v1/appointments/{appointment}"), Some(&token), None).await;
        assert_eq!(read.body["reason"], value.as_str());
        assert_eq!(read.body["cancellationReason"], value.as_str());
    }
    // The longest allowed reason (2000 four-byte characters) also round-trips.
    let reason = "🦷".repeat(2000);
    let patient = app.create_patient(&token, json!({"givenName": "Long", "familyName": "Reason"})).await;
    let booked = app
        .call(
            "POST",
            "/v1/appointments",
            Some(&token),
            Some(json!({"patientId": patient["id"], "practitionerId": practitioner["id"],
                "startsAt": "2031-02-01T09:00:00Z", "endsAt": "2031-02-01T09:30:00Z", "reason": reason})),
        )
        .await;
    assert_eq!(booked.status, 201, "{}", booked.text);
    let id = booked.body["id"].as_str().unwrap();
    let read = app.call("GET", &format!("/v1/appointments/{id}"), Some(&token), None).await;
    assert_eq!(read.body["reason"], reason.as_str());
    // One character more is rejected, naming the field.
    let too_long = app
        .call(
            "POST",
            "/v1/patients",
            Some(&token),
            Some(json!({"givenName": "𝕬".repeat(201), "familyName": "X"})),
        )
        .await;
    assert_problem(&too_long, 422, "201 characters");
    assert_eq!(too_long.body["field"], "givenName");
    // The tables the statements above were aimed at are all still there.
    for table in ["patients", "events", "event_outbox", "appointments"] {
        assert!(app.count(&format!("SELECT 1 FROM {table}")).await > 0, "{table} survived");
    }
}

fn sign(header: &Value, claims: &Value, secret: &[u8]) -> String {
    use hmac::Mac;
    let signing_input = format!("{}.{}", B64.encode(header.to_string()), B64.encode(claims.to_string()));
    let signature = match header["alg"].as_str() {
        Some("HS512") => {
            let mut mac = hmac::Hmac::<sha2::Sha512>::new_from_slice(secret).unwrap();
            mac.update(signing_input.as_bytes());
            mac.finalize().into_bytes().to_vec()
        }
        _ => {
            let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret).unwrap();
            mac.update(signing_input.as_bytes());
            mac.finalize().into_bytes().to_vec()
        }
    };
    format!("{signing_input}.{}", B64.encode(signature))
}

#[tokio::test]
async fn forged_expired_unsigned_and_foreign_tokens_answer_401() {
    let app = TestApp::new().await;
    let now = chrono::Utc::now().timestamp();
    let workspace = app.workspace.id.to_string();
    let sub = app.workspace.admin_id.to_string();
    let (iss, aud) = (clinic_http::auth::LOCAL_ISSUER, clinic_http::auth::LOCAL_AUDIENCE);
    let claims = |exp: i64| {
        json!({"sub": sub, "workspace_id": workspace, "role": "admin", "iat": now, "exp": exp,
               "iss": iss, "aud": aud})
    };
    let hs256 = json!({"alg": "HS256", "typ": "JWT"});
    let secret = TEST_SECRET.as_bytes();

    // Sanity: the hand-rolled signer makes tokens the server accepts.
    let good = sign(&hs256, &claims(now + 600), secret);
    assert_eq!(app.call("GET", "/v1/notifications", Some(&good), None).await.status, 200);

    let valid = app.workspace.admin.clone();
    let mut parts: Vec<String> = valid.split('.').map(str::to_owned).collect();
    let tampered_payload = {
        let mut payload: Value = serde_json::from_slice(&B64.decode(&parts[1]).unwrap()).unwrap();
        payload["workspace_id"] = json!(ulid::Ulid::generate().to_string());
        parts[1] = B64.encode(payload.to_string());
        parts.join(".")
    };
    let flipped_signature = {
        let mut token = valid.clone().into_bytes();
        let last = token.len() - 2;
        token[last] = if token[last] == b'A' { b'B' } else { b'A' };
        String::from_utf8(token).unwrap()
    };
    let unsigned = format!(
        "{}.{}.",
        B64.encode(json!({"alg": "none", "typ": "JWT"}).to_string()),
        B64.encode(claims(now + 600).to_string())
    );
    let unsigned_with_signature = format!("{unsigned}{}", valid.rsplit('.').next().unwrap());
    let no_exp = sign(&hs256, &json!({"sub": sub, "workspace_id": workspace, "role": "admin"}), secret);
    let bad_role = sign(
        &hs256,
        &json!({"sub": sub, "workspace_id": workspace, "role": "root", "exp": now + 600, "iss": iss, "aud": aud}),
        secret,
    );
    let bad_workspace = sign(
        &hs256,
        &json!({"sub": sub, "workspace_id": "'; DROP TABLE events;--", "role": "admin", "exp": now + 600,
                "iss": iss, "aud": aud}),
        secret,
    );
    let forged: Vec<(&str, String)> = vec![
        ("garbage", "not.a.token".into()),
        ("empty", String::new()),
        ("three dots", "...".into()),
        ("tampered payload", tampered_payload),
        ("flipped signature", flipped_signature),
        ("expired", sign(&hs256, &claims(now - 3600), secret)),
        ("not yet valid", {
            let mut early = claims(now + 600);
            early["nbf"] = json!(now + 86_400);
            sign(&hs256, &early, secret)
        }),
        ("another issuer", {
            let mut other = claims(now + 600);
            other["iss"] = json!("https://issuer.example");
            sign(&hs256, &other, secret)
        }),
        ("another audience", {
            let mut other = claims(now + 600);
            other["aud"] = json!("another-api");
            sign(&hs256, &other, secret)
        }),
        ("alg none", unsigned),
        ("alg none with a signature", unsigned_with_signature),
        (
            "HS512 with the right secret",
            sign(&json!({"alg": "HS512", "typ": "JWT"}), &claims(now + 600), secret),
        ),
        ("wrong secret", sign(&hs256, &claims(now + 600), b"some-other-secret")),
        ("no exp", no_exp),
        ("unknown role", bad_role),
        ("workspace not a ULID", bad_workspace),
        ("huge", "a".repeat(16 * 1024)),
    ];
    let events_before = app.count("SELECT 1 FROM events").await;
    for (name, token) in &forged {
        for (method, path, body) in [
            ("GET", "/v1/notifications", None),
            ("POST", "/v1/patients", Some(json!({"givenName": "A", "familyName": "B"}))),
            ("GET", "/healthz", None),
        ] {
            let response = app.call(method, path, Some(token), body).await;
            assert_problem(&response, 401, &format!("{name}: {method} {path}"));
        }
    }
    // Odd Authorization headers: other schemes, bytes that are not text.
    for header in [&b"Basic YWRtaW46YWRtaW4="[..], b"Bearer", b"bearer ", b"Bearer \xff\xfe"] {
        let request = Request::builder()
            .uri("/v1/notifications")
            .header("authorization", axum::http::HeaderValue::from_bytes(header).unwrap())
            .body(Body::empty())
            .unwrap();
        let response = app.send(request).await;
        assert_problem(&response, 401, &String::from_utf8_lossy(header));
    }
    assert_eq!(app.count("SELECT 1 FROM events").await, events_before, "nothing was written");
    // A token of a role that exists but was issued for another workspace reads nothing of this one.
    let stranger = app.add_workspace().await.admin;
    let listed = app.call("GET", "/v1/notifications", Some(&stranger), None).await;
    assert_eq!(listed.status, 200);
    assert_eq!(listed.body["items"], json!([]));
    // One for a workspace that does not exist is refused (DESIGN.md §6c).
    let ghost = clinic_testkit::app::token(
        clinic_core::ids::WorkspaceId::generate(),
        ulid::Ulid::generate(),
        Role::Admin,
    );
    let refused = app.call("GET", "/v1/notifications", Some(&ghost), None).await;
    assert_problem(&refused, 403, "unknown workspace");
}

#[tokio::test]
async fn tampered_cursors_and_out_of_range_limits_answer_400() {
    let app = TestApp::new().await;
    let token = app.workspace.staff.clone();
    let patient = app.create_patient(&token, json!({"givenName": "Cursor", "familyName": "Probe"})).await;
    let other = app.create_patient(&token, json!({"givenName": "Other", "familyName": "Probe"})).await;
    let (id, other_id) = (patient["id"].as_str().unwrap(), other["id"].as_str().unwrap());
    for name in ["A", "B", "C"] {
        for pid in [id, other_id] {
            let r = app
                .call("PATCH", &format!("/v1/patients/{pid}"), Some(&token), Some(json!({"givenName": name})))
                .await;
            assert_eq!(r.status, 200);
        }
    }
    let page = app.call("GET", &format!("/v1/patients/{id}/timeline?limit=1"), Some(&token), None).await;
    let cursor = page.body["nextCursor"].as_str().expect("a next cursor").to_owned();
    let other_page =
        app.call("GET", &format!("/v1/patients/{other_id}/timeline?limit=1"), Some(&token), None).await;
    let other_cursor = other_page.body["nextCursor"].as_str().unwrap().to_owned();
    let ok = app
        .call("GET", &format!("/v1/patients/{id}/timeline?limit=1&cursor={cursor}"), Some(&token), None)
        .await;
    assert_eq!(ok.status, 200, "the issued cursor works");

    let mut flipped = cursor.clone().into_bytes();
    flipped[0] = if flipped[0] == b'A' { b'B' } else { b'A' };
    let tampered = [
        String::from_utf8(flipped).unwrap(),
        cursor[..cursor.len() - 1].to_owned(),
        format!("{cursor}A"),
        other_cursor.clone(),
        String::new(),
        "%00".into(),
        "%27%3B%20DROP%20TABLE%20events%3B--".into(),
        B64.encode(b"01ARZ3NDEKTSV4RRFFQ69G5FAV"),
        "A".repeat(4096),
        "%F0%9F%92%A9".into(),
    ];
    for bad in &tampered {
        let response =
            app.call("GET", &format!("/v1/patients/{id}/timeline?cursor={bad}"), Some(&token), None).await;
        assert_problem(&response, 400, bad);
        assert_eq!(response.body["field"], "cursor");
    }
    // A timeline cursor is no notifications cursor.
    let response = app.call("GET", &format!("/v1/notifications?cursor={cursor}"), Some(&token), None).await;
    assert_problem(&response, 400, "cross-scope cursor");

    for limit in
        ["0", "-1", "101", "1000000", "99999999999999999999999", "1.5", "1e2", "abc", "", "%00", "+5%20"]
    {
        for path in [format!("/v1/patients/{id}/timeline"), "/v1/notifications".to_string()] {
            let response = app.call("GET", &format!("{path}?limit={limit}"), Some(&token), None).await;
            assert_problem(&response, 400, &format!("{path} limit={limit}"));
            assert_eq!(response.body["field"], "limit");
        }
    }
    for limit in ["1", "100"] {
        let response =
            app.call("GET", &format!("/v1/patients/{id}/timeline?limit={limit}"), Some(&token), None).await;
        assert_eq!(response.status, 200, "limit={limit}");
    }
}
