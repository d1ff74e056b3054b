//! The `clinic` binary and its commands, run as a user would: the outbox and delivery operator
//! commands, `clinic dev`'s ownership of its data folder, and its listeners' after-commit step.

mod console;
mod deliveries;
mod dev_cluster;
mod dev_listeners;
mod outbox;
mod support;
mod webhooks;
mod workspaces;
