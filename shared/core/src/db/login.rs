//! The database login when it is not part of the connection string (docs/secret-rotation.md): in
//! AWS either an IAM authentication token generated for each connection (`CLINIC_DB_IAM_USER`, the
//! default: no password exists anywhere) or a login read from a Secrets Manager secret at start-up
//! (`CLINIC_DB_SECRET_ARN`); the connection string then names only the host, port, database and TLS
//! settings.
//!
//! Invariants:
//! - A [`LoginSource`] that is [`LoginSource::per_connection`] (IAM tokens, valid 15 minutes) is
//!   asked for a fresh login before every connection, never cached; such a login is a bearer
//!   token, so [`super::connect_pool_as`] refuses a connection string that does not require TLS.
//! - The password never leaves this module except into a connection attempt: [`Login`]'s `Debug`
//!   is redacted, it has no `Display`, and [`LoginError`] carries a reason, never the secret.
//! - A process reads the login once at start-up ([`DbLogin::start`]) and again only when PostgreSQL
//!   refuses it (SQLSTATE `28P01` invalid password, `28000` invalid authorization): then the
//!   connect that was refused re-reads it once and tries once more. A rotated password therefore
//!   needs no restart and no deploy; connections already open keep working.
//! - Re-reads are shared: concurrent connects refused under the same login wait for one read (a
//!   generation number says whether someone else already re-read), and reads are at least
//!   [`DbLogin::with_min_interval`] apart (default 1 s), so a wrong password cannot turn every
//!   connection attempt into a Secrets Manager call.
//! - Nothing here knows about AWS: the secret is read by a [`LoginSource`] its `main` built
//!   (`clinic-secrets`); locally the login stays in `DATABASE_URL` and this module is not used.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use tokio_postgres::error::SqlState;
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres::{Client, Config, Connection, Socket};

/// A boxed future, as [`LoginSource::fetch`] returns it.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A user name and its password.
#[derive(Clone, PartialEq, Eq)]
pub struct Login {
    user: String,
    password: String,
}

impl Login {
    pub fn new(user: impl Into<String>, password: impl Into<String>) -> Login {
        Login { user: user.into(), password: password.into() }
    }

    pub fn user(&self) -> &str {
        &self.user
    }

    /// `config` with this login's user and password.
    fn applied_to(&self, config: &Config) -> Config {
        let mut config = config.clone();
        config.user(&self.user).password(self.password.as_bytes());
        config
    }
}

impl std::fmt::Debug for Login {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Login").field("user", &self.user).field("password", &"<redacted>").finish()
    }
}

/// Why the login could not be read (a reason, never the secret).
#[derive(Debug, Clone, thiserror::Error)]
#[error("database login: {0}")]
pub struct LoginError(pub String);

/// Where the login is read from (an IAM token or Secrets Manager in AWS; a fixed value in tests).
pub trait LoginSource: Send + Sync + 'static {
    fn fetch(&self) -> BoxFuture<'_, Result<Login, LoginError>>;

    /// Whether every connection needs a login of its own (short-lived tokens): then it is fetched
    /// before each connect and never re-read on a refusal (a fresh token was just refused).
    fn per_connection(&self) -> bool {
        false
    }
}

/// The login in use, shared by every connection of a process (the pool and the `LISTEN` one).
#[derive(Clone)]
pub struct DbLogin {
    inner: Arc<Inner>,
}

struct Inner {
    source: Box<dyn LoginSource>,
    current: RwLock<Current>,
    reread: tokio::sync::Mutex<()>,
    min_interval: Duration,
}

#[derive(Clone)]
struct Current {
    generation: u64,
    login: Arc<Login>,
    read_at: Instant,
}

impl std::fmt::Debug for DbLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DbLogin").field("reads", &self.reads()).finish_non_exhaustive()
    }
}

impl DbLogin {
    /// Reads the login once (start-up): a source that cannot be read stops the process.
    pub async fn start(source: impl LoginSource) -> Result<DbLogin, LoginError> {
        let login = source.fetch().await?;
        let current = Current { generation: 1, login: Arc::new(login), read_at: Instant::now() };
        Ok(DbLogin {
            inner: Arc::new(Inner {
                source: Box::new(source),
                current: RwLock::new(current),
                reread: tokio::sync::Mutex::new(()),
                min_interval: Duration::from_secs(1),
            }),
        })
    }

