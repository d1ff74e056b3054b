//! One module per subcommand.

pub mod bench;
pub mod chaos;
pub mod dev;
pub mod dispatch;
pub mod migrate;
pub mod outbox;
pub mod reminders;
pub mod token;
pub mod workspaces;
