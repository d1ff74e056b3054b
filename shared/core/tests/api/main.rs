//! The HTTP API through the shared router against real PostgreSQL: identity and isolation,
//! mutations and their events, timelines, the OpenAPI document, PHI scans, hostile input and the
//! restricted database role.

mod access;
mod db_privileges;
mod hostile_input;
mod isolation_every_route;
mod mutations;
mod nasty_inputs;
mod openapi;
mod privacy;
mod timelines;
