//! `clinic dev` owns its data folder: the built binary, run with its own data folder under a temporary
//! directory and free ports. kill -9 leaves the cluster running; the next `clinic dev` adopts it, a
//! third one on the same folder is refused with the owner's pid and URLs, and SIGTERM or SIGINT stop
//! the cluster: no PostgreSQL process is left behind. The durable cluster runs with fsync on; the
//! ephemeral one with fsync off, and its folder is wiped on exit. Each start-up problem (port taken, a
//! cluster that does not start, a newer major version, no PostgreSQL) ends in one message with the fix.
//!
//! Skipped (with a message) where the PostgreSQL server binaries are not installed.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Generous: initdb with fsync on a busy shared machine.
const START_BOUND: Duration = Duration::from_secs(180);
const STOP_BOUND: Duration = Duration::from_secs(90);

fn postgres_installed() -> bool {
    let has = |dir: &Path| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file();
    clinic_testkit::test_env::var("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| has(&dir)))
        || std::fs::read_dir("/usr/lib/postgresql")
            .into_iter()
            .flatten()
            .flatten()
            .any(|entry| has(&entry.path().join("bin")))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// One `clinic dev` child, its output collected as it comes.
struct Dev {
    child: Child,
    output: Arc<Mutex<String>>,
}

impl Dev {
    fn spawn(data_dir: &Path, pg_port: u16, api_port: u16, extra: &[&str]) -> Dev {
        Self::spawn_with(data_dir, pg_port, api_port, extra, &[])
    }

    fn spawn_with(data_dir: &Path, pg_port: u16, api_port: u16, extra: &[&str], env: &[(&str, &str)]) -> Dev {
        let mut child = Command::new(env!("CARGO_BIN_EXE_clinic"))
            .arg("dev")
            .args(extra)
            .env_remove("DATABASE_URL")
            .env_remove("CLINIC_PG_EPHEMERAL")
            .env("CLINIC_DATA_DIR", data_dir)
            .env("CLINIC_PG_PORT", pg_port.to_string())
            .env("CLINIC_PORT", api_port.to_string())
            .env("CLINIC_TRANSPORT", "local")
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start clinic dev");
        let output = Arc::new(Mutex::new(String::new()));
        for stream in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let output = output.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    let mut text = output.lock().unwrap();
                    text.push_str(&line);
                    text.push('\n');
                }
            });
        }
        Dev { child, output }
    }

    fn text(&self) -> String {
        self.output.lock().unwrap().clone()
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for "clinic dev is running", failing early when the process exits.
    fn wait_ready(&mut self) {
        let started = Instant::now();
        while !self.text().contains("clinic dev is running") {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("clinic dev exited during start-up with {status}:\n{}", self.text());
            }
            assert!(
                started.elapsed() < START_BOUND,
                "clinic dev not ready within {START_BOUND:?}:\n{}",
                self.text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits for the process to end and returns its exit code.
    fn wait_exit(&mut self) -> Option<i32> {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            assert!(
                started.elapsed() < STOP_BOUND,
                "clinic dev did not exit within {STOP_BOUND:?}:\n{}",
                self.text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn signal(&self, name: &str) {
        let status = Command::new("kill").args(["-s", name, &self.pid().to_string()]).status().unwrap();
        assert!(status.success(), "kill -s {name} {}", self.pid());
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The postmaster's pid from `postmaster.pid`, when the cluster runs.
fn postmaster(data_dir: &Path) -> Option<u32> {
    let text = std::fs::read_to_string(data_dir.join("postmaster.pid")).ok()?;
    text.lines().next()?.trim().parse().ok()
}

/// Alive and not a zombie waiting to be reaped.
fn process_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.rsplit(')').next().is_some_and(|rest| !rest.trim_start().starts_with('Z')))
}

fn wait_gone(pid: u32) {
    let started = Instant::now();
    while process_alive(pid) {
        assert!(
            started.elapsed() < STOP_BOUND,
            "PostgreSQL (pid {pid}) still runs {STOP_BOUND:?} after clinic dev stopped"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn setting(pg_port: u16, name: &str) -> String {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let url = format!("postgres://postgres@127.0.0.1:{pg_port}/postgres");
        let client = clinic_core::db::connect_single(&url, None, None).await.unwrap();
        client.query_one(&format!("SHOW {name}"), &[]).await.unwrap().get(0)
    })
}

/// A temporary folder, removed again (with anything a failed run left in it) at the end.
struct TempDir(PathBuf);

impl TempDir {
    fn new(label: &str) -> TempDir {
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
        let dir = std::env::temp_dir().join(format!("clinic-{label}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        // A cluster a failed assertion left running is stopped before its folder goes.
        for data in ["pgdata", "pgdata-ephemeral"] {
            let data = self.0.join(data);
            // Only a postmaster of this folder (a stale pid file's pid may belong to anything now).
            let ours = |pid: &u32| {
                std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
                    let cmdline = String::from_utf8_lossy(&cmdline);
                    cmdline.contains("postgres") && cmdline.contains(&*data.to_string_lossy())
                })
            };
            if let Some(pid) = postmaster(&data).filter(ours) {
                let _ = Command::new("kill").args(["-s", "INT", &pid.to_string()]).status();
                let started = Instant::now();
                while process_alive(pid) && started.elapsed() < STOP_BOUND {
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn kill_9_restart_and_signals_leave_no_postgres_behind() {
    if !postgres_installed() {
        eprintln!("skipped: PostgreSQL server binaries are not installed (Debian package `postgresql`)");
        return;
    }
    let temp = TempDir::new("dev-cluster");
    let data_dir = temp.0.join("pgdata");
    let (pg_port, api_port) = (free_port(), free_port());

    // A first run, killed with SIGKILL: its cluster keeps running (nothing could stop it).
    let mut first = Dev::spawn(&temp.0, pg_port, api_port, &[]);
    first.wait_ready();
    let cluster_pid = postmaster(&data_dir).expect("a running cluster");
    assert_eq!(setting(pg_port, "fsync"), "on", "the dev cluster is durable by default");
    assert_eq!(setting(pg_port, "synchronous_commit"), "on");
    assert_eq!(setting(pg_port, "full_page_writes"), "on");
    assert_eq!(
        setting(pg_port, "ssl"),
        "off",
        "no sslmode (prefer) falls back to plain on a server without TLS"
    );
    first.child.kill().unwrap();
    first.wait_exit();
    assert!(process_alive(cluster_pid), "kill -9 cannot stop the cluster");

    // The next run adopts it.
    let mut second = Dev::spawn(&temp.0, pg_port, api_port, &[]);
    second.wait_ready();
    assert!(second.text().contains("adopting the cluster"), "{}", second.text());
    assert_eq!(postmaster(&data_dir), Some(cluster_pid), "the same cluster, adopted");

    // A third on the same folder is refused, naming the owner.
    let mut third = Dev::spawn(&temp.0, pg_port, free_port(), &[]);
    let code = third.wait_exit();
    assert_ne!(code, Some(0));
    let refusal = third.text();
    assert!(refusal.contains("already running"), "{refusal}");
    assert!(refusal.contains(&format!("pid {}", second.pid())), "{refusal}");
    assert!(refusal.contains(&format!("http://127.0.0.1:{api_port}")), "{refusal}");
    assert!(refusal.contains(&format!("postgres://postgres@127.0.0.1:{pg_port}/postgres")), "{refusal}");
    assert!(process_alive(cluster_pid), "the refused run leaves the owner's cluster alone");

    // SIGTERM stops the adopted cluster.
    second.signal("TERM");
    assert_eq!(second.wait_exit(), Some(0), "{}", second.text());
    wait_gone(cluster_pid);
    assert!(!temp.0.join("pgdata.lock").exists(), "the lock goes with its owner");

    // SIGINT (Ctrl-C) stops a cluster the run started itself; the data is kept.
    let mut fourth = Dev::spawn(&temp.0, pg_port, api_port, &[]);
    fourth.wait_ready();
    assert!(!fourth.text().contains("creating a cluster"), "the data folder is reused: {}", fourth.text());
    let cluster_pid = postmaster(&data_dir).expect("a running cluster");
    fourth.signal("INT");
    assert_eq!(fourth.wait_exit(), Some(0), "{}", fourth.text());
    wait_gone(cluster_pid);
    assert!(data_dir.join("PG_VERSION").exists(), "the durable folder is kept");
}

#[test]
fn an_ephemeral_cluster_is_fast_and_wiped_on_exit() {
    if !postgres_installed() {
        eprintln!("skipped: PostgreSQL server binaries are not installed (Debian package `postgresql`)");
        return;
    }
    let temp = TempDir::new("dev-ephemeral");
    let (pg_port, api_port) = (free_port(), free_port());
    let mut dev = Dev::spawn(&temp.0, pg_port, api_port, &["--ephemeral"]);
    dev.wait_ready();
    let data_dir = temp.0.join("pgdata-ephemeral");
    let cluster_pid = postmaster(&data_dir).expect("a running cluster");
    assert_eq!(setting(pg_port, "fsync"), "off");
    assert_eq!(setting(pg_port, "synchronous_commit"), "off");
    assert!(!temp.0.join("pgdata").join("PG_VERSION").exists(), "the durable folder is not touched");
    dev.signal("INT");
    assert_eq!(dev.wait_exit(), Some(0), "{}", dev.text());
    wait_gone(cluster_pid);
    let left: Vec<_> = std::fs::read_dir(&data_dir).map(|d| d.flatten().collect()).unwrap_or_default();
    assert!(left.is_empty(), "the ephemeral folder is wiped: {left:?}");
}

#[test]
fn start_up_problems_each_get_one_message_with_the_fix() {
    if !postgres_installed() {
        eprintln!("skipped: PostgreSQL server binaries are not installed (Debian package `postgresql`)");
        return;
    }
    let temp = TempDir::new("dev-problems");
    let data_dir = temp.0.join("pgdata");
    let failure = |pg_port: u16| {
        let mut dev = Dev::spawn(&temp.0, pg_port, free_port(), &[]);
        assert_ne!(dev.wait_exit(), Some(0), "{}", dev.text());
        dev.text()
    };

    // The port is taken by another program (a cluster is created first, then refused the port).
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let text = failure(taken.local_addr().unwrap().port());
    assert!(text.contains("is taken by another program") && text.contains("set CLINIC_PG_PORT"), "{text}");
    drop(taken);
    assert!(data_dir.join("PG_VERSION").exists());

    // A cluster that no longer starts: its log's end and how to move it away.
    std::fs::write(data_dir.join("global").join("pg_control"), b"damaged").unwrap();
    let text = failure(free_port());
    assert!(
        text.contains("did not start") && text.contains(".broken") && text.contains("--ephemeral"),
        "{text}"
    );

    // A data folder of a newer major version than the tools.
    std::fs::write(data_dir.join("PG_VERSION"), "99\n").unwrap();
    let text = failure(free_port());
    assert!(text.contains("holds a PostgreSQL 99 cluster") && text.contains("CLINIC_PG_BIN"), "{text}");
    assert!(text.contains("move the folder away"), "{text}");

    // PostgreSQL missing (here: pointed at a folder without it).
    let mut dev =
        Dev::spawn_with(&temp.0, free_port(), free_port(), &[], &[("CLINIC_PG_BIN", "/nonexistent")]);
    assert_ne!(dev.wait_exit(), Some(0));
    assert!(
        dev.text().contains("CLINIC_PG_BIN=/nonexistent does not hold initdb and pg_ctl"),
        "{}",
        dev.text()
    );
    assert!(postmaster(&data_dir).is_none_or(|pid| !process_alive(pid)), "no cluster is left running");
}
