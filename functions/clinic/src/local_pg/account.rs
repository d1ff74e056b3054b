//! Which account runs the cluster (PostgreSQL refuses root) and a data folder that account can reach.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context};

/// Account created to run the cluster when root starts it and there is no `postgres` account.
const FALLBACK_ACCOUNT: &str = "clinic-pg";

/// A command that runs `program` directly, or as `account` through `runuser` when we are root.
pub(super) fn as_account(account: Option<&str>, program: &Path, args: &[&str]) -> Command {
    match account {
        None => {
            let mut command = Command::new(program);
            command.args(args);
            command
        }
        Some(account) => {
            let mut command = Command::new("runuser");
            command.args(["-u", account, "--"]).arg(program).args(args);
            command
        }
    }
}

/// `None` when not root (run the tools directly); else the unprivileged account to run them as.
pub(super) fn account() -> anyhow::Result<Option<String>> {
    if !is_root()? {
        return Ok(None);
    }
    if user_exists("postgres") {
        return Ok(Some("postgres".to_owned()));
    }
    if !user_exists(FALLBACK_ACCOUNT) {
        let status = Command::new("useradd")
            .args(["--system", "--no-create-home", "--shell", "/usr/sbin/nologin", FALLBACK_ACCOUNT])
            .status()
            .context("running useradd")?;
        if !status.success() {
            bail!("could not create the system account {FALLBACK_ACCOUNT} to run PostgreSQL (it refuses to run as root)");
        }
    }
    Ok(Some(FALLBACK_ACCOUNT.to_owned()))
}

fn is_root() -> anyhow::Result<bool> {
    let output = Command::new("id").arg("-u").output().context("running `id -u`")?;
    Ok(String::from_utf8_lossy(&output.stdout).trim() == "0")
}

fn user_exists(name: &str) -> bool {
    Command::new("id").arg("-u").arg(name).output().is_ok_and(|output| output.status.success())
}

/// `id -u`/`id -g` of `name`.
fn ids_of(name: &str) -> anyhow::Result<(u32, u32)> {
    let id = |flag: &str| -> anyhow::Result<u32> {
        let output = Command::new("id").arg(flag).arg(name).output().context("running `id`")?;
        String::from_utf8_lossy(&output.stdout).trim().parse().with_context(|| format!("no account {name}"))
    };
    Ok((id("-u")?, id("-g")?))
}

/// Creates the data folder and makes it the account's; returns the real folder to use.
pub(super) fn prepare_data_dir(requested: &Path, account: Option<&str>) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(requested).with_context(|| format!("creating {}", requested.display()))?;
    // Absolute and symlink-free: the server runs with another working folder and account.
    let data_dir =
        std::fs::canonicalize(requested).with_context(|| format!("resolving {}", requested.display()))?;
    let Some(account) = account else {
        return Ok(data_dir);
    };
    make_private(&data_dir, account)?;
    let reachable = as_account(
        Some(account),
        Path::new("test"),
        &["-w", &data_dir.to_string_lossy(), "-a", "-x", &data_dir.to_string_lossy()],
    )
    .status()
    .is_ok_and(|status| status.success());
    if reachable {
        return Ok(data_dir);
    }
    let fallback = PathBuf::from(format!("/var/tmp/clinic-pg-{}", path_hash(&data_dir)));
    std::fs::create_dir_all(&fallback).with_context(|| format!("creating {}", fallback.display()))?;
    make_private(&fallback, account)?;
    // An empty folder at the usual place becomes a pointer to the real one.
    if std::fs::remove_dir(&data_dir).is_ok() {
        std::os::unix::fs::symlink(&fallback, &data_dir)
            .with_context(|| format!("linking {} to {}", data_dir.display(), fallback.display()))?;
    }
    eprintln!(
        "local PostgreSQL: {account} cannot reach {}; using {}",
        data_dir.display(),
        fallback.display()
    );
    Ok(fallback)
}

fn make_private(dir: &Path, account: &str) -> anyhow::Result<()> {
    let (uid, gid) = ids_of(account)?;
    std::os::unix::fs::chown(dir, Some(uid), Some(gid))
        .with_context(|| format!("chown {}", dir.display()))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("chmod {}", dir.display()))?;
    Ok(())
}

/// First 12 hex digits of the SHA-256 of the path (what the script computes with `sha256sum`).
pub(super) fn path_hash(path: &Path) -> String {
    use std::io::Write;
    use std::process::Stdio;
    let sha256sum = || -> Option<String> {
        let mut child =
            Command::new("sha256sum").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().ok()?;
        child.stdin.take()?.write_all(path.as_os_str().as_encoded_bytes()).ok()?;
        let output = child.wait_with_output().ok()?;
        let hex = String::from_utf8_lossy(&output.stdout).chars().take(12).collect::<String>();
        (output.status.success() && hex.len() == 12).then_some(hex)
    };
    sha256sum().unwrap_or_else(|| {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        path.hash(&mut hasher);
        format!("{:012x}", hasher.finish() & 0xffff_ffff_ffff)
    })
}
