//! The context a mutation runs in: the caller's workspace and the causal chain (actor, correlation,
//! causation). Every query a use case makes is scoped by `workspace_id`.
//!
//! System contexts (actor `system`: cron jobs, listener-originated mutations, local seeding) are
//! built here only: [`Ctx::system`] for a run of its own, [`Ctx::system_after`] for work an event
//! caused.

use crate::events::{Actor, Cause, Envelope};
use crate::ids::{CorrelationId, RequestId, WorkspaceId};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ctx {
    pub workspace_id: WorkspaceId,
    pub cause: Cause,
}

impl Ctx {
    /// Actor `system` in `workspace_id`, a run of its own: a fresh correlation id and a fresh
    /// causation id, no idempotency key.
    pub fn system(workspace_id: WorkspaceId) -> Ctx {
        Ctx {
            workspace_id,
            cause: Cause {
                actor: Actor::System,
                correlation_id: CorrelationId::generate(),
                causation_id: RequestId::generate().into(),
                idempotency_key: None,
                trace: None,
            },
        }
    }

    /// Actor `system`, continuing `event`'s chain: its workspace, its correlation id, causation =
    /// the event (a listener's chained mutation). The chained events continue the current span's
    /// trace when spans are exported, else the event's own trace.
    pub fn system_after(event: &Envelope) -> Ctx {
        Ctx {
            workspace_id: event.workspace_id,
            cause: Cause {
                actor: Actor::System,
                correlation_id: event.correlation_id,
                causation_id: event.id.into(),
                idempotency_key: None,
                trace: crate::telemetry::spans::traceparent_of(&tracing::Span::current())
                    .or(event.traceparent),
            },
        }
    }
}
