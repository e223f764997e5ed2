//! The OTLP export's place in the server: it pushes the page `/metrics` serves (rendered here
//! as OpenMetrics, in process, through the same scrape and rendering as a request; no route is
//! counted), starts with the server and sends its last export on shutdown.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use super::app::App;
use super::negotiate::Exposition;
use super::page;
use crate::otlp;

/// Starts the export when the configuration turns it on.
pub(super) fn start(app: &Arc<App>) -> Option<otlp::Exporter> {
    let runtime = app.current();
    let config = runtime.config.otlp.clone()?;
    let source = app.clone();
    let page: otlp::PageSource = Arc::new(move || {
        let app = source.clone();
        Box::pin(async move { render(&app).await })
    });
    let drain = runtime.config.shutdown.drain_delay;
    let stop = app.shutting_down.subscribe();
    match otlp::start(config, page, &app.telemetry, stop, drain) {
        Ok(exporter) => {
            let _ = app.otlp.set(exporter.report.clone());
            Some(exporter)
        }
        Err(err) => {
            tracing::error!(error = %err, "OTLP export cannot start");
            None
        }
    }
}

/// Waits for the last export (it is bounded by the drain delay).
pub(super) async fn finish(exporter: Option<otlp::Exporter>, app: &App) {
    if let Some(exporter) = exporter {
        let bound = app.current().config.shutdown.drain_delay;
        let _ = tokio::time::timeout(bound, exporter.task).await;
    }
}

/// The whole `/metrics` page as OpenMetrics (which carries `_created`, UNIT and the types
/// text 0.0.4 cannot name).
async fn render(app: &App) -> Bytes {
    let runtime = app.current();
    let which: Vec<usize> = (0..runtime.scraper.upstreams().len()).collect();
    let scraped = runtime.scraper.scrape(&which, None, None).await;
    let openmetrics = Exposition::OpenMetrics100(None);
    let at = Instant::now();
    let response = page::response(
        app,
        &runtime,
        &which,
        &scraped,
        None,
        openmetrics,
        false,
        at,
    );
    let response = response.await;
    axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap_or_default()
}
