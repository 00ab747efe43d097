//! `GET /metrics` over HTTP/1, served by hyper on a thread of its own with a small
//! current-thread tokio runtime, so a slow scrape never waits on a sweep (and a sweep never on
//! a scrape).
//!
//! The port may face a lab network, so whatever a client sends costs bounded memory and time:
//! - the request head is at most [`Limits::head_bytes`] and [`MAX_HEADERS`] lines, read within
//!   [`Limits::header_time`]; a larger one gets 431, a slower one is closed;
//! - no request body is ever read, and no length a client states is ever used to allocate:
//!   the answer goes out and the connection closes (no keep-alive);
//! - only `GET` and `HEAD` (405 otherwise), only `/metrics` (404 otherwise);
//! - the format follows the `Accept` header ([`Format::negotiate`]): OpenMetrics for a
//!   scraper that prefers it, the Prometheus text format otherwise;
//! - a connection ends after [`Limits::connection_time`] whatever it does;
//! - at most [`Limits::connections`] connections are open; one more closes the oldest, so a
//!   client that opens many and sends nothing cannot keep a scraper out.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};

use super::{Format, Metrics};

/// Header lines a request may have; a real scraper sends about 5.
pub(crate) const MAX_HEADERS: usize = 32;

/// What one client may cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The largest request head (request line and headers) read; hyper's floor is 8 KiB.
    pub head_bytes: usize,
    /// The time a client has to send its request head.
    pub header_time: Duration,
    /// The time a connection may last, whatever it does.
    pub connection_time: Duration,
    /// Connections open at once.
    pub connections: usize,
}

impl Limits {
    /// Far above what Prometheus needs (a head of about 300 bytes, sent at once, one connection
    /// every scrape interval), far below what would matter on a 4 GB board: 256 connections of
    /// at most 16 KiB each.
    pub(crate) const DEFAULT: Limits = Limits {
        head_bytes: 16 << 10,
        header_time: Duration::from_secs(5),
        connection_time: Duration::from_secs(10),
        connections: 256,
    };
}

/// The listener; dropping it stops it.
pub struct MetricsServer {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    addr: String,
}

impl MetricsServer {
    /// Listens on `listen` (`HOST:PORT`) and serves `metrics`. The error names the address.
    pub fn start(listen: &str, metrics: Metrics) -> anyhow::Result<MetricsServer> {
        MetricsServer::start_with(listen, metrics, Limits::DEFAULT)
    }

    /// [`MetricsServer::start`] with other limits.
    pub fn start_with(
        listen: &str,
        metrics: Metrics,
        limits: Limits,
    ) -> anyhow::Result<MetricsServer> {
        let cannot = |e: std::io::Error| {
            anyhow::anyhow!(
                "cannot serve metrics on {listen}: {e}; give a free HOST:PORT (--metrics, or \
                 [metrics] listen; \"off\" for none)"
            )
        };
        // Bound here, so that an address in use is this call's error.
        let listener = std::net::TcpListener::bind(listen).map_err(cannot)?;
        listener.set_nonblocking(true).map_err(cannot)?;
        let addr = listener
            .local_addr()
            .map_or_else(|_| listen.to_string(), |a| a.to_string());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(cannot)?;
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("edgebench-metrics".into())
            .spawn(move || {
                runtime.block_on(async move {
                    match tokio::net::TcpListener::from_std(listener) {
                        Ok(listener) => serve(listener, metrics, limits, stopped).await,
                        Err(e) => tracing::error!("metrics endpoint stopped: {e}"),
                    }
                })
            })?;
        tracing::info!("metrics: http://{addr}/metrics");
        Ok(MetricsServer {
            stop: Some(stop),
            thread: Some(thread),
            addr,
        })
    }

    /// The address bound (the port chosen when `listen` asked for port 0).
    pub fn addr(&self) -> &str {
        &self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Accepts until `stopped`, each connection a task of its own.
async fn serve(
    listener: tokio::net::TcpListener,
    metrics: Metrics,
    limits: Limits,
    mut stopped: tokio::sync::oneshot::Receiver<()>,
) {
    let mut tasks = tokio::task::JoinSet::new();
    // Open connections, oldest first.
    let mut open: VecDeque<tokio::task::AbortHandle> = VecDeque::new();
    loop {
        tokio::select! {
            _ = &mut stopped => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    while tasks.try_join_next().is_some() {}
                    open.retain(|task| !task.is_finished());
                    while open.len() >= limits.connections.max(1) {
                        if let Some(oldest) = open.pop_front() {
                            oldest.abort();
                        }
                    }
                    open.push_back(tasks.spawn(connection(stream, metrics.clone(), limits)));
                }
                Err(e) => {
                    // Out of file descriptors, say: wait rather than spin, and go on.
                    tracing::debug!("metrics endpoint: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
    tasks.abort_all();
}

/// One client connection, to its end or [`Limits::connection_time`].
pub(crate) async fn connection<S>(stream: S, metrics: Metrics, limits: Limits)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let accept = request
            .headers()
            .get(hyper::header::ACCEPT)
            .and_then(|v| v.to_str().ok());
        let response = respond(request.method(), request.uri().path(), accept, &metrics);
        async move { Ok::<_, Infallible>(response) }
    });
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_time)
        .max_buf_size(limits.head_bytes.max(8192))
        .max_headers(MAX_HEADERS)
        .keep_alive(false);
    let served = http.serve_connection(TokioIo::new(stream), service);
    // A client that breaks the protocol or goes away is no concern of the sweep's.
    let _ = tokio::time::timeout(limits.connection_time, served).await;
}

/// The answer to `method path` for a client that accepts `accept`; the request's body is
/// never looked at.
pub(crate) fn respond(
    method: &Method,
    path: &str,
    accept: Option<&str>,
    metrics: &Metrics,
) -> Response<Full<Bytes>> {
    let text = |status: StatusCode, body: &'static str| {
        let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
        *r.status_mut() = status;
        r
    };
    if path != "/metrics" {
        return text(
            StatusCode::NOT_FOUND,
            "not found: the metrics are at /metrics\n",
        );
    }
    if method != Method::GET && method != Method::HEAD {
        let mut r = text(
            StatusCode::METHOD_NOT_ALLOWED,
            "only GET and HEAD: the metrics are read, never written\n",
        );
        r.headers_mut().insert(
            hyper::header::ALLOW,
            hyper::header::HeaderValue::from_static("GET, HEAD"),
        );
        return r;
    }
    let format = Format::negotiate(accept);
    let mut r = Response::new(Full::new(Bytes::from(metrics.encode_as(format))));
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(format.content_type()),
    );
    // Caches between a scraper and the board must not answer one format for the other.
    r.headers_mut().insert(
        hyper::header::VARY,
        hyper::header::HeaderValue::from_static("Accept"),
    );
    r
}

/// The daemon's endpoint from `[metrics] listen`: None for "off", and None (with the error
/// logged) when the address cannot be bound: a sweep is worth more than its metrics.
pub(crate) fn start_or_log(listen: &str, metrics: &Metrics) -> Option<MetricsServer> {
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
