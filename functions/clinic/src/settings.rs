//! Local settings shared by the subcommands: where the project-local data lives, which database to
//! use, and the local token secret.
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

use std::path::PathBuf;

use anyhow::Context;

use crate::local_pg::{Durability, LocalPostgres};

pub fn data_dir() -> PathBuf {
    PathBuf::from(clinic_core::config::var("CLINIC_DATA_DIR").unwrap_or_else(|| ".local".into()))
}

/// The database to use: `DATABASE_URL`, or the dev cluster (started when needed; an ephemeral one
/// with `CLINIC_PG_EPHEMERAL=1`, owned by this process and wiped when it ends).
pub fn database() -> anyhow::Result<(String, Option<LocalPostgres>)> {
    if let Some(url) = clinic_core::config::var("DATABASE_URL") {
        return Ok((url, None));
    }
    if ephemeral_from_env()? {
        // The throwaway cluster of a running `clinic dev --ephemeral`, else one of our own.
        let folder = crate::local_pg::ephemeral_dir(&data_dir().join("pgdata"));
        if let Some(url) = crate::local_pg::lock::live_owner_database(&folder) {
            return Ok((url, None));
        }
        return owned_database(true);
    }
    let port = clinic_core::config::parsed("CLINIC_PG_PORT", 55432u16)?;
    let cluster = LocalPostgres::ensure_started(&data_dir().join("pgdata"), port)?;
    Ok((cluster.url(), Some(cluster)))
}

/// `clinic dev`'s database: `DATABASE_URL` (never touched), or the dev cluster owned by this
/// process (see [`LocalPostgres::own`]).
pub fn owned_database(ephemeral: bool) -> anyhow::Result<(String, Option<LocalPostgres>)> {
    if let Some(url) = clinic_core::config::var("DATABASE_URL") {
        return Ok((url, None));
    }
    let (durability, port) = if ephemeral {
        let port = match clinic_core::config::var("CLINIC_PG_PORT") {
            Some(_) => clinic_core::config::parsed("CLINIC_PG_PORT", 0u16)?,
            None => std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port(),
        };
        (Durability::Ephemeral, port)
    } else {
        (Durability::Durable, clinic_core::config::parsed("CLINIC_PG_PORT", 55432u16)?)
    };
    let cluster = LocalPostgres::own(&data_dir().join("pgdata"), port, durability)?;
    Ok((cluster.url(), Some(cluster)))
}

/// `CLINIC_PG_EPHEMERAL`: `1`/`true`/`yes`/`on` or `0`/`false`/`no`/`off` (unset: false).
pub fn ephemeral_from_env() -> anyhow::Result<bool> {
    match clinic_core::config::var("CLINIC_PG_EPHEMERAL").map(|v| v.trim().to_ascii_lowercase()).as_deref() {
        None | Some("0" | "false" | "no" | "off") => Ok(false),
        Some("1" | "true" | "yes" | "on") => Ok(true),
        Some(other) => anyhow::bail!("CLINIC_PG_EPHEMERAL must be 1 or 0 (got {other:?})"),
    }
}

pub fn jwt_secret() -> anyhow::Result<String> {
    if let Some(secret) = clinic_core::config::var("CLINIC_JWT_SECRET") {
        return Ok(secret);
    }
    jwt_secret_in(&data_dir())
}

/// The JWT secret kept in `dir` (`jwt-secret`), created on first use readable by its owner only
/// (mode 0600, like the webhook key file): it signs every local token.
fn jwt_secret_in(dir: &std::path::Path) -> anyhow::Result<String> {
    let path = dir.join("jwt-secret");
    if let Ok(secret) = std::fs::read_to_string(&path) {
        if !secret.trim().is_empty() {
            return Ok(secret.trim().to_owned());
        }
    }
    std::fs::create_dir_all(dir).context("creating the local data folder")?;
    let secret = format!("{}{}", ulid::Ulid::generate(), ulid::Ulid::generate());
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(&path).with_context(|| format!("writing {}", path.display()))?;
    std::io::Write::write_all(&mut file, secret.as_bytes())
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(secret)
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
}

/// The webhook secret key of every local command (`clinic dev`, `clinic webhooks …`): one function,
/// so the API that seals and the sender that opens use the same key.
pub fn webhook_key() -> anyhow::Result<clinic_core::webhooks::secret_box::WebhookKey> {
    let local = data_dir().join("webhook-secret-key");
    Ok(clinic_core::webhooks::secret_box::WebhookKey::from_env(Some(local))?)
}
