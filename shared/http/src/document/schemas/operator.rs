//! The operator's queues: outbox, deliveries, notifications, listeners, pauses, rejections.

use clinic_core::delivery::admin::DeliveryItem;
use clinic_core::delivery::NotificationItem;
use clinic_core::domain::schema::ApiUlid;
use clinic_core::ids::EventId;
use clinic_core::listeners::rejections::RejectionRecord;
use clinic_core::operator::{self, pause, ActionRequest, NotificationFilter, OutboxFilter, ReasonOnly};

use crate::cursor::Page;
use crate::routes::acted::BulkBody;
use crate::routes::{outbox, recovery};

super::derived! {
    // One answer for every queue; every id has the same schema, so the outbox's stands for all.
    BulkAnswer = operator::BulkAnswer<EventId>, Answer;
    BulkReplayRequest = BulkBody<OutboxFilter, ActionRequest>, Body;
    BulkRequest = BulkBody<OutboxFilter, ReasonOnly>, Body;
    DeliveryAction = operator::NotificationAction, Answer;
    DeliveryList = Page<'static, DeliveryItem>, Answer;
    Explanation = operator::Explanation, Answer;
    ListenerList = recovery::ListenerList, Answer;
    NotificationBulkRequest = BulkBody<NotificationFilter, ReasonOnly>, Body;
    NotificationList = Page<'static, NotificationItem>, Answer;
    OperatorAction = operator::ActionRecord, Answer;
    OperatorActionRequest = ActionRequest, Body;
    OperatorReasonRequest = ReasonOnly, Body;
    OutboxList = Page<'static, operator::OutboxItem>, Answer;
    Overview = recovery::OverviewAnswer, Answer;
    PauseRecord = pause::PauseRecord, Answer;
    PauseRequest = recovery::PauseRequest, Body;
    /// An id as the API reads it: the event id parameter of `/v1/system/events/{id}` refers to it.
    Ulid = ApiUlid, Body;
    RejectionList = Page<'static, RejectionRecord>, Answer;
    UnsettledList = outbox::UnsettledList, Answer;
}
