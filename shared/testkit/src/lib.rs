//! Test and drill helpers: a fresh PostgreSQL database per test ([`fresh_db`]; [`scratch_db`] for
//! `clinic bench`'s sections), test logging, [`free_port`]; tokens and a router in [`app`], seeds
//! in [`seed`]. Not a dependency of any Lambda.
//!
//! Invariants:
//! - Every test that touches the database gets its own database, `clinic_test_<ulid>`, copied from a
//!   template that holds every migration. Real PostgreSQL, never a mock; no test sees another's rows.
//! - The server is `DATABASE_URL` when set, else `postgres://postgres@127.0.0.1:5432/postgres`
//!   (`tests/run` always sets `DATABASE_URL`). The role needs `CREATEDB`. TLS follows libpq's
//!   `sslmode` (see `clinic_core::db::tls`); URLs are edited with `clinic_core::db::conninfo`.
//! - The template is named by the checksum of all migration SQL (`clinic_template_<hash>`), so test
//!   processes built from the same migrations share it (nextest runs binaries in parallel) and a
//!   changed migration list gets a new one. It is built once per process and server at most, under an advisory
//!   lock taken in the admin database (one lock for the whole server), under a temporary name, and
//!   renamed only when fully migrated: a crash mid-build never leaves a template that looks finished.
//!   Templates of other migration lists are left alone (another checkout may be using them).
//! - A [`TestDb`] drops its database `WITH (FORCE)` when it goes out of scope, from its own thread
//!   and runtime, so dropping works inside or outside a tokio runtime and never panics. Set
//!   `TEST_KEEP_DB=1` to keep the databases for inspection. Databases leaked by a killed process are
//!   swept once they are [`STALE_AFTER`] old (the ULID in the name carries the creation time).
//! - Logging: one global subscriber per test process, installed by [`init_test_logging`] or
//!   [`capture_logs`], whichever comes first. It always records `clinic*` targets (TRACE) and other
//!   targets (INFO) as JSON into an in-memory buffer once a test has called [`capture_logs`], and
//!   prints to the test writer only when `TEST_LOG=1` (filtered by `RUST_LOG` when set).
//! - SQL: `CREATE`/`DROP`/`ALTER DATABASE` name a database, which no statement parameter can do, so
//!   those are built with `format!` around `quote_ident`; every other statement is a literal.

pub mod app;
mod logging;
pub mod seed;
pub mod test_env;

pub use logging::{capture_logs, init_test_logging, CapturedLogs};

use std::time::{Duration, SystemTime};

use clinic_core::db::{self, redact, with_database, with_role, MIGRATIONS};
use sha2::{Digest, Sha256};
use ulid::Ulid;

/// The server used when `DATABASE_URL` is not set (libpq's default `sslmode=prefer`: a local Debian
/// cluster's self-signed certificate encrypts without being verified, as with `psql`).
/// The webhook secret key of every test process (tests only; a deployment's key is a file outside
/// the database, `clinic_core::webhooks::secret_box`).
pub fn webhook_key() -> clinic_core::webhooks::secret_box::WebhookKey {
    clinic_core::webhooks::secret_box::WebhookKey::from_bytes([0x5a; 32])
}

/// A file holding [`webhook_key`], for the binaries a test runs (`CLINIC_WEBHOOK_KEY_FILE`), so they
/// seal and open like the test's own router and senders (written once per test process).
pub fn webhook_key_file() -> std::path::PathBuf {
    static FILE: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    FILE.get_or_init(|| {
        let path = std::env::temp_dir().join(format!("clinic-test-webhook-key-{}", std::process::id()));
        std::fs::write(&path, [0x5a; 32]).expect("writing the test webhook key");
        path
    })
    .clone()
}

pub const DEFAULT_ADMIN_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// Test databases older than this are assumed leaked by a killed test process and are dropped.
pub const STALE_AFTER: Duration = Duration::from_secs(6 * 60 * 60);

/// Connections in each test database's pool.
const POOL_SIZE: usize = 8;

/// Advisory lock key (in the admin database) serialising template builds across processes.
const TEMPLATE_LOCK_KEY: i64 = 0x0063_6c69_6e74_706c; // "clintpl"

const TEST_DB_PREFIX: &str = "clinic_test_";

