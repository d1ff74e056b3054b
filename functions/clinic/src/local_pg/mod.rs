//! A private PostgreSQL cluster for `clinic dev`: the Rust twin of `infra/local-postgres.sh` (keep the
//! two in step; they share the data folder and the port).
//!
//! Invariants:
//! - The data folder is kept between runs: `initdb` runs only when it holds no cluster (`PG_VERSION`
//!   missing), so data, migrations and the seeded workspace survive restarts.
//! - The server listens on 127.0.0.1 only and trusts local connections as `postgres`. It keeps
//!   PostgreSQL's durability settings (fsync on), so a 2xx means what it means in AWS and a power
//!   loss does not leave a cluster that no longer starts. [`Durability::Ephemeral`] is the exception:
//!   a throwaway folder (`<data>-ephemeral`), wiped before and after, with fsync,
//!   synchronous_commit and full_page_writes off.
//! - [`LocalPostgres::own`] (what `clinic dev` uses) makes this process the folder's owner: one owner
//!   at a time ([`lock`]), and the owner stops the cluster when it is done, whether it started it or
//!   adopted it from a previous owner that crashed. [`LocalPostgres::ensure_started`] (the other
//!   subcommands) stops only a cluster it started itself.
//! - `initdb` and `pg_ctl` come from `CLINIC_PG_BIN`, else the `/usr/lib/postgresql/<version>/bin` of
//!   the data folder's version, else `PATH`, else the newest `/usr/lib/postgresql/<version>/bin`.
//!   Each start-up problem (no PostgreSQL, port taken, a data folder of another major version, a
//!   cluster that does not start) is one error that says how to fix it. Nothing is installed from
//!   here (`infra/local-postgres.sh start` can, as root).
//! - PostgreSQL refuses to run as root: started by root, the cluster runs as `postgres` (created by
//!   the Debian package), else as a system account `clinic-pg` created on first use. When that account
//!   cannot reach the data folder (a repository under `/root`), the data lives in
//!   `/var/tmp/clinic-pg-<first 12 hex of sha256(data path)>` and the data path becomes a symlink to it.

mod account;
pub mod lock;
mod tools;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{bail, Context};

use self::account::{account, as_account, prepare_data_dir};
use self::lock::OwnerLock;
use self::tools::{data_version, find_bin, tools_version};

/// Whether the cluster's data must survive a crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// PostgreSQL's defaults (fsync on); the data folder is kept.
    Durable,
    /// Fast settings on a folder wiped before start and after stop.
    Ephemeral,
}

/// A running private cluster.
#[derive(Debug)]
pub struct LocalPostgres {
    bin: PathBuf,
    data_dir: PathBuf,
    port: u16,
    run_as: Option<String>,
    durability: Durability,
    /// Stop on [`LocalPostgres::stop`]: this value started the server, or owns the folder.
    stop_on_exit: bool,
    stopped: AtomicBool,
    owner: Option<OwnerLock>,
}

impl LocalPostgres {
    /// Creates the durable cluster in `data_dir` when it holds none, and starts it on
    /// 127.0.0.1:`port` unless it is already running there. Fails when it runs on another port, or
    /// does not come up (the error carries the end of the server log and the fix).
    pub fn ensure_started(data_dir: &Path, port: u16) -> anyhow::Result<LocalPostgres> {
        let mut cluster = Self::prepare(data_dir, port, Durability::Durable)?;
        cluster.start_unless_running()?;
        Ok(cluster)
    }

