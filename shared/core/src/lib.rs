//! The clinic service's core: ids, domain, repositories, events, outbox, listeners, delivery, webhooks,
//! housekeeping and operator use cases. No HTTP server: the router is `clinic-http` (shared/http).
//!
//! Every mutation commits its resource change and exactly one event (with its timeline links and its
//! outbox row) in one PostgreSQL transaction; events carry identifiers only.

pub mod appointments;
pub mod config;
pub mod context;
pub mod contract;
pub mod db;
pub mod delivery;
pub mod disclosures;
pub mod dispatch;
pub mod domain;
pub mod error;
pub mod events;
pub mod housekeeping;
pub mod ids;
pub mod lease;
pub mod listeners;
pub mod operator;
pub mod outbox;
pub mod patients;
pub mod practitioners;
pub mod tags;
pub mod telemetry;
pub mod webhooks;
pub mod workspaces;