/// A TCP port of 127.0.0.1 that was free a moment ago (the OS picks it; bind it soon, another process
/// may take it). The one copy for tests and drills: emulators, private clusters, proxies.
pub fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The admin connection string: `DATABASE_URL` when set and not blank, else [`DEFAULT_ADMIN_URL`].
pub fn admin_url() -> String {
    test_env::var("DATABASE_URL").unwrap_or_else(|| DEFAULT_ADMIN_URL.to_owned())
}

fn ca_file() -> Option<String> {
    test_env::var("CLINIC_DB_CA_FILE")
}

/// Opens one connection to the admin database (the one `DATABASE_URL` names).
pub async fn admin_client() -> tokio_postgres::Client {
    connect_admin(&admin_url()).await.unwrap_or_else(|error| panic!("{error}"))
}

async fn connect_admin(url: &str) -> Result<tokio_postgres::Client, String> {
    db::connect_single(url, ca_file().as_deref(), None).await.map_err(|error| {
        format!(
            "testkit: cannot connect to PostgreSQL at {} ({error}); run the tests with `tests/run`, \
             or set DATABASE_URL to a server where this role may CREATE DATABASE",
            redact(url)
        )
    })
}

/// A database of its own for one test, migrated, dropped when this value is dropped.
pub struct TestDb {
    /// A pool (8 connections) on the test database, as the connecting (super)user.
    pub pool: deadpool_postgres::Pool,
    /// The test database's connection string.
    pub url: String,
    /// The test database's name, `clinic_test_<ulid>`.
    pub name: String,
    admin_url: String,
}

impl std::fmt::Debug for TestDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestDb").field("name", &self.name).finish_non_exhaustive()
    }
}

/// Creates a fresh, fully migrated database (a copy of the template) on the `DATABASE_URL` server
/// and a pool on it.
///
/// Panics with a clear message when PostgreSQL is unreachable; this is test-only code.
pub async fn fresh_db() -> TestDb {
    scratch_db(&admin_url()).await.unwrap_or_else(|error| panic!("{error}"))
}

/// [`fresh_db`] on the server `admin_url` names, with errors as values: the scratch database of
/// `clinic bench` as well as of every test (same template, same drop on `Drop`).
pub async fn scratch_db(admin_url: &str) -> Result<TestDb, String> {
    let template = template(admin_url).await?;
    let name = format!("{TEST_DB_PREFIX}{}", Ulid::generate().to_string().to_lowercase());
    let admin = connect_admin(admin_url).await?;
    admin
        .batch_execute(&format!("CREATE DATABASE {} TEMPLATE {}", quote_ident(&name), quote_ident(&template)))
        .await
        .map_err(|error| {
            format!("testkit: CREATE DATABASE {name} TEMPLATE {template}: {}", describe(&error))
        })?;
    drop(admin);
    let url = with_database(admin_url, &name);
    let pool = db::connect_pool(&url, POOL_SIZE, ca_file().as_deref())
        .map_err(|error| format!("testkit: pool for {name}: {error}"))?;
    Ok(TestDb { pool, url, name, admin_url: admin_url.to_owned() })
}

impl TestDb {
    /// A pooled connection to the test database.
    pub async fn client(&self) -> db::Conn {
        self.pool.get().await.unwrap_or_else(|error| panic!("testkit: connection to {}: {error}", self.name))
    }

    /// The test database's URL with `options=-c role=<role>`, so every session runs as `role` (for
    /// example the restricted `clinic_app`). The connecting user must be allowed to `SET ROLE` to it
    /// (the superuser is).
    pub fn url_for_role(&self, role: &str) -> String {
        with_role(&self.url, role)
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        self.pool.close();
        if env_flag("TEST_KEEP_DB") {
            eprintln!("testkit: keeping database {} (TEST_KEEP_DB=1)", self.name);
            return;
        }
        let admin_url = self.admin_url.clone();
        let name = self.name.clone();
        let (done, finished) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new().name("testkit-drop-db".into()).spawn(move || {
            let _ = done.send(drop_database_blocking(&admin_url, &name));
        });
        let outcome = match spawned {
            Ok(_) => finished.recv_timeout(Duration::from_secs(30)).map_err(|e| e.to_string()),
            Err(error) => Err(error.to_string()),
        };
        match outcome {
            Ok(Ok(())) => {}
            Ok(Err(error)) | Err(error) => {
                eprintln!("testkit: could not drop database {}: {error}", self.name);
            }
        }
    }
}

