//! `GET /metrics` on a small blocking HTTP listener, on a thread of its own so a slow scrape
//! never waits on a sweep (and a sweep never on a scrape).

use super::Metrics;
use std::sync::Arc;

/// The content type of [`Metrics::encode`]'s output (OpenMetrics text).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The listener; dropping it stops it.
pub struct MetricsServer {
    server: Arc<tiny_http::Server>,
    thread: Option<std::thread::JoinHandle<()>>,
    addr: String,
}

impl MetricsServer {
    /// Listens on `listen` (`HOST:PORT`) and serves `metrics`. The error names the address.
    pub fn start(listen: &str, metrics: Metrics) -> anyhow::Result<MetricsServer> {
        let server = tiny_http::Server::http(listen).map_err(|e| {
            anyhow::anyhow!(
                "cannot serve metrics on {listen}: {e}; give a free HOST:PORT (--metrics, or \
                 [metrics] listen; \"off\" for none)"
            )
        })?;
        let addr = server
            .server_addr()
            .to_ip()
            .map_or_else(|| listen.to_string(), |a| a.to_string());
        let server = Arc::new(server);
        let serving = Arc::clone(&server);
        let thread = std::thread::Builder::new()
            .name("edgebench-metrics".into())
            .spawn(move || {
                // Ends when `unblock` is called (on drop).
                for request in serving.incoming_requests() {
                    respond(request, &metrics);
                }
            })?;
        tracing::info!("metrics: http://{addr}/metrics");
        Ok(MetricsServer {
            server,
            thread: Some(thread),
            addr,
        })
    }

    /// The address bound (the port chosen when `listen` asked for port 0).
    pub fn addr(&self) -> &str {
        &self.addr
    }
}

fn respond(request: tiny_http::Request, metrics: &Metrics) {
    let path = request.url().split('?').next().unwrap_or("");
    let get = matches!(
        request.method(),
        tiny_http::Method::Get | tiny_http::Method::Head
    );
    let response = if path == "/metrics" && get {
        let header =
            tiny_http::Header::from_bytes("Content-Type", CONTENT_TYPE).expect("a valid header");
        tiny_http::Response::from_string(metrics.encode()).with_header(header)
    } else {
        tiny_http::Response::from_string("not found: the metrics are at /metrics\n")
            .with_status_code(404)
    };
    // A client that went away mid-response is no concern of the sweep's.
    let _ = request.respond(response);
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The daemon's endpoint from `[metrics] listen`: None for "off", and None (with the error
/// logged) when the address cannot be bound: a sweep is worth more than its metrics.
pub fn start_or_log(listen: &str, metrics: &Metrics) -> Option<MetricsServer> {
    if listen.trim().eq_ignore_ascii_case("off") {
        return None;
    }
    match MetricsServer::start(listen.trim(), metrics.clone()) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::error!("{e:#}; the daemon goes on without a metrics endpoint");
            None
        }
    }
}
