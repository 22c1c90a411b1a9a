//! W3C trace context across the bus: the caller's current span goes into every request
//! (envelope and AMQP headers), the conductor's handler span takes it as its parent, so
//! one trace runs from the HTTP request into the conductor. Without an OpenTelemetry
//! layer installed, spans carry no context and nothing is sent.

use std::collections::HashMap;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::pb;

/// The trace context of `span`.
pub fn of(span: &tracing::Span) -> pb::TraceContext {
    let mut map: HashMap<String, String> = HashMap::new();
    TraceContextPropagator::new().inject_context(&span.context(), &mut map);
    pb::TraceContext {
        traceparent: map.remove("traceparent").unwrap_or_default(),
        tracestate: map.remove("tracestate").unwrap_or_default(),
    }
}

/// Makes the remote caller's span the parent of `span`.
pub fn attach(span: &tracing::Span, t: &pb::TraceContext) {
    if t.traceparent.is_empty() {
        return;
    }
    let mut map: HashMap<String, String> = HashMap::new();
    map.insert("traceparent".into(), t.traceparent.clone());
    if !t.tracestate.is_empty() {
        map.insert("tracestate".into(), t.tracestate.clone());
    }
    let cx = TraceContextPropagator::new().extract(&map);
    let _ = span.set_parent(cx);
}
