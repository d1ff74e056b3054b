//! Database TLS with libpq's `sslmode` semantics, so any connection string that works with `psql`
//! works here.
//!
//! | `sslmode`          | TLS                                  | verifies                          |
//! |--------------------|--------------------------------------|-----------------------------------|
//! | `disable`          | never                                | —                                 |
//! | `allow`, `prefer`* | when the server offers it, else plain| nothing, or the CA when a root certificate is configured |
//! | `require`          | always                               | nothing, or the CA when a root certificate is configured |
//! | `verify-ca`        | always                               | the chain up to the root certificate (system roots when none) |
//! | `verify-full`      | always                               | the chain and the host name       |
//!
//! (*) `prefer` is the default, as in libpq. `allow` tries TLS first (tokio-postgres knows no
//! plain-first mode); like `prefer` it ends up encrypted whenever the server offers TLS. One
//! deliberate difference: when the server offers TLS and the handshake then fails (only possible
//! here with a root certificate configured), the connection fails with the fix instead of silently
//! retrying in plain text as libpq does.
//!
//! Invariants:
//! - The root certificate is `sslrootcert` in the connection string, else the `ca_file` the settings
//!   read (`CLINIC_DB_CA_FILE`, else libpq's default `~/.postgresql/root.crt` when it exists); with one configured only its
//!   certificates are trusted (a bundle such as RDS's: every certificate in it), as libpq does.
//!   `sslrootcert=system` trusts the system's roots and, as in libpq 16, means `verify-full` (a
//!   weaker `sslmode` beside it is refused). `verify-ca`/`verify-full` without any root certificate
//!   are refused before connecting, naming the settings that fix it.
//! - `sslmode` and `sslrootcert` are taken out of the string before tokio-postgres parses it (it
//!   rejects `allow`, `verify-ca`, `verify-full` and `sslrootcert`); everything else is its business.
//! - A failed handshake's error names the `sslmode` in force and the setting to change.

use std::future::Future;
use std::pin::Pin;

use postgres_native_tls::{MakeTlsConnector, TlsStream};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};

use super::conninfo::ConnInfo;
use super::DbError;

/// libpq's `sslmode` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Allow,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    pub fn parse(value: &str) -> Result<Self, DbError> {
        Ok(match value {
            "disable" => SslMode::Disable,
            "allow" => SslMode::Allow,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => {
                return Err(DbError::InvalidUrl(format!(
                    "sslmode={other} is not one of disable, allow, prefer, require, verify-ca, verify-full"
                )))
            }
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Allow => "allow",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    /// Whether a connection in this mode is never made without TLS (`require`, `verify-ca`,
    /// `verify-full`); `allow` and `prefer` may fall back to plain text.
    pub const fn requires_tls(self) -> bool {
        matches!(self, SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull)
    }

    /// What tokio-postgres is told: whether TLS is optional or required.
    fn wire(self) -> tokio_postgres::config::SslMode {
        if self.requires_tls() {
            tokio_postgres::config::SslMode::Require
        } else if matches!(self, SslMode::Disable) {
            tokio_postgres::config::SslMode::Disable
        } else {
            tokio_postgres::config::SslMode::Prefer
        }
    }
}

/// What a handshake checks, derived from the mode and whether a root certificate is configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verification {
    /// Encrypt, trust any certificate.
    None,
    /// The certificate chain must lead to a trusted root; any host name.
    Chain,
    /// The chain and the host name.
    Full,
}

/// The TLS settings of one connection string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    pub mode: SslMode,
    /// A PEM file of trusted roots; `None` with [`TlsSettings::system_roots`] trusts the system's.
    pub root_cert: Option<String>,
    /// `sslrootcert=system`.
    pub system_roots: bool,
}

impl TlsSettings {
    pub fn verification(&self) -> Verification {
        match self.mode {
            SslMode::VerifyFull => Verification::Full,
            SslMode::VerifyCa => Verification::Chain,
            _ if self.root_cert.is_some() => Verification::Chain,
            _ => Verification::None,
        }
    }
}

