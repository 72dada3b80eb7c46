//! `polygateway` — check a configuration, probe sources, make a governed call, run a batch job,
//! watch the governance state, print the telemetry schema, and apply telemetry retention.
//!
//! Configuration comes from the environment and `./.env` (the environment wins), exactly as
//! `Gateway::from_env` reads it. Secrets are never printed.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use polygateway::config::{
    redact_dsn, CacheSettings, ScopeKind, Secret, Settings, TelemetryBackendSettings,
};
use polygateway::telemetry::{retention, telemetry_schema_sql, RetentionTarget, SchemaBackend};
use polygateway::{CallOptions, Gateway, Message};

/// jemalloc, its background thread purging: the memory a burst of requests freed goes back to the
/// system, where glibc's malloc keeps most of it, and a call costs less CPU (ARCHITECTURE.md,
/// "The binary's allocator").
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

// Beside this file's directory, not in src/bin/ (where cargo would take it for a binary).
#[cfg(feature = "sqlite")]
#[path = "polygateway/batch_cmd.rs"]
mod batch_cmd;
#[cfg(feature = "sqlite")]
#[path = "polygateway/batch_view.rs"]
mod batch_view;
#[cfg(feature = "jemalloc")]
#[path = "polygateway/idle_cache.rs"]
mod idle_cache;
#[path = "polygateway/top_cmd.rs"]
mod top_cmd;

#[derive(Parser)]
#[command(
    name = "polygateway",
    version,
    about = "Operate a polygateway configuration: check it, probe its sources, make a governed \
             call, inspect breakers and pacers, print the telemetry schema, apply telemetry \
             retention.",
    after_help = "Configuration is read from the environment and ./.env (the environment wins); \
                  see .env.example for every key."
)]
struct Cli {
    /// Read this file instead of ./.env (variables already in the environment still win).
    #[arg(long, global = true, value_name = "PATH")]
    env_file: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[cfg(feature = "server")]
#[derive(Subcommand)]
enum KeyAction {
    /// Print a new random virtual key and its stored form (`salt$hash`) for the keys file.
    New,
    /// Print the stored form (`salt$hash`) of KEY for the keys file.
    Hash {
        /// The key to hash (read from stdin when omitted, so it stays out of shell history).
        key: Option<String>,
    },
}

#[derive(Subcommand)]
enum Command {
    /// Check the configuration: every key, every assembly guard. Prints the effective settings
    /// per scope (secrets redacted) or the error with the key it is about.
    Config {
        #[command(subcommand)]
        action: ConfigAction,
    },
    /// Probe every source of a scope (all scopes if omitted): chat and embeddings sources with
    /// `GET {base}/models`, OCR sources with `GET {base}/health`. Exits 1 if any is down.
    Health {
        /// Scope name (LLM, OCR, …).
        scope: Option<String>,
    },
    /// Make one governed chat call; print the answer, then source, tokens, latency, cost.
    Chat {
        /// The prompt.
        prompt: String,
        /// Chat scope to use.
        #[arg(long, default_value = "LLM")]
        scope: String,
        /// Ask for one JSON answer instead of a stream (a source with `STREAM=false` never
        /// streams either way).
        #[arg(long)]
        no_stream: bool,
    },
    /// Show each source's breaker, health, pacer and counters after a small probe of governed
    /// calls.
    Sources {
        /// Chat scope to probe.
        #[arg(default_value = "LLM")]
        scope: String,
        /// Governed calls to make before the snapshot (0 = none).
        #[arg(long, default_value_t = 3)]
        probe: usize,
    },
    /// Show every spend budget (`{SCOPE}__BUDGET`, `PGW_TENANT_BUDGETS`) against its limit in
    /// the current window: spent (settled plus the estimates of calls in flight), remaining,
    /// and when the window resets. Read from the limiter backend: with Redis, every process's
    /// spend; with the memory backend only this (fresh) process's, i.e. nothing.
    Budgets,
    /// Print the SQL of the `llm_calls` table (CREATE TABLE and ADD COLUMN statements).
    SchemaSql {
        /// Database flavour.
        backend: Backend,
    },
    /// Delete telemetry rows older than N days from a plain (non-partitioned) table, in bounded
    /// batches. A dry run unless --apply. Exits 3 for a partitioned table (drop partitions
    /// instead).
    Retention {
        /// SQLite file to clean.
        #[arg(
            long,
            conflicts_with = "postgres_dsn",
            required_unless_present = "postgres_dsn"
        )]
        sqlite: Option<PathBuf>,
        /// PostgreSQL DSN to clean.
        #[arg(long)]
        postgres_dsn: Option<String>,
        /// Age threshold in days.
        #[arg(long)]
        older_than_days: u32,
        /// Delete (without it: count only).
        #[arg(long)]
        apply: bool,
        /// Table name.
        #[arg(long, default_value = "llm_calls")]
        table: String,
        /// Rows per DELETE.
        #[arg(long, default_value_t = 5000)]
        batch: usize,
    },
    /// Run a batch job: every line of INPUT (OpenAI's Batch API input format, or plain
    /// `{"custom_id", "messages", …}` lines) is one governed call; results go to OUTPUT in
    /// OpenAI's Batch API output format. Resumable: running the same command again after a
    /// crash or Ctrl-C sends only the items the journal has no answer for.
    #[cfg(feature = "sqlite")]
    Batch(batch_cmd::BatchArgs),
    /// Serve the OpenAI-compatible gateway (`/v1/chat/completions`, `/v1/embeddings`,
    /// `/v1/models`, `/ocr/text`, `/parse`, `/healthz`, `/readyz`, `/metrics`, status page `/`)
    /// on PGW_SERVER_BIND with the virtual keys of PGW_SERVER_KEYS_FILE, until SIGINT or
    /// SIGTERM; then drain for at most PGW_SERVER_DRAIN_TIMEOUT_S.
    #[cfg(feature = "server")]
    Serve {
        /// Listen here instead of PGW_SERVER_BIND.
        #[arg(long)]
        bind: Option<std::net::SocketAddr>,
    },
    /// A terminal view of a running `serve`'s dashboard (its `/status.json`), redrawn every
    /// second: calls by outcome, errors by reason, latency, sources, top keys, budgets.
    Top(top_cmd::TopArgs),
    /// Virtual keys for `serve`: make one, or hash one for the keys file.
    #[cfg(feature = "server")]
    Key {
        #[command(subcommand)]
        action: KeyAction,
    },
}