    /// Like [`LocalPostgres::ensure_started`], as the folder's one owner: fails (naming the owner's
    /// pid and URLs) when another live `clinic dev` owns it, adopts a cluster left running by an
    /// owner that is gone, and stops the cluster on [`LocalPostgres::stop`] or drop either way.
    /// Ephemeral clusters live in `<data_dir>-ephemeral`, wiped before and after.
    pub fn own(data_dir: &Path, port: u16, durability: Durability) -> anyhow::Result<LocalPostgres> {
        let data_dir = match durability {
            Durability::Durable => data_dir.to_path_buf(),
            Durability::Ephemeral => ephemeral_dir(data_dir),
        };
        if let Some(parent) = data_dir.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
        }
        let owner = OwnerLock::acquire(&data_dir, &local_url(port))?;
        let mut cluster = Self::prepare(&data_dir, port, durability)?;
        cluster.owner = Some(owner);
        cluster.stop_on_exit = true;
        if cluster.is_running() {
            eprintln!(
                "local PostgreSQL: adopting the cluster left running in {} (its owner is gone); it stops with this process",
                cluster.data_dir.display()
            );
            if durability == Durability::Ephemeral {
                cluster.stop_server()?;
            }
        }
        if durability == Durability::Ephemeral {
            cluster.wipe()?;
            cluster.init_unless_present()?;
        }
        cluster.start_unless_running()?;
        Ok(cluster)
    }

    /// Finds the tools, prepares the folder and creates the cluster when it holds none.
    fn prepare(data_dir: &Path, port: u16, durability: Durability) -> anyhow::Result<LocalPostgres> {
        let bin = find_bin(data_version(data_dir))?;
        let run_as = account()?;
        let data_dir = prepare_data_dir(data_dir, run_as.as_deref())?;
        let cluster = LocalPostgres {
            bin,
            data_dir,
            port,
            run_as,
            durability,
            stop_on_exit: false,
            stopped: AtomicBool::new(false),
            owner: None,
        };
        cluster.check_version()?;
        if durability == Durability::Durable {
            cluster.init_unless_present()?;
        }
        Ok(cluster)
    }

    fn init_unless_present(&self) -> anyhow::Result<()> {
        if self.data_dir.join("PG_VERSION").exists() {
            return Ok(());
        }
        eprintln!("local PostgreSQL: creating a cluster in {}", self.data_dir.display());
        let data = self.data_dir.display().to_string();
        let mut args = vec!["-D", &data, "-A", "trust", "-U", "postgres", "-E", "UTF8", "--locale=C"];
        if self.durability == Durability::Ephemeral {
            args.push("--no-sync");
        }
        self.pg("initdb", &args).context("initdb failed")?;
        Ok(())
    }

    /// Starts the server unless it already runs on this port.
    fn start_unless_running(&mut self) -> anyhow::Result<()> {
        let port = self.port;
        if self.is_running() {
            return match self.running_port() {
                Some(running) if running != port => bail!(
                    "the local PostgreSQL cluster in {} already runs on port {running}, not {port}; \
                     set CLINIC_PG_PORT={running} or stop it (CLINIC_PG_PORT={running} infra/local-postgres.sh stop)",
                    self.data_dir.display()
                ),
                _ => Ok(()),
            };
        }
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            bail!(
                "port {port} on 127.0.0.1 is taken by another program (not the cluster in {}); set \
                 CLINIC_PG_PORT to a free port, or stop that program",
                self.data_dir.display()
            );
        }
        let data = self.data_dir.display().to_string();
        let log = self.log_file().display().to_string();
        let options = server_options(port, &socket_dir(&self.data_dir), self.durability);
        let started =
            self.pg("pg_ctl", &["start", "-D", &data, "-l", &log, "-w", "-t", "60", "-o", &options]);
        if let Err(error) = started {
            let tail = std::fs::read_to_string(self.log_file())
                .map(|text| {
                    let lines: Vec<&str> = text.lines().collect();
                    lines[lines.len().saturating_sub(20)..].join("\n")
                })
                .unwrap_or_default();
            return Err(error.context(format!(
                "the local PostgreSQL cluster in {data} did not start on 127.0.0.1:{port}. If it was damaged \
                 (a power loss, a full disk), move it away and run again for a fresh one \
                 (mv {data} {data}.broken), or use --ephemeral / CLINIC_PG_EPHEMERAL=1 for a throwaway \
                 cluster. End of {log}:\n{tail}"
            )));
        }
        self.stop_on_exit = true;
        eprintln!(
            "local PostgreSQL: running on 127.0.0.1:{port} ({}, {})",
            self.data_dir.display(),
            match self.durability {
                Durability::Durable => "durable",
                Durability::Ephemeral => "ephemeral: fsync off, wiped on exit",
            }
        );
        Ok(())
    }

    /// Refuses a data folder of another major version than the tools, naming both and the fixes.
    fn check_version(&self) -> anyhow::Result<()> {
        let Some(data) = data_version(&self.data_dir) else { return Ok(()) };
        let tools = tools_version(&self.bin)?;
        if data == tools {
            return Ok(());
        }
        let folder = self.data_dir.display();
        let how = if data > tools {
            format!("install PostgreSQL {data} (Debian: apt-get install postgresql-{data}) or set CLINIC_PG_BIN to its bin folder")
        } else {
            format!(
                "upgrade the folder with pg_upgrade, or set CLINIC_PG_BIN to a PostgreSQL {data} bin folder"
            )
        };
        bail!(
            "the data folder {folder} holds a PostgreSQL {data} cluster, but the tools in {} are PostgreSQL \
             {tools}; {how}, or move the folder away (mv {folder} {folder}.old) to start a fresh cluster",
            self.bin.display()
        )
    }

    /// Lines for the owner lock (what a second `clinic dev` on this folder shows).
    pub fn note_owner(&mut self, line: String) -> anyhow::Result<()> {
        match &mut self.owner {
            Some(owner) => owner.note(line),
            None => Ok(()),
        }
    }

    /// The superuser connection URL, `postgres://postgres@127.0.0.1:<port>/postgres`.
    pub fn url(&self) -> String {
        local_url(self.port)
    }

    /// Stops the server if this value started it or owns the folder (fast shutdown: open sessions are
    /// disconnected), and wipes an ephemeral folder; otherwise leaves it running. Runs once.
    pub fn stop(&self) -> anyhow::Result<()> {
        if !self.stop_on_exit || self.stopped.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let was_running = self.is_running();
        self.stop_server()?;
        if self.durability == Durability::Ephemeral {
            self.wipe()?;
        }
        if was_running {
            eprintln!("local PostgreSQL: stopped ({})", self.data_dir.display());
        }
        Ok(())
    }

    fn stop_server(&self) -> anyhow::Result<()> {
        if !self.is_running() {
            return Ok(());
        }
        let data = self.data_dir.display().to_string();
        self.pg("pg_ctl", &["stop", "-D", &data, "-m", "fast", "-w", "-t", "60"])
            .context("pg_ctl stop failed")?;
        Ok(())
    }

    /// Empties an ephemeral data folder (kept, with its owner and mode, for the next initdb).
    fn wipe(&self) -> anyhow::Result<()> {
        for entry in std::fs::read_dir(&self.data_dir)
            .with_context(|| format!("reading {}", self.data_dir.display()))?
        {
            let path = entry?.path();
            let removed =
                if path.is_dir() { std::fs::remove_dir_all(&path) } else { std::fs::remove_file(&path) };
            removed.with_context(|| format!("removing {}", path.display()))?;
        }
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

impl Drop for LocalPostgres {
    /// A cluster this process owns is stopped even when the command ends by an error or a panic.
    fn drop(&mut self) {
        if self.owner.is_some() {
            if let Err(error) = self.stop() {
                eprintln!("local PostgreSQL: stopping {} failed: {error:#}", self.data_dir.display());
            }
        }
    }
}

fn local_url(port: u16) -> String {
    format!("postgres://postgres@127.0.0.1:{port}/postgres")
}

/// The dev cluster's server options. Beside PostgreSQL's defaults it records commit timestamps
/// (`track_commit_timestamp`), so `pg_xact_commit_timestamp` can say when a transaction committed:
/// `clinic bench latency` stops its clock at a listener's commit with it.
fn server_options(port: u16, socket_dir: &Path, durability: Durability) -> String {
    let fast = match durability {
        Durability::Durable => "",
        Durability::Ephemeral => " -c fsync=off -c synchronous_commit=off -c full_page_writes=off",
    };
    format!(
        "-c listen_addresses=127.0.0.1 -p {port}{fast} -c max_connections=200 -c track_commit_timestamp=on \
         -c unix_socket_directories={}",
        socket_dir.display()
    )
}

/// `<data_dir>-ephemeral`, beside the durable folder.
pub fn ephemeral_dir(data_dir: &Path) -> PathBuf {
    let mut name = data_dir.file_name().map(|name| name.to_os_string()).unwrap_or_default();
    name.push("-ephemeral");
    data_dir.with_file_name(name)
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

#[cfg(test)]
mod tests {
    use super::account::path_hash;
    use super::tools::parse_major;
    use super::*;

    #[test]
    fn url_and_options_name_the_port() {
        assert_eq!(local_url(55432), "postgres://postgres@127.0.0.1:55432/postgres");
        let options = server_options(55432, Path::new("/repo/.local/pgdata"), Durability::Durable);
        assert!(options.contains("-p 55432"));
        assert!(!options.contains("fsync"), "durable by default: {options}");
        let fast = server_options(55432, Path::new("/x"), Durability::Ephemeral);
        assert!(
            fast.contains("fsync=off")
                && fast.contains("synchronous_commit=off")
                && fast.contains("full_page_writes=off")
        );
        assert_eq!(
            ephemeral_dir(Path::new("/repo/.local/pgdata")),
            Path::new("/repo/.local/pgdata-ephemeral")
        );
        assert_eq!(parse_major("pg_ctl (PostgreSQL) 15.14 (Debian 15.14-0+deb12u1)\n"), Some(15));
        assert_eq!(parse_major("pg_ctl (PostgreSQL) 17beta1\n"), Some(17));
        assert!(options.contains("listen_addresses=127.0.0.1"));
        assert!(options.contains("track_commit_timestamp=on") && fast.contains("track_commit_timestamp=on"));
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
        // The settings `main` installs (`CLINIC_PG_BIN`, `PATH`), from this test's environment.
        let env = clinic_core::config::Env::capture();
        crate::settings::install(crate::settings::Settings::read(&env).unwrap());
        if find_bin(None).is_err() {
            eprintln!("skipped: PostgreSQL server binaries are not installed (Debian package `postgresql`)");
            return;
        }
        let port = clinic_testkit::free_port().unwrap();
        let data_dir = std::env::temp_dir().join(format!("clinic-local-pg-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&data_dir);

        let cluster = LocalPostgres::ensure_started(&data_dir, port).unwrap();
        let checks = std::panic::catch_unwind(|| {
            assert!(cluster.stop_on_exit);
            assert!(cluster.is_running());
            assert_eq!(cluster.running_port(), Some(port));
            assert_eq!(cluster.url(), format!("postgres://postgres@127.0.0.1:{port}/postgres"));
            assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());

            let again = LocalPostgres::ensure_started(&data_dir, port).unwrap();
            assert!(!again.stop_on_exit, "a running cluster is reused");
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
