//! The status page (`GET /`) and its data (`GET /status.json`): a live dashboard.
//!
//! Without credentials both tell only what `/healthz` and `/readyz` tell — scopes and their
//! sources, up or down (breaker state). Operator data (the series: calls, latency, errors by
//! reason, capacity wait, pacer, breaker timeline; spend and budgets with projected exhaustion;
//! key and tenant names; error text; ingress counts) needs a virtual key with the `admin`
//! scope, sent as `Authorization: Bearer`, or `PGW_SERVER_PUBLIC_STATUS=true`. A non-admin key
//! is 403, an unknown one 401. In the browser the key is typed once into the page, kept in
//! `sessionStorage` and sent as that header by the page's fetches, never in a URL.
//!
//! The page is one document with its script and styles inline (`dashboard.js`, no CDN, no
//! framework): it polls `status.json` once a second and draws inline SVG charts. A request that
//! carries an admin key (or a public-status server) also gets the operator tables rendered on the
//! server, so `curl` sees them without a script. Not the series themselves
//! (`polygateway_actors::runtime::series`).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Arc;
use std::time::UNIX_EPOCH;

use axum::extract::{Query, State};
use axum::http::{header, HeaderMap};
use axum::response::{Html, IntoResponse, Response};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::server::errors::ApiError;
use crate::server::state::App;

/// The dashboard's script, served inline in the page.
const SCRIPT: &str = include_str!("dashboard.js");

/// Default and largest range of `/status.json` (seconds).
const DEFAULT_RANGE_S: u64 = 300;
/// Window over which a budget's spend rate is measured for its projected exhaustion.
const RATE_WINDOW_S: u64 = 900;

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Whether the request may see operator data: `Ok(true)` with an admin key or a public-status
/// server, `Ok(false)` without credentials, an error for a key that is unknown (401) or not an
/// admin (403).
pub(crate) fn operator(app: &App, headers: &HeaderMap) -> Result<bool, ApiError> {
    if headers.get(header::AUTHORIZATION).is_none() {
        return Ok(app.settings.public_status);
    }
    let key = app.authenticate(headers)?;
    if key.is_admin() {
        Ok(true)
    } else {
        Err(ApiError::admin_required(key.name()))
    }
}

fn kind_name(app: &App, scope: &str) -> &'static str {
    app.kind_of(scope).map_or("?", |k| match k {
        crate::config::ScopeKind::Chat => "chat",
        crate::config::ScopeKind::Embeddings => "embeddings",
        crate::config::ScopeKind::Ocr => "ocr",
    })
}

/// `GET /`.
pub(crate) async fn page(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    let operator = match operator(&app, &headers) {
        Ok(op) => op,
        Err(e) => return e.into_response(),
    };
    let mut html = String::with_capacity(32 << 10);
    let _ = write!(
        html,
        "<!doctype html><html><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width\">\
         <title>polygateway status</title><style>\
         body{{font:14px system-ui,sans-serif;margin:1.5em;color:#222}}\
         table{{border-collapse:collapse;margin:.5em 0 1.5em}}\
         th,td{{border:1px solid #ccc;padding:.25em .6em;text-align:right}}\
         th:first-child,td:first-child{{text-align:left}}\
         .closed{{background:#d8f5d8}}.open{{background:#f8d0d0}}.half_open{{background:#fbeec0}}\
         .unknown{{background:#eee}}\
         .charts{{display:flex;flex-wrap:wrap;gap:12px}}\
         .chart{{border:1px solid #ddd;padding:4px}}.chart h4{{margin:0 0 2px;font-size:12px}}\
         .legend span{{margin-right:8px;font-size:11px}}\
         #auth{{margin:.5em 0 1em}}#msg{{color:#a00}}\
         .timeline{{font-size:12px}}</style></head><body>\
         <h1>polygateway</h1><p id=\"serving\">{}</p>",
        if app.draining() {
            "draining: finishing requests in flight, taking no new ones"
        } else {
            "serving"
        }
    );
    html.push_str("<div id=\"public\">");
    for scope in app.gw.scopes() {
        let _ = write!(
            html,
            "<h2 id=\"scope-{s}\">{s} <small>({kind})</small></h2><table><tr><th>source</th>\
             <th>breaker</th><th>up</th></tr>",
            s = escape(&scope),
            kind = kind_name(&app, &scope),
        );
        for src in app.gw.sources(&scope).await.unwrap_or_default() {
            let breaker = src.breaker.map_or("unknown", |b| b.as_str());
            let up = matches!(breaker, "closed" | "half_open");
            let _ = write!(
                html,
                "<tr class=\"source\"><td>{}</td><td class=\"{breaker}\">{breaker}</td>\
                 <td>{}</td></tr>",
                escape(&src.name),
                if up { "up" } else { "down" }
            );
        }
        html.push_str("</table>");
    }
    html.push_str("</div>");
    if operator {
        html.push_str(
            "<div id=\"operator\"><p><small>the tables below are as of this page's load; \
             the charts further down are live</small></p>",
        );
        operator_tables(&app, &mut html).await;
        html.push_str("</div>");
    }
    html.push_str(
        "<div id=\"auth\"><form id=\"keyform\"><label>admin key \
         <input id=\"key\" type=\"password\" autocomplete=\"off\" size=\"30\"></label> \
         <button>use</button> <button type=\"button\" id=\"forget\">forget</button></form> \
         range <select id=\"range\"><option value=\"60\">1 min</option>\
         <option value=\"300\" selected>5 min</option><option value=\"900\">15 min</option>\
         <option value=\"3600\">1 h</option><option value=\"21600\">6 h</option>\
         <option value=\"86400\">24 h</option></select> <span id=\"msg\"></span></div>\
         <div id=\"dash\"></div><script>",
    );
    html.push_str(SCRIPT);
    html.push_str("</script></body></html>");
    Html(html).into_response()
}

