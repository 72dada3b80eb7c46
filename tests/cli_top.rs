//! `polygateway top` on a pseudo-terminal (`script`, as the batch progress bar is tested):
//! it draws the dashboard's data of a running server — scopes, outcomes with sparklines, sources,
//! top keys — and redraws it once a second; without a key it shows only sources up/down.

mod server_support;

use polygateway_testkit::{mock_settings, Behaviour, MockUpstream};
use server_support::*;
use tokio::process::Command;

const ADMIN: &str = "pgw-top-admin";

async fn top(base: &str, key: Option<&str>, frames: u32) -> (Option<i32>, String) {
    let command = format!(
        "{} top --url {base} --range 60 --frames {frames}",
        env!("CARGO_BIN_EXE_polygateway")
    );
    let mut cmd = Command::new("script");
    cmd.args(["-qec", &command, "/dev/null"])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("TERM", "xterm-256color");
    if let Some(key) = key {
        cmd.env("POLYGATEWAY_ADMIN_KEY", key);
    }
    let out = cmd.output().await.unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[tokio::test]
async fn top_draws_the_dashboard_on_a_terminal_and_redraws_it() {
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    let keys = key_file(&[
        key_entry("topkey-ops", ADMIN, &["admin"], ""),
        key_entry("topkey-app", KEY, &["*"], ""),
    ]);
    let server = start_with_keys(mock_settings(&[("TOPA", &mock.base_url())], &[]), keys).await;
    for _ in 0..4 {
        let ok = reqwest::Client::new()
            .post(server.url("/v1/chat/completions"))
            .bearer_auth(KEY)
            .json(&chat_body("TOPA", false))
            .send()
            .await
            .unwrap();
        assert_eq!(ok.status(), 200);
    }
    let (code, screen) = top(&server.base, Some(ADMIN), 2).await;
    assert_eq!(code, Some(0), "{screen}");
    // Two frames, each drawn from the top of a cleared screen.
    assert_eq!(screen.matches("\x1b[H\x1b[2J").count(), 2, "{screen}");
    assert_eq!(screen.matches("polygateway top — ").count(), 2, "{screen}");
    assert!(screen.contains("TOPA (chat)"), "{screen}");
    let ok_line = screen
        .lines()
        .find(|l| l.trim_start().starts_with("ok "))
        .unwrap_or_else(|| panic!("{screen}"));
    assert!(ok_line.contains("4 in range"), "{ok_line}");
    assert!(ok_line.contains('█'), "a sparkline: {ok_line}");
    assert!(
        screen.contains("openai_1") && screen.contains("closed"),
        "{screen}"
    );
    assert!(screen.contains("latency p50 "), "{screen}");
    assert!(screen.contains("topkey-app"), "top keys: {screen}");

    // Without a key: sources up/down only, no key names.
    let (code, screen) = top(&server.base, None, 1).await;
    assert_eq!(code, Some(0), "{screen}");
    assert!(
        screen.contains("openai_1") && screen.contains(" up "),
        "{screen}"
    );
    assert!(!screen.contains("topkey-"), "{screen}");
    assert!(screen.contains("need an admin key"), "{screen}");

    // A key without `admin`: refused, and said so.
    let (code, screen) = top(&server.base, Some(KEY), 1).await;
    assert_ne!(code, Some(0), "{screen}");
    assert!(screen.contains("403"), "{screen}");
    server.stop().await;
}
