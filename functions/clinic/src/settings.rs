//! Local settings of the `clinic` binary: one [`Settings`] tree read once by `main` from the
//! environment it captured ([`Settings::read`]), installed for the subcommands ([`install`],
//! [`current`]); nothing below `main` reads the environment.
//!
//! - `CLINIC_DATA_DIR` (default `.local`): the git-ignored folder holding the dev PostgreSQL cluster
//!   and the generated token secret; kept between runs.
//! - `DATABASE_URL`: when set, used instead of the dev cluster.
//! - `CLINIC_PG_PORT` (default 55432): the dev cluster's port. An ephemeral cluster takes a free
//!   port unless this is set.
//! - `CLINIC_PG_EPHEMERAL=1` (or `clinic dev --ephemeral`): a throwaway cluster with the fast settings
//!   (fsync off) in `<data dir>/pgdata-ephemeral`, wiped on exit, instead of the durable one.
//! - `CLINIC_WEBHOOK_KEY_FILE`: the key that seals webhook signing secrets; when unset,
//!   `<data dir>/webhook-secret-key`, created (mode 0600) on first use and reused after.
//! - `CLINIC_JWT_SECRET`: HS256 secret; when unset, a random one is generated once into
//!   `<data dir>/jwt-secret` so tokens keep working across restarts.
//!
//! Invariants:
//! - Every variable any subcommand uses is read by [`Settings::read`], at start-up, whatever the
//!   subcommand: a bad value stops the binary with an error naming the variable. The conditional
//!   reads follow the environment (the SQS queues only with `CLINIC_TRANSPORT=sqs`).
//! - The tree is installed once per process, by a `main` (`clinic`, `clinic-drill`), before any
//!   subcommand runs; the subcommands (two dozen operator helpers sharing [`database`] and the pool)
//!   read it through [`current`] instead of threading it through every helper.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::Context;
use clinic_core::config::{ConfigError, Env};
use clinic_core::db::SessionTimeouts;
use clinic_core::delivery::unsubscribe::LinkSettings;
use clinic_core::delivery::DeliveryConfig;
use clinic_core::dispatch::{DispatchConfig, LocalTransport};
use clinic_core::housekeeping::reconcile::ReconcileConfig;
use clinic_core::housekeeping::reminders::ReminderConfig;
use clinic_core::housekeeping::retention::RetentionConfig;
use clinic_core::telemetry::emf::MetricsMode;
use clinic_core::telemetry::TelemetryConfig;
use clinic_core::webhooks::secret_box::KeySource;
use clinic_core::webhooks::WebhookConfig;
use clinic_http::{ApiSettings, LocalKeys};
use clinic_listener::ListenerConfig;
use clinic_sqs::SqsConfig;

use crate::local_pg::{Durability, LocalPostgres};

