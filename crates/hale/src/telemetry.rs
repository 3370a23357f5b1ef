//! Logs and spans. Logs go to stderr through the fmt layer, filtered by
//! `HALE_LOG` (default `warn`). The gateway opens a `turn` span per turn and
//! an `attempt` span per upstream attempt, both carrying the turn id; when
//! `hale serve` is configured with `telemetry.otlp_endpoint`, an
//! OpenTelemetry layer is put in a slot left empty at start (the config is
//! read after logging starts) and exports those spans over OTLP/HTTP with a
//! batch processor on its own thread, flushed when the server stops.
//!
//! Only hale's own spans are exported (a per-layer filter on the crate
//! targets at INFO), never the HTTP and database libraries' spans, and the
//! spans' fields are ids, names and classes: no prompt, answer or key.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::trace::SdkTracerProvider;
use std::sync::{Mutex, OnceLock};
use tracing::Level;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry, reload};

/// The log filter's environment variable (tracing-subscriber syntax, e.g. `info,hale_gateway=debug`).
pub const LOG_ENV: &str = "HALE_LOG";

type Slot = reload::Handle<Option<Box<dyn Layer<Registry> + Send + Sync>>, Registry>;

struct State {
    slot: Slot,
    provider: Mutex<Option<SdkTracerProvider>>,
}

static STATE: OnceLock<State> = OnceLock::new();

/// Starts logging to stderr, with an empty slot for the span exporter.
pub fn init() {
    let filter = EnvFilter::try_from_env(LOG_ENV).unwrap_or_else(|_| EnvFilter::new("warn"));
    let (otel, slot) = reload::Layer::new(None::<Box<dyn Layer<Registry> + Send + Sync>>);
    // The filter wraps the slot, not the exporter put in it later: a
    // per-layer filter must be registered with the subscriber at start.
    let otel = otel.with_filter(
        Targets::new()
            .with_target("hale_gateway", Level::INFO)
            .with_target("hale_tools", Level::INFO),
    );
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_filter(filter);
    tracing_subscriber::registry().with(otel).with(fmt).init();
    let _ = STATE.set(State {
        slot,
        provider: Mutex::new(None),
    });
}

/// Exports hale's spans to `{endpoint}/v1/traces` as `service_name`.
/// Builds the blocking HTTP client on a thread of its own: reqwest's
/// blocking client must not be made or dropped on an async worker.
pub fn export(endpoint: &str, service_name: &str) -> anyhow::Result<()> {
    let state = STATE
        .get()
        .ok_or_else(|| anyhow::anyhow!("logging was not started"))?;
    let url = format!("{endpoint}/v1/traces");
    let name = service_name.to_owned();
    let provider = std::thread::spawn(move || -> anyhow::Result<SdkTracerProvider> {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_endpoint(url)
            .build()?;
        Ok(SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(
                opentelemetry_sdk::Resource::builder()
                    .with_service_name(name)
                    .build(),
            )
            .build())
    })
    .join()
    .map_err(|_| anyhow::anyhow!("the OTLP exporter could not be built"))??;
    let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("hale"));
    state.slot.reload(Some(
        Box::new(layer) as Box<dyn Layer<Registry> + Send + Sync>
    ))?;
    *state.provider.lock().unwrap_or_else(|e| e.into_inner()) = Some(provider);
    Ok(())
}

/// Flushes and stops the exporter, if one runs (on a thread of its own, as
/// the blocking client it drops must not be dropped on an async worker).
pub fn shutdown() {
    let Some(state) = STATE.get() else { return };
    let provider = state
        .provider
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    if let Some(p) = provider {
        let _ = std::thread::spawn(move || {
            if let Err(e) = p.shutdown() {
                eprintln!("warning: the OTLP exporter did not flush: {e}");
            }
        })
        .join();
    }
}
