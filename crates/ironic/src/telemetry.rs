//! Logs and traces of a service process: `tracing` to stderr (human or JSON), and, when
//! `[telemetry] otlp_endpoint` is set, OpenTelemetry spans exported over OTLP/gRPC. The
//! API's request span, the RPC client span and the conductor's handler span form one
//! trace (the context crosses the bus in the request, see `ironic_rpc::trace`).

use ironic_config::{LogFormat, LogSection, TelemetrySection};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// Flushes exported spans when the process stops.
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    pub fn shutdown(self) {
        if let Some(p) = self.provider
            && let Err(e) = p.shutdown()
        {
            eprintln!("could not flush traces: {e}");
        }
    }
}

/// Installs the process-wide subscriber. Call inside the Tokio runtime (the OTLP
/// exporter needs it).
pub fn init(log: &LogSection, tel: &TelemetrySection, service: &str) -> Telemetry {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&log.filter))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(ansi)
        .with_writer(ironic_config::log_writer());
    let fmt = match log.format {
        LogFormat::Human => fmt.boxed(),
        LogFormat::Json => fmt.json().boxed(),
    }
    .with_filter(ironic_config::LineBudget::new(log.max_lines_per_second));
    let mut provider = None;
    let mut otel_error = None;
    let otel = match tel.otlp_endpoint.as_deref().filter(|e| !e.is_empty()) {
        None => None,
        Some(endpoint) => match opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(endpoint)
            .build()
        {
            Ok(exporter) => {
                let name = tel
                    .service_name
                    .clone()
                    .unwrap_or_else(|| service.to_string());
                let p = SdkTracerProvider::builder()
                    .with_batch_exporter(exporter)
                    .with_resource(Resource::builder().with_service_name(name).build())
                    .build();
                // Our spans only (not those of libraries such as lapin's I/O loop).
                let layer = tracing_opentelemetry::layer()
                    .with_tracer(p.tracer(service.to_string()))
                    .with_filter(tracing_subscriber::filter::filter_fn(|m| {
                        m.target().starts_with("ironic")
                    }));
                provider = Some(p);
                Some(layer)
            }
            Err(e) => {
                otel_error = Some(format!("OTLP exporter for {endpoint}: {e}"));
                None
            }
        },
    };
    // Already initialised in tests that start several services in one process.
    let _ = tracing_subscriber::registry()
        .with(otel)
        .with(fmt)
        .with(filter)
        .try_init();
    if log.max_lines_per_second > 0 {
        tokio::spawn(report_dropped_lines());
    }
    if let Some(e) = otel_error {
        tracing::error!("traces are off: {e}");
    } else if let Some(ep) = &tel.otlp_endpoint {
        tracing::info!(endpoint = %ep, "exporting traces over OTLP");
    }
    Telemetry { provider }
}

/// Says, every ten seconds, how many log lines the line budget dropped
/// (`ironic_config::LineBudget`; the report itself is never dropped), and counts them
/// in `ironic_log_lines_dropped_total`.
async fn report_dropped_lines() {
    let mut reported = 0;
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(10));
    loop {
        tick.tick().await;
        let dropped = ironic_config::dropped_log_lines();
        if dropped > reported {
            metrics::counter!("ironic_log_lines_dropped_total").absolute(dropped);
            tracing::warn!(
                target: "ironic::log_budget",
                dropped = dropped - reported,
                "log lines dropped in the last 10 s: more than [log] max_lines_per_second (the audit trail is never dropped)"
            );
            reported = dropped;
        }
    }
}
