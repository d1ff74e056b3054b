//! One module per subcommand.

pub mod dev;
pub mod migrate;
pub mod token;
