//! Database connections and the embedded migrations runner.
//!
//! Invariants:
//! - A process builds its pool once at start-up ([`connect_pool`]); handlers borrow connections from it
//!   and never connect themselves. A broken connection is dropped by the pool's recycle check and
//!   replaced on the next checkout.
//! - The login is in the connection string locally; in AWS it comes from a secret ([`login`]), read
//!   at start-up and re-read when PostgreSQL refuses it, for the pool and the `LISTEN` connection
//!   alike ([`connect_pool_as`], [`connect_single_as`]).
//! - TLS follows libpq's `sslmode` (default `prefer`) and `sslrootcert` in either connection-string
//!   form, with `CLINIC_DB_CA_FILE` (e.g. the RDS bundle) as the root certificate when the string
//!   names none ([`tls`]). Connection strings are edited only through [`conninfo`].
//! - Migrations are forward-only: each applied file's checksum is recorded, and a file that changed
//!   after it was applied stops the runner instead of being silently skipped. Concurrent runners
//!   serialise on an advisory lock.

use std::error::Error as _;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use sha2::{Digest, Sha256};
use tokio_postgres::Client;

pub mod conninfo;
pub mod login;
pub mod sql;
pub mod timeouts;
pub mod tls;

pub use conninfo::{redact, with_database, with_role};
pub use login::DbLogin;
pub use timeouts::SessionTimeouts;

/// A pooled connection.
pub type Conn = deadpool_postgres::Object;
/// A transaction on a pooled connection; repositories take `&Tx<'_>` (or any `GenericClient`).
pub type Tx<'a> = deadpool_postgres::Transaction<'a>;

