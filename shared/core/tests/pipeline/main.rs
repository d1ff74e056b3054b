//! The pipeline behind a commit against real PostgreSQL: the dispatcher with the local transport and
//! the listener workflows it starts.

mod delivery_rules;
mod dispatch_local;
mod listeners_workflows;
mod support;
