//! The HTTP API through the shared router against real PostgreSQL: identity and isolation,
//! mutations and their events, timelines, the OpenAPI document, PHI scans, hostile input and the
//! restricted database role.

mod access;
mod concurrency;
mod contact_preferences;
mod contract;
mod correlation;
mod db_least_privilege;
mod db_privileges;
mod db_timeouts;
mod db_tls;
mod health;
mod hostile_input;
mod identity;
mod isolation_every_route;
mod lists;
mod mutations;
mod nasty_inputs;
mod notification_order;
mod openapi;
mod privacy;
mod privacy_erasure;
mod privacy_erasure_final;
mod staff_changes_and_plans;
mod timelines;
mod unsubscribe;
mod webhook_ssrf;