/// Everything the `clinic` binary reads from its environment.
#[derive(Debug)]
pub struct Settings {
    pub data_dir: PathBuf,
    /// `DATABASE_URL`: when set, used instead of the dev cluster (never started or stopped).
    pub database_url: Option<String>,
    /// `CLINIC_PG_PORT` when set.
    pub pg_port: Option<u16>,
    /// `CLINIC_PG_EPHEMERAL`.
    pub ephemeral: bool,
    /// `CLINIC_PG_BIN`: the folder holding `initdb` and `pg_ctl`.
    pub pg_bin: Option<PathBuf>,
    /// `PATH`, searched for `initdb` and `pg_ctl`.
    pub path: Option<String>,
    /// `CLINIC_DB_CA_FILE`, else libpq's default root certificate when it exists.
    pub ca_file: Option<String>,
    pub db_timeouts: SessionTimeouts,
    /// `CLINIC_JWT_SECRET` (else the data folder's `jwt-secret`).
    pub jwt_secret: Option<String>,
    /// `CLINIC_WEBHOOK_KEY_FILE`, else `<data dir>/webhook-secret-key`.
    pub webhook_key: KeySource,
    pub telemetry: TelemetryConfig,
    pub api: ApiSettings,
    pub local_keys: LocalKeys,
    pub dispatch: DispatchConfig,
    /// Loopback http allowed with `CLINIC_WEBHOOKS_ALLOW_LOOPBACK_HTTP=1` (local only).
    pub webhooks: WebhookConfig,
    /// Default notifier `file`, into `<data dir>/mail` unless `CLINIC_DELIVERY_DIR`.
    pub delivery: DeliveryConfig,
    pub links: LinkSettings,
    /// `CLINIC_AWS_ENDPOINT`: an emulator for SES and SNS.
    pub aws_endpoint: Option<String>,
    /// `CLINIC_PORT` (default 3000): where `clinic dev` serves (the links of `clinic deliveries send`).
    pub port: u16,
    /// `CLINIC_TRANSPORT` (default `local`).
    pub transport: String,
    /// `CLINIC_SQS_ENDPOINT`.
    pub sqs_endpoint: Option<String>,
    /// The SQS settings, read only with `CLINIC_TRANSPORT=sqs` (missing queues: `clinic dev` creates
    /// its own on the endpoint).
    pub sqs: Option<Result<SqsConfig, ConfigError>>,
    /// `CLINIC_CLOUDEVENTS_SOURCE` (default `/clinic`) and the listener handler's deadline margin.
    pub listener: ListenerConfig,
    /// `CLINIC_LOCAL_LISTENER_TIMEOUT_MS` (default 25000, 100–600000): the bound of one in-process
    /// listener run, its after-commit step included.
    pub local_listener_timeout: Duration,
    pub metrics: MetricsMode,
    pub reconcile: ReconcileConfig,
    pub reminders: ReminderConfig,
    pub retention: RetentionConfig,
    /// `CLINIC_SCHEMA_BASE_URL` (checked): wins over the address `clinic dev` listens on.
    pub schema_base: Option<String>,
}

impl Settings {
    pub fn read(env: &Env) -> anyhow::Result<Settings> {
        let data_dir = PathBuf::from(env.var("CLINIC_DATA_DIR").unwrap_or_else(|| ".local".into()));
        let pg_port = match env.var("CLINIC_PG_PORT") {
            Some(_) => Some(env.parsed("CLINIC_PG_PORT", 0u16)?),
            None => None,
        };
        let mut delivery = DeliveryConfig::read(env, "file")?;
        if env.var("CLINIC_DELIVERY_DIR").is_none() {
            delivery.file_dir = data_dir.join("mail");
        }
        let transport = env.var("CLINIC_TRANSPORT").unwrap_or_else(|| "local".into());
        let sqs = (transport == "sqs").then(|| SqsConfig::read(env));
        let local_default = LocalTransport::DEFAULT_RUN_TIMEOUT.as_millis() as u64;
        Ok(Settings {
            database_url: env.var("DATABASE_URL"),
            pg_port,
            ephemeral: ephemeral(env)?,
            pg_bin: env.var("CLINIC_PG_BIN").map(PathBuf::from),
            path: env.var("PATH"),
            ca_file: clinic_core::config::DatabaseConfig::read_ca_file(env),
            db_timeouts: SessionTimeouts::read(env)?,
            jwt_secret: env.var("CLINIC_JWT_SECRET"),
            webhook_key: KeySource::read(env, Some(data_dir.join("webhook-secret-key")))?,
            telemetry: TelemetryConfig::read(env),
            api: ApiSettings::read_local(env)?,
            local_keys: LocalKeys::read(env)?,
            dispatch: DispatchConfig::read(env)?,
            webhooks: WebhookConfig::read(env, true)?,
            delivery,
            links: LinkSettings::read(env)?,
            aws_endpoint: env.var("CLINIC_AWS_ENDPOINT"),
            port: env.parsed("CLINIC_PORT", 3000u16)?,
            transport,
            sqs_endpoint: env.var("CLINIC_SQS_ENDPOINT"),
            sqs,
            listener: ListenerConfig::read(env)?,
            local_listener_timeout: env.millis(
                "CLINIC_LOCAL_LISTENER_TIMEOUT_MS",
                local_default,
                100..=600_000,
            )?,
            metrics: MetricsMode::read(env)?,
            reconcile: ReconcileConfig::read(env)?,
            reminders: ReminderConfig::read(env)?,
            retention: RetentionConfig::read(env)?,
            schema_base: clinic_core::contract::read_schema_base(env)?,
            data_dir,
        })
    }
}

