//! The `HPC_*` environment variables: one list (crates/hpc-env), used by every crate,
//! and the book's reference table generated from it.

use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

/// Every text file of the repository (what git would track: no build output, no
/// fuzz corpora), with its path relative to the root.
fn files() -> Vec<(String, String)> {
    const SKIP: &[&str] = &[
        "target",
        ".git",
        "book/book",
        "fuzz/corpus",
        "fuzz/target",
        "fuzz/artifacts",
        "fuzz/coverage",
        "out",
    ];
    let root = repo();
    let mut out = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = e.path();
            let rel = path
                .strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                if !SKIP.contains(&rel.as_str()) && !rel.ends_with("/target") {
                    stack.push(path);
                }
            } else if ft.is_file() && e.metadata().map(|m| m.len() < 4 << 20).unwrap_or(false) {
                if let Ok(text) = std::fs::read_to_string(&path) {
                    out.push((rel, text));
                }
            }
        }
    }
    assert!(
        out.iter().any(|(p, _)| p == "crates/hpc-env/src/lib.rs"),
        "the walk missed crates/hpc-env"
    );
    out
}

/// The `HPC_*` names in `text`.
fn names(text: &str) -> Vec<&str> {
    let b = text.as_bytes();
    let mut v = Vec::new();
    let mut i = 0;
    while let Some(at) = text[i..].find("HPC_") {
        let start = i + at;
        let mut end = start + 4;
        while end < b.len()
            && (b[end].is_ascii_uppercase() || b[end].is_ascii_digit() || b[end] == b'_')
        {
            end += 1;
        }
        let before_ok =
            start == 0 || !(b[start - 1].is_ascii_alphanumeric() || b[start - 1] == b'_');
        let name = text[start..end].trim_end_matches('_');
        if before_ok && name.len() > 4 {
            v.push(name);
        }
        i = end;
    }
    v
}

#[test]
fn book_table_is_generated_from_the_list() {
    let have = std::fs::read_to_string(repo().join("book/src/reference/environment.md"))
        .expect("book/src/reference/environment.md exists");
    assert!(
        have == hpc_env::markdown_table(),
        "book/src/reference/environment.md is out of date: run `cargo xtask env-table`"
    );
}

#[test]
fn every_variable_the_repository_names_is_in_the_list() {
    let mut missing = Vec::new();
    for (path, text) in files() {
        for n in names(&text) {
            if hpc_env::var(n).is_none() {
                missing.push(format!("{n} ({path})"));
            }
        }
    }
    missing.sort();
    missing.dedup();
    assert!(
        missing.is_empty(),
        "HPC_* names missing from crates/hpc-env's list: {missing:?}"
    );
}

#[test]
fn every_listed_variable_is_used() {
    let files = files();
    for v in hpc_env::ALL {
        let used = files.iter().any(|(path, text)| {
            !path.starts_with("crates/hpc-env/")
                && !path.starts_with("book/src/reference/")
                && (names(text).contains(&v.name) || text.contains(&format!("env::{}", v.constant)))
        });
        assert!(used, "{} is listed but nothing else names it", v.name);
    }
}

#[test]
fn library_code_spells_no_variable_name_itself() {
    // Rust sources other than tests read the names through hpc-env's constants.
    let mut found = Vec::new();
    for (path, text) in files() {
        let source = path.ends_with(".rs")
            && path.contains("/src/")
            && !path.starts_with("crates/hpc-env/")
            && !path.starts_with("fuzz/");
        if !source {
            continue;
        }
        for (no, line) in text.lines().enumerate() {
            for n in names(line) {
                if line.contains(&format!("\"{n}\"")) {
                    found.push(format!("{path}:{}: \"{n}\"", no + 1));
                }
            }
        }
        // Before the file's tests, a name anywhere inside a string (a message that
        // spells it) counts too; tests may assert on a message's text.
        let tests = text
            .lines()
            .position(|l| {
                let t = l.trim_start();
                t.starts_with("#[cfg(test)]") || t.starts_with("#[cfg(all(test")
            })
            .unwrap_or(usize::MAX);
        // clap's help texts (`about`, `long_about`, `after_help`) are static strings,
        // not formatted: their names are checked against the list by
        // `every_variable_the_repository_names_is_in_the_list`.
        let lines: Vec<&str> = text.lines().collect();
        let help = |no: usize| {
            let l = lines.get(no - 1).copied().unwrap_or("");
            l.contains("about") || l.contains("after_help")
        };
        for (no, part) in string_parts(&text) {
            if no <= tests && !help(no) {
                for n in names(part) {
                    found.push(format!("{path}:{no}: {n} in a string"));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "string literals that spell HPC_* names (use the hpc_env constants): {found:#?}"
    );
}

/// The string literals of Rust source `text`, each with the line it starts on:
/// comments, `'"'` and raw strings' hashes are stepped over, and a string may span
/// lines (a `\` continuation).
fn string_parts(text: &str) -> Vec<(usize, &str)> {
    let b = text.as_bytes();
    let (mut i, mut line, mut parts) = (0, 1, Vec::new());
    while i < b.len() {
        let rest = &b[i..];
        if rest.starts_with(b"//") {
            i += rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len());
        } else if rest.starts_with(b"'\"'") {
            i += 3;
        } else if rest.starts_with(b"'\\\"'") {
            i += 4;
        } else if rest[0] == b'"' || rest.starts_with(b"r#") || rest.starts_with(b"r\"") {
            let ident = i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
            if rest[0] == b'r' && ident {
                i += 1;
                continue;
            }
            let hashes = rest
                .iter()
                .skip(usize::from(rest[0] == b'r'))
                .take_while(|&&c| c == b'#')
                .count();
            let open = usize::from(rest[0] == b'r') + hashes;
            if b.get(i + open) != Some(&b'"') {
                i += 1;
                continue;
            }
            let (start, first) = (i + open + 1, line);
            let mut j = start;
            while j < b.len() {
                match b[j] {
                    b'\\' if rest[0] != b'r' => {
                        j += 1;
                        line += usize::from(b.get(j) == Some(&b'\n'));
                    }
                    b'"' if b[j + 1..]
                        .iter()
                        .take(hashes)
                        .filter(|&&c| c == b'#')
                        .count()
                        == hashes =>
                    {
                        break
                    }
                    b'\n' => line += 1,
                    _ => {}
                }
                j += 1;
            }
            parts.push((first, &text[start..j.min(b.len())]));
            i = j + 1 + hashes;
        } else {
            line += usize::from(rest[0] == b'\n');
            i += 1;
        }
    }
    parts
}

#[test]
fn names_inside_strings_are_found() {
    let src = "// \"HPC_SPIN_US\" in a comment\nlet c = '\"';\nwarn!(\"{} is bad\", x, \"HPC_LOG=1 \\\" \\\n HPC_TIMEOUT\");\nlet r = r#\"a \"HPC_BIND\" b\"#;";
    let parts = string_parts(src);
    assert_eq!(
        parts,
        vec![
            (3, "{} is bad"),
            (3, "HPC_LOG=1 \\\" \\\n HPC_TIMEOUT"),
            (5, "a \"HPC_BIND\" b")
        ]
    );
}

#[test]
fn names_are_found_in_text() {
    assert_eq!(
        names("a HPC_LOG=x `HPC_TIMEOUT`, XHPC_NO $HPC_RANK HPC_* HPC_"),
        vec!["HPC_LOG", "HPC_TIMEOUT", "HPC_RANK"]
    );
}
