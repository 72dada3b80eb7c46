//! `polygateway top`: the dashboard's data (`GET /status.json` of a running `serve`) drawn on a
//! terminal once a second — per scope calls/s by outcome with a sparkline, errors by reason,
//! latency and TTFT quantiles, capacity wait; per source breaker, pacer limit against in flight
//! and the last breaker change; top keys and tenants; budgets with projected exhaustion. Plain
//! ANSI (cursor home and clear), no TUI library; Ctrl-C quits. Not the dashboard itself
//! (`polygateway::server`).

use std::fmt::Write;
use std::io::{IsTerminal, Write as _};
use std::process::ExitCode;
use std::time::Duration;

use serde_json::Value;

#[derive(clap::Args, Debug)]
pub(crate) struct TopArgs {
    /// The server's base URL.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
    /// An admin virtual key (its scopes include "admin"); sent as `Authorization: Bearer`.
    /// Without one only scopes and sources up/down are shown (unless the server has
    /// PGW_SERVER_PUBLIC_STATUS=true).
    #[arg(long, env = "POLYGATEWAY_ADMIN_KEY", hide_env_values = true)]
    key: Option<String>,
    /// Seconds of history (1 s points up to 900, 1 min points beyond, up to 86400).
    #[arg(long, default_value_t = 60)]
    range: u64,
    /// Stop after this many frames (default: until Ctrl-C; 1 when stdout is not a terminal).
    #[arg(long)]
    frames: Option<u64>,
}

const SPARK: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// The last `width` values of `values` as a sparkline scaled to their maximum.
fn sparkline(values: &[f64], width: usize) -> String {
    let tail = &values[values.len().saturating_sub(width)..];
    let max = tail.iter().copied().fold(0.0, f64::max);
    tail.iter()
        .map(|v| {
            if max <= 0.0 || *v <= 0.0 {
                ' '
            } else {
                SPARK[((v / max) * 7.0).round().clamp(0.0, 7.0) as usize]
            }
        })
        .collect()
}

fn numbers(v: &Value) -> Vec<f64> {
    v.as_array()
        .map(|a| a.iter().map(|x| x.as_f64().unwrap_or(0.0)).collect())
        .unwrap_or_default()
}

fn last_some(v: &Value) -> Option<f64> {
    v.as_array()?.iter().rev().find_map(Value::as_f64)
}

fn ms(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.0}ms"))
}

