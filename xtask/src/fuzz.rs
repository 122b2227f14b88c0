//! `cargo xtask fuzz`: runs every fuzz target of `fuzz/` (cargo-fuzz, libFuzzer, on
//! the nightly toolchain) for a bounded time, starting from its checked-in corpus.
//!
//! New inputs that libFuzzer finds go to a temporary directory, so a run leaves the
//! tree as it was; a crash leaves its input under `fuzz/artifacts/TARGET/` and fails
//! the task with the command that reproduces it. A crash that was fixed goes into
//! `fuzz/corpus/TARGET/` (so every later run replays it) and into a unit test of the
//! crate it was found in.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};

/// The targets, as named in `fuzz/Cargo.toml`'s `[[bin]]` sections.
pub fn targets(root: &Path) -> Result<Vec<String>> {
    let text =
        std::fs::read_to_string(root.join("fuzz/Cargo.toml")).context("reading fuzz/Cargo.toml")?;
    let mut out = Vec::new();
    let mut in_bin = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_bin = line == "[[bin]]";
        } else if in_bin {
            if let Some(v) = line.strip_prefix("name") {
                let name = v
                    .trim_start()
                    .trim_start_matches('=')
                    .trim()
                    .trim_matches('"');
                out.push(name.to_string());
            }
        }
    }
    if out.is_empty() {
        bail!("fuzz/Cargo.toml names no [[bin]] target");
    }
    Ok(out)
}

fn nightly_present() -> bool {
    Command::new("cargo")
        .args(["+nightly", "--version"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// Runs `only` (every target when empty) for `seconds` each.
pub fn run(root: &Path, seconds: u64, only: &[String]) -> Result<()> {
    if !nightly_present() {
        bail!(
            "fuzzing needs the nightly toolchain (`cargo +nightly`) for libFuzzer's \
             sanitizer flags; install it with `rustup toolchain install nightly`"
        );
    }
    let all = targets(root)?;
    let chosen: Vec<String> = if only.is_empty() {
        all.clone()
    } else {
        for t in only {
            if !all.contains(t) {
                bail!("no fuzz target {t:?}; the targets are: {}", all.join(", "));
            }
        }
        only.to_vec()
    };
    // One build for all targets (cargo fuzz build), then each run starts at once.
    crate::run(Command::new("cargo").args(["+nightly", "fuzz", "build", "--fuzz-dir", "fuzz"]))?;
    let scratch = tempdir()?;
    let mut failed = Vec::new();
    for t in &chosen {
        let corpus = root.join("fuzz/corpus").join(t);
        std::fs::create_dir_all(&corpus)?;
        let new = scratch.join(t);
        std::fs::create_dir_all(&new)?;
        let res = crate::run(Command::new("cargo").args([
            "+nightly",
            "fuzz",
            "run",
            "--fuzz-dir",
            "fuzz",
            t,
            new.to_str().context("temporary path is not UTF-8")?,
            corpus.to_str().context("corpus path is not UTF-8")?,
            "--",
            &format!("-max_total_time={seconds}"),
            "-rss_limit_mb=2048",
            "-timeout=10",
            "-print_final_stats=1",
        ]));
        if let Err(e) = res {
            eprintln!(
                "fuzz target {t} failed: {}\n  its input is under fuzz/artifacts/{t}/; \
                 reproduce with: cargo +nightly fuzz run --fuzz-dir fuzz {t} fuzz/artifacts/{t}/<file>",
                hpc_io::message::chain(e.as_ref())
            );
            failed.push(t.clone());
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    if !failed.is_empty() {
        bail!("fuzz targets failed: {}", failed.join(", "));
    }
    eprintln!(
        "fuzzing: {} targets, {seconds} s each, no failure",
        chosen.len()
    );
    Ok(())
}

fn tempdir() -> Result<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!("hpc-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}
