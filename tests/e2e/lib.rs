//! End-to-end tests live in `e2e/*.rs` as test targets of this package; this library is empty (a
//! package needs a library or binary target). They drive the shared router, dispatcher and local
//! transport in one process; the Lambda handlers are tested in `functions/*/tests`.
