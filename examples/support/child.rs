//! A benchmark's child process (`server_bench`, `hostile`): it listens on a loopback port it
//! prints for its parent, and serves until the parent closes its stdin.

use std::io::Write;

use polygateway::server::Server;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// A listener on 127.0.0.1 whose address is printed on stdout for the parent, and a task that
/// ends when the parent closes this process's stdin.
pub async fn child_listener() -> (TcpListener, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    println!("{}", listener.local_addr().unwrap());
    std::io::stdout().flush().unwrap();
    let stdin_closed = tokio::task::spawn_blocking(|| {
        let mut sink = String::new();
        while std::io::stdin().read_line(&mut sink).is_ok_and(|n| n > 0) {}
    });
    (listener, stdin_closed)
}

/// `server` on a [`child_listener`] until the parent closes stdin; then it drains.
pub async fn serve_until_stdin_closes(server: Server) {
    let (listener, stdin_closed) = child_listener().await;
    server
        .serve(listener, async {
            let _ = stdin_closed.await;
        })
        .await
        .unwrap();
}