    /// Re-reads at least `interval` apart (tests use zero). Call before sharing the login.
    pub fn with_min_interval(self, interval: Duration) -> DbLogin {
        match Arc::try_unwrap(self.inner) {
            Ok(mut inner) => {
                inner.min_interval = interval;
                DbLogin { inner: Arc::new(inner) }
            }
            Err(inner) => DbLogin { inner },
        }
    }

    /// How many times the source was read (start-up included).
    pub fn reads(&self) -> u64 {
        self.current().generation
    }

    /// Whether each connection gets a login of its own (see [`LoginSource::per_connection`]).
    pub fn per_connection(&self) -> bool {
        self.inner.source.per_connection()
    }

    /// A fresh login for one connection (per-connection sources), counted like a read.
    async fn fresh(&self) -> Result<Arc<Login>, LoginError> {
        let login = Arc::new(self.inner.source.fetch().await?);
        let mut current = self.inner.current.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        *current = Current {
            generation: current.generation + 1,
            login: Arc::clone(&login),
            read_at: Instant::now(),
        };
        Ok(login)
    }

    /// The user of the login in use.
    pub fn user(&self) -> String {
        self.current().login.user.clone()
    }

    fn current(&self) -> Current {
        self.inner.current.read().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    /// The login after `refused` was refused: read again, unless another connect already did (or
    /// the last read is too recent).
    async fn reread(&self, refused: u64) -> Result<Arc<Login>, LoginError> {
        let _one_at_a_time = self.inner.reread.lock().await;
        let current = self.current();
        if current.generation != refused || current.read_at.elapsed() < self.inner.min_interval {
            return Ok(current.login);
        }
        let login = Arc::new(self.inner.source.fetch().await?);
        let next = Current { generation: refused + 1, login: Arc::clone(&login), read_at: Instant::now() };
        *self.inner.current.write().unwrap_or_else(|poisoned| poisoned.into_inner()) = next;
        tracing::info!(generation = refused + 1, "database login re-read after PostgreSQL refused it");
        Ok(login)
    }

    /// Connects as the current login; when PostgreSQL refuses it, re-reads it once and tries once
    /// more. A failed re-read is logged and the refusal returned. A per-connection source is asked
    /// for a fresh login first; when it cannot make one (credentials unavailable), the last login
    /// it made is tried and the failure logged.
    pub async fn connect<T>(
        &self,
        config: &Config,
        tls: T,
    ) -> Result<(Client, Connection<Socket, T::Stream>), tokio_postgres::Error>
    where
        T: MakeTlsConnect<Socket> + Clone,
    {
        if self.per_connection() {
            let login = match self.fresh().await {
                Ok(login) => login,
                Err(error) => {
                    // The last token made may still be valid (15 minutes); PostgreSQL decides.
                    tracing::warn!(error = %error, "no fresh database login could be made; trying the last one");
                    self.current().login
                }
            };
            return login.applied_to(config).connect(tls).await;
        }
        let current = self.current();
        match current.login.applied_to(config).connect(tls.clone()).await {
            Err(error) if refused(&error) => match self.reread(current.generation).await {
                Ok(login) => login.applied_to(config).connect(tls).await,
                Err(read_error) => {
                    tracing::warn!(error = %read_error, "database login refused; re-reading it failed");
                    Err(error)
                }
            },
            other => other,
        }
    }
}

/// PostgreSQL refused the login (wrong or rotated password, unknown user).
pub fn refused(error: &tokio_postgres::Error) -> bool {
    matches!(
        error.code(),
        Some(code) if *code == SqlState::INVALID_PASSWORD
            || *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION
    )
}

/// A fixed login (tests; a source that never changes).
#[derive(Debug, Clone)]
pub struct FixedLogin(pub Login);

impl LoginSource for FixedLogin {
    fn fetch(&self) -> BoxFuture<'_, Result<Login, LoginError>> {
        let login = self.0.clone();
        Box::pin(async move { Ok(login) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_password_is_never_shown() {
        let login = Login::new("clinic_login", "hunter2-very-secret");
        let shown = format!("{login:?}");
        assert!(shown.contains("clinic_login"));
        assert!(!shown.contains("hunter2"), "{shown}");
    }
}