/// Parses `url` (either form) into the tokio-postgres configuration and its TLS settings.
/// `ca_file` is `CLINIC_DB_CA_FILE` (else libpq's default `~/.postgresql/root.crt`, as the settings
/// read it: `DatabaseConfig::read_ca_file`), used when the string names no `sslrootcert`.
pub fn split(url: &str, ca_file: Option<&str>) -> Result<(tokio_postgres::Config, TlsSettings), DbError> {
    let mut info = ConnInfo::parse(url)?;
    let mode = info.remove("sslmode").map(|value| SslMode::parse(&value)).transpose()?;
    let root = info.remove("sslrootcert").filter(|value| !value.is_empty());
    let system_roots = root.as_deref() == Some("system");
    let settings = if system_roots {
        let mode = mode.unwrap_or(SslMode::VerifyFull);
        if mode != SslMode::VerifyFull {
            return Err(DbError::Tls(format!(
                "sslrootcert=system checks the host name, so it needs sslmode=verify-full (or no sslmode), not sslmode={}",
                mode.as_str()
            )));
        }
        TlsSettings { mode, root_cert: None, system_roots }
    } else {
        let root_cert = root.or_else(|| ca_file.filter(|path| !path.is_empty()).map(str::to_owned));
        TlsSettings { mode: mode.unwrap_or(SslMode::Prefer), root_cert, system_roots }
    };
    if settings.verification() != Verification::None && settings.root_cert.is_none() && !system_roots {
        return Err(DbError::Tls(format!(
            "sslmode={} verifies the server's certificate but no root certificate is configured: set \
             sslrootcert=<file> in the connection string (or CLINIC_DB_CA_FILE) to the CA certificate that \
             signed it, sslrootcert=system to trust the system's roots, or use sslmode=require to encrypt \
             without verifying",
            settings.mode.as_str()
        )));
    }
    let mut config: tokio_postgres::Config =
        info.to_string().parse().map_err(|e: tokio_postgres::Error| DbError::InvalidUrl(describe(&e)))?;
    config.ssl_mode(settings.mode.wire());
    Ok((config, settings))
}

/// The error text with its causes (tokio-postgres' `Display` shows only the kind).
pub fn describe(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Builds the connector for `settings`.
pub fn connector(settings: &TlsSettings) -> Result<ClinicTls, DbError> {
    let mut builder = native_tls::TlsConnector::builder();
    match settings.verification() {
        Verification::None => {
            builder.danger_accept_invalid_certs(true).danger_accept_invalid_hostnames(true);
        }
        Verification::Chain => {
            builder.danger_accept_invalid_hostnames(true);
        }
        Verification::Full => {}
    }
    if let (Some(path), true) = (&settings.root_cert, settings.verification() != Verification::None) {
        builder.disable_built_in_roots(true);
        for certificate in read_roots(path)? {
            builder.add_root_certificate(certificate);
        }
    }
    let inner = builder.build().map_err(|e| DbError::Tls(e.to_string()))?;
    Ok(ClinicTls { inner: MakeTlsConnector::new(inner), settings: settings.clone() })
}

fn read_roots(path: &str) -> Result<Vec<native_tls::Certificate>, DbError> {
    let pem = std::fs::read_to_string(path).map_err(|e| {
        DbError::Tls(format!("reading the root certificate {path} (sslrootcert / CLINIC_DB_CA_FILE): {e}"))
    })?;
    // A bundle (such as the RDS one) holds many certificates; trust every one of them.
    let blocks = split_pem_certificates(&pem);
    if blocks.is_empty() {
        return Err(DbError::Tls(format!(
            "{path} holds no PEM certificate (sslrootcert / CLINIC_DB_CA_FILE)"
        )));
    }
    blocks
        .iter()
        .map(|block| {
            native_tls::Certificate::from_pem(block.as_bytes())
                .map_err(|e| DbError::Tls(format!("parsing {path}: {e}")))
        })
        .collect()
}

/// The `-----BEGIN CERTIFICATE-----` … `-----END CERTIFICATE-----` blocks of a PEM file, in order.
pub(super) fn split_pem_certificates(pem: &str) -> Vec<String> {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let mut blocks = Vec::new();
    let mut rest = pem;
    while let Some(start) = rest.find(BEGIN) {
        let Some(length) = rest[start..].find(END) else { break };
        let end = start + length + END.len();
        blocks.push(format!("{}\n", &rest[start..end]));
        rest = &rest[end..];
    }
    blocks
}

/// A native-tls connector whose handshake errors say which setting to change.
#[derive(Clone)]
pub struct ClinicTls {
    inner: MakeTlsConnector,
    settings: TlsSettings,
}

impl std::fmt::Debug for ClinicTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClinicTls").field("settings", &self.settings).finish()
    }
}

