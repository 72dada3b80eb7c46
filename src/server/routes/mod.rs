//! The server's routes, one file per family.

pub(crate) mod health;
pub(crate) mod messages;
pub(crate) mod ocr;
pub(crate) mod openai;
pub(crate) mod responses;
#[cfg(test)]
mod translation_props;

use axum::http::Uri;
use axum::response::{IntoResponse, Response};

/// A path the server does not serve: 404 as a JSON error in the dialect its path implies —
/// Anthropic's shape under `/v1/messages`, OpenAI's elsewhere.
pub(crate) async fn not_found(uri: Uri) -> Response {
    let path = uri.path();
    let e = crate::server::errors::ApiError::not_found(path);
    if path.starts_with("/v1/messages") {
        messages::anthropic_error(e).into_response()
    } else {
        e.into_response()
    }
}

/// Middleware: count the request against its ingress (`pgw_server_requests_total`, the status
/// page), then serve it.
pub(crate) async fn count_ingress(
    axum::extract::State(app): axum::extract::State<std::sync::Arc<crate::server::state::App>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    app.ingress.record(request.uri().path());
    next.run(request).await
}
