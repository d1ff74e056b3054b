//! The answer of an operator action on any queue (outbox rows, deliveries, listener pauses): its
//! audit record, read back by its id when a request is repeated with its `Idempotency-Key`. One
//! [`Answer`] for every such route; each record type says how it is found again ([`Recorded`]).

use std::future::Future;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;

use crate::auth::Caller;
use crate::unit_of_work::Answer;
use clinic_core::db::Tx;
use clinic_core::delivery::admin::{self, DeliveryActionRecord};
use clinic_core::error::DomainResult;
use clinic_core::ids::{OperatorActionId, WorkspaceId};
use clinic_core::operator::pause::{self, PauseRecord};
use clinic_core::operator::{self, ActionRecord};

/// The resource type an operator action's idempotency key names.
pub(crate) const OPERATOR_ACTION: &str = "operator_action";

/// An audit record of an operator action that can be read back by its id.
pub trait Recorded: Serialize + Sized + Send {
    fn action_id(&self) -> OperatorActionId;

    /// The record `id` of `workspace`, as the action answered it (`None`: there is none).
    fn recorded(
        tx: &Tx<'_>,
        workspace: WorkspaceId,
        id: OperatorActionId,
    ) -> impl Future<Output = DomainResult<Option<Self>>> + Send;
}

/// The answer of an operator action: its audit record.
pub struct Acted<R>(pub R);

impl<R: Recorded> Answer for Acted<R> {
    const RESOURCE: &'static str = OPERATOR_ACTION;

    fn resource_id(&self) -> uuid::Uuid {
        self.0.action_id().uuid()
    }

    async fn reload(tx: &Tx<'_>, caller: &Caller, id: uuid::Uuid) -> DomainResult<Option<Self>> {
        Ok(R::recorded(tx, caller.workspace_id, OperatorActionId::from_uuid(id)).await?.map(Acted))
    }

    fn respond(self, status: StatusCode) -> Response {
        (status, Json(self.0)).into_response()
    }
}

/// `Recorded` for an audit record type whose `id` is its action id, read back by `$recorded`.
macro_rules! recorded {
    ($record:ty, $recorded:path) => {
        impl Recorded for $record {
            fn action_id(&self) -> OperatorActionId {
                self.id
            }

            async fn recorded(
                tx: &Tx<'_>,
                workspace: WorkspaceId,
                id: OperatorActionId,
            ) -> DomainResult<Option<Self>> {
                $recorded(tx, workspace, id).await
            }
        }
    };
}

recorded!(ActionRecord, operator::recorded);
recorded!(DeliveryActionRecord, admin::recorded);
recorded!(PauseRecord, pause::recorded);
