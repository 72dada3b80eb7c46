//! No import cycle between the module files of either crate (issue #33): a module that imports
//! another must not be imported back, directly or through others, so each layer reads on its own.
//!
//! The check reads the sources: every `use` path and every inline `crate::…` / `super::…` path
//! outside comments and the `#[cfg(test)]` module at the end of a file becomes an edge from the
//! file to the file that defines the item, following `pub use` re-exports to the definition.
//! Re-exports themselves (a `mod.rs` or `lib.rs` facade naming its children's items) are not
//! edges: they add no dependency of the facade on what it lists.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One crate's module files: module path (`["runtime", "call"]`) → source text.
struct Crate {
    modules: BTreeMap<Vec<String>, String>,
}

fn collect(root: &Path, dir: &Path, prefix: &[String], out: &mut BTreeMap<Vec<String>, String>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if path.is_dir() {
            if dir == root && name == "bin" {
                continue;
            }
            let mut child = prefix.to_vec();
            child.push(name);
            collect(root, &path, &child, out);
        } else if let Some(stem) = name.strip_suffix(".rs") {
            let mut module = prefix.to_vec();
            if !(stem == "mod" || (dir == root && stem == "lib")) {
                module.push(stem.to_string());
            }
            let text = std::fs::read_to_string(&path).expect("a readable source file");
            out.insert(module, strip(&text));
        }
    }
}

/// The code of a file without comments and without its trailing `#[cfg(test)] mod …` block.
fn strip(text: &str) -> String {
    let mut lines: Vec<&str> = Vec::new();
    let all: Vec<&str> = text.lines().collect();
    for (i, line) in all.iter().enumerate() {
        let trimmed = line.trim();
        let next = all.get(i + 1).map_or("", |l| l.trim());
        let test_only = trimmed.starts_with("#[cfg(")
            && (trimmed.contains("(test)") || trimmed.contains("(test,"));
        if test_only && next.starts_with("mod ") && next.ends_with('{') {
            break;
        }
        let code = match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        };
        lines.push(code);
    }
    lines.join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Expand `a::{b, c::{d, e as f}, self}` into full paths (aliases dropped, `self` kept as the
/// module itself).
fn expand(tree: &str) -> Vec<Vec<String>> {
    fn split_top(s: &str) -> Vec<&str> {
        let (mut depth, mut start, mut parts) = (0, 0, Vec::new());
        for (i, c) in s.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    parts.push(&s[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        parts.push(&s[start..]);
        parts
    }
    let tree: String = tree
        .chars()
        .filter(|c| !c.is_whitespace() || *c == ' ')
        .collect();
    let tree = tree.trim();
    if tree.is_empty() {
        return Vec::new();
    }
    if let Some(open) = tree.find('{') {
        let head: Vec<String> = tree[..open]
            .split("::")
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        let inner = &tree[open + 1..tree.rfind('}').expect("a closing brace")];
        let mut out = Vec::new();
        for part in split_top(inner) {
            for tail in expand(part) {
                let mut path = head.clone();
                if tail != ["self"] {
                    path.extend(tail);
                }
                out.push(path);
            }
        }
        return out;
    }
    let path = tree.split(" as ").next().unwrap_or(tree).trim();
    vec![path.split("::").map(|s| s.trim().to_string()).collect()]
}

/// `use` statements of a module: (is a re-export, expanded paths).
fn uses(code: &str) -> Vec<(bool, Vec<Vec<String>>)> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("use ") {
        let before = &rest[..at];
        let boundary = before.chars().last().is_none_or(|c| !is_ident(c));
        let statement_start = before
            .trim_end()
            .chars()
            .last()
            .is_none_or(|c| matches!(c, ';' | '}' | '{' | ']' | ')'));
        let line_start = before.rsplit('\n').next().unwrap_or("").trim();
        let public = line_start.starts_with("pub");
        let Some(end) = rest[at..].find(';') else {
            break;
        };
        let body = &rest[at + 4..at + end];
        if boundary && (statement_start || public) {
            out.push((public, expand(body)));
        }
        rest = &rest[at + end + 1..];
    }
    out
}

/// Inline `crate::a::b` / `super::a` / `self::a` paths (outside `use` statements too).
fn inline_paths(code: &str) -> Vec<Vec<String>> {
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let starts = ["crate::", "super::"]
            .iter()
            .find(|p| code_at(&chars, i, p))
            .copied();
        let preceded =
            i > 0 && (is_ident(chars[i - 1]) || chars[i - 1] == '$' || chars[i - 1] == ':');
        match starts {
            Some(_) if !preceded => {
                let mut j = i;
                let mut path = String::new();
                while j < chars.len() && (is_ident(chars[j]) || chars[j] == ':') {
                    path.push(chars[j]);
                    j += 1;
                }
                let segments: Vec<String> = path
                    .split("::")
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect();
                out.push(segments);
                i = j;
            }
            _ => i += 1,
        }
    }
    out
}

fn code_at(chars: &[char], i: usize, pattern: &str) -> bool {
    pattern
        .chars()
        .enumerate()
        .all(|(k, c)| chars.get(i + k) == Some(&c))
}

impl Crate {
    fn load(root: &Path) -> Self {
        let mut modules = BTreeMap::new();
        collect(root, root, &[], &mut modules);
        Crate { modules }
    }

    /// Make `path` (as written in `module`) absolute; `None` for another crate's path.
    fn absolute(&self, module: &[String], path: &[String]) -> Option<Vec<String>> {
        let (first, rest) = path.split_first()?;
        let mut base: Vec<String> = match first.as_str() {
            "crate" => Vec::new(),
            "self" => module.to_vec(),
            "super" => module[..module.len().saturating_sub(1)].to_vec(),
            name => {
                let mut child = module.to_vec();
                child.push(name.to_string());
                if !self.modules.contains_key(&child) {
                    return None;
                }
                return Some(child.into_iter().chain(rest.iter().cloned()).collect());
            }
        };
        let mut rest = rest;
        while let Some(("super", tail)) = rest.split_first().map(|(h, t)| (h.as_str(), t)) {
            base.pop();
            rest = tail;
        }
        base.extend(rest.iter().cloned());
        Some(base)
    }

    /// The module file that defines what `path` (absolute) names.
    fn resolve(&self, path: &[String], depth: u32) -> Option<Vec<String>> {
        let mut module: Vec<String> = Vec::new();
        for (i, segment) in path.iter().enumerate() {
            let mut child = module.clone();
            child.push(segment.clone());
            if self.modules.contains_key(&child) {
                module = child;
                continue;
            }
            if depth < 8 {
                if let Some(found) = self.reexport(&module, segment, &path[i + 1..], depth) {
                    return Some(found);
                }
            }
            return Some(module);
        }
        Some(module)
    }

    /// Follow a `pub use` of `module` that names `name`.
    fn reexport(
        &self,
        module: &[String],
        name: &str,
        tail: &[String],
        depth: u32,
    ) -> Option<Vec<String>> {
        let code = self.modules.get(module)?;
        for (public, paths) in uses(code) {
            if !public {
                continue;
            }
            for path in paths {
                let last = path.last().map(String::as_str);
                if last == Some(name) || last == Some("*") {
                    let Some(mut target) = self.absolute(module, &path) else {
                        continue;
                    };
                    if last == Some("*") {
                        target.pop();
                        target.push(name.to_string());
                    }
                    target.extend(tail.iter().cloned());
                    return self.resolve(&target, depth + 1);
                }
            }
        }
        None
    }

    /// Edges between module files.
    fn edges(&self) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
        let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
        for (module, code) in &self.modules {
            let mut paths: Vec<Vec<String>> = uses(code)
                .into_iter()
                .filter(|(public, _)| !public)
                .flat_map(|(_, p)| p)
                .collect();
            paths.extend(inline_paths(code));
            let targets = edges.entry(module.clone()).or_default();
            for path in paths {
                let Some(absolute) = self.absolute(module, &path) else {
                    continue;
                };
                if let Some(target) = self.resolve(&absolute, 0) {
                    // A module naming its own items is no edge.
                    if target != *module {
                        targets.insert(target);
                    }
                }
            }
        }
        edges
    }
}

