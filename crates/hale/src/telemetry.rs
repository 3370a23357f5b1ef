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
//!
//! Until an exporter is installed that filter enables nothing, so a turn
//! builds no span at all (the registry's span slab, enter and exit on every
//! poll were ~11k instructions of a turn under callgrind): the callsites'
//! interest is computed again when the exporter goes in. Its level hint
//! stays INFO either way, so the libraries' DEBUG logging (sqlx formats
//! each statement when asked) is never switched on by it.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::trace::SdkTracerProvider;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use tracing::Level;
use tracing::level_filters::LevelFilter;
use tracing_subscriber::filter::{FilterFn, Targets};
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

/// An exporter is installed: hale's spans are built (and exported).
static EXPORTING: AtomicBool = AtomicBool::new(false);

/// Starts logging to stderr, with an empty slot for the span exporter.
pub fn init() {
    let filter = EnvFilter::try_from_env(LOG_ENV).unwrap_or_else(|_| EnvFilter::new("warn"));
    let (otel, slot) = reload::Layer::new(None::<Box<dyn Layer<Registry> + Send + Sync>>);
    // The filter wraps the slot, not the exporter put in it later: a
    // per-layer filter must be registered with the subscriber at start.
    let targets = Targets::new()
        .with_target("hale_gateway", Level::INFO)
        .with_target("hale_tools", Level::INFO);
    let otel = otel.with_filter(
        FilterFn::new(move |meta| {
            EXPORTING.load(Ordering::Relaxed) && targets.would_enable(meta.target(), meta.level())
        })
        .with_max_level_hint(LevelFilter::INFO),
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
    // Before the reload, which computes every callsite's interest again.
    EXPORTING.store(true, Ordering::Relaxed);
    if let Err(e) = state.slot.reload(Some(
        Box::new(layer) as Box<dyn Layer<Registry> + Send + Sync>
    )) {
        EXPORTING.store(false, Ordering::Relaxed);
        tracing::callsite::rebuild_interest_cache();
        return Err(e.into());
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Without an exporter a turn's span is not built at all; once hale's
    /// spans are exported (the flag `export` sets before its reload), the
    /// same callsite builds it. Other crates' INFO spans stay off either way.
    #[test]
    fn spans_are_built_only_while_they_are_exported() {
        init();
        let turn = || tracing::info_span!(target: "hale_gateway", "turn", turn_id = "t");
        let other = || tracing::info_span!(target: "sqlx", "query");
        assert!(turn().is_disabled(), "no exporter: no span");
        EXPORTING.store(true, Ordering::Relaxed);
        tracing::callsite::rebuild_interest_cache();
        assert!(!turn().is_disabled(), "exported: the span is built");
        assert!(other().is_disabled(), "only hale's own spans");
        EXPORTING.store(false, Ordering::Relaxed);
        tracing::callsite::rebuild_interest_cache();
        assert!(turn().is_disabled());
    }
}
