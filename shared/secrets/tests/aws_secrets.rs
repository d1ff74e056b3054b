//! Secrets Manager (moto) against real PostgreSQL: the database login read by ARN at start-up and
//! re-read, without a restart, when PostgreSQL refuses it after a rotation; the application keys and
//! the webhook keyring read by ARN.
//!
//! Two rotations: a single-user one (`ALTER ROLE … PASSWORD`) on a throwaway cluster of the test's
//! own that checks passwords (the shared test server trusts 127.0.0.1), refused with `28P01`; and the
//! "alternating users" one Secrets Manager offers for RDS on the shared server (the secret moves to a
//! second login role and the first loses LOGIN), refused with `28000`.

use std::time::Duration;

use aws_sdk_secretsmanager::config::Credentials;
use clinic_core::db::login::refused;
use clinic_core::db::{connect_pool_as, connect_single_as, DbLogin};
use clinic_secrets::{DbLoginSecret, Secrets};

/// The emulator, or a fresh one (kept alive for the whole test binary).
fn emulator() -> Option<String> {
    static EMULATOR: std::sync::OnceLock<Option<clinic_sqs::testing::Emulator>> = std::sync::OnceLock::new();
    if let Some(value) =
        clinic_testkit::test_env::first(&["CLINIC_TEST_AWS_ENDPOINT", "CLINIC_TEST_SQS_ENDPOINT"])
    {
        return Some(value);
    }
    EMULATOR.get_or_init(clinic_sqs::testing::Emulator::start).as_ref().map(|e| e.endpoint.clone())
}

async fn secrets(endpoint: &str) -> Secrets {
    let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "tests"))
        .endpoint_url(endpoint)
        .timeout_config(clinic_secrets::timeouts())
        .load()
        .await;
    Secrets::from_sdk(&sdk)
}

/// Creates a secret on the emulator; answers its ARN.
async fn create_secret(secrets: &Secrets, name: impl Into<String>, value: impl Into<String>) -> String {
    let created = secrets.client().create_secret().name(name).secret_string(value).send().await.unwrap();
    created.arn.unwrap()
}

fn tag() -> String {
    ulid::Ulid::generate().to_string().to_lowercase()
}

fn login_json(user: &str, password: &str) -> String {
    serde_json::json!({ "username": user, "password": password, "engine": "postgres" }).to_string()
}

/// The test database's URL without its user (the login comes from the secret).
fn url_without_user(url: &str) -> String {
    let config: tokio_postgres::Config = url.parse().unwrap();
    let host = match &config.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(host) => host.clone(),
        tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let dbname = config.get_dbname().unwrap().to_owned();
    format!("host={host} port={port} dbname={dbname} sslmode=disable")
}