/// One frame of `status.json`.
fn frame(url: &str, body: &Value) -> String {
    let mut out = String::new();
    let series = &body["series"];
    let step = series["step_s"].as_f64().unwrap_or(1.0).max(1.0);
    let _ = writeln!(
        out,
        "polygateway top — {url} — {} — {} points of {step} s   (Ctrl-C quits)",
        body["status"].as_str().unwrap_or("?"),
        series["points"].as_u64().unwrap_or(0),
    );
    let Some(scopes) = body["scopes"].as_object() else {
        return out;
    };
    for (name, scope) in scopes {
        let _ = writeln!(out, "\n{name} ({})", scope["kind"].as_str().unwrap_or("?"));
        let s = &series["scopes"][name];
        if let Some(calls) = s["calls"].as_object() {
            for (outcome, values) in calls {
                let per_s: Vec<f64> = numbers(values).iter().map(|v| v / step).collect();
                let total: f64 = numbers(values).iter().sum();
                if outcome == "ok" || total > 0.0 {
                    let _ = writeln!(
                        out,
                        "  {outcome:<24} {:>7.2}/s {:>7} in range  {}",
                        per_s.last().copied().unwrap_or(0.0),
                        total,
                        sparkline(&per_s, 40)
                    );
                }
            }
            let q = &s["latency_ms"];
            let t = &s["ttft_ms"];
            let _ = writeln!(
                out,
                "  latency p50 {} p95 {} p99 {} | ttft p50 {} p95 {} p99 {}",
                ms(last_some(&q["p50"])),
                ms(last_some(&q["p95"])),
                ms(last_some(&q["p99"])),
                ms(last_some(&t["p50"])),
                ms(last_some(&t["p95"])),
                ms(last_some(&t["p99"])),
            );
            if let Some(wait) = s["capacity_wait_s"].as_object() {
                let waits: Vec<String> = wait
                    .iter()
                    .map(|(r, v)| (r, numbers(v).iter().sum::<f64>()))
                    .filter(|(_, total)| *total > 0.0)
                    .map(|(r, total)| format!("{r} {total:.2}s"))
                    .collect();
                if !waits.is_empty() {
                    let _ = writeln!(out, "  capacity wait: {}", waits.join(", "));
                }
            }
        }
        let _ = writeln!(
            out,
            "  {:<20} {:<9} {:<4} {:>6} {:>9}  {:<20} last breaker change",
            "source", "breaker", "up", "pacer", "in flight", "attempts/s"
        );
        if let Some(sources) = scope["sources"].as_object() {
            for (src, state) in sources {
                let x = &s["sources"][src];
                let attempts: Vec<f64> = {
                    let mut sum = vec![0.0; series["points"].as_u64().unwrap_or(0) as usize];
                    if let Some(by) = x["attempts"].as_object() {
                        for v in by.values() {
                            for (i, n) in numbers(v).iter().enumerate() {
                                if let Some(slot) = sum.get_mut(i) {
                                    *slot += n / step;
                                }
                            }
                        }
                    }
                    sum
                };
                let change =
                    x["breaker"]
                        .as_array()
                        .and_then(|c| c.last())
                        .map_or(String::new(), |c| {
                            let at = c["at_ms"].as_u64().unwrap_or(0) / 1000;
                            format!(
                                "{:02}:{:02}:{:02} UTC → {}",
                                at / 3600 % 24,
                                at / 60 % 60,
                                at % 60,
                                c["to"].as_str().unwrap_or("?")
                            )
                        });
                let _ = writeln!(
                    out,
                    "  {src:<20} {:<9} {:<4} {:>6} {:>9}  {:<20} {change}",
                    state["breaker"].as_str().unwrap_or("?"),
                    if state["up"].as_bool() == Some(true) {
                        "up"
                    } else {
                        "down"
                    },
                    last_some(&x["pacer_limit"])
                        .filter(|v| *v < f64::from(u32::MAX))
                        .map_or("none".into(), |v| format!("{v:.0}")),
                    last_some(&x["in_flight"]).map_or("-".into(), |v| format!("{v:.0}")),
                    sparkline(&attempts, 20),
                );
            }
        }
    }
    if body["operator"].as_bool() != Some(true) {
        out.push_str("\n(series, keys, tenants and budgets need an admin key: --key)\n");
        return out;
    }
    for (list, title) in [("keys", "top keys"), ("tenants", "top tenants")] {
        let _ = writeln!(
            out,
            "\n{title:<24} {:>8} {:>8} {:>12}",
            "calls", "failed", "spend"
        );
        for k in series[list].as_array().into_iter().flatten() {
            let _ = writeln!(
                out,
                "  {:<22} {:>8} {:>8} {:>12.6}",
                k["name"].as_str().unwrap_or("?"),
                k["calls"].as_u64().unwrap_or(0),
                k["errors"].as_u64().unwrap_or(0),
                k["spend"].as_f64().unwrap_or(0.0)
            );
        }
    }
    if let Some(budgets) = body["budgets"].as_array().filter(|b| !b.is_empty()) {
        let _ = writeln!(out, "\nbudgets");
        for b in budgets {
            let _ = writeln!(
                out,
                "  {:<24} {:>12.6} of {:>12.6} per {:<5} exhausted in {}",
                b["name"].as_str().unwrap_or("?"),
                b["spent"].as_f64().unwrap_or(0.0),
                b["limit"].as_f64().unwrap_or(0.0),
                b["period"].as_str().unwrap_or("?"),
                b["exhausted_in_s"]
                    .as_f64()
                    .map_or("-".into(), |s| format!("{s:.0}s"))
            );
        }
    }
    out
}

pub(crate) async fn run(args: &TopArgs) -> Result<ExitCode, String> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .map_err(|e| e.to_string())?;
    let base = args.url.trim_end_matches('/');
    let url = format!("{base}/status.json?range={}", args.range);
    let terminal = std::io::stdout().is_terminal();
    let frames = args.frames.unwrap_or(if terminal { u64::MAX } else { 1 });
    let mut stdout = std::io::stdout();
    for n in 0..frames {
        let mut req = client.get(&url);
        if let Some(key) = &args.key {
            req = req.bearer_auth(key);
        }
        let text = match req.send().await {
            Ok(resp) if resp.status().is_success() => match resp.json::<Value>().await {
                Ok(body) => frame(base, &body),
                Err(e) => format!("{url}: not the status JSON: {e}\n"),
            },
            Ok(resp) => {
                let status = resp.status();
                let body: Value = resp.json().await.unwrap_or_default();
                let why = body["error"]["message"].as_str().unwrap_or("").to_string();
                return Err(format!("{url}: {status} {why}"));
            }
            Err(e) => format!("{url}: {e}\n"),
        };
        if terminal {
            // Cursor home, clear the screen, draw.
            let _ = write!(stdout, "\x1b[H\x1b[2J{text}");
        } else {
            let _ = write!(stdout, "{text}");
        }
        let _ = stdout.flush();
        if n + 1 < frames {
            tokio::select! {
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = tokio::signal::ctrl_c() => break,
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparklines_scale_to_their_maximum() {
        assert_eq!(sparkline(&[0.0, 1.0, 2.0, 4.0], 10), " ▃▅█");
        assert_eq!(sparkline(&[1.0, 1.0, 1.0], 2), "██");
    }
}
