//! The dispatcher Lambda: its handler fed real EventBridge events (local transport and SQS against the
//! emulator), and `template.yaml` checked against the listener catalog.

mod alarms_doc;
mod fixture_scheduled_tick;
mod fixture_template;
mod handler;
mod webhooks_mode;
