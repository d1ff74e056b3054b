//! End-to-end tests live in `e2e/*.rs` as test targets of this package; this library is empty.
