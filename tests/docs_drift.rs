//! The README and the manual (the mdBook under `docs/`) cannot drift from the code: the
//! configuration reference is the key table the parser reads (and the other docs name no key the
//! table lacks), the metrics table exactly the metrics the library emits, the README's features
//! table and the examples index exactly what Cargo.toml declares, and the Rust blocks of the
//! README and the book need only the dependencies the README names.

use std::collections::BTreeSet;

use polygateway::config::keys::{ValueKind, KEYS};

/// A markdown file of the repository, by its path from the root.
fn doc(file: &str) -> String {
    std::fs::read_to_string(format!("{}/{file}", env!("CARGO_MANIFEST_DIR")))
        .unwrap_or_else(|e| panic!("{file}: {e}"))
}

fn readme() -> String {
    doc("README.md")
}

/// The chapters holding the configuration reference, the metrics table and the examples index.
const CONFIGURATION: &str = "docs/manual/configuration.md";
const OBSERVABILITY: &str = "docs/manual/observability.md";
const DEVELOPMENT: &str = "docs/manual/development.md";

/// The book's chapters as `docs/SUMMARY.md` lists them (paths from the repository's root), so a
/// chapter added to the book is checked without being named here.
fn book_chapters() -> Vec<String> {
    let chapters: Vec<String> = doc("docs/SUMMARY.md")
        .lines()
        .filter_map(|l| {
            let target = l.split_once("](")?.1.split_once(')')?.0;
            Some(format!("docs/{target}"))
        })
        .collect();
    assert!(
        chapters.len() > 10 && chapters.contains(&"docs/behaviour.md".to_string()),
        "docs/SUMMARY.md lists {chapters:?}"
    );
    chapters
}

/// First-column code spans of the markdown table that follows `heading`.
fn table_keys(markdown: &str, heading: &str) -> BTreeSet<String> {
    let section = markdown
        .split_once(heading)
        .unwrap_or_else(|| panic!("no {heading:?} section"))
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

/// The configuration reference (docs/manual/configuration.md) is generated from the key table:
/// its rows are exactly the table's rows (pattern, meaning, default), in the table's order. On a
/// mismatch the message holds the table as it should read, ready to paste.
#[test]
fn the_configuration_reference_is_the_key_table() {
    let chapter = doc(CONFIGURATION);
    let section = chapter
        .split_once("## Configuration reference")
        .expect("docs/manual/configuration.md has a configuration reference")
        .1;
    let documented: Vec<&str> = section
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2) // the header and its rule
        .collect();
    let expected: Vec<String> = KEYS
        .iter()
        .map(|k| format!("| `{}` | {} | {} |", k.pattern(), k.doc, k.default))
        .collect();
    assert!(
        documented == expected,
        "docs/manual/configuration.md's configuration reference differs from \
         polygateway::config::keys::KEYS; it should read:\n| key | meaning | default |\n|---|---|---|\n{}",
        expected.join("\n")
    );
    // The table is what the parser accepts.
    let accepted: BTreeSet<String> = polygateway::config::accepted_keys().into_iter().collect();
    let patterns: BTreeSet<String> = KEYS.iter().map(|k| k.pattern()).collect();
    assert_eq!(accepted, patterns);
}