#[derive(Subcommand)]
enum ConfigAction {
    /// Load and validate; print the effective configuration.
    Check,
}

#[derive(Clone, Copy, ValueEnum)]
enum Backend {
    Sqlite,
    Postgres,
}

fn settings(cli: &Cli) -> Result<Settings, String> {
    let result = match &cli.env_file {
        Some(path) => {
            let env: BTreeMap<String, String> = std::env::vars().collect();
            Settings::from_env_with(Some(path), &env)
        }
        None => Settings::from_env(),
    };
    result.map_err(|e| e.to_string())
}

async fn gateway(cli: &Cli, scope: &str) -> Result<Gateway, String> {
    Gateway::from_settings(settings(cli)?, scope)
        .await
        .map_err(|e| e.to_string())
}

fn print_settings(s: &Settings) {
    println!("limiter backend: {:?}", s.limiter_backend);
    println!("breaker backend: {:?}", s.breaker_backend);
    if let Some(url) = &s.redis_url {
        println!("redis: {}", redact_dsn(url.expose()));
    }
    match &s.cache {
        CacheSettings::None => println!("cache: none"),
        CacheSettings::Memory { namespace, ttl } => {
            println!("cache: memory, namespace {namespace}, ttl {ttl:?}")
        }
        CacheSettings::Redis { namespace, ttl } => {
            println!("cache: redis, namespace {namespace}, ttl {ttl:?}")
        }
    }
    match &s.telemetry.backend {
        TelemetryBackendSettings::None => println!("telemetry: none"),
        TelemetryBackendSettings::Sqlite { path } => println!("telemetry: sqlite {path}"),
        TelemetryBackendSettings::Postgres { dsn, pool_max, .. } => println!(
            "telemetry: postgres {} (pool {pool_max})",
            redact_dsn(dsn.expose())
        ),
    }
    println!(
        "lease ttl: {:?}, structured retries: {}",
        s.lease_ttl, s.structured_max_retries
    );
    let registry = polygateway::provider::ProviderRegistry::with_defaults();
    for (name, scope) in &s.scopes {
        println!(
            "\nscope {name} ({:?}): selector {:?}, attempts {}, backoff {:?}..{:?}, quota_full {:?}, circuit_open {:?}",
            scope.kind,
            scope.selector,
            scope.retry.max_attempts,
            scope.retry.backoff_base,
            scope.retry.backoff_max,
            scope.quota_full,
            scope.circuit_open
        );
        println!(
            "  global: concurrency {} rpm {} tpm {}; breaker: threshold {} cooldown {:?}; stall window {:?}",
            scope.global_max_concurrency,
            scope.global_rpm,
            scope.global_tpm,
            scope.breaker.fail_threshold,
            scope.breaker.cooldown,
            scope.backpressure.stall_window
        );
        for src in &scope.sources {
            // How typed calls carry their schema to this source (chat scopes only).
            let structured = match scope.kind {
                ScopeKind::Chat => {
                    let mode = src.effective_structured_mode(registry.get(&src.provider));
                    let origin = if src.structured_mode.is_some() {
                        "STRUCTURED_MODE"
                    } else {
                        "provider"
                    };
                    format!(" structured={} ({origin})", mode.as_str())
                }
                ScopeKind::Embeddings | ScopeKind::Ocr => String::new(),
            };
            println!(
                "  {:<16} {:<10} {} model={} key={} timeout={:?} ttft={:?} inter_token={:?} concurrency={} rpm={} tpm={}{structured}",
                src.name,
                src.provider,
                redact_dsn(&src.base_url),
                src.model,
                if src.api_key.is_empty() { "empty" } else { "set" },
                src.timeout,
                src.ttft_timeout,
                src.inter_token_timeout,
                src.max_concurrency,
                src.rpm,
                src.tpm
            );
        }
    }
}