/// The tables an operator sees rendered on the server: each source in full, recent errors,
/// requests by ingress, budgets.
async fn operator_tables(app: &App, html: &mut String) {
    let by_ingress: Vec<String> = app
        .ingress
        .snapshot()
        .into_iter()
        .map(|(name, n)| format!("{name} {n}"))
        .collect();
    let _ = write!(
        html,
        "<p>requests by ingress: {}</p>",
        by_ingress.join(" · ")
    );
    for scope in app.gw.scopes() {
        let models: Vec<String> = app
            .models
            .iter()
            .filter(|(_, s)| **s == scope)
            .map(|(m, _)| escape(m))
            .collect();
        let _ = write!(
            html,
            "<h3>{s} <small>(model: {})</small></h3><table><tr>\
             <th>source</th><th>breaker</th><th>pacer limit</th><th>in flight</th><th>health</th>\
             <th>attempts</th><th>successes</th><th>failures</th><th>429</th><th>dead</th>\
             <th>hedges (won)</th><th>continued</th><th>cooling</th></tr>",
            models.join(", "),
            s = escape(&scope),
        );
        for src in app.gw.sources(&scope).await.unwrap_or_default() {
            let breaker = src.breaker.map_or("unknown", |b| b.as_str());
            let _ = write!(
                html,
                "<tr><td>{}</td><td class=\"{breaker}\">{breaker}</td><td>{}</td>\
                 <td>{}</td><td>{:.2}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
                 <td>{} ({})</td><td>{}</td><td>{:.1}s</td></tr>",
                escape(&src.name),
                src.pacer_limit,
                src.in_flight,
                src.health,
                src.attempts,
                src.successes,
                src.failures,
                src.rate_limited,
                src.dead,
                src.hedges,
                src.hedges_won,
                src.continuations,
                src.cooling_for.as_secs_f64()
            );
        }
        html.push_str("</table>");
        let recent = app.errors.recent(&scope);
        if recent.is_empty() {
            html.push_str("<p>no recent errors</p>");
        } else {
            html.push_str("<p>recent errors:</p><ul>");
            for e in recent {
                let at = e.at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
                let _ = write!(
                    html,
                    "<li>{:02}:{:02}:{:02} UTC {} {}: {}</li>",
                    at / 3600 % 24,
                    at / 60 % 60,
                    at % 60,
                    e.status,
                    e.code,
                    escape(&e.message)
                );
            }
            html.push_str("</ul>");
        }
    }
    match budgets(app).await {
        Ok(list) if list.is_empty() => {}
        Ok(list) => {
            html.push_str(
                "<h2 id=\"budgets\">spend budgets</h2><table><tr><th>budget</th><th>window</th>\
                 <th>spent</th><th>limit</th><th>remaining</th><th>resets in</th>\
                 <th>exhausted in</th></tr>",
            );
            for b in list {
                let class = if b["remaining"].as_f64().unwrap_or(0.0) <= 0.0 {
                    "open"
                } else {
                    "closed"
                };
                let _ = write!(
                    html,
                    "<tr class=\"budget\"><td>{}</td><td>{}</td><td class=\"{class}\">{:.6}</td>\
                     <td>{:.6}</td><td>{:.6}</td><td>{}s</td><td>{}</td></tr>",
                    escape(b["name"].as_str().unwrap_or("")),
                    escape(b["period"].as_str().unwrap_or("")),
                    b["spent"].as_f64().unwrap_or(0.0),
                    b["limit"].as_f64().unwrap_or(0.0),
                    b["remaining"].as_f64().unwrap_or(0.0),
                    b["resets_in_s"].as_u64().unwrap_or(0),
                    b["exhausted_in_s"]
                        .as_f64()
                        .map_or("not at this rate".to_string(), |s| format!("{s:.0}s")),
                );
            }
            html.push_str("</table>");
        }
        Err(e) => {
            let _ = write!(
                html,
                "<p>spend budgets unavailable: {}</p>",
                escape(&e.to_string())
            );
        }
    }
}

