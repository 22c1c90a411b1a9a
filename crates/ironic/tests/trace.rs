#![allow(clippy::unwrap_used)]
//! One trace from the HTTP request through the AMQP message into the conductor: the
//! conductor's handler span is a child of the RPC client span, itself a child of the
//! API's request span. The API and the conductor run in this process but talk only over
//! RabbitMQ, so the parentage can only come from the context carried in the message.

mod common;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use serde_json::json;
use tracing_subscriber::layer::SubscriberExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_conductor_span_is_a_child_of_the_api_span() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")))
        .with(tracing_subscriber::EnvFilter::new("info"));
    tracing::subscriber::set_global_default(subscriber).unwrap();

    let s = common::start(common::Backend::Split).await;
    // The client traces too: its trace continues through the API into the conductor.
    let client_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let r = s
        .raw(
            "POST",
            "/v1/nodes",
            &[
                ("X-OpenStack-Ironic-API-Version", "1.51".to_string()),
                (
                    "traceparent",
                    format!("00-{client_trace}-00f067aa0ba902b7-01"),
                ),
            ],
            Some(
                json!({"driver": "fake-hardware", "name": "traced"})
                    .to_string()
                    .as_bytes(),
            ),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    s.stop().await;
    provider.force_flush().unwrap();

    let spans = exporter.get_finished_spans().unwrap();
    let named = |n: &str| spans.iter().filter(|s| s.name == n).collect::<Vec<_>>();
    let server = named("rpc.server");
    assert_eq!(server.len(), 1, "one conductor handler span");
    let server = server[0];
    let client = named("rpc.client");
    assert_eq!(client.len(), 1, "one RPC client span");
    let client = client[0];
    let request = named("request")
        .into_iter()
        .find(|r| r.span_context.span_id() == client.parent_span_id)
        .expect("the RPC client span's parent is an API request span");
    assert_eq!(server.parent_span_id, client.span_context.span_id());
    let trace = request.span_context.trace_id();
    assert_eq!(client.span_context.trace_id(), trace);
    assert_eq!(
        server.span_context.trace_id(),
        trace,
        "one trace end to end"
    );
    assert_eq!(trace.to_string(), client_trace, "the client's trace");
    assert_eq!(request.parent_span_id.to_string(), "00f067aa0ba902b7");
}
