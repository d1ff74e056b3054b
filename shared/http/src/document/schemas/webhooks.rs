//! Webhook endpoints and their deliveries.

use clinic_core::webhooks::endpoints::{Created, Endpoint, EndpointChange, NewEndpoint, Recovery, Rotation};
use clinic_core::webhooks::store::DeliveryItem;

use clinic_core::operator::ReasonOnly;

use crate::routes::acted::BulkBody;
use crate::routes::webhooks::{operated, Listed, Recovered, Replay};

super::derived! {
    WebhookEndpoint = Endpoint, Answer;
    /// The one answer that carries the signing secret (create and rotate, not their replays).
    WebhookEndpointWithSecret = Created, Answer;
    WebhookEndpointList = Listed<Endpoint>, Answer;
    NewWebhookEndpoint = NewEndpoint, Body;
    WebhookEndpointChange = EndpointChange, Body;
    WebhookRotateRequest = Rotation, Body;
    WebhookRecoverRequest = Recovery, Body;
    WebhookRecovered = Recovered, Answer;
    WebhookDeliveryList = Listed<DeliveryItem>, Answer;
    WebhookDeliveryBulkRequest = BulkBody<operated::Filter, ReasonOnly>, Body;
    WebhookDeliveryAction = operated::ActionRecord, Answer;
    WebhookReplay = Replay, Answer;
}