/// Why the database could not be reached or prepared.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("invalid database URL: {0}")]
    InvalidUrl(String),
    #[error("database TLS: {0}")]
    Tls(String),
    #[error("database session settings: {0}")]
    Settings(#[from] crate::config::ConfigError),
    #[error("could not build the connection pool: {0}")]
    Pool(String),
    #[error("could not get a database connection: {0}")]
    Checkout(#[from] deadpool_postgres::PoolError),
    #[error("database error: {0}")]
    Postgres(#[from] tokio_postgres::Error),
    #[error("migration V{version} was changed after it was applied (checksum mismatch)")]
    MigrationChanged { version: i32 },
}

/// Builds a pool of `max_size` connections. Connections are opened lazily, on first checkout. Every
/// session of the pool is an application session: it gets the default [`SessionTimeouts`] (10 s / 3 s
/// / 15 s) unless the URL's own `options` set them.
pub fn connect_pool(url: &str, max_size: usize, ca_file: Option<&str>) -> Result<Pool, DbError> {
    connect_pool_as(url, max_size, ca_file, None, &SessionTimeouts::default())
}

/// [`connect_pool`], logging in as `login` (when given) instead of the URL's user and password, with
/// the `timeouts` the process was configured with ([`SessionTimeouts::read`]).
pub fn connect_pool_as(
    url: &str,
    max_size: usize,
    ca_file: Option<&str>,
    login: Option<&DbLogin>,
    timeouts: &SessionTimeouts,
) -> Result<Pool, DbError> {
    let (mut config, settings) = tls::split(url, ca_file)?;
    tokens_need_tls(login, &settings)?;
    if config.get_application_name().is_none() {
        config.application_name("clinic");
    }
    timeouts.apply(&mut config);
    config.connect_timeout(Duration::from_secs(5));
    let connect = PoolConnect { tls: tls::connector(&settings)?, login: login.cloned() };
    let manager =
        Manager::from_connect(config, connect, ManagerConfig { recycling_method: RecyclingMethod::Fast });
    Pool::builder(manager)
        .max_size(max_size)
        .wait_timeout(Some(Duration::from_secs(10)))
        .create_timeout(Some(Duration::from_secs(5)))
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .build()
        .map_err(|e| DbError::Pool(e.to_string()))
}

/// A per-connection login (an IAM token) is a bearer credential: it is sent only over TLS.
fn tokens_need_tls(login: Option<&DbLogin>, settings: &tls::TlsSettings) -> Result<(), DbError> {
    if login.is_some_and(DbLogin::per_connection) && !settings.mode.requires_tls() {
        return Err(DbError::Tls(format!(
            "IAM database authentication sends a token as the password, so DATABASE_URL needs \
             sslmode=require, verify-ca or verify-full (it has sslmode={})",
            settings.mode.as_str()
        )));
    }
    Ok(())
}

/// How the pool opens a connection: as the URL says, or as the current [`DbLogin`].
struct PoolConnect {
    tls: tls::ClinicTls,
    login: Option<DbLogin>,
}

impl deadpool_postgres::Connect for PoolConnect {
    fn connect(
        &self,
        config: &tokio_postgres::Config,
    ) -> login::BoxFuture<'_, Result<(Client, tokio::task::JoinHandle<()>), tokio_postgres::Error>> {
        let config = config.clone();
        Box::pin(async move {
            let (client, connection) = match &self.login {
                Some(login) => login.connect(&config, self.tls.clone()).await?,
                None => config.connect(self.tls.clone()).await?,
            };
            let task = tokio::spawn(async move {
                if let Err(error) = connection.await {
                    tracing::warn!(error = %error, "pooled database connection ended");
                }
            });
            Ok((client, task))
        })
    }
}

/// Opens one dedicated connection (for LISTEN, migrations and owner maintenance), driving it on a
/// spawned task. Notifications are forwarded to `notifications` when given. It does not get the
/// application's [`SessionTimeouts`] (see [`timeouts`]); its URL may set any it wants.
pub async fn connect_single(
    url: &str,
    ca_file: Option<&str>,
    notifications: Option<tokio::sync::mpsc::UnboundedSender<tokio_postgres::Notification>>,
) -> Result<Client, DbError> {
    connect_single_as(url, ca_file, None, notifications).await
}

/// [`connect_single`], logging in as `login` (when given) instead of the URL's user and password.
pub async fn connect_single_as(
    url: &str,
    ca_file: Option<&str>,
    login: Option<&DbLogin>,
    notifications: Option<tokio::sync::mpsc::UnboundedSender<tokio_postgres::Notification>>,
) -> Result<Client, DbError> {
    use futures::StreamExt;
    let (mut config, settings) = tls::split(url, ca_file)?;
    tokens_need_tls(login, &settings)?;
    config.connect_timeout(Duration::from_secs(5));
    let tls = tls::connector(&settings)?;
    let connected = match login {
        Some(login) => login.connect(&config, tls).await,
        None => config.connect(tls).await,
    };
    let (client, mut connection) = connected.map_err(|error| {
        // tokio-postgres' `Display` hides the cause; a handshake failure's cause says what to change.
        if error.source().is_some_and(|cause| cause.is::<tls::HandshakeError>()) {
            DbError::Tls(tls::describe(&error))
        } else {
            DbError::Postgres(error)
        }
    })?;
    tokio::spawn(async move {
        let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(message) = messages.next().await {
            match message {
                Ok(tokio_postgres::AsyncMessage::Notification(notification)) => {
                    if let Some(sender) = &notifications {
                        let _ = sender.send(notification);
                    }
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(error = %error, "database connection ended");
                    break;
                }
            }
        }
    });
    Ok(client)
}

/// One embedded migration file.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    pub version: i32,
    pub name: &'static str,
    pub sql: &'static str,
}

