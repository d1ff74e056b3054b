//! Finding PostgreSQL's tools and the versions of tools and data folders.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context};

/// The major version in the folder's `PG_VERSION`, when it holds a cluster.
pub(super) fn data_version(data_dir: &Path) -> Option<u32> {
    std::fs::read_to_string(data_dir.join("PG_VERSION")).ok()?.trim().parse().ok()
}

/// The major version of the tools in `bin` (`pg_ctl (PostgreSQL) 15.14 (Debian …)` → 15).
pub(super) fn tools_version(bin: &Path) -> anyhow::Result<u32> {
    let output =
        Command::new(bin.join("pg_ctl")).arg("--version").output().context("running pg_ctl --version")?;
    let text = String::from_utf8_lossy(&output.stdout);
    parse_major(&text).with_context(|| format!("unexpected `pg_ctl --version` output: {text}"))
}

pub(super) fn parse_major(version_line: &str) -> Option<u32> {
    let after = version_line.split(')').nth(1)?.trim_start();
    after.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

/// The folder holding `initdb` and `pg_ctl`; the Debian folder of `data_version` when installed.
pub(super) fn find_bin(data_version: Option<u32>) -> anyhow::Result<PathBuf> {
    let has_tools = |dir: &Path| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file();
    let settings = crate::settings::current();
    if let Some(dir) = settings.pg_bin.clone() {
        if has_tools(&dir) {
            return Ok(dir);
        }
        bail!("CLINIC_PG_BIN={} does not hold initdb and pg_ctl", dir.display());
    }
    if let Some(version) = data_version {
        let dir = PathBuf::from(format!("/usr/lib/postgresql/{version}/bin"));
        if has_tools(&dir) {
            return Ok(dir);
        }
    }
    if let Some(path) = &settings.path {
        for dir in std::env::split_paths(&path) {
            if has_tools(&dir) {
                // Debian links /usr/bin/pg_ctl to a wrapper; use the real folder when it is a symlink.
                let real = std::fs::canonicalize(dir.join("pg_ctl"))
                    .ok()
                    .and_then(|p| p.parent().map(Path::to_path_buf));
                return Ok(real.filter(|real| has_tools(real)).unwrap_or(dir));
            }
        }
    }
    let newest = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_string_lossy().parse::<f64>().ok()?;
            let bin = entry.path().join("bin");
            has_tools(&bin).then_some((version, bin))
        })
        .max_by(|a, b| a.0.total_cmp(&b.0));
    match newest {
        Some((_, bin)) => Ok(bin),
        None => bail!(
            "PostgreSQL's initdb and pg_ctl were not found on PATH or in /usr/lib/postgresql/<version>/bin. \
             Install the Debian package `postgresql` (apt-get install postgresql), set CLINIC_PG_BIN to \
             the folder holding them, or set DATABASE_URL to a server you already have."
        ),
    }
}
