//! A file made once and readable by its owner only: the local keys and secrets (`clinic dev`'s token
//! secret, the local webhook key) that are created on first use and kept.
//!
//! Invariants:
//! - The file appears complete or not at all: the contents are written and synced to a temporary
//!   file of a name no other call uses (0600), then hard-linked into place. A reader never sees a
//!   half-written file.
//! - Concurrent first uses (two processes, or two threads of one) agree: the first link wins, a
//!   later one fails with `AlreadyExists` and its caller reads the winner's contents. Nothing is ever
//!   overwritten.
//! - No temporary file stays behind, whatever the outcome.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Whether [`create_once`] made the file or found one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Created {
    /// This call's contents are the file's.
    Made,
    /// The file was there already (made before, or by a concurrent first use): read it.
    Existing,
}

/// Makes `path` with `contents` (mode 0600, its folder created when missing) unless it exists.
pub fn create_once(path: &Path, contents: &[u8]) -> std::io::Result<Created> {
    if let Some(folder) = path.parent().filter(|folder| !folder.as_os_str().is_empty()) {
        std::fs::create_dir_all(folder)?;
    }
    let temporary = path.with_extension(format!("tmp-{}", ulid::Ulid::generate()));
    let linked = (|| {
        let mut file =
            std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&temporary)?;
        file.write_all(contents)?;
        file.sync_all()?;
        std::fs::hard_link(&temporary, path)
    })();
    let _ = std::fs::remove_file(&temporary);
    match linked {
        Ok(()) => Ok(Created::Made),
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => Ok(Created::Existing),
        Err(error) => Err(error),
    }
}
