//! The API Lambda: handler fixtures (real API Gateway v2 events) and the template's connection budget.

mod fixture_requests;
mod template_connections;
