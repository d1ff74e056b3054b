//! Local settings shared by the subcommands: where the project-local data lives, which database to
//! use, and the local token secret.
//!
//! - `CLINIC_DATA_DIR` (default `.local`): the git-ignored folder holding the dev PostgreSQL cluster
//!   and the generated token secret; kept between runs.
//! - `DATABASE_URL`: when set, used instead of the dev cluster.
//! - `CLINIC_PG_PORT` (default 55432): the dev cluster's port.
//! - `CLINIC_JWT_SECRET`: HS256 secret; when unset, a random one is generated once into
//!   `<data dir>/jwt-secret` so tokens keep working across restarts.

use std::path::PathBuf;

use anyhow::Context;

use crate::local_pg::LocalPostgres;

pub fn data_dir() -> PathBuf {
    PathBuf::from(clinic_core::config::var("CLINIC_DATA_DIR").unwrap_or_else(|| ".local".into()))
}

/// The database to use: `DATABASE_URL`, or the dev cluster (started when needed).
pub fn database() -> anyhow::Result<(String, Option<LocalPostgres>)> {
    if let Some(url) = clinic_core::config::var("DATABASE_URL") {
        return Ok((url, None));
    }
    let port = clinic_core::config::parsed("CLINIC_PG_PORT", 55432u16)?;
    let cluster = LocalPostgres::ensure_started(&data_dir().join("pgdata"), port)?;
    Ok((cluster.url(), Some(cluster)))
}

pub fn jwt_secret() -> anyhow::Result<String> {
    if let Some(secret) = clinic_core::config::var("CLINIC_JWT_SECRET") {
        return Ok(secret);
    }
    let path = data_dir().join("jwt-secret");
    if let Ok(secret) = std::fs::read_to_string(&path) {
        if !secret.trim().is_empty() {
            return Ok(secret.trim().to_owned());
        }
    }
    std::fs::create_dir_all(data_dir()).context("creating the local data folder")?;
    let secret = format!("{}{}", ulid::Ulid::generate(), ulid::Ulid::generate());
    std::fs::write(&path, &secret).with_context(|| format!("writing {}", path.display()))?;
    Ok(secret)
}
