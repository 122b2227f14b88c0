//! The book's Rust snippets as doc-tests.
//!
//! Every chapter of `book/src` is the documentation of a module below, so
//! `cargo test -p hpc-book --doc` compiles and runs every ```` ```rust ```` block of the
//! book against the workspace's crates, as an application that depends on them would
//! (`cargo xtask test` runs it). A block that must not run (it needs a second process,
//! say) is marked `no_run` and is still compiled; `ignore` is not used. Lines starting
//! with `# ` are compiled but not shown by mdBook, as in rustdoc.
//!
//! The tests of this file check that every chapter is included here, and that every
//! code block names its language, so that no Rust escapes as plain text.

macro_rules! chapters {
    ($($module:ident = $file:literal;)*) => {
        $(
            #[doc = include_str!(concat!("src/", $file))]
            pub mod $module {}
        )*
        /// The chapter files included above, relative to `book/src`.
        pub const CHAPTERS: &[&str] = &[$($file),*];
    };
}

chapters! {
    introduction = "introduction.md";
    quickstart = "quickstart.md";
    engines = "engines.md";
    placement = "placement.md";
    transport = "transport.md";
    transport_measurements = "transport-measurements.md";
    collectives = "collectives.md";
    collectives_measurements = "collectives-measurements.md";
    collectives_schedules = "collectives-schedules.md";
    collectives_dpu = "collectives-dpu.md";
    gpu = "gpu.md";
    brunel = "brunel.md";
    brunel_performance = "brunel-performance.md";
    microcircuit = "microcircuit.md";
    plasticity = "plasticity.md";
    own_network = "own-network.md";
    fft3d = "fft3d.md";
    timeline = "timeline.md";
    timeline_measurements = "timeline-measurements.md";
    containers = "containers.md";
    containers_measurements = "containers-measurements.md";
    packaging_measurements = "packaging-measurements.md";
    packaging = "packaging.md";
    cluster = "cluster.md";
    environment = "reference/environment.md";
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    fn src() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
    }

    /// Every `.md` file under `book/src` but the table of contents.
    fn markdown_files() -> Vec<String> {
        let mut out = Vec::new();
        let mut stack = vec![src()];
        while let Some(dir) = stack.pop() {
            for e in std::fs::read_dir(&dir).unwrap().flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.extension().is_some_and(|x| x == "md") {
                    let rel = p
                        .strip_prefix(src())
                        .unwrap()
                        .to_string_lossy()
                        .into_owned();
                    if rel != "SUMMARY.md" {
                        out.push(rel);
                    }
                }
            }
        }
        out.sort();
        out
    }

    #[test]
    fn every_chapter_is_tested_and_listed_in_the_summary() {
        let summary = std::fs::read_to_string(src().join("SUMMARY.md")).unwrap();
        for f in markdown_files() {
            assert!(
                super::CHAPTERS.contains(&f.as_str()),
                "book/src/{f} is not included in book/snippets.rs: its snippets would not be tested"
            );
            assert!(
                summary.contains(&format!("({f})")),
                "book/src/{f} is not in SUMMARY.md"
            );
        }
    }

    #[test]
    fn every_code_block_names_its_language_and_none_is_ignored() {
        let mut problems = Vec::new();
        for f in markdown_files() {
            let text = std::fs::read_to_string(src().join(&f)).unwrap();
            let mut open = false;
            for (no, line) in text.lines().enumerate() {
                let Some(info) = line.trim_start().strip_prefix("```") else {
                    continue;
                };
                if open {
                    open = false;
                    continue;
                }
                open = true;
                let info = info.trim();
                if info.is_empty() {
                    problems.push(format!(
                        "{f}:{}: a code block without a language (rustdoc would compile it as Rust)",
                        no + 1
                    ));
                }
                if info.starts_with("rust") && info.split(',').any(|a| a == "ignore") {
                    problems.push(format!("{f}:{}: `ignore`d Rust", no + 1));
                }
            }
            assert!(!open, "{f}: a code block is not closed");
        }
        assert!(problems.is_empty(), "{problems:#?}");
    }
}
