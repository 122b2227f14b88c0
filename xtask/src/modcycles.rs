//! `cargo xtask modcycles`: no crate of the workspace may have an import cycle
//! between its modules.
//!
//! A module here is a top-level module of a crate (`src/board.rs`, or `src/algo/`
//! with everything under it); the crate root (`lib.rs`, `main.rs`) only declares
//! and re-exports, and is no node. An edge `a -> b` is any path `crate::b...` in
//! the code of `a` (a `use` or an inline path; comments and string literals do not
//! count), including `crate::{b, c::x}` groups and paths through a name the root
//! re-exports (`crate::Comm` is an edge to the module the root takes `Comm` from).
//! A cycle is a strongly connected set of two or more modules; each is printed
//! with the edges that close it, and the task fails.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// One crate's module graph: edges from each module to the modules it names,
/// with one place (file:line) each edge is made.
#[derive(Debug, Default)]
pub struct Graph {
    pub edges: BTreeMap<String, BTreeMap<String, String>>,
}

/// Checks every crate under `crates/` and `examples/` (and `xtask`, `benches`).
pub fn run(root: &Path) -> Result<()> {
    let mut dirs = Vec::new();
    for group in ["crates", "examples"] {
        let Ok(rd) = std::fs::read_dir(root.join(group)) else {
            continue;
        };
        for e in rd.flatten() {
            dirs.push(e.path());
        }
    }
    dirs.push(root.join("xtask"));
    dirs.push(root.join("benches"));
    dirs.sort();
    let mut bad = 0;
    let mut checked = 0;
    for dir in dirs {
        let src = dir.join("src");
        let lib = ["lib.rs", "main.rs"]
            .iter()
            .map(|f| src.join(f))
            .find(|p| p.exists());
        let Some(lib) = lib else { continue };
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let g = graph(&src, &lib).with_context(|| format!("reading {}", src.display()))?;
        checked += 1;
        for cycle in cycles(&g) {
            bad += 1;
            eprintln!("{name}: module cycle {}", cycle.join(" -> "));
            for w in cycle.windows(2) {
                if let Some(at) = g.edges.get(&w[0]).and_then(|e| e.get(&w[1])) {
                    eprintln!("    {} -> {}  ({at})", w[0], w[1]);
                }
            }
        }
    }
    if bad > 0 {
        bail!("{bad} module cycle(s)");
    }
    eprintln!("no module cycle in {checked} crates");
    Ok(())
}

