//! IAM database authentication (docs/secret-rotation.md): the password of each connection is a
//! token — a SigV4-presigned `connect` request for the database user — made from the function's
//! own role credentials, so no password exists anywhere to leak, store or rotate.
//!
//! Invariants:
//! - A token is made for every connection ([`LoginSource::per_connection`]) and lives 15 minutes
//!   at most (RDS checks it at login only; an open connection outlives it).
//! - The token is made locally (no network call beyond the SDK's credential provider, which
//!   caches the role's credentials); it is never logged: [`Login`]'s `Debug` redacts it.
//! - A token is a bearer credential, so the pool refuses a connection string without TLS
//!   (`clinic_core::db::connect_pool_as`).
//! - The signature is the SDK's own SigV4 signer's (`aws-sigv4`); a test compares the whole token
//!   with botocore's `generate_db_auth_token`.

use std::time::{Duration, SystemTime};

use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_credential_types::Credentials;
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SignatureLocation, SigningSettings};
use aws_sigv4::sign::v4;
use clinic_core::db::login::{BoxFuture, Login, LoginError, LoginSource};

/// How long a token is valid: RDS accepts at most 15 minutes.
pub const TOKEN_LIFETIME: Duration = Duration::from_secs(900);

/// Makes IAM authentication tokens for one database user at one endpoint.
#[derive(Debug, Clone)]
pub struct IamDbAuth {
    host: String,
    port: u16,
    user: String,
    region: String,
    credentials: SharedCredentialsProvider,
}

impl IamDbAuth {
    /// Tokens for `user` at `host:port`, signed for `region` with `credentials`.
    pub fn new(
        host: impl Into<String>,
        port: u16,
        user: impl Into<String>,
        region: impl Into<String>,
        credentials: SharedCredentialsProvider,
    ) -> IamDbAuth {
        IamDbAuth { host: host.into(), port, user: user.into(), region: region.into(), credentials }
    }

    /// Tokens for `user` at the server `url` names (its first host), with the SDK configuration's
    /// region and credentials (in Lambda: the function's role). `ca_file` is `CLINIC_DB_CA_FILE`.
    pub fn from_sdk(
        sdk: &aws_config::SdkConfig,
        url: &str,
        ca_file: Option<&str>,
        user: &str,
    ) -> Result<IamDbAuth, LoginError> {
        let (host, port) = endpoint(url, ca_file)?;
        let region = sdk
            .region()
            .ok_or_else(|| LoginError("IAM database authentication needs a region (AWS_REGION)".into()))?;
        let credentials = sdk.credentials_provider().ok_or_else(|| {
            LoginError("IAM database authentication needs AWS credentials (the function's role)".into())
        })?;
        Ok(IamDbAuth::new(host, port, user, region.as_ref(), credentials))
    }

    /// The token for `credentials` at `time`: `host:port/?Action=connect&DBUser=…&X-Amz-…`.
    pub fn token_at(&self, credentials: Credentials, time: SystemTime) -> Result<String, LoginError> {
        let failed = |error: &dyn std::fmt::Display| LoginError(format!("IAM database token: {error}"));
        let mut settings = SigningSettings::default();
        settings.expires_in = Some(TOKEN_LIFETIME);
        settings.signature_location = SignatureLocation::QueryParams;
        let identity = credentials.into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name("rds-db")
            .time(time)
            .settings(settings)
            .build()
            .map_err(|e| failed(&e))?;
        let query = form_urlencoded::Serializer::new(String::new())
            .append_pair("Action", "connect")
            .append_pair("DBUser", &self.user)
            .finish();
        let address = format!("{}:{}/?{query}", self.host, self.port);
        let request = SignableRequest::new(
            "GET",
            format!("https://{address}"),
            std::iter::empty(),
            SignableBody::Bytes(&[]),
        )
        .map_err(|e| failed(&e))?;
        let (instructions, _signature) = sign(request, &params.into()).map_err(|e| failed(&e))?.into_parts();
        let mut signed = form_urlencoded::Serializer::new(String::new());
        for (name, value) in instructions.params() {
            signed.append_pair(name, value);
        }
        Ok(format!("{address}&{}", signed.finish()))
    }
}

impl LoginSource for IamDbAuth {
    fn fetch(&self) -> BoxFuture<'_, Result<Login, LoginError>> {
        Box::pin(async move {
            let credentials = self
                .credentials
                .provide_credentials()
                .await
                .map_err(|e| LoginError(format!("IAM database token: no credentials: {e}")))?;
            Ok(Login::new(self.user.clone(), self.token_at(credentials, SystemTime::now())?))
        })
    }

    fn per_connection(&self) -> bool {
        true
    }
}

/// The first host and port of a connection string (either form), as RDS names them in a token.
pub fn endpoint(url: &str, ca_file: Option<&str>) -> Result<(String, u16), LoginError> {
    let (config, _tls) = clinic_core::db::tls::split(url, ca_file)
        .map_err(|e| LoginError(format!("IAM database token: {e}")))?;
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
        _ => return Err(LoginError("IAM database authentication needs a TCP host in DATABASE_URL".into())),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    Ok((host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth() -> IamDbAuth {
        let credentials =
            SharedCredentialsProvider::new(Credentials::new("AKIDEXAMPLE", "s3cr3t", None, None, "test"));
        IamDbAuth::new("db.example.internal", 5432, "clinic_login", "eu-central-1", credentials)
    }

    #[test]
    fn a_token_is_a_presigned_connect_for_the_user_valid_15_minutes() {
        let credentials = Credentials::new("AKIDEXAMPLE", "s3cr3t", None, None, "test");
        let time = SystemTime::UNIX_EPOCH + Duration::from_secs(1_780_000_000);
        let token = auth().token_at(credentials, time).unwrap();
        assert!(
            token.starts_with("db.example.internal:5432/?Action=connect&DBUser=clinic_login&"),
            "{token}"
        );
        assert!(token.contains("X-Amz-Expires=900"), "{token}");
        assert!(
            token.contains("X-Amz-Credential=AKIDEXAMPLE%2F20260528%2Feu-central-1%2Frds-db%2Faws4_request"),
            "{token}"
        );
        assert!(!token.contains("s3cr3t"));
        let later = auth()
            .token_at(
                Credentials::new("AKIDEXAMPLE", "s3cr3t", None, None, "test"),
                time + Duration::from_secs(1),
            )
            .unwrap();
        assert_ne!(token, later, "each connection's token is its own");
    }

    #[test]
    fn the_endpoint_is_read_from_either_form_of_the_connection_string() {
        let keywords = "host=db.example.internal port=6432 dbname=clinic sslmode=verify-full";
        assert_eq!(
            endpoint(keywords, Some("/opt/rds-ca.pem")).unwrap(),
            ("db.example.internal".into(), 6432)
        );
        let url = "postgres://db.example.internal/clinic?sslmode=require";
        assert_eq!(endpoint(url, None).unwrap(), ("db.example.internal".into(), 5432));
        assert!(endpoint("host=/var/run/postgresql dbname=clinic", None).is_err());
    }
}
