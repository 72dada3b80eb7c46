//! The status page (`GET /`): every scope's sources live — breaker, pacer limit, in flight,
//! health, counters, cooldown — the last errors the server answered for the scope, and every
//! spend budget's spend against its limit. Server
//! rendered, no scripts or external assets, refreshed by the browser every 2 s. Unauthenticated
//! and secret-free (names and numbers only); not an API (use `/readyz` and `/metrics`).

use std::fmt::Write;
use std::sync::Arc;
use std::time::UNIX_EPOCH;

use axum::extract::State;
use axum::response::Html;

use crate::server::state::App;

const REFRESH_S: u32 = 2;

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

/// `GET /`.
pub(crate) async fn page(State(app): State<Arc<App>>) -> Html<String> {
    let mut html = String::with_capacity(8 << 10);
    let _ = write!(
        html,
        "<!doctype html><html><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"{REFRESH_S}\">\
         <title>polygateway status</title><style>\
         body{{font:14px system-ui,sans-serif;margin:1.5em;color:#222}}\
         table{{border-collapse:collapse;margin:.5em 0 1.5em}}\
         th,td{{border:1px solid #ccc;padding:.25em .6em;text-align:right}}\
         th:first-child,td:first-child{{text-align:left}}\
         .closed{{background:#d8f5d8}}.open{{background:#f8d0d0}}.half_open{{background:#fbeec0}}\
         .unknown{{background:#eee}}</style></head><body>\
         <h1>polygateway</h1><p>{}</p>",
        if app.draining() {
            "draining: finishing requests in flight, taking no new ones"
        } else {
            "serving"
        }
    );
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
        let kind = app.kind_of(&scope).map_or("?", |k| match k {
            crate::config::ScopeKind::Chat => "chat",
            crate::config::ScopeKind::Embeddings => "embeddings",
            crate::config::ScopeKind::Ocr => "ocr",
        });
        let models: Vec<String> = app
            .models
            .iter()
            .filter(|(_, s)| **s == scope)
            .map(|(m, _)| escape(m))
            .collect();
        let _ = write!(
            html,
            "<h2 id=\"scope-{s}\">{s} <small>({kind}; model: {})</small></h2><table><tr>\
             <th>source</th><th>breaker</th><th>pacer limit</th><th>in flight</th><th>health</th>\
             <th>attempts</th><th>successes</th><th>failures</th><th>429</th><th>dead</th>\
             <th>cooling</th></tr>",
            models.join(", "),
            s = escape(&scope),
        );
        for src in app.gw.sources(&scope).await.unwrap_or_default() {
            let breaker = src.breaker.map_or("unknown", |b| b.as_str());
            let _ = write!(
                html,
                "<tr class=\"source\"><td>{}</td><td class=\"{breaker}\">{breaker}</td><td>{}</td>\
                 <td>{}</td><td>{:.2}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
                 <td>{:.1}s</td></tr>",
                escape(&src.name),
                src.pacer_limit,
                src.in_flight,
                src.health,
                src.attempts,
                src.successes,
                src.failures,
                src.rate_limited,
                src.dead,
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
    budgets(&app, &mut html).await;
    html.push_str("</body></html>");
    Html(html)
}

/// Spend against limit of every budget: the scopes' and tenants' (the gateway's) and each
/// key's, read from the limiter backend (shared with every replica on Redis).
async fn budgets(app: &App, html: &mut String) {
    let keys: Vec<_> = app
        .keys
        .iter()
        .filter_map(|k| {
            let b = k.budget()?;
            Some(crate::gateway::budget::claim(
                format!("vkey:{}", k.name()),
                b,
            ))
        })
        .collect();
    match app.gw.budgets_with(&keys).await {
        Ok(list) if list.is_empty() => {}
        Ok(list) => {
            html.push_str(
                "<h2 id=\"budgets\">spend budgets</h2><table><tr><th>budget</th><th>window</th>\
                 <th>spent</th><th>limit</th><th>remaining</th><th>resets in</th></tr>",
            );
            for b in list {
                let class = if b.remaining <= 0.0 { "open" } else { "closed" };
                let _ = write!(
                    html,
                    "<tr class=\"budget\"><td>{}</td><td>{}</td><td class=\"{class}\">{:.6}</td>\
                     <td>{:.6}</td><td>{:.6}</td><td>{}s</td></tr>",
                    escape(&b.name),
                    escape(&b.period),
                    b.spent,
                    b.limit,
                    b.remaining,
                    b.resets_in.as_secs()
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
