//! The operational endpoints: `GET /healthz` (the process is up), `GET /readyz` (the governance
//! backends answer and every scope has a source whose breaker is not open; 503 while draining)
//! and `GET /metrics` (Prometheus text). Unauthenticated, like a load balancer's probes; they
//! show no secrets. Not the status page ([`crate::server::status`]).

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::ports::BreakerState;
use crate::server::state::App;

/// `GET /healthz`.
pub(crate) async fn healthz() -> Response {
    axum::Json(json!({"status": "ok"})).into_response()
}

/// `GET /readyz`.
pub(crate) async fn readyz(State(app): State<Arc<App>>) -> Response {
    if app.draining() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(json!({"ready": false, "reason": "draining"})),
        )
            .into_response();
    }
    let (gate, timeout) = app.gw.key_gate();
    let mut reasons = Vec::new();
    let mut scopes = serde_json::Map::new();
    let scope_names = app.gw.scopes();
    if let Some(first) = scope_names.first() {
        match tokio::time::timeout(timeout, gate.leases_held(first)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => reasons.push(format!("limiter backend: {}", e.message)),
            Err(_) => reasons.push("limiter backend: no answer in time".to_string()),
        }
    }
    for scope in scope_names {
        let sources = app.gw.sources(&scope).await.unwrap_or_default();
        let unreadable = sources.iter().any(|s| s.breaker.is_none());
        let serving = sources
            .iter()
            .filter(|s| {
                matches!(
                    s.breaker,
                    Some(BreakerState::Closed | BreakerState::HalfOpen)
                )
            })
            .count();
        if unreadable {
            reasons.push(format!("{scope}: breaker backend unreadable"));
        } else if serving == 0 {
            reasons.push(format!("{scope}: every source's breaker is open"));
        }
        scopes.insert(
            scope,
            json!({"sources": sources.len(), "not_open": serving}),
        );
    }
    let ready = reasons.is_empty();
    (
        if ready {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        },
        axum::Json(json!({"ready": ready, "reasons": reasons, "scopes": scopes})),
    )
        .into_response()
}

/// `GET /metrics`: with `PGW_SERVER_METRICS_TOKEN` set, only for `Authorization: Bearer <token>`
/// (compared in constant time); 401 otherwise.
pub(crate) async fn metrics(
    State(app): State<Arc<App>>,
    headers: axum::http::HeaderMap,
) -> Response {
    if let Some(token) = &app.settings.metrics_token {
        use subtle::ConstantTimeEq;
        let presented = crate::server::state::bearer(&headers).unwrap_or("");
        let ok: bool = presented.len() == token.expose().len()
            && bool::from(presented.as_bytes().ct_eq(token.expose().as_bytes()));
        if !ok {
            return (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer realm=\"metrics\"")],
                "GET /metrics needs `Authorization: Bearer <PGW_SERVER_METRICS_TOKEN>`\n",
            )
                .into_response();
        }
    }
    match crate::server::render_metrics() {
        Some(text) => ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            "no Prometheus recorder of this server is installed: call \
             polygateway::server::install_metrics_recorder() before building the gateway \
             (`polygateway serve` does)\n",
        )
            .into_response(),
    }
}