/// Spend against limit of every budget (the scopes' and tenants', then each key's), with the
/// spend rate of the last 15 minutes and the time left at that rate before the limit is
/// reached (`null` when nothing was spent, or when the window resets first).
async fn budgets(app: &App) -> Result<Vec<Value>, crate::GatewayError> {
    let keys: Vec<_> = app
        .keys
        .iter()
        .filter_map(|k| {
            let b = k.budget()?;
            Some(crate::call::budget::claim(format!("vkey:{}", k.name()), b))
        })
        .collect();
    let list = app.gw.budgets_with(&keys).await?;
    let book = polygateway_actors::runtime::series::Book::global();
    let now = crate::metrics::unix_now();
    Ok(list
        .into_iter()
        .map(|b| {
            let rate = book.spent(&b.name, now, RATE_WINDOW_S) / RATE_WINDOW_S as f64;
            let exhausted_in = if b.remaining <= 0.0 {
                Some(0.0)
            } else if rate > 0.0 {
                Some(b.remaining / rate).filter(|s| *s < b.resets_in.as_secs_f64())
            } else {
                None
            };
            json!({
                "name": b.name,
                "period": b.period,
                "spent": b.spent,
                "limit": b.limit,
                "remaining": b.remaining,
                "resets_in_s": b.resets_in.as_secs(),
                "spend_per_s": rate,
                "exhausted_in_s": exhausted_in,
            })
        })
        .collect())
}

/// `GET /status.json` parameters.
#[derive(Deserialize)]
pub(crate) struct Range {
    /// Seconds of history (1 s points up to 900, 1 min points up to 86 400).
    range: Option<u64>,
}

/// `GET /status.json`.
pub(crate) async fn json(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Query(q): Query<Range>,
) -> Response {
    let operator = match operator(&app, &headers) {
        Ok(op) => op,
        Err(e) => return e.into_response(),
    };
    let mut scopes = serde_json::Map::new();
    for scope in app.gw.scopes() {
        let mut sources = serde_json::Map::new();
        for src in app.gw.sources(&scope).await.unwrap_or_default() {
            let breaker = src.breaker.map_or("unknown", |b| b.as_str());
            let mut entry = json!({
                "breaker": breaker,
                "up": matches!(breaker, "closed" | "half_open"),
            });
            if operator {
                entry["pacer_limit"] = json!(src.pacer_limit);
                entry["in_flight"] = json!(src.in_flight);
                entry["health"] = json!(src.health);
                entry["cooling_s"] = json!(src.cooling_for.as_secs_f64());
                entry["hedges"] = json!(src.hedges);
                entry["hedges_won"] = json!(src.hedges_won);
                entry["continuations"] = json!(src.continuations);
            }
            sources.insert(src.name.clone(), entry);
        }
        let mut entry = json!({"kind": kind_name(&app, &scope), "sources": sources});
        if operator {
            let errors: Vec<Value> = app
                .errors
                .recent(&scope)
                .into_iter()
                .map(|e| {
                    json!({
                        "at_ms": e.at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64),
                        "status": e.status,
                        "code": e.code,
                        "message": e.message,
                    })
                })
                .collect();
            entry["recent_errors"] = json!(errors);
        }
        scopes.insert(scope, entry);
    }
    let mut body = json!({
        "status": if app.draining() { "draining" } else { "serving" },
        "operator": operator,
        "scopes": scopes,
    });
    if operator {
        let range = q.range.unwrap_or(DEFAULT_RANGE_S);
        body["series"] = json!(app.gw.series(range));
        body["budgets"] = match budgets(&app).await {
            Ok(list) => json!(list),
            Err(e) => json!({"error": e.to_string()}),
        };
        body["ingress"] = json!(app
            .ingress
            .snapshot()
            .into_iter()
            .collect::<BTreeMap<_, _>>());
        body["series_bytes"] = json!(polygateway_actors::runtime::series::Book::global().bytes());
    }
    ([(header::CACHE_CONTROL, "no-store")], axum::Json(body)).into_response()
}

#[cfg(test)]
mod tests {
    #[test]
    fn markup_is_escaped() {
        assert_eq!(
            super::escape("<a href='x'>&\""),
            "&lt;a href=&#39;x&#39;&gt;&amp;&quot;"
        );
    }
}
