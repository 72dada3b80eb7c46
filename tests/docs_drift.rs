//! The README cannot drift from the code: its configuration reference lists exactly the keys the
//! parser accepts, and its metrics table exactly the metrics the library emits.

use std::collections::BTreeSet;

fn readme() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap()
}

/// First-column code spans of the markdown table that follows `heading`.
fn table_keys(markdown: &str, heading: &str) -> BTreeSet<String> {
    let section = markdown
        .split_once(heading)
        .unwrap_or_else(|| panic!("README has no {heading:?} section"))
        .1;
    section
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| {
            let first = l.split('|').nth(1)?.trim();
            first
                .strip_prefix('`')
                .and_then(|f| f.strip_suffix('`'))
                .map(str::to_string)
        })
        .collect()
}

#[test]
fn the_configuration_reference_lists_exactly_the_accepted_keys() {
    let documented = table_keys(&readme(), "## Configuration reference");
    let accepted: BTreeSet<String> = polygateway::config::accepted_keys().into_iter().collect();
    let missing: Vec<_> = accepted.difference(&documented).collect();
    let unknown: Vec<_> = documented.difference(&accepted).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "README misses {missing:?}; README documents keys the parser rejects: {unknown:?}"
    );
}

#[test]
fn the_metrics_table_lists_exactly_the_emitted_metrics() {
    let documented = table_keys(&readme(), "## Metrics");
    let emitted: BTreeSet<String> = polygateway::metrics::all()
        .into_iter()
        .map(|(name, _, _)| name.to_string())
        .collect();
    assert_eq!(documented, emitted);
}

#[test]
fn the_env_example_mentions_every_key_family() {
    let example =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/.env.example")).unwrap();
    for key in polygateway::config::accepted_keys() {
        let suffix = key.rsplit("}__").next().unwrap();
        assert!(
            example.contains(suffix),
            ".env.example does not mention {key}"
        );
    }
}
