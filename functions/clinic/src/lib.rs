//! The `clinic` library behind the operator's binary: the subcommands, and the local pieces
//! `clinic dev` is made of (its PostgreSQL cluster, its dispatcher and SQS consumer, its settings).
//!
//! Invariants:
//! - Built without any `testing` feature and without the testkit: this is what operators run.
//!   The drills (`clinic-drill`: bench and chaos, functions/drill) link this library for the same
//!   local pieces and add the test transports themselves; `tests/run` checks with `cargo tree` that
//!   `clinic` links no testkit.

pub mod commands;
pub mod dev_dispatcher;
pub mod local_pg;
pub mod settings;
pub mod sqs_consumer;
