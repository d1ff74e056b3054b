//! Every parameter an operation of the API takes, as `utoipa::IntoParams` types that the handlers'
//! `#[utoipa::path(params(…))]` name: one type per distinct parameter, so operations taking the same
//! parameter share it. Each is the OpenAPI Parameter Object it publishes, written as JSON.
//!
//! Over 500 lines: data only, 53 parameter objects (the constraints the fuzzer and clients rely on).

use super::parameters;

parameters! {
    CorrelationId = {
        "name": "X-Correlation-Id",
        "in": "header",
        "required": false,
        "description": "A correlation id this API issued for the caller's workspace (a previous answer's X-Correlation-Id) continues that chain. Any other value is accepted but not used: a fresh id is issued and answered instead, and the value is never echoed or stored (docs/correlation.md).",
        "schema": {
            "type": "string"
        }
    };
    TypeInPath = {
        "name": "type",
        "in": "path",
        "required": true,
        "schema": {
            "example": "appointment.created",
            "type": "string"
        }
    };
    VersionInPath = {
        "name": "version",
        "in": "path",
        "required": true,
        "schema": {
            "example": "v1.json",
            "type": "string"
        }
    };
    BodyInPath = {
        "name": "body",
        "in": "path",
        "required": true,
        "schema": {
            "enum": [
                "heartbeat",
                "fhir-id-only"
            ],
            "example": "heartbeat",
            "type": "string"
        }
    };
    IdempotencyKey = {
        "name": "Idempotency-Key",
        "in": "header",
        "required": false,
        "description": "1 to 255 visible ASCII characters. The first request with a key binds it, within the workspace, to that request (method, path and body bytes): repeating it returns the stored answer and writes nothing; the same key with a different request answers 422 (field Idempotency-Key).",
        "schema": {
            "maxLength": 255,
            "minLength": 1,
            "pattern": "^[\\x21-\\x7e]+$",
            "type": "string"
        }
    };
    Q = {
        "name": "q",
        "in": "query",
        "required": true,
        "description": "Name prefix: at least 2 characters after trimming white space, at most 100, no NUL.",
        "schema": {
            "maxLength": 100,
            "minLength": 2,
            "pattern": "^[^\\x00]*[^\\x09-\\x0d\\x20\\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\x00][^\\x00]*[^\\x09-\\x0d\\x20\\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\x00][^\\x00]*$",
            "type": "string"
        }
    };
    DateOfBirth = {
        "name": "dateOfBirth",
        "in": "query",
        "required": false,
        "description": "Only patients born on this date (YYYY-MM-DD, from 1900-01-01 to today; the pattern bounds the year to 1900-2099).",
        "schema": {
            "format": "date",
            "pattern": "^(19|20)[0-9]{2}-[0-9]{2}-[0-9]{2}$",
            "type": "string"
        }
    };
    Limit = {
        "name": "limit",
        "in": "query",
        "required": false,
        "schema": {
            "default": 50,
            "maximum": 100,
            "minimum": 1,
            "type": "integer"
        }
    };
    Cursor = {
        "name": "cursor",
        "in": "query",
        "required": false,
        "description": "Opaque: the previous page's nextCursor, for the same list and filters. Sealed by the server; one it did not issue answers 400 (a fuzzer cannot mint one: tests/fuzz-api.hooks.py).",
        "schema": {
            "maxLength": 2048,
            "minLength": 1,
            "type": "string"
        }
    };
    PathId = {
        "name": "id",
        "in": "path",
        "required": true,
        "schema": {
            "maxLength": 26,
            "minLength": 26,
            "pattern": "^[0-7][0-9A-HJKMNP-TV-Za-hjkmnp-tv-z]{25}$",
            "type": "string"
        }
    };
    Active = {
        "name": "active",
        "in": "query",
        "required": false,
        "schema": {
            "type": "boolean"
        }
    };
    WindowFrom = {
        "name": "from",
        "in": "query",
        "required": true,
        "description": "Start of the window (inclusive), RFC 3339 in UTC (ending in Z).",
        "schema": {
            "format": "date-time",
            "pattern": "^(19[0-9]{2}|[2-9][0-9]{3})-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{1,9})?([Zz]|[+-]00:00)$",
            "type": "string"
        }
    };
    WindowTo = {
        "name": "to",
        "in": "query",
        "required": true,
        "description": "End of the window (exclusive), RFC 3339 in UTC; after `from` and at most 31 days later (a rule between two parameters: documented in tests/fuzz-api.hooks.py).",
        "schema": {
            "format": "date-time",
            "pattern": "^(19[0-9]{2}|[2-9][0-9]{3})-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{1,9})?([Zz]|[+-]00:00)$",
            "type": "string"
        }
    };
    PractitionerId = {
        "name": "practitionerId",
        "in": "query",
        "required": false,
        "schema": {
            "maxLength": 26,
            "minLength": 26,
            "pattern": "^[0-7][0-9A-HJKMNP-TV-Za-hjkmnp-tv-z]{25}$",
            "type": "string"
        }
    };
    PatientId = {
        "name": "patientId",
        "in": "query",
        "required": false,
        "schema": {
            "maxLength": 26,
            "minLength": 26,
            "pattern": "^[0-7][0-9A-HJKMNP-TV-Za-hjkmnp-tv-z]{25}$",
            "type": "string"
        }
    };
    AppointmentStatus = {
        "name": "status",
        "in": "query",
        "required": false,
        "schema": {
            "enum": [
                "booked",
                "cancelled",
                "completed"
            ],
            "type": "string"
        }
    };
    OutboxStatus = {
        "name": "status",
        "in": "query",
        "required": false,
        "description": "Only rows in this status",
        "schema": {
            "enum": [
                "pending",
                "claimed",
                "dispatched",
                "retry",
                "dead",
                "discarded"
            ],
            "type": "string"
        }
    };
    EventType = {
        "name": "eventType",
        "in": "query",
        "required": false,
        "description": "Only rows of this event type",
        "schema": {
            "enum": [
                "patient.created",
                "patient.updated",
                "patient.deleted",
                "practitioner.created",
                "practitioner.updated",
                "appointment.created",
                "appointment.rescheduled",
                "appointment.cancelled",
                "appointment.completed",
                "appointment.reminder_due"
            ],
            "type": "string"
        }
    };
    OlderThan = {
        "name": "olderThan",
        "in": "query",
        "required": false,
        "description": "Only rows created at least this long ago: seconds, or a number with unit s, m, h or d",
        "schema": {
            "pattern": "^[0-9]{1,9}[smhd]?$",
            "type": "string"
        }
    };
    RoutedListener = {
        "name": "listener",
        "in": "query",
        "required": false,
        "description": "Only events routed to this listener.",
        "schema": {
            "enum": [
                "patient_booking_confirmation",
                "practitioner_schedule_change",
                "patient_reschedule_notice",
                "patient_cancellation_notice",
                "patient_reminder",
                "cancel_future_appointments"
            ],
            "type": "string"
        }
    };
    ErrorCode = {
        "name": "errorCode",
        "in": "query",
        "required": false,
        "schema": {
            "pattern": "^[A-Za-z0-9_.:-]{1,100}$",
            "type": "string"
        }
    };
    CreatedFrom = {
        "name": "from",
        "in": "query",
        "required": false,
        "description": "Rows created at or after this time (RFC 3339).",
        "schema": {
            "format": "date-time",
            "type": "string"
        }
    };
    CreatedTo = {
        "name": "to",
        "in": "query",
        "required": false,
        "description": "Rows created before this time (RFC 3339); after from when both are given.",
        "schema": {
            "format": "date-time",
            "type": "string"
        }
    };
    ResourceId = {
        "name": "resourceId",
        "in": "query",
        "required": false,
        "description": "Events linked to this resource (any timeline link).",
        "schema": {
            "maxLength": 26,
            "minLength": 26,
            "pattern": "^[0-7][0-9A-HJKMNP-TV-Za-hjkmnp-tv-z]{25}$",
            "type": "string"
        }
    };
    OutboxEventId = {
        "name": "id",
        "in": "path",
        "required": true,
        "description": "The event id",
        "schema": {
            "maxLength": 26,
            "minLength": 26,
            "pattern": "^[0-7][0-9A-HJKMNP-TV-Za-hjkmnp-tv-z]{25}$",
            "type": "string"
        }
    };
    IdempotencyKeyOperator = {
        "name": "Idempotency-Key",
        "in": "header",
        "required": false,
        "description": "1 to 255 visible ASCII characters. The first request with a key binds it, within the workspace, to that request (method, path and body bytes): repeating it returns the stored answer and writes nothing; the same key with a different request answers 422 (field Idempotency-Key). Operator actions: a replay answers the stored audit record; a replay of a bulk action answers what its batch's audit rows show (applied and matched: the rows it changed, sample: their first ids, skipped empty, remaining 0); a dry run writes nothing and claims no key.",
        "schema": {
            "maxLength": 255,
            "minLength": 1,
            "pattern": "^[\\x21-\\x7e]+$",
            "type": "string"
        }
    };
    DeliveryStatus = {
        "name": "status",
        "in": "query",
        "required": false,
        "description": "Only deliveries in this status",
        "schema": {
            "enum": [
                "pending",
                "sending",
                "uncertain",
                "sent",
                "retry",
                "dead",
                "no_contact",
                "opted_out",
                "discarded",
                "stale",
                "deferred",
                "suppressed"
            ],
            "type": "string"
        }
    };
    Age = {
        "name": "olderThan",
        "in": "query",
        "required": false,
        "description": "Only rows created at least this long ago (seconds, or a number with s, m, h or d)",
        "schema": {
            "description": "An age: seconds, or a number with s, m, h or d.",
            "examples": [
                "15m"
            ],
            "pattern": "^[0-9]{1,9}[smhd]?$",
            "type": "string"
        }
    };
    OnlyFrom = {
        "name": "from",
        "in": "query",
        "required": false,
        "description": "Only rows created at or after this time",
        "schema": {
            "format": "date-time",
            "type": "string"
        }
    };
    OnlyTo = {
        "name": "to",
        "in": "query",
        "required": false,
        "description": "Only rows created before this time",
        "schema": {
            "format": "date-time",
            "type": "string"
        }
    };
    LastErrorCode = {
        "name": "errorCode",
        "in": "query",
        "required": false,
        "description": "Only rows whose last error code is this one",
        "schema": {
            "pattern": "^[A-Za-z0-9_.:-]{1,100}$",
            "type": "string"
        }
    };
    DeliveryListener = {
        "name": "listener",
        "in": "query",
        "required": false,
        "description": "Only deliveries this listener made",
        "schema": {
            "description": "Notifications this listener made",
            "enum": [
                "patient_booking_confirmation",
                "practitioner_schedule_change",
                "patient_reschedule_notice",
                "patient_cancellation_notice",
                "patient_reminder",
                "cancel_future_appointments"
            ],
            "type": "string"
        }
    };
    Template = {
        "name": "template",
        "in": "query",
        "required": false,
        "description": "Only deliveries of this template",
        "schema": {
            "description": "Notifications of this template",
            "pattern": "^[a-z0-9_.]{1,64}$",
            "type": "string"
        }
    };
    DeliveryId = {
        "name": "id",
        "in": "path",
        "required": true,
        "description": "The notification (delivery) id",
        "schema": {
            "maxLength": 26,
            "minLength": 26,
            "pattern": "^[0-7][0-9A-HJKMNP-TV-Za-hjkmnp-tv-z]{25}$",
            "type": "string"
        }
    };
    WebhookDeliveryId = {
        "name": "id",
        "in": "path",
        "required": true,
        "description": "The webhook delivery id (its webhook-id)",
        "schema": {
            "maxLength": 26,
            "minLength": 26,
            "pattern": "^[0-7][0-9A-HJKMNP-TV-Za-hjkmnp-tv-z]{25}$",
            "type": "string"
        }
    };
    All = {
        "name": "all",
        "in": "query",
        "required": false,
        "description": "Also the pairs the reconciler is still restarting",
        "schema": {
            "enum": [
                "true",
                "false"
            ],
            "type": "string"
        }
    };
    PairLimit = {
        "name": "limit",
        "in": "query",
        "required": false,
        "description": "Pairs listed (1-100, default 50)",
        "schema": {
            "maximum": 100,
            "minimum": 1,
            "type": "integer"
        }
    };
    ExplainedEventId = {
        "name": "id",
        "in": "path",
        "required": true,
        "description": "The event id",
        "schema": {
            "$ref": "#/components/schemas/Ulid"
        }
    };
    RejectedEventId = {
        "name": "eventId",
        "in": "query",
        "required": false,
        "description": "Only rejections of deliveries that claimed this event id",
        "schema": {
            "pattern": "^[0-7][0-9A-HJKMNP-TV-Za-hjkmnp-tv-z]{25}$",
            "type": "string"
        }
    };
    Reason = {
        "name": "reason",
        "in": "query",
        "required": false,
        "description": "Only this reason code",
        "schema": {
            "enum": [
                "unknown_event",
                "tenant_mismatch",
                "type_mismatch",
                "subject_mismatch",
                "version_mismatch",
                "source_mismatch",
                "listener_not_routed"
            ],
            "type": "string"
        }
    };
    RejectionLimit = {
        "name": "limit",
        "in": "query",
        "required": false,
        "description": "Items per page (1-100, default 50)",
        "schema": {
            "maximum": 100,
            "minimum": 1,
            "type": "integer"
        }
    };
    RejectionCursor = {
        "name": "cursor",
        "in": "query",
        "required": false,
        "description": "Opaque: the previous page's nextCursor, for the same filters. Sealed by the server; one it did not issue answers 400.",
        "schema": {
            "maxLength": 2048,
            "minLength": 1,
            "type": "string"
        }
    };
    CorrelationIdPlain = {
        "name": "X-Correlation-Id",
        "in": "header",
        "required": false,
        "schema": {
            "type": "string"
        }
    };
    IdempotencyKeyWebhook = {
        "name": "Idempotency-Key",
        "in": "header",
        "required": false,
        "description": "1 to 255 visible ASCII characters. The first request with a key binds it, within the workspace, to that request (method, path and body bytes): repeating it returns the stored answer and writes nothing; the same key with a different request answers 422 (field Idempotency-Key). Webhook endpoints: a replay of create or rotate answers the endpoint without `secret` (the secret is never stored outside the endpoint, so it is shown once); a replay of recover answers `since` and `recovered` as null.",
        "schema": {
            "maxLength": 255,
            "minLength": 1,
            "pattern": "^[\\x21-\\x7e]+$",
            "type": "string"
        }
    };
    WebhookEndpointId = {
        "name": "id",
        "in": "path",
        "required": true,
        "description": "The webhook endpoint id",
        "schema": {
            "maxLength": 26,
            "minLength": 26,
            "pattern": "^[0-9A-HJKMNP-TV-Za-hjkmnp-tv-z]{26}$",
            "type": "string"
        }
    };
    EndpointId = {
        "name": "endpointId",
        "in": "query",
        "required": false,
        "description": "Only this endpoint's",
        "schema": {
            "maxLength": 26,
            "minLength": 26,
            "pattern": "^[0-9A-HJKMNP-TV-Za-hjkmnp-tv-z]{26}$",
            "type": "string"
        }
    };
    WebhookEventId = {
        "name": "eventId",
        "in": "query",
        "required": false,
        "description": "Only this event's",
        "schema": {
            "maxLength": 26,
            "minLength": 26,
            "pattern": "^[0-9A-HJKMNP-TV-Za-hjkmnp-tv-z]{26}$",
            "type": "string"
        }
    };
    WebhookDeliveryStatus = {
        "name": "status",
        "in": "query",
        "required": false,
        "description": "Only this status",
        "schema": {
            "enum": [
                "pending",
                "sending",
                "delivered",
                "retry",
                "failed",
                "discarded"
            ],
            "type": "string"
        }
    };
    WebhookEventType = {
        "name": "eventType",
        "in": "query",
        "required": false,
        "description": "Only deliveries of this event type",
        "schema": {
            "enum": [
                "patient.created",
                "patient.updated",
                "patient.deleted",
                "practitioner.created",
                "practitioner.updated",
                "appointment.created",
                "appointment.rescheduled",
                "appointment.cancelled",
                "appointment.completed",
                "appointment.reminder_due"
            ],
            "type": "string"
        }
    };
    WebhookLimit = {
        "name": "limit",
        "in": "query",
        "required": false,
        "description": "1–100 (default 50)",
        "schema": {
            "maximum": 100,
            "minimum": 1,
            "type": "integer"
        }
    };
    After = {
        "name": "after",
        "in": "query",
        "required": false,
        "description": "Answer the deliveries numbered after this (default 0)",
        "schema": {
            "default": 0,
            "maximum": i64::MAX,
            "minimum": 0,
            "type": "integer"
        }
    };
    ReplayLimit = {
        "name": "limit",
        "in": "query",
        "required": false,
        "description": "At most this many (1–100, default 100)",
        "schema": {
            "default": 100,
            "maximum": 100,
            "minimum": 1,
            "type": "integer"
        }
    };
    TokenInPath = {
        "name": "token",
        "in": "path",
        "required": true,
        "description": "The signed, expiring token of the email's List-Unsubscribe link: the workspace id, the patient id, the message kind and the expiry (no personal data), with an HMAC-SHA256 tag; base64url, 78 characters.",
        "schema": {
            "maxLength": 78,
            "minLength": 78,
            "pattern": "^[A-Za-z0-9_-]{78}$",
            "type": "string"
        }
    };
}