static SETTINGS: OnceLock<Settings> = OnceLock::new();

/// Installs the process's settings (a `main` calls this once, first; a later call changes nothing).
pub fn install(settings: Settings) -> &'static Settings {
    let _ = SETTINGS.set(settings);
    current()
}

/// The installed settings.
///
/// # Panics
/// When no `main` installed them: a programming error, not a configuration one.
pub fn current() -> &'static Settings {
    SETTINGS.get().expect("clinic::settings::install runs first, in main")
}

pub fn data_dir() -> PathBuf {
    current().data_dir.clone()
}

/// The database to use: `DATABASE_URL`, or the dev cluster (started when needed; an ephemeral one
/// with `CLINIC_PG_EPHEMERAL=1`, owned by this process and wiped when it ends).
pub fn database() -> anyhow::Result<(String, Option<LocalPostgres>)> {
    let settings = current();
    if let Some(url) = &settings.database_url {
        return Ok((url.clone(), None));
    }
    if settings.ephemeral {
        // The throwaway cluster of a running `clinic dev --ephemeral`, else one of our own.
        let folder = crate::local_pg::ephemeral_dir(&data_dir().join("pgdata"));
        if let Some(url) = crate::local_pg::lock::live_owner_database(&folder) {
            return Ok((url, None));
        }
        return owned_database(true);
    }
    let port = settings.pg_port.unwrap_or(55432);
    let cluster = LocalPostgres::ensure_started(&data_dir().join("pgdata"), port)?;
    Ok((cluster.url(), Some(cluster)))
}

/// `clinic dev`'s database: `DATABASE_URL` (never touched), or the dev cluster owned by this
/// process (see [`LocalPostgres::own`]).
pub fn owned_database(ephemeral: bool) -> anyhow::Result<(String, Option<LocalPostgres>)> {
    let settings = current();
    if let Some(url) = &settings.database_url {
        return Ok((url.clone(), None));
    }
    let (durability, port) = if ephemeral {
        let port = match settings.pg_port {
            Some(port) => port,
            None => std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port(),
        };
        (Durability::Ephemeral, port)
    } else {
        (Durability::Durable, settings.pg_port.unwrap_or(55432))
    };
    let cluster = LocalPostgres::own(&data_dir().join("pgdata"), port, durability)?;
    Ok((cluster.url(), Some(cluster)))
}

/// `CLINIC_PG_EPHEMERAL`: `1`/`true`/`yes`/`on` or `0`/`false`/`no`/`off` (unset: false).
fn ephemeral(env: &Env) -> anyhow::Result<bool> {
    match env.var("CLINIC_PG_EPHEMERAL").map(|v| v.trim().to_ascii_lowercase()).as_deref() {
        None | Some("0" | "false" | "no" | "off") => Ok(false),
        Some("1" | "true" | "yes" | "on") => Ok(true),
        Some(other) => anyhow::bail!("CLINIC_PG_EPHEMERAL must be 1 or 0 (got {other:?})"),
    }
}

pub fn jwt_secret() -> anyhow::Result<String> {
    if let Some(secret) = &current().jwt_secret {
        return Ok(secret.clone());
    }
    jwt_secret_in(&data_dir())
}