/// `json_schema`, or `json_object (fell back from json_schema)` after a refusal.
fn structured_label(s: &polygateway::SourceSnapshot) -> String {
    match (s.structured_mode, s.structured_mode_configured) {
        (Some(now), Some(configured)) if now != configured => {
            format!("{} (fell back from {})", now.as_str(), configured.as_str())
        }
        (Some(now), _) => now.as_str().to_string(),
        (None, _) => "-".to_string(),
    }
}

/// A direct probe (outside governance: a health check must not spend the scope's quota).
async fn probe_source(
    client: &reqwest::Client,
    kind: ScopeKind,
    base: &str,
    key: &Secret,
) -> Result<(), String> {
    let base = base.trim_end_matches('/');
    let url = match kind {
        ScopeKind::Ocr => format!("{base}/health"),
        ScopeKind::Chat | ScopeKind::Embeddings => format!("{base}/models"),
    };
    let mut request = client.get(&url).timeout(Duration::from_secs(5));
    if !key.is_empty() {
        request = request.bearer_auth(key.expose());
    }
    let resp = request.send().await.map_err(|e| {
        if e.is_timeout() {
            "timeout".to_string()
        } else {
            "unreachable".to_string()
        }
    })?;
    if resp.status().is_success() {
        Ok(())
    } else {
        Err(format!("HTTP {}", resp.status().as_u16()))
    }
}

/// One line on stderr when the command's telemetry did not (fully) land, so an operator does not
/// learn of an unwritable SQLite path or an unreachable PostgreSQL only from an empty table.
fn warn_if_telemetry_degraded(gw: &Gateway) {
    let status = gw.telemetry_status();
    if status.degraded || status.fatal {
        eprintln!(
            "polygateway: warning: telemetry {}: {} ({} row(s) dropped)",
            if status.fatal { "disabled" } else { "degraded" },
            status.reason.as_deref().unwrap_or("no reason recorded"),
            status.dropped_rows
        );
    }
}

