//! A process forked after it used the runtime gives its child a working runtime of its own
//! (the Python package promises it; `python/tests/test_process_life.py` forks). What a fork
//! copies must then name no thread of the parent's: Tokio's `parking_lot` feature parks every
//! idle worker in parking_lot's one process-wide table, and a child forked while a parent's
//! thread sat there crashed (SIGSEGV or SIGABRT) in 16 of 240 runs of that test's script; 0 of
//! 320 without the feature. This check names the cause: no crate of the workspace may turn the
//! feature on, directly or through `full`.

use std::process::Command;

use serde_json::Value;

/// The platform this test was built for, as `rustc -vV` names it.
fn host_triple() -> String {
    let output = Command::new("rustc")
        .arg("-vV")
        .output()
        .expect("rustc -vV runs");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .expect("rustc -vV names its host")
        .to_string()
}

#[test]
fn tokio_is_built_without_parking_lot() {
    // Offline and for this platform only: a fresh machine's build fetched the host's packages
    // and no other (unfiltered, cargo metadata wants Windows-only crates' manifests too).
    let output = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--offline"])
        .args(["--filter-platform", &host_triple()])
        .arg("--manifest-path")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: Value = serde_json::from_slice(&output.stdout).expect("cargo metadata's JSON");
    let tokio_ids: Vec<&str> = metadata["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .filter(|p| p["name"] == "tokio")
        .filter_map(|p| p["id"].as_str())
        .collect();
    assert!(
        !tokio_ids.is_empty(),
        "tokio is not in the workspace's graph"
    );
    for node in metadata["resolve"]["nodes"]
        .as_array()
        .expect("the resolved graph")
    {
        if !tokio_ids.contains(&node["id"].as_str().unwrap_or_default()) {
            continue;
        }
        let features: Vec<&str> = node["features"]
            .as_array()
            .expect("features")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert!(
            !features.contains(&"parking_lot"),
            "tokio is built with `parking_lot` ({features:?}): a process forked after it used the \
             runtime can crash its child; list Tokio's features without `full` (Cargo.toml)"
        );
    }
}
