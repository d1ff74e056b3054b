//! IAM database authentication: the token compared with botocore's `generate_db_auth_token` (an
//! implementation nobody here wrote), a fresh token for every connection of a real pool, and no
//! token ever sent without TLS.

use std::process::Command;
use std::time::{Duration, SystemTime};

use aws_credential_types::provider::SharedCredentialsProvider;
use aws_credential_types::Credentials;
use clinic_core::db::{connect_pool_as, connect_single_as, DbError, DbLogin};
use clinic_secrets::iam::IamDbAuth;

fn credentials() -> Credentials {
    Credentials::new("AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", None, None, "tests")
}

fn tokens(host: &str, port: u16, user: &str) -> IamDbAuth {
    IamDbAuth::new(host, port, user, "eu-central-1", SharedCredentialsProvider::new(credentials()))
}

/// Python with botocore: the test tools' interpreter (tests/run's venv holds moto, hence botocore).
fn python_with_botocore() -> Option<String> {
    let python =
        clinic_testkit::test_env::var("CLINIC_TEST_WEBHOOK_PYTHON").unwrap_or_else(|| "python3".into());
    let probe = Command::new(&python).args(["-c", "import botocore"]).output().ok()?;
    probe.status.success().then_some(python)
}

const BOTOCORE_TOKEN: &str = r#"
import datetime, importlib, sys
from unittest import mock
import botocore.session
host, port, user, region, key_id, secret, epoch = sys.argv[1:]
now = datetime.datetime.fromtimestamp(int(epoch), tz=datetime.timezone.utc)
def clock(remove_tzinfo=True):
    return now.replace(tzinfo=None) if remove_tzinfo else now
session = botocore.session.get_session()
session.set_credentials(key_id, secret)
rds = session.create_client("rds", region_name=region)
# botocore signs in Python, or through awscrt when that is installed: pin the clock of both.
patches = []
for name in ("botocore.auth", "botocore.crt.auth"):
    try:
        module = importlib.import_module(name)
    except ImportError:
        continue
    if hasattr(module, "get_current_datetime"):
        patches.append(mock.patch(f"{name}.get_current_datetime", side_effect=clock))
for patch in patches:
    patch.start()
print(rds.generate_db_auth_token(host, int(port), user, Region=region))
"#;

/// `host:port/?query` as its address and its sorted query pairs (the order is not part of a token).
fn parts(token: &str) -> (String, Vec<(String, String)>) {
    let (address, query) = token.split_once("/?").expect("a token is host:port/?query");
    let mut pairs: Vec<(String, String)> =
        form_urlencoded::parse(query.as_bytes()).map(|(k, v)| (k.into_owned(), v.into_owned())).collect();
    pairs.sort();
    (address.to_owned(), pairs)
}

#[test]
fn an_iam_token_is_the_one_botocore_makes_for_the_same_request_and_time() {
    let Some(python) = python_with_botocore() else {
        eprintln!("!!! SKIPPING IAM TOKEN COMPARISON: no Python with botocore (tests/run provides one)");
        return;
    };
    let epoch = 1_780_000_000u64;
    for (host, port, user) in [
        ("clinic.abcdefghijkl.eu-central-1.rds.amazonaws.com", 5432, "clinic_login"),
        ("db.internal", 6432, "user+with/odd=chars"),
    ] {
        let ours = tokens(host, port, user)
            .token_at(credentials(), SystemTime::UNIX_EPOCH + Duration::from_secs(epoch))
            .unwrap();
        let key = credentials();
        let output = Command::new(&python)
            .args(["-c", BOTOCORE_TOKEN, host, &port.to_string(), user, "eu-central-1"])
            .args([key.access_key_id(), key.secret_access_key(), &epoch.to_string()])
            .output()
            .unwrap();
        assert!(output.status.success(), "botocore: {}", String::from_utf8_lossy(&output.stderr));
        let theirs = String::from_utf8(output.stdout).unwrap().trim().to_owned();
        // The same pairs (botocore's Python and awscrt signers order them differently; RDS parses them).
        assert_eq!(parts(&ours), parts(&theirs), "\nours:   {ours}\ntheirs: {theirs}");
        let signature = |token: &str| parts(token).1.into_iter().find(|(k, _)| k == "X-Amz-Signature");
        assert!(signature(&ours).is_some_and(|(_, v)| v.len() == 64), "{ours}");
    }
}

/// The test server's host and port, and a URL for `user` on `database` with `sslmode`.
fn url_as(database_url: &str, database: &str, sslmode: &str) -> (String, u16, String) {
    let config: tokio_postgres::Config = database_url.parse().unwrap();
    let host = match &config.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(host) => host.clone(),
        tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    (host.clone(), port, format!("host={host} port={port} dbname={database} sslmode={sslmode}"))
}

#[tokio::test]
async fn every_new_connection_logs_in_with_a_token_made_for_it() {
    let db = clinic_testkit::fresh_db().await;
    let admin = db.client().await;
    let user = format!("iam_login_{}", ulid::Ulid::generate().to_string().to_lowercase());
    admin
        .batch_execute(&format!("CREATE ROLE {user} LOGIN; GRANT CONNECT ON DATABASE {} TO {user}", db.name))
        .await
        .unwrap();
    let (host, port, url) = url_as(&db.url, &db.name, "require");
    // The shared test server accepts any password from 127.0.0.1: what is checked here is that each
    // connection asked for a token of its own, and that tokens travel only over TLS.
    let login = DbLogin::start(tokens(&host, port, &user)).await.unwrap();
    assert!(login.per_connection());
    assert_eq!(login.reads(), 1, "start-up makes one token (it proves the credentials work)");

    let pool = connect_pool_as(&url, 3, None, Some(&login), &Default::default()).unwrap();
    let held = futures::future::try_join_all((0..3).map(|_| pool.get())).await.unwrap();
    for client in &held {
        let row = client
            .query_one("SELECT current_user::text, ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()", &[])
            .await
            .unwrap();
        assert_eq!(row.get::<_, String>(0), user);
        assert!(row.get::<_, bool>(1), "the token went over TLS");
    }
    assert_eq!(login.reads(), 1 + 3, "three connections, three tokens");
    drop(held);
    // A recycled connection needs no new login; a new one does.
    let again = pool.get().await.unwrap();
    again.simple_query("SELECT 1").await.unwrap();
    assert_eq!(login.reads(), 4);
    let listen = connect_single_as(&url, None, Some(&login), None).await.unwrap();
    listen.simple_query("SELECT 1").await.unwrap();
    assert_eq!(login.reads(), 5, "the LISTEN connection gets its own token too");
}

#[tokio::test]
async fn an_iam_token_is_never_sent_without_tls() {
    let db = clinic_testkit::fresh_db().await;
    let login = DbLogin::start(tokens("127.0.0.1", 5432, "nobody")).await.unwrap();
    for sslmode in ["disable", "allow", "prefer"] {
        let (_, _, url) = url_as(&db.url, &db.name, sslmode);
        let refused =
            connect_pool_as(&url, 1, None, Some(&login), &Default::default()).map(|_| ()).unwrap_err();
        assert!(
            matches!(&refused, DbError::Tls(message) if message.contains("sslmode=require")),
            "{refused}"
        );
        let refused = connect_single_as(&url, None, Some(&login), None).await.map(|_| ()).unwrap_err();
        assert!(matches!(&refused, DbError::Tls(_)), "{refused}");
    }
    assert_eq!(login.reads(), 1, "no token was made for a connection that was refused before it");
}
