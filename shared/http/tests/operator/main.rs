//! Operating the outbox against real PostgreSQL: operator actions over HTTP, stats and metrics, the
//! retention sweep and appointment reminders.

mod console;
mod custody_http;
mod disclosures;
mod explain_trail;
mod http;
mod idempotency;
mod queries;
mod recovery;
mod reminders;
mod retention;
mod retention_expiry;
mod stats;
mod support;
