//! A private PostgreSQL cluster for `clinic dev`: the Rust twin of `infra/local-postgres.sh` (keep the
//! two in step; they share the data folder and the port).
//!
//! Invariants:
//! - The data folder is kept between runs: `initdb` runs only when it holds no cluster (`PG_VERSION`
//!   missing), so data, migrations and the seeded workspace survive restarts.
//! - The server listens on 127.0.0.1 only, trusts local connections as `postgres`, and is tuned for
//!   throwaway data (`fsync`, `synchronous_commit`, `full_page_writes` off). It is a developer
//!   convenience, never a place for data that cannot be recreated.
//! - `initdb` and `pg_ctl` come from `CLINIC_PG_BIN`, else `PATH`, else the newest
//!   `/usr/lib/postgresql/<version>/bin`; when none has them the error names the Debian package
//!   `postgresql`. Nothing is installed from here (`infra/local-postgres.sh start` can, as root).
//! - PostgreSQL refuses to run as root: started by root, the cluster runs as `postgres` (created by
//!   the Debian package), else as a system account `clinic-pg` created on first use. When that account
//!   cannot reach the data folder (a repository under `/root`), the data lives in
//!   `/var/tmp/clinic-pg-<first 12 hex of sha256(data path)>` and the data path becomes a symlink to it.
//! - [`LocalPostgres::stop`] stops the server only if this value started it: a cluster that was
//!   already running (another `clinic dev`, or the script) is left running.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anyhow::{bail, Context};

/// Account created to run the cluster when root starts it and there is no `postgres` account.
const FALLBACK_ACCOUNT: &str = "clinic-pg";

/// A running private cluster.
#[derive(Debug)]
pub struct LocalPostgres {
    bin: PathBuf,
    data_dir: PathBuf,
    port: u16,
    run_as: Option<String>,
    started_here: bool,
}