/// The JWT secret kept in `dir` (`jwt-secret`), made on first use readable by its owner only
/// ([`clinic_core::private_file::create_once`], like the webhook key file): it signs every local
/// token, so two commands started at once on a fresh folder end with the same one.
fn jwt_secret_in(dir: &std::path::Path) -> anyhow::Result<String> {
    let path = dir.join("jwt-secret");
    let read = || -> anyhow::Result<String> {
        let secret = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let secret = secret.trim();
        anyhow::ensure!(
            !secret.is_empty(),
            "{} is empty: delete it and a new secret is made",
            path.display()
        );
        Ok(secret.to_owned())
    };
    if path.exists() {
        return read();
    }
    let secret = format!("{}{}", ulid::Ulid::generate(), ulid::Ulid::generate());
    match clinic_core::private_file::create_once(&path, secret.as_bytes())
        .with_context(|| format!("writing {}", path.display()))?
    {
        clinic_core::private_file::Created::Made => Ok(secret),
        clinic_core::private_file::Created::Existing => read(),
    }
}

#[cfg(all(test, unix))]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_local_jwt_secret_is_created_for_its_owner_only_and_kept() {
        let dir = std::env::temp_dir().join(format!("clinic-jwt-{}", ulid::Ulid::generate()));
        let first = super::jwt_secret_in(&dir).unwrap();
        let mode = std::fs::metadata(dir.join("jwt-secret")).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(super::jwt_secret_in(&dir).unwrap(), first, "kept across runs");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// An emptied secret file is refused with the way out named, never replaced behind the back of
    /// the tokens already signed with the lost secret.
    #[test]
    fn an_empty_secret_file_is_refused_with_the_fix_named() {
        let dir = std::env::temp_dir().join(format!("clinic-jwt-{}", ulid::Ulid::generate()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("jwt-secret"), " \n").unwrap();
        let refused = super::jwt_secret_in(&dir).unwrap_err().to_string();
        assert!(refused.contains("jwt-secret is empty: delete it"), "{refused}");
        assert_eq!(std::fs::read_to_string(dir.join("jwt-secret")).unwrap(), " \n", "left as found");
        std::fs::remove_file(dir.join("jwt-secret")).unwrap();
        assert!(!super::jwt_secret_in(&dir).unwrap().is_empty(), "deleted, a new one is made");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Two local commands started at once (`clinic dev` and `clinic token`) on a fresh data folder:
    /// both must end with the one secret the file keeps, or one's tokens fail at the other.
    #[test]
    fn concurrent_first_uses_agree_on_one_secret() {
        for _ in 0..20 {
            let dir = std::env::temp_dir().join(format!("clinic-jwt-{}", ulid::Ulid::generate()));
            let start = std::sync::Arc::new(std::sync::Barrier::new(8));
            let threads: Vec<_> = (0..8)
                .map(|_| {
                    let (dir, start) = (dir.clone(), start.clone());
                    std::thread::spawn(move || {
                        start.wait();
                        super::jwt_secret_in(&dir)
                    })
                })
                .collect();
            let secrets: Vec<String> = threads.into_iter().map(|t| t.join().unwrap().unwrap()).collect();
            let kept = std::fs::read_to_string(dir.join("jwt-secret")).unwrap();
            assert!(secrets.iter().all(|secret| *secret == kept), "{secrets:?} vs the file's {kept:?}");
            let leftovers = std::fs::read_dir(&dir).unwrap().count();
            assert_eq!(leftovers, 1, "only the secret file stays");
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
}

/// The webhook secret key of every local command (`clinic dev`, `clinic webhooks …`): one function,
/// so the API that seals and the sender that opens use the same key.
pub fn webhook_key() -> anyhow::Result<clinic_core::webhooks::secret_box::WebhookKey> {
    Ok(clinic_core::webhooks::secret_box::WebhookKey::configured(&current().webhook_key)?)
}
