//! The governed MonkeyOCR pass-through: `POST /ocr/text` and `POST /parse`, multipart with the
//! image in the `file` field, as MonkeyOCR itself takes them. The scope is `?model=` (a scope
//! name or alias), or the one OCR scope the key may use. `/parse` answers the layout inline: the
//! gateway has already fetched and read the result ZIP that MonkeyOCR only links to. Not chat or
//! embeddings ([`super::openai`]).

use std::sync::Arc;

use axum::extract::{Multipart, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use crate::config::ScopeKind;
use crate::server::auth::keys::VirtualKey;
use crate::server::errors::ApiError;
use crate::server::state::App;
use crate::types::CallOptions;

#[derive(Deserialize)]
pub(crate) struct OcrQuery {
    #[serde(default)]
    model: Option<String>,
}

#[derive(Clone, Copy)]
enum Task {
    Text,
    Parse,
}

/// `POST /ocr/text`.
pub(crate) async fn ocr_text(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Query(q): Query<OcrQuery>,
    multipart: Result<Multipart, axum::extract::multipart::MultipartRejection>,
) -> Response {
    run(&app, &headers, q, multipart, Task::Text).await
}

/// `POST /parse`.
pub(crate) async fn parse(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Query(q): Query<OcrQuery>,
    multipart: Result<Multipart, axum::extract::multipart::MultipartRejection>,
) -> Response {
    run(&app, &headers, q, multipart, Task::Parse).await
}

async fn run(
    app: &App,
    headers: &HeaderMap,
    q: OcrQuery,
    multipart: Result<Multipart, axum::extract::multipart::MultipartRejection>,
    task: Task,
) -> Response {
    app.answer(async |scope| serve(app, headers, q, multipart, task, scope).await)
        .await
}

fn ocr_scope(app: &App, key: &VirtualKey, model: Option<&str>) -> Result<String, ApiError> {
    if let Some(model) = model {
        return app.scope_for(key, model, ScopeKind::Ocr);
    }
    let usable: Vec<&String> = app
        .gw
        .settings()
        .scopes
        .iter()
        .filter(|(name, s)| s.kind == ScopeKind::Ocr && key.may_use(name))
        .map(|(name, _)| name)
        .collect();
    match usable.as_slice() {
        [one] => Ok((*one).clone()),
        [] => Err(ApiError::unknown_model("(an OCR scope)", &[])),
        many => Err(ApiError::bad_request(
            format!(
                "several OCR scopes are served; choose one with ?model= ({})",
                many.iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Some("model"),
        )),
    }
}

async fn serve(
    app: &App,
    headers: &HeaderMap,
    q: OcrQuery,
    multipart: Result<Multipart, axum::extract::multipart::MultipartRejection>,
    task: Task,
    scope_out: &mut Option<String>,
) -> Result<Response, ApiError> {
    let key = app.authenticate(headers)?;
    let scope = ocr_scope(app, key, q.model.as_deref())?;
    *scope_out = Some(scope.clone());
    let mut multipart = multipart.map_err(|e| {
        ApiError::bad_request(
            format!("expected a multipart/form-data upload with a `file` field: {e}"),
            Some("file"),
        )
    })?;
    let mut image = None;
    while let Some(field) = multipart
        .next_field()
        .await
        .map_err(|e| ApiError::bad_request(format!("unreadable upload: {e}"), Some("file")))?
    {
        if field.name() == Some("file") {
            let bytes = field.bytes().await.map_err(|e| {
                ApiError::bad_request(format!("unreadable `file` field: {e}"), Some("file"))
            })?;
            image = Some(bytes.to_vec());
        }
    }
    let image = image
        .ok_or_else(|| ApiError::bad_request("the upload has no `file` field", Some("file")))?;
    let options = crate::server::call_order::with_call_order(
        CallOptions::new().tenant_id(key.tenant()),
        key,
        headers,
    )?;
    let lease = app.admit(key).await?;
    let handle = app.gw.ocr_scope(&scope)?;
    let timeout = app.settings.request_timeout;
    let body = match task {
        Task::Text => {
            let r = tokio::time::timeout(timeout, handle.recognize_text(image, options))
                .await
                .map_err(|_| ApiError::timeout(timeout))??;
            json!({"success": true, "task_type": "text", "content": r.text,
                   "source": r.provenance.source_name})
        }
        Task::Parse => {
            let r = tokio::time::timeout(timeout, handle.parse_layout(image, options))
                .await
                .map_err(|_| ApiError::timeout(timeout))??;
            json!({"success": true, "task_type": "parse", "elements": r.elements,
                   "page_sizes": r.page_sizes, "source": r.provenance.source_name})
        }
    };
    drop(lease);
    Ok(axum::Json(body).into_response())
}