/// Every migration, in order. A test checks this list against the files in `migrations/`.
pub const MIGRATIONS: &[Migration] = &[
    Migration { version: 1, name: "schema", sql: include_str!("../../../../migrations/V1__schema.sql") },
    Migration { version: 2, name: "app_role", sql: include_str!("../../../../migrations/V2__app_role.sql") },
    Migration {
        version: 3,
        name: "workspace_settings_and_disclosures",
        sql: include_str!("../../../../migrations/V3__workspace_settings_and_disclosures.sql"),
    },
    Migration {
        version: 4,
        name: "notifications_by_created_at",
        sql: include_str!("../../../../migrations/V4__notifications_by_created_at.sql"),
    },
    Migration {
        version: 5,
        name: "notification_delivery",
        sql: include_str!("../../../../migrations/V5__notification_delivery.sql"),
    },
    Migration {
        version: 6,
        name: "privacy_privileges_and_operator_index",
        sql: include_str!("../../../../migrations/V6__privacy_privileges_and_operator_index.sql"),
    },
    Migration {
        version: 7,
        name: "staff_lists",
        sql: include_str!("../../../../migrations/V7__staff_lists.sql"),
    },
    Migration {
        version: 8,
        name: "custody_and_timeouts",
        sql: include_str!("../../../../migrations/V8__custody_and_timeouts.sql"),
    },
    Migration {
        version: 9,
        name: "operator_console",
        sql: include_str!("../../../../migrations/V9__operator_console.sql"),
    },
    Migration {
        version: 10,
        name: "operator_history",
        sql: include_str!("../../../../migrations/V10__operator_history.sql"),
    },
    Migration {
        version: 11,
        name: "event_contract",
        sql: include_str!("../../../../migrations/V11__event_contract.sql"),
    },
    Migration {
        version: 12,
        name: "webhooks",
        sql: include_str!("../../../../migrations/V12__webhooks.sql"),
    },
    Migration {
        version: 13,
        name: "custody_per_event",
        sql: include_str!("../../../../migrations/V13__custody_per_event.sql"),
    },
    Migration {
        version: 14,
        name: "event_links_without_foreign_keys",
        sql: include_str!("../../../../migrations/V14__event_links_without_foreign_keys.sql"),
    },
    Migration {
        version: 15,
        name: "claim_token_only_while_claimed",
        sql: include_str!("../../../../migrations/V15__claim_token_only_while_claimed.sql"),
    },
    Migration {
        version: 16,
        name: "erasure_is_final",
        sql: include_str!("../../../../migrations/V16__erasure_is_final.sql"),
    },
    Migration {
        version: 17,
        name: "notification_stale",
        sql: include_str!("../../../../migrations/V17__notification_stale.sql"),
    },
    Migration {
        version: 18,
        name: "notification_retention",
        sql: include_str!("../../../../migrations/V18__notification_retention.sql"),
    },
    Migration {
        version: 19,
        name: "operator_wait_indexes",
        sql: include_str!("../../../../migrations/V19__operator_wait_indexes.sql"),
    },
    Migration {
        version: 20,
        name: "event_trace_context",
        sql: include_str!("../../../../migrations/V20__event_trace_context.sql"),
    },
    Migration {
        version: 21,
        name: "lease_queue_operator_actions",
        sql: include_str!("../../../../migrations/V21__lease_queue_operator_actions.sql"),
    },
    Migration {
        version: 22,
        name: "contact_policy",
        sql: include_str!("../../../../migrations/V22__contact_policy.sql"),
    },
    Migration {
        version: 23,
        name: "fair_delivery",
        sql: include_str!("../../../../migrations/V23__fair_delivery.sql"),
    },
    Migration {
        version: 24,
        name: "verifiable_subscriptions",
        sql: include_str!("../../../../migrations/V24__verifiable_subscriptions.sql"),
    },
    Migration {
        version: 25,
        name: "fair_pick_index",
        sql: include_str!("../../../../migrations/V25__fair_pick_index.sql"),
    },
];

const MIGRATION_LOCK_KEY: i64 = 0x636c_696e_6963; // "clinic"

fn checksum(sql: &str) -> String {
    let digest = Sha256::digest(sql.as_bytes());
    digest.iter().map(|byte| format!("{byte:02x}")).collect()
}

const LOCK_MIGRATIONS: &str = "SELECT pg_advisory_lock($1)";
const UNLOCK_MIGRATIONS: &str = "SELECT pg_advisory_unlock($1)";