/// A failed TLS handshake, with the fix.
#[derive(Debug, thiserror::Error)]
#[error("{detail} (sslmode={mode}): {hint}", mode = .mode.as_str())]
pub struct HandshakeError {
    mode: SslMode,
    detail: String,
    hint: &'static str,
}

impl HandshakeError {
    fn new(settings: &TlsSettings, error: native_tls::Error) -> Self {
        let mismatch = error.to_string().contains("mismatch");
        let hint = match (settings.verification(), settings.root_cert.is_some()) {
            (Verification::None, _) => "check that the server speaks TLS, or use sslmode=disable",
            (Verification::Full, true) if mismatch => {
                "the server's certificate does not name this host; connect with the host name it was \
                 issued for, or use sslmode=verify-ca to check only the certificate chain"
            }
            (Verification::Full, false) => {
                "the server's certificate is not trusted for this host; set sslrootcert=<file> in the \
                 connection string (or CLINIC_DB_CA_FILE) to the CA certificate that signed it and connect \
                 with the host name it was issued for, or use sslmode=require to encrypt without verifying"
            }
            (_, false) => {
                "the server's certificate is not signed by a trusted root; set sslrootcert=<file> in the \
                 connection string (or CLINIC_DB_CA_FILE) to the CA certificate that signed it, or use \
                 sslmode=require to encrypt without verifying"
            }
            (_, true) => {
                "the server's certificate is not signed by the configured root certificate (sslrootcert / \
                 CLINIC_DB_CA_FILE); point it at the CA that signed the server's certificate, or use \
                 sslmode=require without a root certificate to encrypt without verifying"
            }
        };
        HandshakeError { mode: settings.mode, detail: format!("TLS handshake failed: {error}"), hint }
    }
}

impl<S> MakeTlsConnect<S> for ClinicTls
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = TlsStream<S>;
    type TlsConnect = ClinicTlsConnect;
    type Error = native_tls::Error;

    fn make_tls_connect(&mut self, domain: &str) -> Result<ClinicTlsConnect, native_tls::Error> {
        let inner = <MakeTlsConnector as MakeTlsConnect<S>>::make_tls_connect(&mut self.inner, domain)?;
        Ok(ClinicTlsConnect { inner, settings: self.settings.clone() })
    }
}

/// One handshake of [`ClinicTls`].
pub struct ClinicTlsConnect {
    inner: postgres_native_tls::TlsConnector,
    settings: TlsSettings,
}

