//! The owner lock of a dev data folder: `<folder>.lock` beside it, holding the owner's pid and URLs.
//!
//! Invariants:
//! - At most one live process owns a data folder. The lock file is created exclusively; one left by a
//!   process that no longer runs (a crash, kill -9) is stale and is taken over, and the cluster that
//!   process left running is adopted by the new owner.
//! - A pid counts as live only while `/proc/<pid>` exists and its command line names `clinic`, so a
//!   pid reused by another program does not keep a folder locked forever.
//! - The file is removed when the [`OwnerLock`] is dropped, and only if it still names this process.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

/// Holds the lock until dropped.
#[derive(Debug)]
pub struct OwnerLock {
    path: PathBuf,
    lines: Vec<String>,
}

/// What a lock file says about its owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub pid: u32,
    pub details: Vec<String>,
}

impl OwnerLock {
    /// Takes the lock of `data_dir` for this process, recording `database_url`. Fails, naming the
    /// owner's pid and URLs, when another live process holds it.
    pub fn acquire(data_dir: &Path, database_url: &str) -> anyhow::Result<OwnerLock> {
        let path = lock_path(data_dir);
        let lines = vec![format!("database: {database_url}")];
        for _attempt in 0..3 {
            match std::fs::OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(mut file) => {
                    file.write_all(render(std::process::id(), &lines).as_bytes())
                        .with_context(|| format!("writing {}", path.display()))?;
                    return Ok(OwnerLock { path, lines });
                }
                Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => match read(&path) {
                    Some(owner) if owner.pid != std::process::id() && is_live(owner.pid) => bail!(
                        "clinic dev is already running on the data folder {} (pid {}; {}). Use that one, \
                         stop it (kill {}), or give this one its own folder with CLINIC_DATA_DIR=<dir>",
                        data_dir.display(),
                        owner.pid,
                        owner.details.join("; "),
                        owner.pid
                    ),
                    _ => {
                        // Stale (its process is gone) or unreadable: take it over.
                        let _ = std::fs::remove_file(&path);
                    }
                },
                Err(error) => return Err(error).with_context(|| format!("creating {}", path.display())),
            }
        }
        bail!(
            "could not take the lock {} (it keeps reappearing); is another clinic dev starting?",
            path.display()
        )
    }

    /// Adds a line (e.g. the API's base URL) for a second `clinic dev` to show.
    pub fn note(&mut self, line: String) -> anyhow::Result<()> {
        self.lines.push(line);
        std::fs::write(&self.path, render(std::process::id(), &self.lines))
            .with_context(|| format!("writing {}", self.path.display()))
    }
}

impl Drop for OwnerLock {
    fn drop(&mut self) {
        if read(&self.path).is_some_and(|owner| owner.pid == std::process::id()) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// `<data dir>.lock`, beside the folder (inside it would be the cluster's business).
pub fn lock_path(data_dir: &Path) -> PathBuf {
    let mut name = data_dir.file_name().map(|name| name.to_os_string()).unwrap_or_default();
    name.push(".lock");
    data_dir.with_file_name(name)
}

/// The owner a lock file names, if it is readable.
pub fn read(path: &Path) -> Option<Owner> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut lines = text.lines();
    let pid = lines.next()?.strip_prefix("pid: ")?.trim().parse().ok()?;
    Some(Owner { pid, details: lines.map(str::to_owned).collect() })
}

fn render(pid: u32, lines: &[String]) -> String {
    let mut text = format!("pid: {pid}\n");
    for line in lines {
        text.push_str(line);
        text.push('\n');
    }
    text
}

/// The database URL recorded by the live owner of `data_dir`, if one runs.
pub fn live_owner_database(data_dir: &Path) -> Option<String> {
    let owner = read(&lock_path(data_dir)).filter(|owner| is_live(owner.pid))?;
    owner.details.iter().find_map(|line| line.strip_prefix("database: ").map(str::to_owned))
}

/// Is `pid` a running clinic process?
pub fn is_live(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|cmdline| String::from_utf8_lossy(&cmdline).contains("clinic"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stale_lock_is_taken_over_and_removed_on_drop() {
        let dir = std::env::temp_dir().join(format!("clinic-lock-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let data = dir.join("pgdata");
        assert_eq!(lock_path(&data), dir.join("pgdata.lock"));

        // A stale lock (no such process) is taken over.
        std::fs::write(lock_path(&data), "pid: 4000000\ndatabase: x\n").unwrap();
        let mut lock = OwnerLock::acquire(&data, "postgres://db").unwrap();
        lock.note("api: http://127.0.0.1:3000".into()).unwrap();
        let owner = read(&lock_path(&data)).unwrap();
        assert_eq!(owner.pid, std::process::id());
        assert_eq!(owner.details, ["database: postgres://db", "api: http://127.0.0.1:3000"]);

        // Liveness (a second live owner being refused is tests/dev_cluster.rs, with two processes).
        assert!(is_live(std::process::id()), "the test binary's command line names clinic");
        assert!(!is_live(4_000_000));
        drop(lock);
        assert!(!lock_path(&data).exists(), "dropping the lock removes its file");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
