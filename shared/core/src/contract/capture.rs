//! Test support: every envelope and CloudEvent the test suite emits, written to
//! `$CLINIC_CONTRACT_CAPTURE_DIR` (when set) so tests/contract can validate them against the
//! checked-in schemas with independent implementations (the `cloudevents` and `jsonschema` Python
//! packages). Compiled only with the `testing` feature; a Lambda never has it. Writing is best effort:
//! a capture that cannot be written never fails the code under test.

use std::sync::atomic::{AtomicU64, Ordering};

/// Records the body `body()` gives (a CloudEvent or an envelope, as JSON text) under `kind` (`sqs`,
/// `local`, …). `body` runs only when capture is on, so a process without it serialises nothing.
pub fn record<B: AsRef<[u8]>>(kind: &str, body: impl FnOnce() -> B) {
    static SEQUENCE: AtomicU64 = AtomicU64::new(0);
    // Test support (the `testing` feature), not configuration: read once per process, here.
    static DIR: std::sync::LazyLock<Option<std::ffi::OsString>> = std::sync::LazyLock::new(|| {
        std::env::var_os("CLINIC_CONTRACT_CAPTURE_DIR").filter(|dir| !dir.is_empty())
    });
    let Some(dir) = DIR.as_ref() else { return };
    let sequence = SEQUENCE.fetch_add(1, Ordering::Relaxed);
    let name = format!("{kind}-{}-{sequence}-{}.json", std::process::id(), crate::ids::new_ulid());
    let _ = std::fs::create_dir_all(dir);
    let _ = std::fs::write(std::path::Path::new(dir).join(name), body());
}