/// Applies every migration not yet applied, each in its own transaction. Returns the versions applied.
pub async fn migrate(client: &mut Client) -> Result<Vec<i32>, DbError> {
    client.execute(LOCK_MIGRATIONS, &[&MIGRATION_LOCK_KEY]).await?;
    let result = apply_pending(client).await;
    client.execute(UNLOCK_MIGRATIONS, &[&MIGRATION_LOCK_KEY]).await?;
    result
}

const CREATE_SCHEMA_MIGRATIONS: &str = "CREATE TABLE IF NOT EXISTS schema_migrations (
     version integer PRIMARY KEY,
     name text NOT NULL,
     checksum text NOT NULL,
     applied_at timestamptz NOT NULL DEFAULT now()
 )";
const APPLIED_CHECKSUM: &str = "SELECT checksum FROM schema_migrations WHERE version = $1";
const RECORD_MIGRATION: &str = "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)";

async fn apply_pending(client: &mut Client) -> Result<Vec<i32>, DbError> {
    client.batch_execute(CREATE_SCHEMA_MIGRATIONS).await?;
    let mut applied = Vec::new();
    for migration in MIGRATIONS {
        let row = client.query_opt(APPLIED_CHECKSUM, &[&migration.version]).await?;
        let expected = checksum(migration.sql);
        match row {
            Some(row) => {
                let recorded: String = row.get(0);
                if recorded != expected {
                    return Err(DbError::MigrationChanged { version: migration.version });
                }
            }
            None => {
                let tx = client.transaction().await?;
                tx.batch_execute(migration.sql).await?;
                tx.execute(RECORD_MIGRATION, &[&migration.version, &migration.name, &expected]).await?;
                tx.commit().await?;
                tracing::info!(version = migration.version, name = migration.name, "migration applied");
                applied.push(migration.version);
            }
        }
    }
    Ok(applied)
}

/// True for errors worth retrying: a lost connection, a serialization failure or deadlock, or the
/// server shutting down or starting up.
pub fn is_transient(error: &tokio_postgres::Error) -> bool {
    use tokio_postgres::error::SqlState;
    match error.code() {
        None => true,
        Some(code) => {
            *code == SqlState::T_R_SERIALIZATION_FAILURE
                || *code == SqlState::T_R_DEADLOCK_DETECTED
                || *code == SqlState::ADMIN_SHUTDOWN
                || *code == SqlState::CRASH_SHUTDOWN
                || *code == SqlState::CANNOT_CONNECT_NOW
                || *code == SqlState::TOO_MANY_CONNECTIONS
                || code.code().starts_with("08")
        }
    }
}

/// The name of the constraint a database error violated, if any.
/// The constraint name migration V16's triggers report when a write would touch an erased patient
/// (personal fields, reasons, times or un-deleting): a final refusal, never a server error.
pub const PATIENT_ERASED: &str = "patient_erased";

pub fn violated_constraint(error: &tokio_postgres::Error) -> Option<&str> {
    error.as_db_error().and_then(|db| db.constraint())
}

/// `url` (either form) with `-c role=<role>` added to its `options`, so every session of a pool runs
/// as that role (the login user must be allowed to `SET ROLE` to it).
pub fn url_with_role(url: &str, role: &str) -> String {
    with_role(url, role)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migration_list_matches_the_migrations_folder() {
        let folder = concat!(env!("CARGO_MANIFEST_DIR"), "/../../migrations");
        let mut files: Vec<String> = std::fs::read_dir(folder)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.ends_with(".sql"))
            .collect();
        files.sort_by_key(|name| name[1..name.find("__").unwrap()].parse::<i32>().unwrap());
        let listed: Vec<String> =
            MIGRATIONS.iter().map(|m| format!("V{}__{}.sql", m.version, m.name)).collect();
        assert_eq!(files, listed);
        assert!(MIGRATIONS.windows(2).all(|pair| pair[1].version == pair[0].version + 1));
    }
}
