//! One module per subcommand.

pub mod bench;
pub mod dev;
pub mod dispatch;
pub mod migrate;
pub mod token;