/// Drops `name` on its own current-thread runtime (callable from any thread, in or out of tokio).
fn drop_database_blocking(admin_url: &str, name: &str) -> Result<(), String> {
    let runtime =
        tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let admin =
            db::connect_single(admin_url, ca_file().as_deref(), None).await.map_err(|e| e.to_string())?;
        admin
            .batch_execute(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", quote_ident(name)))
            .await
            .map_err(|e| describe(&e))
    })
}

/// The template's name: `clinic_template_` and the first 16 hex digits of a SHA-256 over every
/// migration's version, name and SQL.
pub fn template_name() -> String {
    let mut hasher = Sha256::new();
    for migration in MIGRATIONS {
        hasher.update(migration.version.to_be_bytes());
        hasher.update(migration.name.as_bytes());
        hasher.update([0]);
        hasher.update(migration.sql.as_bytes());
        hasher.update([0]);
    }
    let digest = hasher.finalize();
    let hex: String = digest.iter().take(8).map(|byte| format!("{byte:02x}")).collect();
    format!("clinic_template_{hex}")
}

/// The admin URLs (servers) whose template this process has checked or built.
static TEMPLATES: tokio::sync::Mutex<Vec<String>> = tokio::sync::Mutex::const_new(Vec::new());

/// The migrated template database on the `admin_url` server, built by the first caller in this
/// process if no process has.
async fn template(admin_url: &str) -> Result<String, String> {
    let name = template_name();
    let mut ready = TEMPLATES.lock().await;
    if ready.iter().any(|url| url == admin_url) {
        return Ok(name);
    }
    let admin = connect_admin(admin_url).await?;
    admin
        .execute("SELECT pg_advisory_lock($1)", &[&TEMPLATE_LOCK_KEY])
        .await
        .map_err(|e| format!("testkit: template lock: {}", describe(&e)))?;
    let built = ensure_template(&admin, admin_url, &name).await;
    let _ = admin.execute("SELECT pg_advisory_unlock($1)", &[&TEMPLATE_LOCK_KEY]).await;
    built.map_err(|error| format!("testkit: building template database {name}: {error}"))?;
    ready.push(admin_url.to_owned());
    Ok(name)
}

/// Under the template lock: sweeps leaked test databases, then builds `name` unless it exists.
async fn ensure_template(admin: &tokio_postgres::Client, admin_url: &str, name: &str) -> Result<(), String> {
    sweep_stale_databases(admin).await;
    let exists = admin
        .query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&name])
        .await
        .map_err(|e| describe(&e))?
        .is_some();
    if exists {
        return Ok(());
    }
    let building = format!("{name}_building");
    let run = |sql: String| async move { admin.batch_execute(&sql).await.map_err(|e| describe(&e)) };
    run(format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", quote_ident(&building))).await?;
    run(format!("CREATE DATABASE {}", quote_ident(&building))).await?;

    let mut client = db::connect_single(&with_database(admin_url, &building), ca_file().as_deref(), None)
        .await
        .map_err(|e| e.to_string())?;
    db::migrate(&mut client).await.map_err(|e| e.to_string())?;
    drop(client);

    // The migration connection closes asynchronously; renaming waits until it is gone.
    let rename = format!("ALTER DATABASE {} RENAME TO {}", quote_ident(&building), quote_ident(name));
    let mut attempts = 0;
    loop {
        match admin.batch_execute(&rename).await {
            Ok(()) => return Ok(()),
            Err(error)
                if attempts < 100
                    && error.code() == Some(&tokio_postgres::error::SqlState::OBJECT_IN_USE) =>
            {
                attempts += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(error) => return Err(describe(&error)),
        }
    }
}

/// Drops `clinic_test_*` databases created more than [`STALE_AFTER`] ago (best effort).
async fn sweep_stale_databases(admin: &tokio_postgres::Client) {
    let Ok(rows) = admin
        .query("SELECT datname FROM pg_database WHERE starts_with(datname, $1)", &[&TEST_DB_PREFIX])
        .await
    else {
        return;
    };
    let now = SystemTime::now();
    for row in rows {
        let name: String = row.get(0);
        let Ok(id) = name[TEST_DB_PREFIX.len()..].to_uppercase().parse::<Ulid>() else {
            continue;
        };
        let stale = now.duration_since(id.datetime()).is_ok_and(|age| age > STALE_AFTER);
        if stale {
            let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", quote_ident(&name));
            let _ = admin.batch_execute(&sql).await;
        }
    }
}

fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A database error with the server's message (tokio-postgres' `Display` hides it).
fn describe(error: &tokio_postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => format!("{}: {}", db.code().code(), db.message()),
        None => error.to_string(),
    }
}