/// Every cycle's modules, one line per strongly connected component of more than one file.
fn cycles(edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Vec<String> {
    // Tarjan's algorithm.
    struct Tarjan<'a> {
        edges: &'a BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        index: BTreeMap<&'a Vec<String>, usize>,
        low: BTreeMap<&'a Vec<String>, usize>,
        stack: Vec<&'a Vec<String>>,
        on_stack: BTreeSet<&'a Vec<String>>,
        found: Vec<String>,
    }
    impl<'a> Tarjan<'a> {
        fn visit(&mut self, v: &'a Vec<String>) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.edges.get(v).into_iter().flatten() {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(if w.is_empty() {
                        "<root>".to_string()
                    } else {
                        w.join("::")
                    });
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component.join(" ↔ "));
                }
            }
        }
    }
    let mut tarjan = Tarjan {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in edges.keys() {
        if !tarjan.index.contains_key(v) {
            tarjan.visit(v);
        }
    }
    tarjan.found
}

/// `min_edges`: fewer import edges than this means the parser missed the crate's imports.
fn check(dir: &str, min_edges: usize, known: &[&str]) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let krate = Crate::load(&root);
    let edges = krate.edges();
    // Not vacuous: the parser sees the crate's imports.
    let total: usize = edges.values().map(BTreeSet::len).sum();
    assert!(total >= min_edges, "{dir}: only {total} import edges found");
    let found = cycles(&edges);
    let new: Vec<&String> = found
        .iter()
        .filter(|c| !known.contains(&c.as_str()))
        .collect();
    let gone: Vec<&&str> = known
        .iter()
        .filter(|k| !found.iter().any(|c| c == *k))
        .collect();
    assert!(
        new.is_empty(),
        "{dir} has new import cycles:\n{}",
        new.iter()
            .map(|c| c.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        gone.is_empty(),
        "{dir}: these cycles are gone, delete them from the list: {gone:?}"
    );
}

#[test]
fn the_actors_crate_has_no_import_cycle() {
    check("actors/src", 51, &[]);
}

/// The root crate's last six cycles were broken in issue #50.
#[test]
fn the_root_crate_has_no_import_cycle() {
    check("src", 51, &[]);
}

/// The checker finds a cycle when there is one (two files importing each other).
#[test]
fn the_checker_sees_a_cycle() {
    let mut modules = BTreeMap::new();
    modules.insert(vec![], "mod a;\nmod b;".to_string());
    modules.insert(
        vec!["a".into()],
        "use super::b::B;\npub struct A;".to_string(),
    );
    modules.insert(vec!["b".into()], "pub struct B(crate::a::A);".to_string());
    let krate = Crate { modules };
    assert_eq!(cycles(&krate.edges()), vec!["a ↔ b".to_string()]);
    // And a facade re-exporting its children is no cycle.
    let mut modules = BTreeMap::new();
    modules.insert(
        vec![],
        "mod a;\npub use a::A;\npub struct Root;".to_string(),
    );
    modules.insert(vec!["a".into()], "pub struct A(crate::Root);".to_string());
    assert!(cycles(&Crate { modules }.edges()).is_empty());
}

/// The test kit (46 import edges when it became a crate of its own).
#[test]
fn the_testkit_crate_has_no_import_cycle() {
    check("testkit/src", 40, &[]);
}
