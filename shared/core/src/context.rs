//! The context a mutation runs in: the caller's workspace and the causal chain (actor, correlation,
//! causation). Every query a use case makes is scoped by `workspace_id`.

use crate::events::Cause;
use crate::ids::WorkspaceId;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ctx {
    pub workspace_id: WorkspaceId,
    pub cause: Cause,
}
