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
//! - A call that returns leaves no temporary file behind, whatever its outcome. A process killed
//!   mid-call can leave one (`<name>.tmp-<ulid>`, never the file itself half-written); nothing reads
//!   it, it blocks no later call, and it may be deleted.

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

#[cfg(test)]
mod tests {
    use super::{create_once, Created};
    use std::os::unix::fs::PermissionsExt;

    fn scratch() -> std::path::PathBuf {
        std::env::temp_dir().join(format!("clinic-private-{}", ulid::Ulid::generate()))
    }

    fn names(folder: &std::path::Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(folder)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn the_first_call_makes_the_file_for_its_owner_only_and_a_later_one_never_overwrites_it() {
        let folder = scratch();
        let path = folder.join("nested").join("key");
        assert_eq!(create_once(&path, b"first").unwrap(), Created::Made);
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(create_once(&path, b"second").unwrap(), Created::Existing);
        assert_eq!(std::fs::read(&path).unwrap(), b"first");
        assert_eq!(names(&folder.join("nested")), ["key"], "no temporary file stays");
        std::fs::remove_dir_all(&folder).unwrap();
    }

    /// A process killed between writing its temporary file and linking it leaves that file: the
    /// next first use still makes the real one, and the leftover is never taken for it.
    #[test]
    fn a_temporary_file_left_by_a_killed_call_blocks_nothing() {
        let folder = scratch();
        std::fs::create_dir_all(&folder).unwrap();
        let path = folder.join("key");
        let leftover = path.with_extension(format!("tmp-{}", ulid::Ulid::generate()));
        std::fs::write(&leftover, b"half").unwrap();
        assert_eq!(create_once(&path, b"whole").unwrap(), Created::Made);
        assert_eq!(std::fs::read(&path).unwrap(), b"whole");
        assert_eq!(std::fs::read(&leftover).unwrap(), b"half", "the leftover is left alone");
        std::fs::remove_dir_all(&folder).unwrap();
    }
}
