//! Subscriptions for other applications (DESIGN.md §5c, docs/webhooks.md): outgoing webhooks signed
//! per the Standard Webhooks spec.
//!
//! - [`endpoints`]: what a workspace registers (URL, description, event-type filter, secrets with a
//!   rotation overlap), with an append-only audit of every change.
//! - [`fanout`]: the `webhook_fan_out` listener's effect — one delivery per (subscribed endpoint,
//!   event), `UNIQUE(endpoint_id, event_id)`, in the listener's receipt transaction; a disabled
//!   endpoint's deliveries are created and held until it is enabled (bounded by
//!   [`fanout::HOLD_DAYS`]). The dispatcher starts the fan-out only for events that some such
//!   endpoint subscribes to ([`crate::listeners::map::routed`], predicate [`fanout::subscribed`]), so
//!   workspaces without webhooks pay nothing.
//! - [`sender`]: claims due deliveries under a lease, checks the URL again ([`guard`]), POSTs the
//!   signed identifier-only CloudEvent ([`signing`], [`client`]), records the attempt, marks fenced.
//! - [`sequence`]: each endpoint numbers its deliveries densely (the CloudEvents `sequence`);
//!   [`heartbeat`]: a signed heartbeat with the endpoint's status and last number when idle.
//! - [`secret_box`]: the signing secrets are stored sealed (XChaCha20-Poly1305, bound to their
//!   endpoint's row) under a key kept outside the database; only create/rotate seal and the sender
//!   opens.
//!
//! `webhook_deliveries` is a lease queue ([`crate::lease`], [`crate::lease::WEBHOOK_DELIVERIES`]:
//! `failed` is the lifecycle's `dead`; the claim, the fence, the burial at the ceiling and the fresh
//! budget of a recover are the lease module's pieces; the schedule is a [`crate::lease::RetryPolicy`]):
//!
//! | status      | moved in by | moved out by |
//! |-------------|-------------|--------------|
//! | `pending`   | [`fanout::fan_out`] (also for a disabled endpoint: held, no attempt spent); [`store::recover`] (an admin's recover-since) | a sender's claim → `sending` (only while the endpoint is enabled) |
//! | `sending`   | claim (lease = `available_at`); also a `sending` row whose lease ended (its sender died: sent again, same `webhook-id`) | the claim holder's mark → `delivered`, `retry`, `failed`; an expired lease on the last attempt → `failed` (`attempts_exhausted`) |
//! | `retry`     | mark: a retryable failure with attempts left; `available_at` = the schedule's next step | claim once due (only while the endpoint is enabled); an operator retry → `pending` now, or discard → `discarded` |
//! | `delivered` | mark: a 2xx answer | final; swept by retention |
//! | `failed`    | mark: 4xx other than 408/429, the last attempt failed, or the endpoint/event is gone | [`store::recover`] or an operator retry ([`crate::operator::queue`], single or bulk) → `pending`; an operator discard → `discarded` |
//! | `discarded` | an operator discard of a `failed` or `retry` delivery (audited in `operator_actions.webhook_delivery_id`) | final; swept by retention like `delivered` |
//!
//! Invariants:
//! - Rows, attempts, audit rows, logs and metrics hold ids, codes, counters and at most a scanned
//!   excerpt of an error answer — never a secret, a URL's query, or anything about a patient.
//!   The body sent is the identifier-only CloudEvent (no names, contact details or reasons).
//! - The `webhook-id` header is the delivery id, equal across every attempt and every recover, so
//!   receivers deduplicate at-least-once delivery.
//! - No transaction is open across an HTTP call; every call has connect and total timeouts below the
//!   lease; every connection goes to an address the SSRF guard checked for that attempt.

pub mod client;
pub mod endpoints;
pub mod fanout;
pub mod fhir;
pub mod guard;
pub mod heartbeat;
pub mod secret_box;
pub mod sender;
pub mod sequence;
pub mod signing;
pub mod store;

pub use sender::{BodyFn, Payload, WebhookConfig, WebhookReport, WebhookSender};
