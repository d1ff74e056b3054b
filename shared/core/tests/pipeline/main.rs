//! The pipeline behind a commit against real PostgreSQL: the dispatcher with the local transport and
//! the listener workflows it starts.

mod claim_floor;
mod custody;
mod delivery_lease;
mod delivery_pace;
mod delivery_policy;
mod delivery_rate;
mod delivery_rules;
mod dispatch_local;
mod fair_claim;
mod lease_fence;
mod listeners_pointer;
mod listeners_workflows;
mod model;
mod model_notifications;
mod model_webhooks;
mod outages;
mod overlap;
mod sql_pipeline;
mod support;
mod waiting;
mod walk;
mod webhook_locked_endpoint;
mod webhook_numbering;
mod webhook_status_seen;
mod webhook_throttle;