#[tokio::test]
async fn a_rotated_database_login_is_re_read_when_postgres_refuses_it() {
    let Some(endpoint) = emulator() else {
        eprintln!("!!! SKIPPING SECRETS TEST: no Secrets Manager emulator (set CLINIC_TEST_AWS_ENDPOINT)");
        return;
    };
    let db = clinic_testkit::fresh_db().await;
    let admin = db.client().await;
    let (first, second) = (format!("login_a_{}", tag()), format!("login_b_{}", tag()));
    for role in [&first, &second] {
        admin.batch_execute(&format!("CREATE ROLE {role} LOGIN PASSWORD 'initial'")).await.unwrap();
        admin.batch_execute(&format!("GRANT CONNECT ON DATABASE {} TO {role}", db.name)).await.unwrap();
    }

    let secrets = secrets(&endpoint).await;
    let arn = create_secret(&secrets, format!("clinic-db-{}", tag()), login_json(&first, "initial")).await;

    let login = DbLogin::start(DbLoginSecret::new(secrets.clone(), &arn))
        .await
        .unwrap()
        .with_min_interval(Duration::ZERO);
    assert_eq!((login.user(), login.reads()), (first.clone(), 1));
    let url = url_without_user(&db.url);
    let pool = connect_pool_as(&url, 4, None, Some(&login), &Default::default()).unwrap();
    let session_user = |pool: deadpool_postgres::Pool| async move {
        let conn = pool.get().await.map_err(|e| e.to_string())?;
        let row = conn.query_one("SELECT session_user::text", &[]).await.map_err(|e| e.to_string())?;
        Ok::<String, String>(row.get(0))
    };
    assert_eq!(session_user(pool.clone()).await.unwrap(), first);

    // Rotation: the secret moves to the second login; the first may no longer log in, and its
    // sessions end (as after a restart of the server or a recycled connection).
    secrets
        .client()
        .put_secret_value()
        .secret_id(&arn)
        .secret_string(login_json(&second, "rotated"))
        .send()
        .await
        .unwrap();
    admin.batch_execute(&format!("ALTER ROLE {first} NOLOGIN PASSWORD 'changed'")).await.unwrap();
    admin
        .execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", &[&first])
        .await
        .unwrap();

    // The same pool recovers: a connection the server closed is replaced, the replacement is
    // refused as the old login, the secret is re-read once and the connect tried again.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let recovered = loop {
        // Several checkouts at once: they share one re-read.
        let answers = futures::future::join_all((0..4).map(|_| session_user(pool.clone()))).await;
        if answers.iter().all(|answer| answer.as_deref() == Ok(second.as_str())) {
            break true;
        }
        assert!(tokio::time::Instant::now() < deadline, "the pool did not recover: {answers:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(recovered);
    assert_eq!(login.reads(), 2, "one re-read for the rotation, shared by every connect");
    assert_eq!(login.user(), second);

    // The LISTEN connection logs in the same way.
    let listen = connect_single_as(&url, None, Some(&login), None).await.unwrap();
    let row = listen.query_one("SELECT session_user::text", &[]).await.unwrap();
    assert_eq!(row.get::<_, String>(0), second);

    // A login nobody rotated to stays refused (no loop): the error is PostgreSQL's refusal.
    admin.batch_execute(&format!("ALTER ROLE {second} NOLOGIN")).await.unwrap();
    let error = connect_single_as(&url, None, Some(&login), None).await.unwrap_err();
    match error {
        clinic_core::db::DbError::Postgres(error) => assert!(refused(&error), "{error}"),
        other => panic!("expected a refusal, got {other}"),
    }
    assert_eq!(login.reads(), 3, "re-read once, found nothing new");
    drop(pool);
    drop(listen);
    for role in [&first, &second] {
        admin.batch_execute(&format!("REVOKE ALL ON DATABASE {} FROM {role}", db.name)).await.unwrap();
    }
    drop(admin);
    drop(db);
    let admin = clinic_testkit::admin_client().await;
    for role in [&first, &second] {
        let _ = admin.batch_execute(&format!("DROP ROLE IF EXISTS {role}")).await;
    }
}

#[tokio::test]
async fn a_secret_is_read_by_arn_with_its_previous_version() {
    let Some(endpoint) = emulator() else {
        eprintln!("!!! SKIPPING SECRETS TEST: no Secrets Manager emulator (set CLINIC_TEST_AWS_ENDPOINT)");
        return;
    };
    let secrets = secrets(&endpoint).await;
    let arn = create_secret(&secrets, format!("clinic-key-{}", tag()), "first-key-0123456789abcdef").await;
    assert_eq!(secrets.read_versions(&arn).await.unwrap(), ("first-key-0123456789abcdef".into(), None));
    secrets
        .client()
        .put_secret_value()
        .secret_id(&arn)
        .secret_string("second-key-0123456789abcdef")
        .send()
        .await
        .unwrap();
    assert_eq!(
        secrets.read_versions(&arn).await.unwrap(),
        ("second-key-0123456789abcdef".into(), Some("first-key-0123456789abcdef".into()))
    );
    let missing =
        secrets.read("arn:aws:secretsmanager:us-east-1:123456789012:secret:nope-AbCdEf").await.unwrap_err();
    assert!(missing.to_string().contains("ResourceNotFoundException"), "{missing}");
}

/// The one-click unsubscribe key read by ARN (issue 40): a link signed before a rotation (a new
/// secret version) still verifies with the keys read after it, new links are signed with the new
/// version, and a secret too short to be a key is refused naming its ARN, never its value.
#[tokio::test]
async fn the_unsubscribe_key_is_read_by_arn_and_its_previous_version_still_verifies() {
    use clinic_core::delivery::unsubscribe::{Claims, TokenError};
    let Some(endpoint) = emulator() else {
        eprintln!("!!! SKIPPING SECRETS TEST: no Secrets Manager emulator (set CLINIC_TEST_AWS_ENDPOINT)");
        return;
    };
    let secrets = secrets(&endpoint).await;
    let arn =
        create_secret(&secrets, format!("clinic-unsubscribe-{}", tag()), "unsubscribe-key-one-0123456789")
            .await;
    let now = chrono::Utc::now();
    let claims = Claims {
        workspace_id: clinic_core::ids::WorkspaceId::generate(),
        patient_id: clinic_core::ids::PatientId::generate(),
        kind: clinic_core::domain::contact::MessageKind::Reminder,
        expires_at: chrono::DateTime::from_timestamp(now.timestamp() + 3600, 0).unwrap(),
    };
    let before = clinic_secrets::unsubscribe_keys(&secrets, &arn).await.unwrap();
    let old_link = before.issue(&claims);
    secrets
        .client()
        .put_secret_value()
        .secret_id(&arn)
        .secret_string("unsubscribe-key-two-0123456789")
        .send()
        .await
        .unwrap();
    let after = clinic_secrets::unsubscribe_keys_at(Some(&arn), Some(&endpoint)).await.unwrap().unwrap();
    assert_eq!(after.verify(&old_link, now), Ok(claims), "a link sent before the rotation");
    assert_eq!(before.verify(&after.issue(&claims), now), Err(TokenError::Forged), "the new version signs");
    assert!(clinic_secrets::unsubscribe_keys_at(None, Some(&endpoint)).await.unwrap().is_none());

    secrets.client().put_secret_value().secret_id(&arn).secret_string("short").send().await.unwrap();
    let refused = clinic_secrets::unsubscribe_keys(&secrets, &arn).await.unwrap_err().to_string();
    assert!(refused.contains(&arn) && !refused.contains("short"), "{refused}");
}

/// Issue 39 item 3 (the sealing key): the stack's generated secret is the keyring; after a rotation
/// (a new secret version) the previous key still opens every row, and the sender's re-seal moves the
/// rows to the new key in bounded batches, after which the new key alone opens them.
#[tokio::test]
async fn a_rotated_webhook_key_opens_old_rows_and_reseals_them_in_batches() {
    use clinic_core::ids::{WebhookEndpointId, WorkspaceId};
    use clinic_core::webhooks::endpoints::{seal_clear, signing};
    use clinic_core::webhooks::secret_box::WebhookKey;
    use clinic_core::webhooks::signing::Secret;

    let Some(endpoint) = emulator() else {
        eprintln!("!!! SKIPPING SECRETS TEST: no Secrets Manager emulator (set CLINIC_TEST_AWS_ENDPOINT)");
        return;
    };
    let secrets = secrets(&endpoint).await;
    // What GenerateSecretString makes: 64 letters and digits.
    let generated = |seed: char| {
        std::iter::repeat_n(seed, 40).chain("0123456789abcdefghijklmnop".chars()).collect::<String>()
    };
    let arn = create_secret(&secrets, format!("clinic-webhook-key-{}", tag()), generated('a')).await;
    let old = clinic_secrets::webhook_key(&secrets, &arn).await.unwrap();

    let db = clinic_testkit::fresh_db().await;
    let mut conn = db.client().await;
    let workspace = WorkspaceId::generate();
    clinic_core::workspaces::insert_workspace(&conn, workspace, "Keyring clinic").await.unwrap();
    let mut rows = Vec::new();
    for _ in 0..5 {
        let (id, secret, previous) = (WebhookEndpointId::generate(), Secret::generate(), Secret::generate());
        let (sealed, sealed_previous) =
            (old.seal(id, &secret).await.unwrap(), old.seal(id, &previous).await.unwrap());
        conn.execute(
            "INSERT INTO webhook_endpoints (id, workspace_id, url, secret, previous_secret, previous_expires_at) \
             VALUES ($1, $2, 'https://hooks.example.com/x', $3, $4, now() + interval '1 day')",
            &[&id, &workspace, &sealed, &sealed_previous],
        )
        .await
        .unwrap();
        rows.push((id, secret, previous));
    }

    // Rotation: a new version of the secret; a process started now holds both keys.
    secrets.client().put_secret_value().secret_id(&arn).secret_string(generated('b')).send().await.unwrap();
    let ring = clinic_secrets::webhook_key(&secrets, &arn).await.unwrap();
    assert_ne!(ring.key_id(), old.key_id());
    let new_only = WebhookKey::from_secret_text(&generated('b'), None).unwrap();
    for (id, secret, previous) in &rows {
        let opened = signing(&conn, &ring, *id).await.unwrap().unwrap().unwrap();
        assert_eq!((&opened.current, opened.previous.as_ref()), (secret, Some(previous)));
        assert!(signing(&conn, &new_only, *id).await.unwrap().unwrap().is_err(), "not yet re-sealed");
    }

    // Re-seal in bounded batches of 2: 2, 2, 1, then nothing is left.
    let mut batches = Vec::new();
    loop {
        let tx = conn.transaction().await.unwrap();
        let sealed = seal_clear(&tx, &ring, 2).await.unwrap();
        tx.commit().await.unwrap();
        batches.push(sealed);
        if sealed == 0 {
            break;
        }
    }
    assert_eq!(batches, vec![2, 2, 1, 0]);
    let prefix = format!("{}%", ring.sealed_prefix());
    let row = conn
        .query_one(
            "SELECT count(*) FILTER (WHERE secret LIKE $1 AND previous_secret LIKE $1), count(*) FROM webhook_endpoints",
            &[&prefix],
        )
        .await
        .unwrap();
    assert_eq!((row.get::<_, i64>(0), row.get::<_, i64>(1)), (5, 5));
    // The previous key is no longer needed.
    for (id, secret, previous) in &rows {
        let opened = signing(&conn, &new_only, *id).await.unwrap().unwrap().unwrap();
        assert_eq!((&opened.current, opened.previous.as_ref()), (secret, Some(previous)));
    }
}

/// A throwaway PostgreSQL cluster that checks passwords (scram-sha-256 over TCP; trust only on its own
/// Unix socket, for the test's admin session), stopped and removed on drop. `None` where the tools
/// are missing or the cluster cannot start (the test then says it skipped).
struct PasswordCluster {
    dir: std::path::PathBuf,
    bin: std::path::PathBuf,
    port: u16,
}

impl PasswordCluster {
    fn start() -> Option<PasswordCluster> {
        let bin = ["17", "16", "15", "14", "13"]
            .iter()
            .map(|version| std::path::PathBuf::from(format!("/usr/lib/postgresql/{version}/bin")))
            .find(|bin| bin.join("initdb").is_file())?;
        let dir = std::env::temp_dir().join(format!("clinic-secrets-pg-{}", tag()));
        std::fs::create_dir_all(&dir).ok()?;
        let port = clinic_testkit::free_port().ok()?;
        let cluster = PasswordCluster { dir, bin, port };
        // PostgreSQL refuses to run as root: as root, the cluster runs as `postgres`.
        let root = std::process::Command::new("id").arg("-u").output().ok()?.stdout.starts_with(b"0");
        if root {
            let chown =
                std::process::Command::new("chown").args(["-R", "postgres"]).arg(&cluster.dir).status();
            if !chown.ok()?.success() {
                return None;
            }
        }
        let data = cluster.dir.join("data");
        let run = |tool: &str, args: &[&str]| {
            let mut command = if root {
                let mut command = std::process::Command::new("runuser");
                command.args(["-u", "postgres", "--"]).arg(cluster.bin.join(tool));
                command
            } else {
                std::process::Command::new(cluster.bin.join(tool))
            };
            command.args(args).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
            command.status().map(|status| status.success()).unwrap_or(false)
        };
        let data_arg = data.to_str()?;
        let initdb = ["-D", data_arg, "-U", "postgres", "--auth-local=trust", "--auth-host=scram-sha-256"];
        if !run("initdb", &initdb) {
            return None;
        }
        let options = format!(
            "-c listen_addresses=127.0.0.1 -p {} -c unix_socket_directories={} -c fsync=off",
            cluster.port,
            cluster.dir.display()
        );
        let log = cluster.dir.join("log");
        let start = ["start", "-D", data_arg, "-l", log.to_str()?, "-w", "-t", "60", "-o", &options];
        run("pg_ctl", &start).then_some(cluster)
    }

    /// The admin session over the cluster's Unix socket (trusted).
    fn admin_url(&self) -> String {
        format!("host={} port={} user=postgres dbname=postgres", self.dir.display(), self.port)
    }

    /// Where the functions connect: TCP, password checked, no login in the string.
    fn url(&self) -> String {
        format!("host=127.0.0.1 port={} dbname=postgres sslmode=disable", self.port)
    }
}

impl Drop for PasswordCluster {
    fn drop(&mut self) {
        let data = self.dir.join("data");
        let stop = |program: &str, prefix: &[&str]| {
            std::process::Command::new(program)
                .args(prefix)
                .arg(self.bin.join("pg_ctl"))
                .args(["stop", "-D"])
                .arg(&data)
                .args(["-m", "immediate", "-w"])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
        };
        let _ = stop("runuser", &["-u", "postgres", "--"]).or_else(|_| stop("env", &[]));
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Issue 39 item 3 (database password): a single-user rotation — `ALTER ROLE … PASSWORD` in
/// PostgreSQL and a new secret version — on a server that checks passwords. New connections are
/// refused (`28P01`) under the old password; the same pool re-reads the secret once and recovers,
/// without a restart.
#[tokio::test]
async fn a_rotated_database_password_is_re_read_when_postgres_refuses_it() {
    let Some(endpoint) = emulator() else {
        eprintln!("!!! SKIPPING SECRETS TEST: no Secrets Manager emulator (set CLINIC_TEST_AWS_ENDPOINT)");
        return;
    };
    let Some(cluster) = PasswordCluster::start() else {
        eprintln!(
            "!!! SKIPPING PASSWORD ROTATION TEST: no initdb/pg_ctl to start a password-checking cluster"
        );
        return;
    };
    let admin = clinic_core::db::connect_single(&cluster.admin_url(), None, None).await.unwrap();
    let role = format!("rotating_{}", tag());
    admin.batch_execute(&format!("CREATE ROLE {role} LOGIN PASSWORD 'first-password'")).await.unwrap();

    let secrets = secrets(&endpoint).await;
    let arn =
        create_secret(&secrets, format!("clinic-db-password-{}", tag()), login_json(&role, "first-password"))
            .await;
    let login =
        clinic_secrets::database_login(&secrets, &arn).await.unwrap().with_min_interval(Duration::ZERO);
    let pool = connect_pool_as(&cluster.url(), 2, None, Some(&login), &Default::default()).unwrap();
    let query = |pool: deadpool_postgres::Pool| async move {
        let conn = pool.get().await.map_err(|e| e.to_string())?;
        let row = conn.query_one("SELECT session_user::text", &[]).await.map_err(|e| e.to_string())?;
        Ok::<String, String>(row.get(0))
    };
    assert_eq!(query(pool.clone()).await.unwrap(), role);

    // A wrong password is refused as 28P01 (the server checks it).
    let wrong = DbLogin::start(clinic_core::db::login::FixedLogin(clinic_core::db::login::Login::new(
        &role,
        "not-the-password",
    )))
    .await
    .unwrap();
    match connect_single_as(&cluster.url(), None, Some(&wrong), None).await.unwrap_err() {
        clinic_core::db::DbError::Postgres(error) => {
            assert_eq!(error.code(), Some(&tokio_postgres::error::SqlState::INVALID_PASSWORD), "{error}");
            assert!(refused(&error));
        }
        other => panic!("expected 28P01, got {other}"),
    }

    // Rotation: PostgreSQL first, then the secret (the order of Secrets Manager's setSecret /
    // finishSecret steps); open sessions end as after a restart.
    admin.batch_execute(&format!("ALTER ROLE {role} PASSWORD 'second-password'")).await.unwrap();
    secrets
        .client()
        .put_secret_value()
        .secret_id(&arn)
        .secret_string(login_json(&role, "second-password"))
        .send()
        .await
        .unwrap();
    admin
        .execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", &[&role])
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let answers = futures::future::join_all((0..2).map(|_| query(pool.clone()))).await;
        if answers.iter().all(|answer| answer.as_deref() == Ok(role.as_str())) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the pool did not recover: {answers:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(login.reads(), 2, "one re-read after the rotation");
    drop(pool);
    drop(admin);
    drop(cluster);
}
