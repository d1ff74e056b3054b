//! Housekeeping: scheduled jobs that keep the system's own bookkeeping in shape, beside the request
//! path and the dispatcher. Each runs on its own schedule (the housekeeping Lambda's modes, `clinic
//! reminders run`, `clinic outbox sweep`, …) and reads its work in bounded batches.
//!
//! Every job implements ONE interface, [`job::Job`] (a kind, and a run bounded by a deadline that
//! answers one [`job::JobReport`]); the housekeeping Lambda runs a job by its name.
//!
//! Invariants shared by every job here:
//! - A run is safe to repeat, to overlap with another run and to stop anywhere: each unit of work is
//!   one short transaction that re-checks what it acts on under a row lock, and nothing is remembered
//!   between runs except what the tables say.
//! - A job writes only through the owning modules' paths (events through
//!   [`crate::events::store::append`]); it never deletes from the event log and never starts a
//!   listener itself — the dispatcher picks up what it appends.
//! - Logs and reports carry ids and counts only.
//!
//! The jobs:
//! - [`reminders`]: emits `appointment.reminder_due` once per appointment and start time within the
//!   lead time.
//! - [`retention`]: deletes finished outbox rows, old listener starts and receipts past the
//!   retention, in bounded batches within a time budget (never those of an event still in custody).
//! - [`reconcile`]: restarts (same identity) the listener starts whose receipt is overdue, up to a
//!   bound, then marks the pair for operators (DESIGN.md §5a).
//! - [`waiting`]: the gauge of rows waiting for an operator per queue (dead outbox rows, dead
//!   notifications, failed webhook deliveries), emitted each minute for the alarms that stay up while
//!   such rows exist.
//! - [`senders`]: the notification and webhook senders' scheduled runs (`deliver`, `webhooks`).

pub mod job;
pub mod reconcile;
pub mod reminders;
pub mod retention;
pub mod senders;
pub mod waiting;

pub use job::{Job, JobError, JobKind, JobReport, Jobs};
pub use reconcile::Reconcile;
pub use reminders::Reminders;
pub use retention::Sweep;
pub use senders::{Deliver, WebhookRetries};