/// Every key the prose names is in the key table: `PGW_*` and `LLM_*` keys in the README,
/// `.env.example`, ARCHITECTURE.md and every chapter of the book (docs/behaviour.md among them),
/// and every key name or key suffix that docs/behaviour.md quotes (`TTFT_TIMEOUT_S`,
/// `QUOTA_FULL=wait`), with a choice key's quoted value one of its words. (`.env.example`'s keys
/// are checked both ways, one line per key, by `tests/config_env.rs`; the configuration
/// reference's by the test above.)
#[test]
fn the_docs_name_no_key_the_table_lacks() {
    let is_name_char = |c: char| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_';
    let mut unknown = Vec::new();
    let files = ["README.md", ".env.example", "ARCHITECTURE.md"]
        .map(String::from)
        .into_iter()
        .chain(book_chapters());
    for file in files {
        let text = doc(&file);
        for prefix in ["PGW_", "LLM_"] {
            for (at, _) in text.match_indices(prefix) {
                let before = text[..at].chars().next_back();
                if before.is_some_and(|c| is_name_char(c) || c.is_ascii_lowercase()) {
                    continue;
                }
                let token: String = text[at..]
                    .chars()
                    .take_while(|c| is_name_char(*c))
                    .collect();
                // `LLM__…` is a scope key (checked elsewhere); `PGW_` alone is the namespace,
                // `PGW_SERVER_` a family of keys.
                if token.starts_with("LLM__") || token == prefix {
                    continue;
                }
                let known = if token.ends_with('_') {
                    KEYS.iter().any(|k| k.name.starts_with(&token))
                } else {
                    KEYS.iter().any(|k| k.name == token)
                };
                if !known {
                    unknown.push(format!("{file}: {token}"));
                }
            }
        }
    }
    let behaviour = doc("docs/behaviour.md");
    for quoted in behaviour.split('`').skip(1).step_by(2) {
        let (name, value) = quoted.split_once('=').unwrap_or((quoted, ""));
        let looks_like_key = name.contains('_')
            && name.starts_with(|c: char| c.is_ascii_uppercase())
            && name.chars().all(is_name_char);
        if !looks_like_key {
            continue;
        }
        // `PGW_` and `PGW_SERVER_` name the key families with that prefix.
        if name.ends_with('_') && KEYS.iter().any(|k| k.name.starts_with(name)) {
            continue;
        }
        let Some(key) = KEYS
            .iter()
            .find(|k| k.name == name || k.name.ends_with(&format!("__{name}")))
        else {
            unknown.push(format!("docs/behaviour.md: `{quoted}`"));
            continue;
        };
        if let (ValueKind::Choice(words), false) = (key.value, value.is_empty()) {
            if !words.contains(&value) {
                unknown.push(format!("docs/behaviour.md: `{quoted}` ({words:?})"));
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "keys or values the key table does not have:\n{}",
        unknown.join("\n")
    );
}

#[test]
fn the_metrics_table_lists_exactly_the_emitted_metrics() {
    let documented = table_keys(&doc(OBSERVABILITY), "## Metrics");
    let emitted: BTreeSet<String> = polygateway::metrics::all()
        .into_iter()
        .map(|(name, _, _)| name.to_string())
        .collect();
    assert_eq!(documented, emitted);
}

/// Text files of the repository that may cite the behaviour reference (the target dir, `.git`
/// and binary files excluded).
fn repository_text_files() -> Vec<(std::path::PathBuf, String)> {
    fn walk(dir: &std::path::Path, out: &mut Vec<(std::path::PathBuf, String)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            // `.git` is a directory in a clone and a file in a worktree.
            if matches!(name.as_str(), "target" | ".git") {
                continue;
            }
            if path.is_dir() {
                walk(&path, out);
            } else if let Ok(text) = std::fs::read_to_string(&path) {
                out.push((path, text));
            }
        }
    }
    let mut files = Vec::new();
    walk(std::path::Path::new(env!("CARGO_MANIFEST_DIR")), &mut files);
    files
}

/// Comments and docs point at `docs/behaviour.md` and `docs/monkeyocr.md`, never at a file that
/// only exists outside the repository (the behaviour contract used to live in an external
/// `SPEC.md`; someone who clones the repository could not follow those pointers).
#[test]
fn no_reference_leaves_the_repository() {
    // Spelled in pieces so this file does not match itself.
    let forbidden = [
        concat!("SP", "EC §"),
        concat!("SP", "EC:"),
        concat!("shared", "/"),
        concat!("monkeyocr", "-protocol"),
        concat!("/wo", "rk/"),
    ];
    let mut hits = Vec::new();
    for (path, text) in repository_text_files() {
        for (n, line) in text.lines().enumerate() {
            if forbidden.iter().any(|f| line.contains(f)) {
                hits.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        hits.is_empty(),
        "references outside the repository:\n{}",
        hits.join("\n")
    );
}

/// Every section of the behaviour reference cited anywhere names a section that exists there.
#[test]
fn every_cited_behaviour_section_exists() {
    let root = env!("CARGO_MANIFEST_DIR");
    let reference = std::fs::read_to_string(format!("{root}/docs/behaviour.md")).unwrap();
    // Sections are headings (`## §5`, `### §5.3 …`) and the numbered rules of §10 (`- §10.3 …`).
    let defined: BTreeSet<String> = reference
        .lines()
        .filter_map(|l| {
            let rest = l
                .trim_start_matches('#')
                .trim_start_matches("- ")
                .trim_start();
            let label = rest.strip_prefix('§')?;
            let end = label.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
            Some(label[..end].trim_end_matches('.').to_string())
        })
        .collect();
    assert!(
        defined.contains("5.3") && defined.contains("10.8"),
        "{defined:?}"
    );
    let citation = concat!("docs/behaviour.md", " §");
    let mut dangling = Vec::new();
    let mut cited = 0;
    for (path, text) in repository_text_files() {
        for (n, line) in text.lines().enumerate() {
            for piece in line.split(citation).skip(1) {
                // `§8.3–§8.5` cites the range's first section; the rest are checked by their own `§`.
                let label: String = piece
                    .chars()
                    .take_while(|c| c.is_ascii_digit() || *c == '.')
                    .collect();
                let label = label.trim_end_matches('.');
                cited += 1;
                if !defined.contains(label) {
                    dangling.push(format!("{}:{}: §{label}", path.display(), n + 1));
                }
            }
        }
    }
    assert!(
        cited > 50,
        "only {cited} citations found: is the citation form still {citation:?}?"
    );
    assert!(
        dangling.is_empty(),
        "cited sections missing from docs/behaviour.md:\n{}",
        dangling.join("\n")
    );
}

/// The fenced blocks of `lang` in `markdown` (the info string starts with `lang`).
fn fenced_blocks(markdown: &str, lang: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        match (&mut current, line.strip_prefix("```")) {
            (None, Some(info)) if info.starts_with(lang) => current = Some(String::new()),
            (Some(_), Some(_)) => blocks.extend(current.take()),
            (Some(block), None) => {
                block.push_str(line);
                block.push('\n');
            }
            (None, _) => {}
        }
    }
    blocks
}

/// The README's structured example derived `schemars::JsonSchema` while the README named no
/// `schemars` dependency (issue #21): every crate a Rust block of the README or of a book chapter
/// names (hidden lines included) is one the README's `[dependencies]` block lists, or `std`.
#[test]
fn readme_rust_blocks_need_only_the_dependencies_the_readme_names() {
    let readme = readme();
    let named: BTreeSet<String> = fenced_blocks(&readme, "toml")
        .iter()
        .filter(|b| b.contains("[dependencies]"))
        .flat_map(|b| b.lines().map(str::to_string).collect::<Vec<_>>())
        .filter_map(|l| Some(l.split_once('=')?.0.trim().replace('-', "_")))
        .chain(["std".to_string(), "core".to_string()])
        .collect();
    assert!(
        named.contains("polygateway"),
        "no [dependencies] block: {named:?}"
    );
    let markdown = std::iter::once("README.md".to_string())
        .chain(book_chapters())
        .map(|file| (doc(&file), file));
    for (block, file) in markdown.flat_map(|(text, file)| {
        fenced_blocks(&text, "rust")
            .into_iter()
            .map(move |b| (b, file.clone()))
    }) {
        let bytes = block.as_bytes();
        for (at, _) in block.match_indices("::") {
            let start = block[..at]
                .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .map_or(0, |i| i + 1);
            let root = &block[start..at];
            let is_path_root = start < 2 || &bytes[start - 2..start] != b"::";
            let is_crate = root.starts_with(|c: char| c.is_ascii_lowercase());
            if is_path_root && is_crate && !["crate", "self", "super"].contains(&root) {
                assert!(
                    named.contains(root),
                    "a Rust block of {file} uses `{root}::` but the README's [dependencies] \
                     block names only {named:?}"
                );
            }
        }
    }
}

/// Every file of the README and the book with a Rust block is compiled as a doc test: `src/lib.rs`
/// includes it in a `#[cfg(doctest)]` item (a chapter added with an example and not included
/// would be an example nobody compiles).
#[test]
fn every_rust_block_of_the_book_is_a_doc_test() {
    let lib = doc("src/lib.rs");
    let mut not_compiled = Vec::new();
    for file in std::iter::once("README.md".to_string()).chain(book_chapters()) {
        if fenced_blocks(&doc(&file), "rust").is_empty() {
            continue;
        }
        if !lib.contains(&format!("#[doc = include_str!(\"../{file}\")]")) {
            not_compiled.push(file);
        }
    }
    assert!(
        not_compiled.is_empty(),
        "Rust blocks src/lib.rs does not compile as doc tests (add a #[cfg(doctest)] item): \
         {not_compiled:?}"
    );
}

/// The README's "Cargo features" table lists exactly the crate's features.
#[test]
fn the_features_table_lists_exactly_the_cargo_features() {
    let manifest =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml")).unwrap();
    let features: BTreeSet<String> = manifest
        .split_once("[features]")
        .unwrap()
        .1
        .lines()
        .skip(1)
        .take_while(|l| !l.starts_with('['))
        .filter_map(|l| Some(l.split_once('=')?.0.trim().to_string()))
        .filter(|name| !name.starts_with('#') && name != "default")
        .collect();
    assert_eq!(table_keys(&readme(), "## Cargo features"), features);
}

/// The examples index (docs/manual/development.md) lists exactly the declared examples.
#[test]
fn the_examples_index_lists_every_example() {
    let manifest =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml")).unwrap();
    let examples: BTreeSet<String> = manifest
        .split("[[example]]")
        .skip(1)
        .filter_map(|section| {
            let line = section.lines().find(|l| l.starts_with("name"))?;
            Some(line.split('"').nth(1)?.to_string())
        })
        .collect();
    assert_eq!(table_keys(&doc(DEVELOPMENT), "## Examples"), examples);
}
