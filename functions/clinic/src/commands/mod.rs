//! One module per subcommand.

pub mod dev;
pub mod dispatch;
pub mod migrate;
pub mod token;
