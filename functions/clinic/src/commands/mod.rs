//! One module per subcommand.

pub mod deliveries;
pub mod dev;
pub mod migrate;
pub mod operate;
pub mod outbox;
pub mod reminders;
pub mod token;
pub mod webhooks;
pub mod workspaces;