/// `serving`: `serve`'s settings, read by [`start`] before the runtime.
async fn run(
    cli: Cli,
    #[cfg_attr(not(feature = "server"), allow(unused_variables))] serving: Option<Settings>,
) -> Result<ExitCode, String> {
    match &cli.command {
        Command::Config {
            action: ConfigAction::Check,
        } => {
            let s = settings(&cli)?;
            print_settings(&s);
            if s.scopes.is_empty() {
                return Err("no scope is configured: add a source such as \
                     LLM__OPENAI__1__BASE_URL, LLM__OPENAI__1__API_KEY and LLM__OPENAI__1__MODEL \
                     (see .env.example)"
                    .into());
            }
            println!("\nconfiguration OK");
            Ok(ExitCode::SUCCESS)
        }
        Command::Health { scope } => {
            let s = settings(&cli)?;
            if let Some(want) = scope {
                if !s.scopes.contains_key(want) {
                    return Err(format!(
                        "scope {want} is not configured (configured: {})",
                        s.scopes.keys().cloned().collect::<Vec<_>>().join(", ")
                    ));
                }
            }
            let client = reqwest::Client::new();
            let mut down = 0;
            println!("{:<10} {:<18} {:<6} detail", "scope", "source", "status");
            for (name, sc) in &s.scopes {
                if scope.as_ref().is_some_and(|want| want != name) {
                    continue;
                }
                for src in &sc.sources {
                    let result = probe_source(&client, sc.kind, &src.base_url, &src.api_key).await;
                    let (status, detail) = match &result {
                        Ok(()) => ("up", String::new()),
                        Err(e) => ("DOWN", e.clone()),
                    };
                    down += usize::from(result.is_err());
                    println!("{name:<10} {:<18} {status:<6} {detail}", src.name);
                }
            }
            Ok(if down == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Command::Chat {
            prompt,
            scope,
            no_stream,
        } => {
            let gw = gateway(&cli, scope).await?;
            let options = CallOptions::new().stream(!no_stream);
            let result = match gw.chat_scope(scope) {
                Ok(handle) => {
                    handle
                        .chat_with(vec![Message::user(prompt.clone())], options)
                        .await
                }
                Err(e) => Err(e),
            };
            gw.shutdown().await;
            warn_if_telemetry_degraded(&gw);
            let r = result.map_err(|e| e.to_string())?;
            println!("{}", r.content);
            println!(
                "\nsource {}  tokens {}+{} ({})  latency {:.0} ms  cost {}",
                r.source_name,
                r.prompt_tokens,
                r.completion_tokens,
                r.usage_source.as_str(),
                r.latency_ms,
                r.cost.map_or("n/a".to_string(), |c| format!("{c:.6}"))
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Sources { scope, probe } => {
            let gw = gateway(&cli, scope).await?;
            let handle = match gw.chat_scope(scope) {
                Ok(h) => h,
                Err(e) => {
                    gw.shutdown().await;
                    return Err(e.to_string());
                }
            };
            for i in 0..*probe {
                if let Err(e) = handle.chat(vec![Message::user(format!("probe {i}"))]).await {
                    println!("probe {i}: {e}");
                }
            }
            let snapshot = gw.sources(scope).await.map_err(|e| e.to_string());
            gw.shutdown().await;
            warn_if_telemetry_degraded(&gw);
            println!(
                "{:<18} {:<10} {:>5} {:>7} {:>6} {:>9} {:>9} {:>9} {:>8}  structured",
                "source",
                "breaker",
                "epoch",
                "health",
                "pacer",
                "attempts",
                "successes",
                "failures",
                "cooling"
            );
            for s in snapshot? {
                println!(
                    "{:<18} {:<10} {:>5} {:>7.2} {:>6} {:>9} {:>9} {:>9} {:>7.1}s  {}",
                    s.name,
                    s.breaker.map_or("unknown", |b| b.as_str()),
                    s.epoch,
                    s.health,
                    s.pacer_limit,
                    s.attempts,
                    s.successes,
                    s.failures + s.dead + s.rate_limited,
                    s.cooling_for.as_secs_f64(),
                    structured_label(&s)
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Budgets => {
            let settings = settings(&cli)?;
            let Some(scope) = settings.scopes.keys().next().cloned() else {
                return Err("no scope is configured".into());
            };
            let gw = Gateway::from_settings(settings, &scope)
                .await
                .map_err(|e| e.to_string())?;
            let budgets = gw.budgets().await.map_err(|e| e.to_string());
            gw.shutdown().await;
            let budgets = budgets?;
            if budgets.is_empty() {
                println!("no spend budget is configured ({{SCOPE}}__BUDGET, PGW_TENANT_BUDGETS)");
            } else {
                println!(
                    "{:<28} {:<6} {:>16} {:>16} {:>16} {:>10}",
                    "budget", "window", "spent", "limit", "remaining", "resets in"
                );
            }
            for b in budgets {
                println!(
                    "{:<28} {:<6} {:>16.6} {:>16.6} {:>16.6} {:>9}s",
                    b.name,
                    b.period,
                    b.spent,
                    b.limit,
                    b.remaining,
                    b.resets_in.as_secs()
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::SchemaSql { backend } => {
            print!(
                "{}",
                telemetry_schema_sql(match backend {
                    Backend::Sqlite => SchemaBackend::Sqlite,
                    Backend::Postgres => SchemaBackend::Postgres,
                })
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Retention {
            sqlite,
            postgres_dsn,
            older_than_days,
            apply,
            table,
            batch,
        } => {
            let target = match (sqlite, postgres_dsn) {
                (Some(path), _) => RetentionTarget::Sqlite(path.clone()),
                (None, Some(dsn)) => RetentionTarget::Postgres(Secret::new(dsn.clone())),
                (None, None) => return Err("give --sqlite PATH or --postgres-dsn DSN".into()),
            };
            match retention(&target, table, *older_than_days, *apply, *batch).await {
                Ok(report) if report.applied => {
                    println!(
                        "deleted {} of {} rows older than {older_than_days} days from {table}",
                        report.deleted, report.matched
                    );
                    Ok(ExitCode::SUCCESS)
                }
                Ok(report) => {
                    println!(
                        "dry run: {} rows of {table} are older than {older_than_days} days (add --apply to delete)",
                        report.matched
                    );
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => {
                    eprintln!("polygateway retention: {e}");
                    Ok(ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(1)))
                }
            }
        }
        #[cfg(feature = "sqlite")]
        Command::Batch(args) => batch_cmd::run(settings(&cli)?, args).await,
        #[cfg(feature = "server")]
        Command::Serve { bind } => serve(serving.map_or_else(|| settings(&cli), Ok)?, *bind).await,
        Command::Top(args) => top_cmd::run(args).await,
        #[cfg(feature = "server")]
        Command::Key { action } => key(action),
    }
}

#[cfg(feature = "server")]
async fn serve(s: Settings, bind: Option<std::net::SocketAddr>) -> Result<ExitCode, String> {
    use polygateway::server::{install_metrics_recorder, KeyStore, Server};
    // Before the gateway: its scopes register their metric handles with the recorder of the day.
    install_metrics_recorder();
    let default_scope = s.scopes.keys().next().cloned().ok_or(
        "no scope is configured: add a source such as LLM__OPENAI__1__BASE_URL, \
                LLM__OPENAI__1__API_KEY and LLM__OPENAI__1__MODEL (see .env.example)",
    )?;
    let keys_file = s.server.keys_file.clone().ok_or(
        "PGW_SERVER_KEYS_FILE is required: a JSON file of virtual keys \
         (`polygateway key new` prints one; see docs/manual/server.md)",
    )?;
    let keys = KeyStore::from_file(&keys_file).map_err(|e| e.to_string())?;
    let bind = bind.unwrap_or(s.server.bind);
    let gw = Gateway::from_settings(s, &default_scope)
        .await
        .map_err(|e| e.to_string())?;
    let server = match Server::new(gw.clone(), keys) {
        Ok(server) => server,
        Err(e) => {
            gw.shutdown().await;
            return Err(e.to_string());
        }
    };
    let listener = match tokio::net::TcpListener::bind(bind).await {
        Ok(l) => l,
        Err(e) => {
            gw.shutdown().await;
            return Err(format!("cannot listen on {bind}: {e}"));
        }
    };
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    let workers = tokio::runtime::Handle::current().metrics().num_workers();
    println!(
        "polygateway serve: listening on http://{local} (scopes: {}; {workers} worker thread{})",
        gw.scopes().join(", "),
        if workers == 1 { "" } else { "s" }
    );
    let result = server.serve(listener, stop_signal()).await;
    println!("polygateway serve: draining done; shutting the runtime down");
    gw.shutdown().await;
    warn_if_telemetry_degraded(&gw);
    result.map_err(|e| format!("server error: {e}"))?;
    Ok(ExitCode::SUCCESS)
}

/// SIGINT or SIGTERM (what an orchestrator sends before it kills).
#[cfg(feature = "server")]
async fn stop_signal() {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                    return;
                }
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}

#[cfg(feature = "server")]
fn key(action: &KeyAction) -> Result<ExitCode, String> {
    use polygateway::server::{generate_key, hash_key};
    match action {
        KeyAction::New => {
            let key = generate_key();
            println!("key:  {key}");
            println!("hash: {}", hash_key(&key));
        }
        KeyAction::Hash { key } => {
            let key = match key {
                Some(k) => k.clone(),
                None => {
                    let mut line = String::new();
                    std::io::stdin()
                        .read_line(&mut line)
                        .map_err(|e| format!("cannot read the key from stdin: {e}"))?;
                    line.trim().to_string()
                }
            };
            if key.is_empty() {
                return Err("the key is empty".into());
            }
            println!("{}", hash_key(&key));
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match start(cli) {
        Ok(code) => code,
        Err(message) => {
            eprintln!("polygateway: {message}");
            ExitCode::from(1)
        }
    }
}

/// Runs the command on tokio's multi-threaded runtime, a worker per core, except that `serve`
/// takes `PGW_SERVER_WORKERS` when it is set: `serve`'s settings are therefore read here, before
/// the runtime exists, and handed to it (read once).
fn start(cli: Cli) -> Result<ExitCode, String> {
    #[cfg(feature = "server")]
    let serving = match cli.command {
        Command::Serve { .. } => Some(settings(&cli)?),
        _ => None,
    };
    #[cfg(not(feature = "server"))]
    let serving = None;
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    #[cfg(feature = "jemalloc")]
    builder.on_thread_park(idle_cache::on_park);
    if let Some(workers) = serving.as_ref().and_then(|s: &Settings| s.server.workers) {
        builder.worker_threads(workers);
    }
    let runtime = builder
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    runtime.block_on(run(cli, serving))
}
