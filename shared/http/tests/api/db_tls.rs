//! libpq's `sslmode` against the test server (the machine's Debian cluster offers TLS with its
//! self-signed snakeoil certificate, issued for `localhost`): `prefer` (the default), `allow` and
//! `require` encrypt without verifying; `verify-ca` and `verify-full` refuse an unknown certificate
//! with a message naming the setting to change; with the server's own certificate as the root
//! (`sslrootcert` or `CLINIC_DB_CA_FILE`) the chain verifies, and so does the host name `localhost`
//! but not `127.0.0.1`. Both connection-string forms, both the single connection and the pool.
//!
//! A server without TLS (tests/run's private cluster) makes these tests print why and pass.

use clinic_core::db::{connect_pool, connect_single, tls::describe};

/// (user, port, host, readable certificate file) of the test server, when it is on loopback and offers TLS.
async fn tls_server() -> Option<(String, u16, String, Option<String>)> {
    let admin = clinic_testkit::admin_client().await;
    let ssl: String = admin.query_one("SHOW ssl", &[]).await.unwrap().get(0);
    if ssl != "on" {
        eprintln!("skipped: the test server does not offer TLS (ssl = {ssl})");
        return None;
    }
    let cert_file: String = admin.query_one("SHOW ssl_cert_file", &[]).await.unwrap().get(0);
    let data_dir: String = admin.query_one("SHOW data_directory", &[]).await.unwrap().get(0);
    let cert_path = std::path::Path::new(&data_dir).join(&cert_file);
    let readable = std::fs::read_to_string(&cert_path).is_ok_and(|pem| pem.contains("BEGIN CERTIFICATE"));
    let (config, _) = clinic_core::db::tls::split(&clinic_testkit::admin_url(), None).unwrap();
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(host)) if host == "127.0.0.1" || host == "localhost" => {
            host.clone()
        }
        _ => {
            eprintln!("skipped: the test server is not on 127.0.0.1");
            return None;
        }
    };
    let user = config.get_user().unwrap_or("postgres").to_owned();
    let port = config.get_ports().first().copied().unwrap_or(5432);
    Some((user, port, host, readable.then(|| cert_path.display().to_string())))
}

async fn encrypted(url: &str, ca_file: Option<&str>) -> Result<bool, String> {
    let client = connect_single(url, ca_file, None).await.map_err(|e| e.to_string())?;
    let row = client
        .query_one("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()", &[])
        .await
        .map_err(|e| describe(&e))?;
    Ok(row.get(0))
}

#[tokio::test]
async fn prefer_allow_and_require_encrypt_without_verifying_and_disable_does_not() {
    let Some((user, port, _, _)) = tls_server().await else { return };
    let url = |query: &str| format!("postgresql://{user}@127.0.0.1:{port}/postgres{query}");
    assert_eq!(encrypted(&url(""), None).await, Ok(true), "no sslmode means prefer, as in libpq");
    assert_eq!(encrypted(&url("?sslmode=prefer"), None).await, Ok(true));
    assert_eq!(encrypted(&url("?sslmode=require"), None).await, Ok(true));
    assert_eq!(encrypted(&url("?sslmode=disable"), None).await, Ok(false));
    let key_value =
        |mode: &str| format!("host=127.0.0.1 port={port} user={user} dbname=postgres sslmode={mode}");
    assert_eq!(encrypted(&key_value("allow"), None).await, Ok(true));
    assert_eq!(encrypted(&key_value("require"), None).await, Ok(true));
    assert_eq!(encrypted(&key_value("disable"), None).await, Ok(false));

    let pool = connect_pool(&url("?sslmode=require"), 1, None).unwrap();
    let conn = pool.get().await.unwrap();
    let row = conn.query_one("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()", &[]).await.unwrap();
    assert!(row.get::<_, bool>(0), "the pool encrypts too");
}

#[tokio::test]
async fn verify_modes_refuse_a_certificate_they_cannot_check_and_name_the_setting() {
    let Some((user, port, _, _)) = tls_server().await else { return };
    for mode in ["verify-full", "verify-ca"] {
        let url = format!("postgresql://{user}@127.0.0.1:{port}/postgres?sslmode={mode}");
        let error = encrypted(&url, None).await.unwrap_err();
        assert!(error.contains(&format!("sslmode={mode}")), "{error}");
        assert!(error.contains("sslrootcert") && error.contains("CLINIC_DB_CA_FILE"), "{error}");
        let error = connect_pool(&url, 1, None).unwrap_err().to_string();
        assert!(error.contains(&format!("sslmode={mode}")) && error.contains("sslrootcert"), "pool: {error}");

        // A root certificate that did not sign the server's: the handshake is refused.
        let other_root = "/etc/ssl/certs/ca-certificates.crt";
        if std::fs::read_to_string(other_root).is_ok_and(|pem| pem.contains("BEGIN CERTIFICATE")) {
            let error = encrypted(&url, Some(other_root)).await.unwrap_err();
            assert!(error.contains("certificate verify failed"), "{error}");
            assert!(
                error.contains(&format!("sslmode={mode}")) && error.contains("configured root certificate"),
                "{error}"
            );
            let pool = connect_pool(&url, 1, Some(other_root)).unwrap();
            let error = describe(&pool.get().await.unwrap_err());
            assert!(
                error.contains(&format!("sslmode={mode}")) && error.contains("sslrootcert"),
                "pool: {error}"
            );
        }
    }
}

#[tokio::test]
async fn the_servers_certificate_as_root_verifies_the_chain_and_the_name_it_was_issued_for() {
    let Some((user, port, _, Some(cert))) = tls_server().await else {
        eprintln!("skipped: the server's certificate file is not readable here");
        return;
    };
    let at = |host: &str, mode: &str| {
        format!("host={host} port={port} user={user} dbname=postgres sslmode={mode} sslrootcert='{cert}'")
    };
    assert_eq!(encrypted(&at("127.0.0.1", "verify-ca"), None).await, Ok(true));
    assert_eq!(
        encrypted(&at("localhost", "verify-full"), None).await,
        Ok(true),
        "the snakeoil certificate names localhost"
    );
    let error = encrypted(&at("127.0.0.1", "verify-full"), None).await.unwrap_err();
    assert!(error.contains("sslmode=verify-full") && error.contains("sslmode=verify-ca"), "{error}");

    // CLINIC_DB_CA_FILE is the root when the string names none; `require` then checks the chain.
    let plain = format!("postgresql://{user}@127.0.0.1:{port}/postgres?sslmode=require");
    assert_eq!(encrypted(&plain, Some(&cert)).await, Ok(true));
    let other_root = "/etc/ssl/certs/ca-certificates.crt";
    if std::fs::read_to_string(other_root).is_ok_and(|pem| pem.contains("BEGIN CERTIFICATE")) {
        let error = encrypted(&plain, Some(other_root)).await.unwrap_err();
        assert!(
            error.contains("sslmode=require") && error.contains("configured root certificate"),
            "{error}"
        );
    }
}