fn env_flag(name: &str) -> bool {
    test_env::flag(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn database_exists(name: &str) -> bool {
        admin_client()
            .await
            .query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&name])
            .await
            .unwrap()
            .is_some()
    }

    #[tokio::test]
    async fn fresh_databases_are_migrated_isolated_and_dropped() {
        init_test_logging();
        let first = fresh_db().await;
        let second = fresh_db().await;
        assert_ne!(first.name, second.name);

        for db in [&first, &second] {
            let applied: i64 = db
                .client()
                .await
                .query_one("SELECT count(*) FROM schema_migrations", &[])
                .await
                .unwrap()
                .get(0);
            assert_eq!(applied, MIGRATIONS.len() as i64);
        }

        first
            .client()
            .await
            .execute("INSERT INTO workspaces (id, name) VALUES (gen_random_uuid(), 'isolation probe')", &[])
            .await
            .unwrap();
        let count = |db: &TestDb| {
            let pool = db.pool.clone();
            async move {
                let client = pool.get().await.unwrap();
                client.query_one("SELECT count(*) FROM workspaces", &[]).await.unwrap().get::<_, i64>(0)
            }
        };
        assert_eq!(count(&first).await, 1);
        assert_eq!(count(&second).await, 0);

        let (first_name, second_name) = (first.name.clone(), second.name.clone());
        let _held = first.client().await; // an open connection must not stop the drop
        drop(first);
        assert!(!database_exists(&first_name).await);
        assert!(database_exists(&second_name).await);
        drop(second);
        assert!(!database_exists(&second_name).await);
    }

    #[tokio::test]
    async fn url_for_role_connects_as_that_role() {
        let db = fresh_db().await;
        let client = db::connect_single(&db.url_for_role("clinic_app"), None, None).await.unwrap();
        let row = client.query_one("SELECT current_user::text, current_database()::text", &[]).await.unwrap();
        assert_eq!(row.get::<_, String>(0), "clinic_app");
        assert_eq!(row.get::<_, String>(1), db.name);
    }

    #[test]
    fn dropping_outside_a_runtime_works() {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let db = runtime.block_on(fresh_db());
        let name = db.name.clone();
        drop(runtime);
        drop(db);
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        assert!(!runtime.block_on(database_exists(&name)));
    }

    #[test]
    fn template_name_is_stable_and_safe() {
        let name = template_name();
        assert_eq!(name, template_name());
        assert_eq!(name.len(), "clinic_template_".len() + 16);
        assert!(name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'));
    }

    /// Moved here with the bench's own `with_database` (the bench now uses [`scratch_db`]); the
    /// key=value form is quoted by this one.
    #[test]
    fn database_name_is_replaced_or_added() {
        assert_eq!(
            with_database("postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "b1"),
            "postgres://postgres@127.0.0.1:5432/b1?sslmode=disable"
        );
        assert_eq!(with_database("postgres://u@h:1", "b2"), "postgres://u@h:1/b2");
        assert_eq!(
            with_database("postgres://u@h:1?sslmode=disable", "b3"),
            "postgres://u@h:1/b3?sslmode=disable"
        );
        assert_eq!(with_database("host=h user=u", "b4"), "host=h user=u dbname=b4");
    }

    #[test]
    fn captured_logs_hold_what_was_logged() {
        let logs = capture_logs();
        tracing::info!(planted = "Ada Lovelace", "a line a scan must see");
        tracing::trace!(target: "clinic_core::probe", planted = "deep trace", "trace level is captured");
        let text = logs.text();
        assert!(text.contains("Ada Lovelace"), "{text}");
        assert!(logs.contains("deep trace"));
        assert!(logs.json_lines().iter().any(|line| line["fields"]["planted"] == "Ada Lovelace"));
        let later = capture_logs();
        assert!(!later.contains("Ada Lovelace"));
    }
}
