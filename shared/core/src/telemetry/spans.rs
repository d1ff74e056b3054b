//! The outbox hand-off in spans: how a request's span continues its caller's trace, and how a span
//! that handles events links to the traces that committed them (docs/tracing.md).
//!
//! Invariants:
//! - Work after the outbox never pretends to be a child of the request: a span that handles events
//!   gets one *link* per event to the event's stored `traceparent` (a batch of N events is one span
//!   with N links), each link carrying the event id and the wait, and the span carries the longest
//!   wait as `outbox.wait_ms` (commit → claim) or `queue.wait_ms` (send → listener start).
//! - Attributes are ids, types, counts and durations only.
//! - With the export off ([`super::exporting`] false) every function here returns before doing any
//!   work: no context is built, no iterator is walked.

use chrono::{DateTime, Utc};
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use opentelemetry::KeyValue;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::{exporting, TraceParent};
use crate::ids::EventId;

/// The wait attribute of a span that claims events from the outbox (commit → claim).
pub const OUTBOX_WAIT: &str = "outbox.wait_ms";
/// The wait attribute of a listener run (the transport's send → the listener's start).
pub const QUEUE_WAIT: &str = "queue.wait_ms";

/// `traceparent` as a remote OpenTelemetry span context.
pub fn span_context(trace: TraceParent) -> SpanContext {
    SpanContext::new(
        TraceId::from_bytes(trace.trace_id()),
        SpanId::from_bytes(trace.parent_id()),
        TraceFlags::new(trace.flags()),
        true,
        TraceState::default(),
    )
}

/// The `traceparent` naming `span` itself, when spans are exported and `span` is recorded.
pub fn traceparent_of(span: &tracing::Span) -> Option<TraceParent> {
    if !exporting() {
        return None;
    }
    let context = span.context();
    let own = context.span().span_context().clone();
    if !own.is_valid() {
        return None;
    }
    TraceParent::from_parts(own.trace_id().to_bytes(), own.span_id().to_bytes(), own.trace_flags().to_u8())
}

/// Makes `span` (not yet entered) continue `incoming` — a validated client or X-Ray trace context —
/// and answers the `traceparent` to store with the events the request commits: `span`'s own when
/// spans are exported; otherwise `incoming` under a new parent id, or a fresh trace.
pub fn continue_trace(span: &tracing::Span, incoming: Option<TraceParent>) -> TraceParent {
    if exporting() {
        if let Some(incoming) = incoming {
            let parent = opentelemetry::Context::new().with_remote_span_context(span_context(incoming));
            let _ = span.set_parent(parent);
        }
        if let Some(own) = traceparent_of(span) {
            return own;
        }
    }
    incoming.map_or_else(TraceParent::generate, TraceParent::child)
}

/// Milliseconds from `since` to `now` (0 when the clocks disagree).
pub fn wait_ms(since: DateTime<Utc>, now: DateTime<Utc>) -> i64 {
    (now - since).num_milliseconds().max(0)
}

/// One handled event, for [`link_events`]: its id, the trace that committed it, and how long it
/// waited (milliseconds).
#[derive(Debug, Clone, Copy)]
pub struct Handled {
    pub event_id: EventId,
    pub trace: Option<TraceParent>,
    pub wait_ms: i64,
}

/// Links `span` to the committing trace of each event (one link each, with `event.id` and the
/// `wait` attribute) and records the longest wait as `wait` on the span. `events` is not walked when
/// the export is off.
pub fn link_events<I>(span: &tracing::Span, wait: &'static str, events: impl FnOnce() -> I)
where
    I: IntoIterator<Item = Handled>,
{
    if !exporting() {
        return;
    }
    let mut longest: Option<i64> = None;
    let mut count = 0_i64;
    for event in events() {
        count += 1;
        longest = Some(longest.map_or(event.wait_ms, |longest| longest.max(event.wait_ms)));
        if let Some(trace) = event.trace {
            span.add_link_with_attributes(
                span_context(trace),
                vec![
                    KeyValue::new("event.id", event.event_id.to_string()),
                    KeyValue::new(wait, event.wait_ms),
                ],
            );
        }
    }
    if let Some(longest) = longest {
        span.set_attribute(wait, longest);
    }
    span.set_attribute("events", count);
}

/// Links `span` (one event's side effect, e.g. a webhook POST) to the trace that committed the event.
pub fn link_trace(span: &tracing::Span, event_id: EventId, trace: Option<TraceParent>) {
    if !exporting() {
        return;
    }
    if let Some(trace) = trace {
        span.add_link_with_attributes(
            span_context(trace),
            vec![KeyValue::new("event.id", event_id.to_string())],
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_the_export_nothing_is_walked_and_a_trace_is_still_answered() {
        // This unit-test process installs no OpenTelemetry layer.
        assert!(!exporting());
        let span = tracing::info_span!("test");
        link_events(&span, OUTBOX_WAIT, || -> Vec<Handled> { panic!("walked while the export is off") });
        let incoming = TraceParent::generate();
        let answered = continue_trace(&span, Some(incoming));
        assert_eq!(answered.trace_id(), incoming.trace_id());
        assert_ne!(answered.parent_id(), incoming.parent_id());
        assert_ne!(continue_trace(&span, None).trace_id(), incoming.trace_id());
        assert_eq!(traceparent_of(&span), None);
    }
}