impl<S> TlsConnect<S> for ClinicTlsConnect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = TlsStream<S>;
    type Error = HandshakeError;
    type Future = Pin<Box<dyn Future<Output = Result<TlsStream<S>, HandshakeError>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        let ClinicTlsConnect { inner, settings } = self;
        Box::pin(
            async move { inner.connect(stream).await.map_err(|error| HandshakeError::new(&settings, error)) },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(url: &str, ca_file: Option<&str>) -> TlsSettings {
        split(url, ca_file).unwrap().1
    }

    #[test]
    fn modes_map_to_the_wire_and_to_what_is_verified() {
        let cases = [
            ("postgres://h/d", SslMode::Prefer, Verification::None, tokio_postgres::config::SslMode::Prefer),
            (
                "postgres://h/d?sslmode=allow",
                SslMode::Allow,
                Verification::None,
                tokio_postgres::config::SslMode::Prefer,
            ),
            (
                "host=h sslmode=disable",
                SslMode::Disable,
                Verification::None,
                tokio_postgres::config::SslMode::Disable,
            ),
            (
                "host=h sslmode=require",
                SslMode::Require,
                Verification::None,
                tokio_postgres::config::SslMode::Require,
            ),
            (
                "postgres://h/d?sslmode=verify-ca&sslrootcert=%2Fca.pem",
                SslMode::VerifyCa,
                Verification::Chain,
                tokio_postgres::config::SslMode::Require,
            ),
            (
                "host=h sslmode=verify-full sslrootcert=/ca.pem",
                SslMode::VerifyFull,
                Verification::Full,
                tokio_postgres::config::SslMode::Require,
            ),
            (
                "host=h sslrootcert=system",
                SslMode::VerifyFull,
                Verification::Full,
                tokio_postgres::config::SslMode::Require,
            ),
        ];
        for (url, mode, verification, wire) in cases {
            let (config, tls) = split(url, None).unwrap();
            assert_eq!(
                (tls.mode, tls.verification(), config.get_ssl_mode()),
                (mode, verification, wire),
                "{url}"
            );
        }
    }

    #[test]
    fn a_root_certificate_makes_require_check_the_chain() {
        let from_url =
            settings("postgres://h/d?sslmode=require&sslrootcert=%2Fetc%2Fca.pem", Some("/other.pem"));
        assert_eq!(
            from_url.root_cert.as_deref(),
            Some("/etc/ca.pem"),
            "the string wins over CLINIC_DB_CA_FILE"
        );
        assert_eq!(from_url.verification(), Verification::Chain);
        let from_ca_file = settings("host=h sslmode=require", Some("/rds.pem"));
        assert_eq!(
            (from_ca_file.root_cert.as_deref(), from_ca_file.verification()),
            (Some("/rds.pem"), Verification::Chain)
        );
        let system = settings("host=h sslmode=verify-full sslrootcert=system", Some("/rds.pem"));
        assert_eq!((system.root_cert.as_deref(), system.verification()), (None, Verification::Full));
        let weaker = split("host=h sslmode=require sslrootcert=system", None).unwrap_err().to_string();
        assert!(weaker.contains("needs sslmode=verify-full"), "{weaker}");
    }

    #[test]
    fn verifying_without_a_root_certificate_is_refused_before_connecting() {
        for url in ["postgres://h/d?sslmode=verify-full", "host=h sslmode=verify-ca"] {
            let error = split(url, None).unwrap_err().to_string();
            for needle in
                ["no root certificate", "sslrootcert=<file>", "CLINIC_DB_CA_FILE", "sslmode=require"]
            {
                assert!(error.contains(needle), "{url}: {error}");
            }
        }
    }

    #[test]
    fn unknown_modes_are_refused_with_the_choices() {
        let error = split("postgres://h/d?sslmode=verify", None).unwrap_err().to_string();
        assert!(error.contains("sslmode=verify is not one of"), "{error}");
        assert!(split("host=h bogus=1", None).is_err());
    }

    #[test]
    fn a_pem_bundle_is_split_into_every_certificate() {
        let bundle = "junk\n-----BEGIN CERTIFICATE-----\nAAA\n-----END CERTIFICATE-----\n\
                      -----BEGIN CERTIFICATE-----\nBBB\n-----END CERTIFICATE-----\n";
        let blocks = split_pem_certificates(bundle);
        assert_eq!(blocks.len(), 2);
        assert!(blocks[1].contains("BBB") && blocks[1].starts_with("-----BEGIN"));
    }
}