/// The module graph of the crate whose sources are under `src` with root `lib`.
pub fn graph(src: &Path, lib: &Path) -> Result<Graph> {
    let mut files = Vec::new();
    walk(src, &mut files)?;
    // Top-level modules: files and folders directly under src (not bin/).
    let mut modules = BTreeMap::new();
    for f in &files {
        if f == lib {
            continue;
        }
        let rel = f.strip_prefix(src).unwrap_or(f);
        let mut comps = rel.components();
        let first = comps
            .next()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .unwrap_or_default();
        if first == "bin" || first == "main.rs" {
            continue;
        }
        let m = first.trim_end_matches(".rs").to_string();
        modules.insert(f.clone(), m);
    }
    let names: BTreeSet<String> = modules.values().cloned().collect();
    // Names the root re-exports, by the module they come from.
    let root_code = strip(&std::fs::read_to_string(lib)?);
    let reexports = reexports(&root_code, &names);
    let mut g = Graph::default();
    for m in &names {
        g.edges.entry(m.clone()).or_default();
    }
    for (f, m) in &modules {
        let code = strip(&std::fs::read_to_string(f)?);
        for (line, target) in crate_paths(&code) {
            let to = if names.contains(&target) {
                Some(target)
            } else {
                reexports.get(&target).cloned()
            };
            if let Some(to) = to {
                if &to != m {
                    let at = format!("{}:{line}", f.display());
                    g.edges
                        .entry(m.clone())
                        .or_default()
                        .entry(to)
                        .or_insert(at);
                }
            }
        }
    }
    Ok(g)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        if p.is_dir() {
            walk(&p, out)?;
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    Ok(())
}

/// `code` with comments removed and string and character literals emptied;
/// lines are kept (newlines stay) so that line numbers still match.
pub fn strip(code: &str) -> String {
    let b: Vec<char> = code.chars().collect();
    let mut out = String::with_capacity(code.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if b[i] == '\n' {
                        out.push('\n');
                    }
                    i += 1;
                }
            }
        } else if c == 'r'
            && (next == Some('"') || next == Some('#'))
            && !b
                .get(i.wrapping_sub(1))
                .is_some_and(|p| p.is_alphanumeric() || *p == '_')
        {
            // Raw string r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == '"' && (0..hashes).all(|k| b.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                if b[j] == '\n' {
                    out.push('\n');
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == '"' {
            i += 1;
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    i += 1;
                } else if b[i] == '\n' {
                    out.push('\n');
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' && b.get(i + 2) == Some(&'\'') {
            // A character literal such as '"' (a lifetime never closes with a quote).
            out.push_str("' '");
            i += 3;
        } else if c == '\'' && next == Some('\\') {
            // An escaped character literal: '\'' , '\n', '\u{..}'.
            let mut j = i + 3;
            while j < b.len() && b[j] != '\'' {
                j += 1;
            }
            out.push_str("' '");
            i = j + 1;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn ident_at(b: &[char], mut i: usize) -> (String, usize) {
    let mut s = String::new();
    while i < b.len() && (b[i].is_alphanumeric() || b[i] == '_') {
        s.push(b[i]);
        i += 1;
    }
    (s, i)
}

fn skip_ws(b: &[char], mut i: usize) -> usize {
    while i < b.len() && b[i].is_whitespace() {
        i += 1;
    }
    i
}

/// Every first segment after `crate::` in `code`, with its line (1-based);
/// `crate::{a, b::c}` gives `a` and `b`.
pub fn crate_paths(code: &str) -> Vec<(usize, String)> {
    let b: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < b.len() {
        if b[i] == '\n' {
            line += 1;
        }
        let word_start = i == 0 || !(b[i - 1].is_alphanumeric() || b[i - 1] == '_');
        if word_start && b[i..].starts_with(&['c', 'r', 'a', 't', 'e', ':', ':']) {
            let j = skip_ws(&b, i + 7);
            if b.get(j) == Some(&'{') {
                // A group: the first segment of each member at depth 1.
                let mut depth = 0;
                let mut k = j;
                let mut expect = true;
                while k < b.len() {
                    match b[k] {
                        '{' => {
                            depth += 1;
                            expect = depth == 1;
                            k += 1;
                        }
                        '}' => {
                            depth -= 1;
                            k += 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        ',' if depth == 1 => {
                            expect = true;
                            k += 1;
                        }
                        c if expect && (c.is_alphabetic() || c == '_') => {
                            let (id, e) = ident_at(&b, k);
                            out.push((line, id));
                            expect = false;
                            k = e;
                        }
                        _ => k += 1,
                    }
                }
            } else {
                let (id, _) = ident_at(&b, j);
                if !id.is_empty() {
                    out.push((line, id));
                }
            }
            i += 7;
            continue;
        }
        i += 1;
    }
    out
}

/// The names `pub use module::{...}` (or `pub use module::Name`) in the crate root
/// makes available as `crate::Name`, mapped to their module.
fn reexports(root: &str, modules: &BTreeSet<String>) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    for stmt in root.split(';') {
        let s = stmt.trim();
        let Some(rest) = s
            .find("use ")
            .filter(|&at| s[..at].contains("pub"))
            .map(|at| s[at + 4..].trim())
        else {
            continue;
        };
        let rest = rest.strip_prefix("crate::").unwrap_or(rest);
        let Some((module, names)) = rest.split_once("::") else {
            continue;
        };
        let module = module.trim();
        if !modules.contains(module) {
            continue;
        }
        let names = names.trim().trim_start_matches('{').trim_end_matches('}');
        for n in names.split(',') {
            // `path::Name`, `Name as Other`: the name the root exports.
            let n = n.trim();
            let n = n.rsplit_once(" as ").map_or(n, |(_, a)| a.trim());
            let n = n.rsplit("::").next().unwrap_or(n).trim();
            if !n.is_empty() && n != "self" && n != "*" {
                map.insert(n.to_string(), module.to_string());
            }
        }
    }
    map
}

/// The strongly connected sets of two or more modules, each as a closed walk
/// (first module repeated at the end) through its members.
pub fn cycles(g: &Graph) -> Vec<Vec<String>> {
    // Tarjan's algorithm.
    struct T<'a> {
        g: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        next: usize,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        t.index.insert(v, t.next);
        t.low.insert(v, t.next);
        t.next += 1;
        t.stack.push(v);
        t.on.insert(v);
        let succ: Vec<&'a str> = t.g.edges[v].keys().map(String::as_str).collect();
        for w in succ {
            if !t.g.edges.contains_key(w) {
                continue;
            }
            if !t.index.contains_key(w) {
                visit(t, w);
                let lw = t.low[w];
                let lv = t.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if t.on.contains(w) {
                let iw = t.index[w];
                let lv = t.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = BTreeSet::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                comp.insert(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                t.out.push(walk_through(t.g, &comp));
            }
        }
    }
    let mut t = T {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in g.edges.keys() {
        if !t.index.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    t.out
}

/// A shortest cycle through the first member of a strongly connected set.
fn walk_through(g: &Graph, comp: &BTreeSet<String>) -> Vec<String> {
    let start = comp.iter().next().cloned().unwrap_or_default();
    // Breadth-first from start back to start inside the set.
    let mut prev: BTreeMap<String, String> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start.clone()]);
    while let Some(v) = queue.pop_front() {
        for w in g.edges[&v].keys().filter(|w| comp.contains(*w)) {
            if *w == start {
                let mut path = vec![v.clone()];
                let mut at = v.clone();
                while at != start {
                    at = prev[&at].clone();
                    path.push(at.clone());
                }
                path.reverse();
                path.push(start.clone());
                return path;
            }
            if !prev.contains_key(w) {
                prev.insert(w.clone(), v.clone());
                queue.push_back(w.clone());
            }
        }
    }
    comp.iter().cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph_of(edges: &[(&str, &str)]) -> Graph {
        let mut g = Graph::default();
        for (a, b) in edges {
            g.edges
                .entry(a.to_string())
                .or_default()
                .insert(b.to_string(), String::new());
            g.edges.entry(b.to_string()).or_default();
        }
        g
    }

    #[test]
    fn finds_a_cycle_and_only_it() {
        let g = graph_of(&[("comm", "engine"), ("engine", "board"), ("board", "comm")]);
        let c = cycles(&g);
        assert_eq!(c, vec![vec!["board", "comm", "engine", "board"]]);
        let g = graph_of(&[("comm", "engine"), ("engine", "board"), ("comm", "board")]);
        assert!(cycles(&g).is_empty());
    }

    #[test]
    fn paths_groups_comments_and_strings() {
        let code = strip(
            "use crate::{board::{self, Desc}, error::Error};\n\
             // use crate::comm;\n\
             /* crate::proxy */ let s = \"crate::shm\"; let c = '\"'; let p = crate::map::f();\n\
             let r = r#\"crate::sync\"#;",
        );
        let got: Vec<String> = crate_paths(&code).into_iter().map(|(_, m)| m).collect();
        assert_eq!(got, ["board", "error", "map"]);
        assert_eq!(crate_paths(&code)[2].0, 3);
    }

    #[test]
    fn root_reexports_resolve() {
        let mods: BTreeSet<String> = ["comm", "shm"].iter().map(|s| s.to_string()).collect();
        let r = reexports(
            "pub use comm::{Comm, Engine as E};\npub use shm::SharedBuf;\nuse comm::Hidden;",
            &mods,
        );
        assert_eq!(r.get("Comm").map(String::as_str), Some("comm"));
        assert_eq!(r.get("E").map(String::as_str), Some("comm"));
        assert_eq!(r.get("SharedBuf").map(String::as_str), Some("shm"));
        assert!(!r.contains_key("Hidden"));
    }
}
