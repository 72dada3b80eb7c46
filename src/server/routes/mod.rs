//! The server's routes, one file per family.

pub(crate) mod health;
pub(crate) mod messages;
pub(crate) mod ocr;
pub(crate) mod openai;
pub(crate) mod responses;
#[cfg(test)]
mod translation_props;

use std::sync::Arc;

use axum::http::Uri;
use axum::response::{IntoResponse, Response};

use crate::server::state::App;

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

/// The layer that counts each request against its ingress (`pgw_server_requests_total`, the
/// status page), then serves it: a plain service around the routes, with no future of its own
/// (axum's `from_fn` middleware would box one per request and clone the routes into it).
#[derive(Clone)]
pub(crate) struct CountIngress(pub(crate) Arc<App>);

impl<S> tower_layer::Layer<S> for CountIngress {
    type Service = Counted<S>;

    fn layer(&self, inner: S) -> Counted<S> {
        Counted {
            inner,
            app: Arc::clone(&self.0),
        }
    }
}

/// A service of the routes whose requests are counted by ingress ([`CountIngress`]).
#[derive(Clone)]
pub(crate) struct Counted<S> {
    inner: S,
    app: Arc<App>,
}

impl<S, B> tower_service::Service<axum::http::Request<B>> for Counted<S>
where
    S: tower_service::Service<axum::http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: axum::http::Request<B>) -> S::Future {
        self.app.ingress.record(request.uri().path());
        self.inner.call(request)
    }
}