impl LocalPostgres {
    /// Creates the cluster in `data_dir` when it holds none, and starts it on 127.0.0.1:`port` unless
    /// it is already running there. Fails when it runs on another port, or does not come up (the
    /// error carries the end of the server log).
    pub fn ensure_started(data_dir: &Path, port: u16) -> anyhow::Result<LocalPostgres> {
        let bin = find_bin()?;
        let run_as = account()?;
        let data_dir = prepare_data_dir(data_dir, run_as.as_deref())?;
        let mut cluster = LocalPostgres { bin, data_dir, port, run_as, started_here: false };

        if !cluster.data_dir.join("PG_VERSION").exists() {
            eprintln!("local PostgreSQL: creating a cluster in {}", cluster.data_dir.display());
            let data = cluster.data_dir.display().to_string();
            cluster
                .pg(
                    "initdb",
                    &["-D", &data, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8", "--locale=C"],
                )
                .context("initdb failed")?;
        }

        if cluster.is_running() {
            match cluster.running_port() {
                Some(running) if running != port => bail!(
                    "the local PostgreSQL cluster in {} already runs on port {running}, not {port}; \
                     set CLINIC_PG_PORT={running} or stop it (CLINIC_PG_PORT={running} infra/local-postgres.sh stop)",
                    cluster.data_dir.display()
                ),
                _ => return Ok(cluster),
            }
        }

        let data = cluster.data_dir.display().to_string();
        let log = cluster.log_file().display().to_string();
        let options = server_options(port, &socket_dir(&cluster.data_dir));
        let started =
            cluster.pg("pg_ctl", &["start", "-D", &data, "-l", &log, "-w", "-t", "60", "-o", &options]);
        if let Err(error) = started {
            let tail = std::fs::read_to_string(cluster.log_file())
                .map(|text| {
                    text.lines()
                        .rev()
                        .take(20)
                        .collect::<Vec<_>>()
                        .into_iter()
                        .rev()
                        .collect::<Vec<_>>()
                        .join("\n")
                })
                .unwrap_or_default();
            return Err(error.context(format!(
                "the local PostgreSQL server did not start on 127.0.0.1:{port} (is the port taken? set CLINIC_PG_PORT); \
                 end of {log}:\n{tail}"
            )));
        }
        cluster.started_here = true;
        eprintln!("local PostgreSQL: running on 127.0.0.1:{port} ({})", cluster.data_dir.display());
        Ok(cluster)
    }

    /// The superuser connection URL, `postgres://postgres@127.0.0.1:<port>/postgres`.
    pub fn url(&self) -> String {
        local_url(self.port)
    }

    /// Stops the server if [`LocalPostgres::ensure_started`] started it (fast shutdown: open sessions
    /// are disconnected); otherwise leaves it running.
    pub fn stop(&self) -> anyhow::Result<()> {
        if !self.started_here || !self.is_running() {
            return Ok(());
        }
        let data = self.data_dir.display().to_string();
        self.pg("pg_ctl", &["stop", "-D", &data, "-m", "fast", "-w"]).context("pg_ctl stop failed")?;
        Ok(())
    }

    fn log_file(&self) -> PathBuf {
        self.data_dir.join("server.log")
    }

    fn is_running(&self) -> bool {
        let data = self.data_dir.display().to_string();
        self.data_dir.join("PG_VERSION").exists() && self.pg("pg_ctl", &["status", "-D", &data]).is_ok()
    }

    /// The port in `postmaster.pid` (line 4) of the running server.
    fn running_port(&self) -> Option<u16> {
        let pid_file = std::fs::read_to_string(self.data_dir.join("postmaster.pid")).ok()?;
        pid_file.lines().nth(3)?.trim().parse().ok()
    }

    /// Runs `program` from the PostgreSQL bin folder as the cluster's account; fails on a non-zero exit.
    fn pg(&self, program: &str, args: &[&str]) -> anyhow::Result<Output> {
        let path = self.bin.join(program);
        let output = as_account(self.run_as.as_deref(), &path, args)
            .output()
            .with_context(|| format!("running {}", path.display()))?;
        if !output.status.success() {
            bail!(
                "{program} {} exited with {}: {}",
                args.first().copied().unwrap_or_default(),
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        Ok(output)
    }
}

fn local_url(port: u16) -> String {
    format!("postgres://postgres@127.0.0.1:{port}/postgres")
}

fn server_options(port: u16, socket_dir: &Path) -> String {
    format!(
        "-c listen_addresses=127.0.0.1 -p {port} -c fsync=off -c synchronous_commit=off \
         -c full_page_writes=off -c max_connections=200 -c unix_socket_directories={}",
        socket_dir.display()
    )
}

/// The data folder when its path is short and plain (Unix socket paths are limited to ~107 bytes, and
/// pg_ctl hands the options to a shell), else `/tmp`.
fn socket_dir(data_dir: &Path) -> PathBuf {
    let text = data_dir.to_string_lossy();
    let plain = text.bytes().all(|b| b.is_ascii_alphanumeric() || b"/._-".contains(&b));
    if plain && text.len() < 80 {
        data_dir.to_path_buf()
    } else {
        PathBuf::from("/tmp")
    }
}

/// A command that runs `program` directly, or as `account` through `runuser` when we are root.
fn as_account(account: Option<&str>, program: &Path, args: &[&str]) -> Command {
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

/// The folder holding `initdb` and `pg_ctl`.
fn find_bin() -> anyhow::Result<PathBuf> {
    let has_tools = |dir: &Path| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file();
    if let Some(dir) = std::env::var_os("CLINIC_PG_BIN").filter(|dir| !dir.is_empty()) {
        let dir = PathBuf::from(dir);
        if has_tools(&dir) {
            return Ok(dir);
        }
        bail!("CLINIC_PG_BIN={} does not hold initdb and pg_ctl", dir.display());
    }
    if let Some(path) = std::env::var_os("PATH") {
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

/// `None` when not root (run the tools directly); else the unprivileged account to run them as.
fn account() -> anyhow::Result<Option<String>> {
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
fn prepare_data_dir(requested: &Path, account: Option<&str>) -> anyhow::Result<PathBuf> {
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
fn path_hash(path: &Path) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_and_options_name_the_port() {
        assert_eq!(local_url(55432), "postgres://postgres@127.0.0.1:55432/postgres");
        let options = server_options(55432, Path::new("/repo/.local/pgdata"));
        assert!(options.contains("-p 55432"));
        assert!(options.contains("listen_addresses=127.0.0.1"));
        assert!(options.contains("unix_socket_directories=/repo/.local/pgdata"));
    }

    #[test]
    fn odd_or_long_data_paths_put_the_socket_in_tmp() {
        assert_eq!(socket_dir(Path::new("/work/main/.local/pgdata")), Path::new("/work/main/.local/pgdata"));
        assert_eq!(socket_dir(Path::new("/home/me/my project/.local/pgdata")), Path::new("/tmp"));
        assert_eq!(socket_dir(&Path::new("/x").join("y".repeat(100))), Path::new("/tmp"));
    }

    #[test]
    fn path_hash_matches_sha256sum() {
        let hash = path_hash(Path::new("/work/main/.local/pgdata"));
        assert_eq!(hash.len(), 12);
        assert!(hash.bytes().all(|b| b.is_ascii_hexdigit()));
    }

    /// Creates, starts, reuses and stops a real cluster in a temporary folder on a free port.
    #[test]
    fn starts_reuses_and_stops_a_cluster() {
        if find_bin().is_err() {
            eprintln!("skipped: PostgreSQL server binaries are not installed (Debian package `postgresql`)");
            return;
        }
        let port = clinic_testkit::free_port().unwrap();
        let data_dir = std::env::temp_dir().join(format!("clinic-local-pg-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&data_dir);

        let cluster = LocalPostgres::ensure_started(&data_dir, port).unwrap();
        let checks = std::panic::catch_unwind(|| {
            assert!(cluster.started_here);
            assert!(cluster.is_running());
            assert_eq!(cluster.running_port(), Some(port));
            assert_eq!(cluster.url(), format!("postgres://postgres@127.0.0.1:{port}/postgres"));
            assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());

            let again = LocalPostgres::ensure_started(&data_dir, port).unwrap();
            assert!(!again.started_here, "a running cluster is reused");
            again.stop().unwrap();
            assert!(cluster.is_running(), "stop leaves a cluster it did not start running");

            let other_port = LocalPostgres::ensure_started(&data_dir, port.wrapping_add(1));
            assert!(other_port.unwrap_err().to_string().contains("already runs on port"));
        });
        cluster.stop().unwrap();
        assert!(!cluster.is_running());
        std::fs::remove_dir_all(&data_dir).unwrap();
        if let Err(panic) = checks {
            std::panic::resume_unwind(panic);
        }
    }
}
