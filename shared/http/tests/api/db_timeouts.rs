//! The app role's session timeouts (V8): `clinic_app` and its login members get statement, lock and
//! idle-in-transaction timeouts below the dispatcher's lease, and a session blocked on a row lock
//! gives up after `lock_timeout` instead of hanging.

use std::time::{Duration, Instant};

use clinic_core::dispatch::DispatchConfig;

const V8: &str = include_str!("../../../../migrations/V8__custody_and_timeouts.sql");

fn parse_ms(value: &str) -> u64 {
    let digits: String = value.chars().take_while(char::is_ascii_digit).collect();
    let n: u64 = digits.parse().unwrap();
    match &value[digits.len()..] {
        "ms" => n,
        "s" => n * 1000,
        "min" => n * 60_000,
        other => panic!("unit {other}"),
    }
}

#[tokio::test]
async fn the_app_role_has_timeouts_below_the_lease() {
    let db = clinic_testkit::fresh_db().await;
    let client = db.client().await;
    let row = client
        .query_one(
            "SELECT s.setconfig FROM pg_db_role_setting s JOIN pg_roles r ON r.oid = s.setrole \
             WHERE r.rolname = 'clinic_app' AND s.setdatabase = 0",
            &[],
        )
        .await
        .unwrap();
    let settings: Vec<String> = row.get(0);
    let lease = DispatchConfig::default().lease.as_millis() as u64;
    for name in ["statement_timeout", "lock_timeout", "idle_in_transaction_session_timeout"] {
        let value = settings
            .iter()
            .find_map(|s| s.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("{name} not set: {settings:?}"));
        let ms = parse_ms(value);
        assert!(ms > 0 && ms < lease, "{name} = {value} must be below the {lease} ms lease");
    }
}

#[tokio::test]
async fn a_login_member_of_clinic_app_gets_them_and_a_lock_wait_ends() {
    let db = clinic_testkit::fresh_db().await;
    let owner = db.client().await;
    let login = format!("i11_login_{}", ulid::Ulid::generate().to_string().to_lowercase());
    owner.batch_execute(&format!("CREATE ROLE {login} LOGIN IN ROLE clinic_app")).await.unwrap();
    // The migration's role part, as a deploy that granted the login first would run it.
    let role_part = &V8[V8.find("ALTER ROLE clinic_app SET").unwrap()..];
    owner.batch_execute(role_part).await.unwrap();

    let result = async {
        let url = db.url.replacen("postgres@", &format!("{login}@"), 1);
        let (app, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(connection);
        let shown: String = app.query_one("SHOW lock_timeout", &[]).await.unwrap().get(0);
        assert_eq!(shown, "3s");
        let shown: String = app.query_one("SHOW statement_timeout", &[]).await.unwrap().get(0);
        assert_eq!(shown, "10s");
        let shown: String =
            app.query_one("SHOW idle_in_transaction_session_timeout", &[]).await.unwrap().get(0);
        assert_eq!(shown, "15s");

        // The owner holds a lock; the app session gives up after lock_timeout instead of hanging.
        let mut locker = db.client().await;
        let tx = locker.transaction().await.unwrap();
        tx.batch_execute("LOCK TABLE workspaces IN ACCESS EXCLUSIVE MODE").await.unwrap();
        let began = Instant::now();
        let error = app.query("SELECT count(*) FROM workspaces", &[]).await.unwrap_err();
        let waited_lock = began.elapsed();
        tx.rollback().await.unwrap();
        assert_eq!(error.code(), Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE), "{error}");
        assert!(
            waited_lock >= Duration::from_secs(2) && waited_lock < Duration::from_secs(15),
            "{waited_lock:?}"
        );
    }
    .await;
    owner.batch_execute(&format!("DROP ROLE {login}")).await.unwrap();
    result
}

/// V8's role settings do not reach a session that takes the role with `-c role=clinic_app` (tests,
/// `clinic dev`); every pool session gets the timeouts from its startup options instead.
#[tokio::test]
async fn every_pool_session_has_the_timeouts_and_a_lock_wait_past_lock_timeout_fails() {
    let db = clinic_testkit::fresh_db().await;
    let pool = clinic_core::db::connect_pool(&db.url_for_role("clinic_app"), 2, None).unwrap();
    let app = pool.get().await.unwrap();
    let show = |name: &'static str| {
        let app = &app;
        async move { app.query_one(&format!("SHOW {name}"), &[]).await.unwrap().get::<_, String>(0) }
    };
    assert_eq!(show("statement_timeout").await, "10s");
    assert_eq!(show("lock_timeout").await, "3s");
    assert_eq!(show("idle_in_transaction_session_timeout").await, "15s");
    let role: String = app.query_one("SELECT current_user::text", &[]).await.unwrap().get(0);
    assert_eq!(role, "clinic_app");

    // The owner holds a lock longer than lock_timeout; the pool session gives up after ~3 s.
    let mut locker = db.client().await;
    let tx = locker.transaction().await.unwrap();
    tx.batch_execute("LOCK TABLE workspaces IN ACCESS EXCLUSIVE MODE").await.unwrap();
    let began = Instant::now();
    let error = app.query("SELECT count(*) FROM workspaces", &[]).await.unwrap_err();
    let waited = began.elapsed();
    tx.rollback().await.unwrap();
    assert_eq!(error.code(), Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE), "{error}");
    assert!(waited >= Duration::from_millis(2500) && waited < Duration::from_secs(15), "{waited:?}");
}

/// A URL's own options win over the defaults (`clinic chaos` sets its listeners' `lock_timeout`).
#[tokio::test]
async fn the_urls_own_options_override_the_defaults() {
    let db = clinic_testkit::fresh_db().await;
    let mut info = clinic_core::db::conninfo::ConnInfo::parse(&db.url_for_role("clinic_app")).unwrap();
    let options = format!("{} -c lock_timeout=1234", info.get("options").unwrap_or_default());
    info.set("options", &options);
    let url = info.to_string();
    let pool = clinic_core::db::connect_pool(&url, 1, None).unwrap();
    let app = pool.get().await.unwrap();
    let lock: String = app.query_one("SHOW lock_timeout", &[]).await.unwrap().get(0);
    assert_eq!(lock, "1234ms");
    let statement: String = app.query_one("SHOW statement_timeout", &[]).await.unwrap().get(0);
    assert_eq!(statement, "10s");
}
