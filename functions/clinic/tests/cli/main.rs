//! The `clinic` binary and its commands, run as a user would: the outbox and delivery operator
//! commands, and `clinic dev`'s ownership of its data folder.

mod console;
mod deliveries;
mod dev_cluster;
mod outbox;
mod support;
mod webhooks;
mod workspaces;
