//! Operating the outbox against real PostgreSQL: operator actions over HTTP, stats and metrics, the
//! retention sweep and appointment reminders.

mod http;
mod reminders;
mod retention;
mod stats;
mod support;
