//! Liveness and readiness: `/healthz` never touches the database (it answers with the database
//! gone); `/readyz` checks the database, at most once per readiness interval per process, however
//! many probes arrive at once.

use std::time::Duration;

use axum::body::Body;
use axum::http::Request;
use clinic_core::db::connect_pool;
use clinic_http::correlation::CorrelationKeys;
use clinic_http::readiness::Readiness;
use clinic_http::{router, AppState};
use clinic_http::{ApiConfig, AuthConfig};
use futures::future::join_all;
use serde_json::Value;
use tower::ServiceExt;

fn state(url: &str, pool_size: usize, interval: Duration) -> AppState {
    AppState {
        pool: connect_pool(url, pool_size, None).expect("pool"),
        api: ApiConfig {
            auth: AuthConfig::Hs256 { secret: b"health-test-secret".to_vec() },
            cursor_key: b"health-test-cursor-key".to_vec(),
            correlation: CorrelationKeys::new(b"health-test-correlation-key", None),
            readiness: Readiness::new(interval),
            subject_claim: "sub".into(),
            webhook_egress: Default::default(),
            workspaces: Default::default(),
            webhook_key: Some(clinic_testkit::webhook_key()),
            unsubscribe: None,
            outbox_max_attempts: Some(10),
        },
    }
}

async fn get(state: &AppState, path: &str) -> (u16, Value) {
    let request = Request::builder().uri(path).body(Body::empty()).unwrap();
    let response = router(state.clone()).oneshot(request).await.unwrap();
    let status = response.status().as_u16();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

#[tokio::test]
async fn liveness_answers_without_a_database_and_readiness_does_not() {
    // A port nothing listens on: every connection attempt is refused.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let state = state(
        &format!("postgres://nobody@127.0.0.1:{closed}/nothing?sslmode=disable"),
        2,
        Duration::from_secs(300),
    );
    assert_eq!(get(&state, "/healthz").await, (200, serde_json::json!({"status": "ok"})));
    let (status, body) = get(&state, "/readyz").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["type"], "urn:clinic:problem:not-ready");
    assert_eq!(state.pool.status().size, 0, "no connection was ever opened");
}

/// How many times the pool's one connection was handed out again after its first checkout, this
/// look included.
async fn reuses(state: &AppState) -> usize {
    let conn = state.pool.get().await.unwrap();
    deadpool_postgres::Object::metrics(&conn).recycle_count
}

#[tokio::test]
async fn readiness_checks_the_database_at_most_once_per_interval() {
    let db = clinic_testkit::fresh_db().await;
    let url = db.url_for_role("clinic_app");

    let cached = state(&url, 4, Duration::from_secs(300));
    let answers = join_all((0..50).map(|_| get(&cached, "/readyz"))).await;
    assert!(answers.iter().all(|(status, body)| *status == 200 && body["database"] == "ok"), "{answers:?}");
    assert_eq!(cached.pool.status().size, 1, "one connection for 50 concurrent probes");
    assert_eq!(reuses(&cached).await, 1, "one check: handed out again only for this look");
    for _ in 0..20 {
        assert_eq!(get(&cached, "/healthz").await.0, 200);
    }
    assert_eq!(reuses(&cached).await, 2, "liveness took no connection (only the two looks)");

    // The same probes against an expired cache check every time: what the bound saves.
    let uncached = state(&url, 4, Duration::ZERO);
    for _ in 0..10 {
        assert_eq!(get(&uncached, "/readyz").await.0, 200);
    }
    assert_eq!(reuses(&uncached).await, 10, "ten checks: created once, handed out again 9 times + the look");
}
